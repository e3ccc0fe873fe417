#pragma once
// MCP (Model Context Protocol) client over stdio: the tools of the agent loop come from real MCP
// servers (DESIGN §4c). Torch-free, MPI-free, no threads: many calls are in flight at once over
// one or several servers and a single poll loop matches the replies to them by JSON-RPC id.
// Two ways to call: call_many (a batch, waited for), or submit/poll (calls enter and leave one by
// one while the caller does other work: the agent loop decodes other samples meanwhile). Not
// thread-safe: one owner thread.
//
// Wire (MCP 2025-11-25, basic/transports + lifecycle + server/tools): one JSON-RPC 2.0 object per
// line. start(): spawn each server (agent/line_process.h), `initialize` (protocolVersion
// 2025-11-25, capabilities {}, clientInfo rlpt) -> `notifications/initialized` -> `tools/list`
// (following nextCursor). Notifications from a server are ignored; requests from a server are
// answered with -32601 (we declare no client capabilities).
//
// Failure policy of call_many and submit/poll (a broken tool is an observation, never a stopped run):
//   a call with no reply within timeout_s      -> error result (kind "timeout"); the server is
//                                                  killed and restarted before its next call
//   the server exits / closes its stdout       -> every call in flight on it: error (kind
//                                                  "crash"); restarted before its next call
//   a line that is not JSON-RPC (garbage)      -> every call in flight on it: error (kind
//                                                  "garbage"); killed and restarted
//   a JSON-RPC error reply, or isError:true    -> error result (kind "tool") with the server's text
//   a restart that fails                       -> error result (kind "crash") naming why; the
//                                                  server's later calls fail at once until the
//                                                  next call_many or clear_restart_failures()
// Only start() throws: IoError naming the command when a server cannot be started, does not
// complete the handshake within init_timeout_s, or two servers list the same tool name.
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlpt::agent {

class LineProcess;

struct McpTool {
    std::string name;
    std::string description;
    nlohmann::json input_schema;  // the server's JSON Schema object
    size_t server = 0;            // index into the client's commands
};

struct ToolCallRequest {
    std::string name;
    nlohmann::json arguments = nlohmann::json::object();
};

struct ToolResult {
    std::string text;  // text blocks joined with "\n"; other blocks as "[<type>]"; or the error text
    bool is_error = false;
    std::string error_kind;  // "" | "timeout" | "crash" | "garbage" | "tool" | "unknown_tool" (see above)
    double latency_s = 0.0;  // request written -> reply read (or the failure seen)
};

class McpClient {
  public:
    // commands: one shell command per server (`npx -y @modelcontextprotocol/server-everything`).
    McpClient(std::vector<std::string> commands, double call_timeout_s, double init_timeout_s = 60.0);
    ~McpClient();
    McpClient(const McpClient&) = delete;
    McpClient& operator=(const McpClient&) = delete;

    // Starts every server and lists its tools (see the header comment for errors).
    void start();
    // Every tool of every server, in server order then tools/list order.
    const std::vector<McpTool>& tools() const { return tools_; }
    const McpTool* find_tool(const std::string& name) const;

    // Runs the calls concurrently (all written before any reply is awaited) and returns one
    // result per call, in order. Never throws for a tool's failure (see above). An unknown name
    // gives kind "unknown_tool" without contacting a server.
    // Needs no asynchronous call in flight (InternalError).
    std::vector<ToolResult> call_many(const std::vector<ToolCallRequest>& calls);

    // Asynchronous calls. submit writes the call and returns its ticket; a call that cannot reach
    // a server (unknown tool, failed restart, write error) is complete at once. A restart (the
    // handshake, up to init_timeout_s) runs inside submit. poll reads what the servers wrote and
    // returns the calls completed since the last poll (timeouts included), waiting up to
    // timeout_s for the first one when none is (0: never waits).
    int64_t submit(const ToolCallRequest& call);
    std::vector<std::pair<int64_t, ToolResult>> poll(double timeout_s);
    size_t in_flight() const { return pending_.size() + done_.size(); }
    void clear_restart_failures() { restart_failed_.clear(); }

    int64_t restarts() const { return restarts_; }
    // Kills every server (also done by the destructor).
    void stop();

  private:
    struct Server;
    struct Pending {  // a call written to a server
        int64_t ticket;
        std::string name;
        size_t server;
        double t0;
        double deadline;
    };
    void start_server(Server& s);
    void fail_server(size_t server, const std::string& kind, const std::string& why);
    void read_server(size_t server);
    nlohmann::json request(Server& s, const std::string& method, const nlohmann::json& params);
    std::vector<std::unique_ptr<Server>> servers_;
    std::vector<McpTool> tools_;
    double call_timeout_s_;
    double init_timeout_s_;
    int64_t next_id_ = 1;
    int64_t next_ticket_ = 1;
    int64_t restarts_ = 0;
    std::map<int64_t, Pending> pending_;                // JSON-RPC id -> call on a server
    std::vector<std::pair<int64_t, ToolResult>> done_;  // complete, not yet polled
    std::set<size_t> restart_failed_;                   // servers whose restart failed
};

// The text of a CallToolResult (`content` blocks) as the model sees it: text blocks joined with
// "\n", a resource's text, "[image]"/"[audio]"/"[resource_link <uri>]" for the rest.
std::string tool_result_text(const nlohmann::json& result);

}  // namespace rlpt::agent
