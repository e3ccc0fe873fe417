#include "rlpt/agent/environment.h"

#include <poll.h>

#include <cmath>
#include <deque>

#include "rlpt/agent/line_process.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::agent {
namespace {

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// "" when `j` is a well-formed reply, else what is wrong.
std::string parse_reply(const std::string& line, bool is_reset, EnvReply& r) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) return "wrote a reply that is not a JSON object: " + line.substr(0, 120);
    if (j.contains("error")) return "reported an error: " + (j["error"].is_string() ? j["error"].get<std::string>() : dump(j["error"]));
    if (!j.contains("observation") || !j["observation"].is_string()) return "replied without an \"observation\" string";
    r.observation = j["observation"].get<std::string>();
    if (is_reset) return "";
    if (!j.contains("reward") || !j["reward"].is_number() || !std::isfinite(j["reward"].get<double>()))
        return "replied without a finite \"reward\"";
    if (!j.contains("done") || !j["done"].is_boolean()) return "replied without a boolean \"done\"";
    r.reward = j["reward"].get<double>();
    r.done = j["done"].get<bool>();
    return "";
}

}  // namespace

EnvironmentPool::EnvironmentPool(std::string command, int64_t workers, double timeout_s)
    : command_(std::move(command)), timeout_s_(timeout_s) {
    RLPT_CHECK_KIND(ConfigError, !command_.empty(), "rollout.multi_turn.env_command: empty");
    RLPT_CHECK_KIND(ConfigError, workers >= 1, "rollout.multi_turn.env_workers: must be >= 1 (got {})", workers);
    RLPT_CHECK_KIND(ConfigError, timeout_s > 0, "rollout.multi_turn.env_timeout_s: must be > 0 (got {})", timeout_s);
    workers_.resize(static_cast<size_t>(workers));
}

EnvironmentPool::~EnvironmentPool() = default;

LineProcess* EnvironmentPool::worker(size_t w) {
    auto& p = workers_[w];
    if (p && p->running()) return p.get();
    if (p) {
        p->stop(0.0);
        ++restarts_;
        RLPT_LOG_WARN("environment '{}' (worker {}) restarted", command_, w);
    }
    p = std::make_unique<LineProcess>(command_, fmt::format("environment '{}'", command_));
    return p.get();
}

std::vector<EnvReply> EnvironmentPool::exchange(const std::vector<int64_t>& episodes,
                                                const std::vector<nlohmann::json>& requests, bool is_reset) {
    std::vector<EnvReply> out(episodes.size());
    const size_t W = workers_.size();
    std::vector<std::deque<size_t>> waiting(W);  // request indices in the order sent
    auto fail = [&](size_t w, const std::string& why) {
        for (size_t i : waiting[w]) {
            out[i].error = fmt::format("environment '{}' {} (sample {})", command_, why, episodes[i]);
            out[i].done = true;
        }
        waiting[w].clear();
        if (workers_[w]) workers_[w]->stop(0.0);  // restarted before its next request
    };
    for (size_t i = 0; i < episodes.size(); ++i) {
        const size_t w = static_cast<size_t>(episodes[i]) % W;
        try {
            worker(w)->send_line(dump(requests[i]), timeout_s_);
            waiting[w].push_back(i);
        } catch (const Error& e) {
            waiting[w].push_back(i);
            fail(w, e.message());
        }
    }
    const double deadline = monotonic_s() + timeout_s_;
    for (;;) {
        std::vector<pollfd> fds;
        std::vector<size_t> ws;
        for (size_t w = 0; w < W; ++w)
            if (!waiting[w].empty()) {
                fds.push_back(pollfd{workers_[w]->read_fd(), POLLIN, 0});
                ws.push_back(w);
            }
        if (fds.empty()) break;
        const double left = deadline - monotonic_s();
        if (left <= 0) {
            for (size_t w : ws) fail(w, fmt::format("did not answer within {} s (rollout.multi_turn.env_timeout_s)", timeout_s_));
            break;
        }
        ::poll(fds.data(), fds.size(), static_cast<int>(std::min(left, 1.0) * 1000) + 1);
        for (size_t k = 0; k < fds.size(); ++k) {
            if (!fds[k].revents) continue;
            const size_t w = ws[k];
            LineProcess& p = *workers_[w];
            const bool alive = p.pump();
            while (!waiting[w].empty()) {
                auto line = p.pop_line();
                if (!line) break;
                const size_t i = waiting[w].front();
                waiting[w].pop_front();
                if (auto why = parse_reply(*line, is_reset, out[i]); !why.empty()) {
                    waiting[w].push_front(i);
                    fail(w, why);
                    break;
                }
            }
            if (!alive && !waiting[w].empty()) fail(w, p.exit_description());
        }
    }
    return out;
}

std::vector<EnvReply> EnvironmentPool::reset(const std::vector<int64_t>& episodes, const std::vector<nlohmann::json>& samples) {
    std::vector<nlohmann::json> req;
    for (size_t i = 0; i < episodes.size(); ++i) req.push_back({{"op", "reset"}, {"episode", episodes[i]}, {"sample", samples[i]}});
    return exchange(episodes, req, true);
}

std::vector<EnvReply> EnvironmentPool::step(const std::vector<int64_t>& episodes, const std::vector<std::string>& actions) {
    std::vector<nlohmann::json> req;
    for (size_t i = 0; i < episodes.size(); ++i) req.push_back({{"op", "step"}, {"episode", episodes[i]}, {"action", actions[i]}});
    return exchange(episodes, req, false);
}

void EnvironmentPool::close(const std::vector<int64_t>& episodes) {
    for (int64_t e : episodes) {
        auto& p = workers_[static_cast<size_t>(e) % workers_.size()];
        if (!p || !p->running()) continue;
        try {
            p->send_line(dump({{"op", "close"}, {"episode", e}}), timeout_s_);
        } catch (const Error&) {
            p->stop(0.0);
        }
    }
}

}  // namespace rlpt::agent
