#pragma once
// Environments for tasks whose reward depends on the interaction (DESIGN §4c): any program that
// speaks JSON lines, so users write them in Python or anything else
// (scripts/examples/echo_env.py). Torch-free, MPI-free, no threads.
//
// A pool of `workers` processes (agent/line_process.h) per rollout rank; episode e (the sample's
// global index) always goes to worker e % workers, which keeps its state. Requests, one per line:
//   {"op": "reset", "episode": e, "sample": {"data_source", "ground_truth", "extra", ...}}
//       -> {"observation": "..."}            (text shown to the model before its first turn; may be "")
//   {"op": "step", "episode": e, "action": "<the assistant's message>"}
//       -> {"observation": "...", "reward": r, "done": true|false}
//   {"op": "close", "episode": e}            (no reply: the episode is over)
// Each worker answers its requests in order. All requests of a call are written before the
// replies are read, so episodes on different workers proceed concurrently.
//
// Failures never throw out of reset/step: a worker that exits, does not answer within
// timeout_s, or writes a reply that is not such an object ends those episodes with `error` set
// ("environment '<cmd>' ... (sample 17)"), done = true, reward 0; the worker is restarted before
// its next request.
#include <cstdint>
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

    int64_t restarts() const { return restarts_; }

  private:
    std::vector<EnvReply> exchange(const std::vector<int64_t>& episodes, const std::vector<nlohmann::json>& requests,
                                   bool is_reset);
    LineProcess* worker(size_t w);
    std::string command_;
    double timeout_s_;
    std::vector<std::unique_ptr<LineProcess>> workers_;
    int64_t restarts_ = 0;
};

}  // namespace rlpt::agent
