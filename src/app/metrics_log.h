#pragma once
// Metrics of a run as JSON lines in <run_dir>/metrics.jsonl: one object per training step
// (and per validation), verl's metric names, plus "step". On resume the lines after the
// resumed step are dropped so the file matches the continued run.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace rlpt::app {

class MetricsLog {
  public:
    // keep_up_to_step >= 0: keep existing lines with step <= it (resume); -1: start fresh.
    MetricsLog(const std::string& run_dir, int64_t keep_up_to_step);
    void write(int64_t step, const std::map<std::string, double>& metrics);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    std::ofstream out_;
};

// "a.b/c" -> value lookup with a default.
double metric_or(const std::map<std::string, double>& m, const std::string& key, double fallback);

}  // namespace rlpt::app
