#include "metrics_log.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::app {

MetricsLog::MetricsLog(const std::string& run_dir, int64_t keep_up_to_step, const std::vector<std::string>& loggers) {
    auto on = [&](const char* name) { return std::find(loggers.begin(), loggers.end(), name) != loggers.end(); };
    console_ = on("console");
    if (on("tensorboard"))
        tb_ = std::make_unique<TensorBoardWriter>((std::filesystem::path(run_dir) / "tensorboard").string());
    if (!on("jsonl")) return;
    path_ = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
    std::vector<std::string> kept;
    if (keep_up_to_step >= 0) {
        std::ifstream in(path_);
        for (std::string line; std::getline(in, line);) {
            try {
                auto j = nlohmann::json::parse(line);
                if (j.value("step", int64_t(-1)) <= keep_up_to_step) kept.push_back(line);
            } catch (const nlohmann::json::exception&) {
                // a torn last line from a crash: drop it
            }
        }
    }
    std::error_code ec;
    if (keep_up_to_step < 0 && std::filesystem::file_size(path_, ec) > 0 && !ec) {
        // A fresh start in a directory with history (trainer.resume=disable): keep the old log.
        const std::time_t t = std::time(nullptr);
        std::tm tm{};
        gmtime_r(&t, &tm);
        char stamp[32];
        std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        const std::string aside = path_ + "." + stamp + ".old";
        std::filesystem::rename(path_, aside, ec);
        if (ec) throw IoError(fmt::format("cannot keep the old {} as {}: {}", path_, aside, ec.message()));
        RLPT_LOG_INFO("starting a fresh metrics log; the previous one is kept as {}", aside);
    }
    out_.open(path_, std::ios::trunc);
    if (!out_) throw IoError(fmt::format("cannot write {}", path_));
    for (const auto& l : kept) out_ << l << "\n";
    out_.flush();
}

std::string MetricsLog::path() const {
    std::string s = path_;
    if (tb_) s += (s.empty() ? "" : " and ") + tb_->path();
    return s.empty() ? "the console only (trainer.logger)" : s;
}

void MetricsLog::write(int64_t step, const std::map<std::string, double>& metrics) {
    if (tb_) tb_->add_scalars(step, metrics);
    if (path_.empty()) return;
    nlohmann::json j;
    j["step"] = step;
    for (const auto& [k, v] : metrics) {
        if (std::isfinite(v)) j[k] = v;
        else j[k] = nullptr;
    }
    out_ << j.dump() << "\n";
    out_.flush();
}

double metric_or(const std::map<std::string, double>& m, const std::string& key, double fallback) {
    auto it = m.find(key);
    return it == m.end() ? fallback : it->second;
}

}  // namespace rlpt::app
