#pragma once
// Metrics of a run, to the sinks trainer.logger names (verl's key):
//   jsonl        <run_dir>/metrics.jsonl: one object per training step (and per validation),
//                verl's metric names, plus "step". On resume the lines after the resumed step
//                are dropped so the file matches the continued run.
//   tensorboard  <run_dir>/tensorboard/events.out.tfevents.*: one scalar per metric per step
//                (a new event file per start; TensorBoard shows the latest value of a step).
//   console      the trainers' progress line per step (console() tells them).
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensorboard.h"

namespace rlpt::app {

class MetricsLog {
  public:
    // keep_up_to_step >= 0: keep existing lines with step <= it (resume); -1: start fresh.
    MetricsLog(const std::string& run_dir, int64_t keep_up_to_step,
               const std::vector<std::string>& loggers = {"console", "jsonl"});
    void write(int64_t step, const std::map<std::string, double>& metrics);
    // Where the metrics go, for the final log line ("runs/x/metrics.jsonl", ...).
    std::string path() const;
    bool console() const { return console_; }

  private:
    std::string path_;  // metrics.jsonl, "" without the jsonl logger
    std::ofstream out_;
    std::unique_ptr<TensorBoardWriter> tb_;
    bool console_ = true;
};

// "a.b/c" -> value lookup with a default.
double metric_or(const std::map<std::string, double>& m, const std::string& key, double fallback);

}  // namespace rlpt::app
