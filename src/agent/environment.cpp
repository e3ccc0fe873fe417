#include "rlpt/agent/environment.h"

#include <poll.h>

#include <cmath>
#include <deque>
#include <map>

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
    if (j.contains("error"))
        return "reported an error: " + (j["error"].is_string() ? j["error"].get<std::string>() : dump(j["error"]));
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
    waiting_.resize(static_cast<size_t>(workers));
    front_since_.assign(static_cast<size_t>(workers), 0.0);
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

void EnvironmentPool::fail(size_t w, const std::string& why) {
    for (const auto& q : waiting_[w]) {
        EnvReply r;
        r.error = fmt::format("environment '{}' {} (sample {})", command_, why, q.episode);
        r.done = true;
        done_.emplace_back(q.ticket, std::move(r));
    }
    waiting_[w].clear();
    if (workers_[w]) workers_[w]->stop(0.0);  // restarted before its next request
}

int64_t EnvironmentPool::submit(int64_t episode, const nlohmann::json& request, bool is_reset) {
    const int64_t ticket = next_ticket_++;
    const size_t w = static_cast<size_t>(episode) % workers_.size();
    const bool first = waiting_[w].empty();
    try {
        worker(w)->send_line(dump(request), timeout_s_);
        waiting_[w].push_back(Waiting{ticket, episode, is_reset});
        if (first) front_since_[w] = monotonic_s();
    } catch (const Error& e) {
        waiting_[w].push_back(Waiting{ticket, episode, is_reset});
        fail(w, e.message());
    }
    return ticket;
}

int64_t EnvironmentPool::submit_step(int64_t episode, const std::string& action) {
    return submit(episode, {{"op", "step"}, {"episode", episode}, {"action", action}}, false);
}

std::vector<std::pair<int64_t, EnvReply>> EnvironmentPool::poll(double timeout_s) {
    const double until = monotonic_s() + std::max(0.0, timeout_s);
    const size_t W = workers_.size();
    for (bool first = true; done_.empty(); first = false) {
        const double now = monotonic_s();
        if (!first && now >= until) break;
        std::vector<pollfd> fds;
        std::vector<size_t> ws;
        double next_deadline = until;
        for (size_t w = 0; w < W; ++w) {
            if (waiting_[w].empty()) continue;
            // A worker answers in order: its oldest request has timeout_s from when it became the oldest.
            if (now >= front_since_[w] + timeout_s_) {
                fail(w, fmt::format("did not answer within {} s (rollout.multi_turn.env_timeout_s)", timeout_s_));
                continue;
            }
            next_deadline = std::min(next_deadline, front_since_[w] + timeout_s_);
            fds.push_back(pollfd{workers_[w]->read_fd(), POLLIN, 0});
            ws.push_back(w);
        }
        if (fds.empty()) break;
        const double wait = std::max(0.0, next_deadline - monotonic_s());
        ::poll(fds.data(), fds.size(), wait > 0 ? static_cast<int>(std::min(wait, 1.0) * 1000) + 1 : 0);
        for (size_t k = 0; k < fds.size(); ++k) {
            if (!fds[k].revents) continue;
            const size_t w = ws[k];
            LineProcess& p = *workers_[w];
            const bool alive = p.pump();
            while (!waiting_[w].empty()) {
                auto line = p.pop_line();
                if (!line) break;
                const Waiting q = waiting_[w].front();
                EnvReply r;
                if (auto why = parse_reply(*line, q.is_reset, r); !why.empty()) {
                    fail(w, why);
                    break;
                }
                waiting_[w].pop_front();
                front_since_[w] = monotonic_s();
                done_.emplace_back(q.ticket, std::move(r));
            }
            if (!alive && !waiting_[w].empty()) fail(w, p.exit_description());
        }
    }
    std::vector<std::pair<int64_t, EnvReply>> out;
    out.swap(done_);
    return out;
}

size_t EnvironmentPool::in_flight() const {
    size_t n = done_.size();
    for (const auto& q : waiting_) n += q.size();
    return n;
}

std::vector<EnvReply> EnvironmentPool::exchange(const std::vector<int64_t>& episodes,
                                                const std::vector<nlohmann::json>& requests, bool is_reset) {
    RLPT_CHECK_KIND(InternalError, in_flight() == 0,
                    "EnvironmentPool: a batch exchange with asynchronous steps in flight");
    std::map<int64_t, size_t> index;  // ticket -> request
    for (size_t i = 0; i < episodes.size(); ++i) index[submit(episodes[i], requests[i], is_reset)] = i;
    std::vector<EnvReply> out(episodes.size());
    for (size_t left = episodes.size(); left > 0;)
        for (auto& [ticket, r] : poll(3600.0)) {
            out[index.at(ticket)] = std::move(r);
            --left;
        }
    return out;
}

std::vector<EnvReply> EnvironmentPool::reset(const std::vector<int64_t>& episodes,
                                             const std::vector<nlohmann::json>& samples) {
    std::vector<nlohmann::json> req;
    for (size_t i = 0; i < episodes.size(); ++i)
        req.push_back({{"op", "reset"}, {"episode", episodes[i]}, {"sample", samples[i]}});
    return exchange(episodes, req, true);
}

std::vector<EnvReply> EnvironmentPool::step(const std::vector<int64_t>& episodes,
                                            const std::vector<std::string>& actions) {
    std::vector<nlohmann::json> req;
    for (size_t i = 0; i < episodes.size(); ++i)
        req.push_back({{"op", "step"}, {"episode", episodes[i]}, {"action", actions[i]}});
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
