#include "rlpt/agent/mcp_client.h"

#include <poll.h>

#include <algorithm>
#include <map>
#include <set>

#include "rlpt/agent/line_process.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::agent {
namespace {

constexpr const char* kProtocolVersion = "2025-11-25";

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

nlohmann::json request_json(int64_t id, const std::string& method, const nlohmann::json& params) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
}

// Our answer to a request the server sends us: we offer no client capabilities.
nlohmann::json method_not_found(const nlohmann::json& request) {
    return {{"jsonrpc", "2.0"}, {"id", request["id"]}, {"error", {{"code", -32601}, {"message", "Method not found"}}}};
}

bool is_request_from_server(const nlohmann::json& j) { return j.contains("method") && j.contains("id"); }

ToolResult error_result(const std::string& tool, const std::string& kind, const std::string& why, double latency) {
    ToolResult r;
    r.is_error = true;
    r.error_kind = kind;
    r.text = fmt::format("Error executing tool '{}': {}", tool, why);
    r.latency_s = latency;
    return r;
}

}  // namespace

std::string tool_result_text(const nlohmann::json& result) {
    std::string out;
    auto add = [&](const std::string& s) { out += (out.empty() ? "" : "\n") + s; };
    const auto content = result.find("content");
    if (content == result.end() || !content->is_array()) return out;
    for (const auto& b : *content) {
        const std::string type = b.is_object() ? b.value("type", "") : "";
        if (type == "text" && b.contains("text") && b["text"].is_string()) add(b["text"].get<std::string>());
        else if (type == "resource" && b.contains("resource") && b["resource"].is_object() &&
                 b["resource"].contains("text") && b["resource"]["text"].is_string())
            add(b["resource"]["text"].get<std::string>());
        else if (type == "resource_link") add("[resource_link " + b.value("uri", std::string()) + "]");
        else add("[" + (type.empty() ? std::string("unknown") : type) + "]");
    }
    return out;
}

struct McpClient::Server {
    std::string command;
    std::unique_ptr<LineProcess> proc;
    bool broken = false;  // killed after a failure: restart before the next call
};

McpClient::McpClient(std::vector<std::string> commands, double call_timeout_s, double init_timeout_s)
    : call_timeout_s_(call_timeout_s), init_timeout_s_(init_timeout_s) {
    RLPT_CHECK_KIND(ConfigError, call_timeout_s > 0 && init_timeout_s > 0, "MCP client: timeouts must be > 0");
    for (auto& c : commands) {
        RLPT_CHECK_KIND(ConfigError, !c.empty(), "MCP client: an empty server command");
        servers_.push_back(std::make_unique<Server>());
        servers_.back()->command = std::move(c);
    }
}

McpClient::~McpClient() { stop(); }

void McpClient::stop() {
    for (auto& s : servers_)
        if (s->proc) s->proc->stop();
}

// One synchronous request during start-up (IoError on failure or after init_timeout_s).
nlohmann::json McpClient::request(Server& s, const std::string& method, const nlohmann::json& params) {
    const std::string& who = s.proc->who();
    const double deadline = monotonic_s() + init_timeout_s_;
    const int64_t id = next_id_++;
    s.proc->send_line(dump(request_json(id, method, params)), init_timeout_s_);
    for (;;) {
        const double left = deadline - monotonic_s();
        auto line = left > 0 ? s.proc->read_line(left) : std::nullopt;
        RLPT_CHECK_KIND(IoError, line.has_value(), "{}: no reply to '{}' within {} s", who, method, init_timeout_s_);
        nlohmann::json j = nlohmann::json::parse(*line, nullptr, false);
        RLPT_CHECK_KIND(IoError, j.is_object(), "{}: answered '{}' with a line that is not JSON-RPC: {}", who, method,
                        line->substr(0, 200));
        if (is_request_from_server(j)) {
            s.proc->send_line(dump(method_not_found(j)), init_timeout_s_);
            continue;
        }
        if (!j.contains("id") || j["id"] != id) continue;  // a notification, or a stale reply
        if (j.contains("error")) RLPT_THROW(IoError, "{}: '{}' failed: {}", who, method, dump(j["error"]));
        RLPT_CHECK_KIND(IoError, j.contains("result") && j["result"].is_object(),
                        "{}: the '{}' reply has no result: {}", who, method, line->substr(0, 200));
        return j["result"];
    }
}

// A fresh process: initialize + notifications/initialized (IoError on failure).
void McpClient::start_server(Server& s) {
    s.proc = std::make_unique<LineProcess>(s.command, fmt::format("MCP server '{}'", s.command));
    s.broken = false;
    auto init = request(s, "initialize",
                        {{"protocolVersion", kProtocolVersion},
                         {"capabilities", nlohmann::json::object()},
                         {"clientInfo", {{"name", "rlpt"}, {"version", "0.1"}}}});
    RLPT_CHECK_KIND(IoError, init.contains("protocolVersion") && init["protocolVersion"].is_string(),
                    "{}: the initialize reply has no protocolVersion", s.proc->who());
    s.proc->send_line(dump({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}), init_timeout_s_);
}

