#pragma once
// Environments for tasks whose reward depends on the interaction (DESIGN §4c): any program that
// speaks JSON lines, so users write them in Python or anything else
// (scripts/examples/retry_env.py). Torch-free, MPI-free, no threads.
//
// A pool of `workers` processes (agent/line_process.h) per rollout rank; episode e (the sample's
// global index) always goes to worker e % workers, which keeps its state. Requests, one per line:
//   {"op": "reset", "episode": e, "sample": {"data_source", "ground_truth", "extra", ...}}
//       -> {"observation": "..."}            (text shown to the model before its first turn; may be "")
//   {"op": "step", "episode": e, "action": "<the assistant's message>"}
//       -> {"observation": "...", "reward": r, "done": true|false}
//   {"op": "close", "episode": e}            (no reply: the episode is over)
// Each worker answers its requests in order. All requests of a call are written before the
// replies are read, so episodes on different workers proceed concurrently. Steps can also be
// asynchronous (submit_step / poll: the agent loop decodes other samples meanwhile); a worker's
// oldest unanswered request has timeout_s from when it became the oldest. Not thread-safe.
//
// Failures never throw out of reset/step: a worker that exits, does not answer within
// timeout_s, or writes a reply that is not such an object ends those episodes with `error` set
// ("environment '<cmd>' ... (sample 17)"), done = true, reward 0; the worker is restarted before
// its next request.
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlpt::agent {

class LineProcess;

struct EnvReply {
    std::string observation;
    double reward = 0.0;
    bool done = false;
    std::string error;  // non-empty: the episode failed (see above)
};

class EnvironmentPool {
  public:
    // ConfigError for an empty command, workers < 1 or timeout_s <= 0. Starts processes lazily.
    EnvironmentPool(std::string command, int64_t workers, double timeout_s);
    ~EnvironmentPool();
    EnvironmentPool(const EnvironmentPool&) = delete;
    EnvironmentPool& operator=(const EnvironmentPool&) = delete;

    // One reply per episode, in order. samples[i] is sent as "sample".
    std::vector<EnvReply> reset(const std::vector<int64_t>& episodes, const std::vector<nlohmann::json>& samples);
    std::vector<EnvReply> step(const std::vector<int64_t>& episodes, const std::vector<std::string>& actions);
    void close(const std::vector<int64_t>& episodes);

    // Asynchronous steps: submit_step writes the request and returns its ticket (a failed write
    // completes it at once, with `error`); poll returns the requests completed since the last
    // poll, waiting up to timeout_s for the first one when none is (0: never waits). reset, step
    // and close need none in flight.
    int64_t submit_step(int64_t episode, const std::string& action);
    std::vector<std::pair<int64_t, EnvReply>> poll(double timeout_s);
    size_t in_flight() const;

    int64_t restarts() const { return restarts_; }

  private:
    std::vector<EnvReply> exchange(const std::vector<int64_t>& episodes, const std::vector<nlohmann::json>& requests,
                                   bool is_reset);
    LineProcess* worker(size_t w);
    int64_t submit(int64_t episode, const nlohmann::json& request, bool is_reset);
    void fail(size_t w, const std::string& why);  // every request waiting on worker w: error; stop it
    struct Waiting {
        int64_t ticket;
        int64_t episode;
        bool is_reset;
    };
    std::string command_;
    double timeout_s_;
    std::vector<std::unique_ptr<LineProcess>> workers_;
    std::vector<std::deque<Waiting>> waiting_;  // per worker, in the order sent
    std::vector<double> front_since_;           // per worker: when its oldest request became the oldest
    std::vector<std::pair<int64_t, EnvReply>> done_;
    int64_t next_ticket_ = 1;
    int64_t restarts_ = 0;
};

}  // namespace rlpt::agent
