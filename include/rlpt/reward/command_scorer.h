#pragma once
// A scorer that is any program speaking JSON lines: users bring rewards in any language, and
// scripts/examples/reward_server.py runs a verl `compute_score(data_source, solution_str,
// ground_truth, extra_info)` Python function unchanged. Torch-free.
//
// Process: started with `/bin/sh -c <command>` on the first batch, in its own process group,
// with stdin and stdout connected to this process (one socket) and stderr inherited (so its
// tracebacks appear in rlpt's log); kept running for the whole run, one per process that
// scores (the controller). Destruction closes its stdin, waits up to 2 s for it to exit, then
// kills its process group.
//
// Protocol, one JSON object per line, UTF-8:
//   rlpt -> command   {"data_source": "...", "solution_str": "...", "ground_truth": "...",
//                      "extra_info": {...}, "index": <sample index>}
//   command -> rlpt   one reply per request, in request order:
//                      a number (the score), or {"score": x, "acc": a, "pred": "...", <name>: <number>...}
//                      (acc, pred and the other numbers optional; numbers other than score/acc
//                      become ScoreResult::extra), or {"error": "message"} (the run stops with it).
// A batch (score_many) writes every request and reads the replies concurrently, so a server
// that answers line by line never blocks on a full pipe; it may also answer after reading
// several lines.
//
// Errors (ValueError naming the command): the program exits or closes stdout (with its exit
// status), a batch is not answered within timeout_s (the process is killed; the next batch
// starts a fresh one), a reply that is not JSON or has no finite score, an {"error"} reply.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

class CommandScorer final : public Scorer {
  public:
    // Throws ConfigError for an empty command or timeout_s <= 0. Starts nothing yet.
    CommandScorer(std::string command, double timeout_s);
    ~CommandScorer() override;
    CommandScorer(const CommandScorer&) = delete;
    CommandScorer& operator=(const CommandScorer&) = delete;

    std::string name() const override;  // "command(<command>)"
    ScoreResult score(const ScoreRequest& request) const override;
    bool scores_batches() const override { return true; }
    std::vector<ScoreResult> score_many(const std::vector<ScoreRequest>& requests) const override;

  private:
    struct Process;
    std::string command_;
    double timeout_s_;
    mutable std::mutex mu_;
    mutable std::unique_ptr<Process> proc_;
};

}  // namespace rlpt::reward