void McpClient::start() {
    tools_.clear();
    std::vector<McpTool> all;
    for (size_t i = 0; i < servers_.size(); ++i) {
        Server& s = *servers_[i];
        start_server(s);
        const std::string& who = s.proc->who();
        nlohmann::json params = nlohmann::json::object();
        for (int page = 0; page < 1000; ++page) {  // tools/list, following nextCursor
            nlohmann::json result = request(s, "tools/list", params);
            RLPT_CHECK_KIND(IoError, result.contains("tools") && result["tools"].is_array(),
                            "{}: the tools/list reply has no tools array", who);
            for (const auto& t : result["tools"]) {
                RLPT_CHECK_KIND(IoError, t.is_object() && t.contains("name") && t["name"].is_string(),
                                "{}: tools/list gave a tool without a name: {}", who, dump(t).substr(0, 200));
                McpTool tool;
                tool.name = t["name"].get<std::string>();
                tool.description = t.contains("description") && t["description"].is_string()
                                       ? t["description"].get<std::string>()
                                       : "";
                tool.input_schema = t.contains("inputSchema") ? t["inputSchema"] : nlohmann::json::object();
                tool.server = i;
                all.push_back(std::move(tool));
            }
            if (!result.contains("nextCursor") || !result["nextCursor"].is_string()) break;
            params = {{"cursor", result["nextCursor"]}};
        }
    }
    std::map<std::string, size_t> seen;
    for (const auto& t : all) {
        auto [it, fresh] = seen.emplace(t.name, t.server);
        RLPT_CHECK_KIND(IoError, fresh, "MCP servers '{}' and '{}' both offer a tool named '{}'",
                        servers_[it->second]->command, servers_[t.server]->command, t.name);
    }
    tools_ = std::move(all);
}

const McpTool* McpClient::find_tool(const std::string& name) const {
    for (const auto& t : tools_)
        if (t.name == name) return &t;
    return nullptr;
}

void McpClient::fail_server(size_t server, const std::string& kind, const std::string& why) {
    servers_[server]->broken = true;
    if (servers_[server]->proc) servers_[server]->proc->stop(0.0);
    const double now = monotonic_s();
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.server != server) {
            ++it;
            continue;
        }
        done_.emplace_back(it->second.ticket, error_result(it->second.name, kind, why, now - it->second.t0));
        it = pending_.erase(it);
    }
}

int64_t McpClient::submit(const ToolCallRequest& call) {
    const int64_t ticket = next_ticket_++;
    const McpTool* tool = find_tool(call.name);
    if (!tool) {
        std::string names;
        for (const auto& t : tools_) names += (names.empty() ? "" : ", ") + t.name;
        done_.emplace_back(ticket,
                           ToolResult{fmt::format("Unknown function '{}'. Available tools: [{}]", call.name, names),
                                      true, "unknown_tool", 0.0});
        return ticket;
    }
    Server& s = *servers_[tool->server];
    const double t0 = monotonic_s();
    if (s.broken || !s.proc || !s.proc->running()) {
        std::string why;
        if (restart_failed_.count(tool->server) == 0) {
            try {
                if (s.proc) s.proc->stop(0.0);
                start_server(s);
                ++restarts_;
                RLPT_LOG_WARN("MCP server '{}' restarted", s.command);
            } catch (const Error& e) {
                why = e.message();
                s.broken = true;
                restart_failed_.insert(tool->server);
            }
        } else {
            why = fmt::format("MCP server '{}' could not be restarted", s.command);
        }
        if (!why.empty()) {
            done_.emplace_back(ticket, error_result(call.name, "crash", why, monotonic_s() - t0));
            return ticket;
        }
    }
    const int64_t id = next_id_++;
    try {
        s.proc->send_line(dump(request_json(id, "tools/call", {{"name", call.name}, {"arguments", call.arguments}})),
                          call_timeout_s_);
    } catch (const Error& e) {
        done_.emplace_back(ticket, error_result(call.name, "crash", e.message(), monotonic_s() - t0));
        fail_server(tool->server, "crash", e.message());
        return ticket;
    }
    pending_[id] = Pending{ticket, call.name, tool->server, t0, t0 + call_timeout_s_};
    return ticket;
}

