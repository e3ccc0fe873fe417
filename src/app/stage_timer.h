#pragma once
// Wall-clock timing of the trainer's stages into timing_s/<name> metrics. Private to src/app.
#include <time.h>

#include <map>
#include <string>

namespace rlpt::app {

inline double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Adds the scope's duration to timing["timing_s/<name>"].
class Stage {
  public:
    Stage(std::map<std::string, double>& timing, const char* name) : timing_(timing), name_(name), t0_(now_s()) {}
    ~Stage() { timing_[std::string("timing_s/") + name_] += now_s() - t0_; }

  private:
    std::map<std::string, double>& timing_;
    const char* name_;
    double t0_;
};

}  // namespace rlpt::app