std::vector<std::pair<int64_t, ToolResult>> McpClient::poll(double timeout_s) {
    const double until = monotonic_s() + std::max(0.0, timeout_s);
    for (bool first = true; done_.empty() && !pending_.empty(); first = false) {
        double now = monotonic_s();
        if (!first && now >= until) break;
        double first_deadline = now + 3600;
        std::set<size_t> timed_out;
        for (const auto& [id, p] : pending_) {
            if (p.deadline <= now) timed_out.insert(p.server);
            first_deadline = std::min(first_deadline, p.deadline);
        }
        for (size_t sv : timed_out)
            fail_server(
                sv, "timeout",
                fmt::format("no reply within {} s (MCP server '{}' was killed; it restarts before its next call)",
                            call_timeout_s_, servers_[sv]->command));
        if (pending_.empty()) break;
        std::vector<pollfd> fds;
        std::vector<size_t> fd_server;
        for (size_t sv = 0; sv < servers_.size(); ++sv) {
            const bool busy =
                std::any_of(pending_.begin(), pending_.end(), [&](const auto& kv) { return kv.second.server == sv; });
            if (busy && servers_[sv]->proc && servers_[sv]->proc->read_fd() >= 0) {
                fds.push_back(pollfd{servers_[sv]->proc->read_fd(), POLLIN, 0});
                fd_server.push_back(sv);
            }
        }
        const double wait = std::max(0.0, std::min(first_deadline, until) - monotonic_s());
        ::poll(fds.data(), fds.size(), wait > 0 ? static_cast<int>(std::min(wait, 1.0) * 1000) + 1 : 0);
        for (size_t k = 0; k < fds.size(); ++k)
            if (fds[k].revents) read_server(fd_server[k]);
    }
    std::vector<std::pair<int64_t, ToolResult>> out;
    out.swap(done_);
    return out;
}

// Everything server `sv` wrote: replies complete their calls.
void McpClient::read_server(size_t sv) {
    LineProcess& proc = *servers_[sv]->proc;
    const bool alive = proc.pump();
    while (auto line = proc.pop_line()) {
        nlohmann::json j = nlohmann::json::parse(*line, nullptr, false);
        if (!j.is_object() || (!j.contains("method") && !j.contains("id"))) {
            fail_server(sv, "garbage",
                        fmt::format("MCP server '{}' wrote a line that is not JSON-RPC ({}); it was killed and "
                                    "restarts before its next call",
                                    servers_[sv]->command, line->substr(0, 120)));
            return;
        }
        if (is_request_from_server(j)) {
            try {
                proc.send_line(dump(method_not_found(j)), 1.0);
            } catch (const Error&) {
            }
            continue;
        }
        if (!j.contains("id") || !j["id"].is_number_integer()) continue;  // a notification
        auto it = pending_.find(j["id"].get<int64_t>());
        if (it == pending_.end()) continue;  // a reply to a call already given up
        const Pending p = it->second;
        pending_.erase(it);
        const double latency = monotonic_s() - p.t0;
        if (j.contains("error")) {
            const auto& e = j["error"];
            const std::string msg = e.is_object() && e.contains("message") && e["message"].is_string()
                                        ? e["message"].get<std::string>()
                                        : dump(e);
            done_.emplace_back(p.ticket, error_result(p.name, "tool", msg, latency));
        } else if (!j.contains("result") || !j["result"].is_object() || !j["result"].contains("content") ||
                   !j["result"]["content"].is_array()) {
            done_.emplace_back(p.ticket,
                               error_result(p.name, "garbage",
                                            "the reply is not a CallToolResult: " + line->substr(0, 120), latency));
        } else {
            const auto& r = j["result"];
            ToolResult tr;
            tr.text = tool_result_text(r);
            tr.is_error = r.contains("isError") && r["isError"].is_boolean() && r["isError"].get<bool>();
            tr.error_kind = tr.is_error ? "tool" : "";
            tr.latency_s = latency;
            done_.emplace_back(p.ticket, std::move(tr));
        }
    }
    if (!alive)
        fail_server(sv, "crash",
                    fmt::format("MCP server '{}' {} (it restarts before its next call)", servers_[sv]->command,
                                proc.exit_description()));
}

std::vector<ToolResult> McpClient::call_many(const std::vector<ToolCallRequest>& calls) {
    RLPT_CHECK_KIND(InternalError, pending_.empty() && done_.empty(),
                    "McpClient::call_many with asynchronous calls in flight");
    restart_failed_.clear();
    std::map<int64_t, size_t> index;  // ticket -> call
    for (size_t c = 0; c < calls.size(); ++c) index[submit(calls[c])] = c;
    std::vector<ToolResult> results(calls.size());
    for (size_t left = calls.size(); left > 0;)
        for (auto& [ticket, r] : poll(3600.0)) {
            results[index.at(ticket)] = std::move(r);
            --left;
        }
    return results;
}

}  // namespace rlpt::agent
