// The MCP client (agent/mcp_client.h) and its transport (agent/line_process.h) against a real
// MCP server, @modelcontextprotocol/server-everything from npm (installed by
// scripts/fetch_test_assets.sh into $RLPT_ASSET_DIR/mcp), and against tests/agent/fault_mcp_server.py
// for the hang / crash / garbage cases.
#include <gtest/gtest.h>

#include <map>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlpt/build_config.h"
#include "unit/agent_test_util.h"
#include "rlpt/agent/line_process.h"
#include "rlpt/agent/mcp_client.h"
#include "rlpt/core/error.h"

namespace rlpt::agent {
namespace {

using testing::everything_server;

#define REQUIRE_EVERYTHING(var)                                                                          \
    const std::string var = everything_server();                                                         \
    if (var.empty())                                                                                     \
    GTEST_SKIP() << "@modelcontextprotocol/server-everything is not installed (node/npm absent, or run " \
                    "scripts/fetch_test_assets.sh)"

std::string fault_server(const std::string& mode) {
    return fmt::format("python3 {}/tests/agent/fault_mcp_server.py {}", RLPT_SOURCE_DIR, mode);
}

// A live (non-zombie) process in the group: /proc/<pid>/stat's state and pgrp fields.
bool group_alive(pid_t pgid) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream f(e.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        const size_t close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(stat.substr(close + 2));
        char state = 0;
        long ppid = 0, pgrp = 0;
        rest >> state >> ppid >> pgrp;
        if (pgrp == pgid && state != 'Z' && state != 'X') return true;
    }
    return false;
}

// SIGKILL is delivered asynchronously: wait for the group to empty.
bool group_gone_within(pid_t pgid, double seconds) {
    for (const double end = monotonic_s() + seconds; monotonic_s() < end; ::usleep(10000))
        if (!group_alive(pgid)) return true;
    return false;
}

TEST(AgentMcp, HandshakeListAndCallAgainstServerEverything) {
    REQUIRE_EVERYTHING(server);
    McpClient c({server}, 30.0);
    c.start();
    ASSERT_NE(c.find_tool("get-sum"), nullptr);
    ASSERT_NE(c.find_tool("echo"), nullptr);
    EXPECT_EQ(c.find_tool("get-sum")->input_schema["required"], nlohmann::json({"a", "b"}));
    EXPECT_EQ(c.tools().size(), 13u);  // capabilities {}: the 12 fixed tools + simulate-research-query
    auto r = c.call_many({{"get-sum", {{"a", 2}, {"b", 3.5}}},
                          {"get-sum", {{"a", "x"}, {"b", 1}}},
                          {"echo", {{"message", "hi"}}},
                          {"add", {{"a", 1}, {"b", 2}}}});
    ASSERT_EQ(r.size(), 4u);
    EXPECT_FALSE(r[0].is_error);
    EXPECT_EQ(r[0].text, "The sum of 2 and 3.5 is 5.5.");
    EXPECT_TRUE(r[1].is_error);  // the SDK reports schema failures as isError results
    EXPECT_EQ(r[1].error_kind, "tool");
    EXPECT_NE(r[1].text.find("Input validation error"), std::string::npos) << r[1].text;
    EXPECT_EQ(r[2].text, "Echo: hi");
    EXPECT_EQ(r[3].error_kind, "unknown_tool");
    EXPECT_NE(r[3].text.find("Unknown function 'add'"), std::string::npos);
    EXPECT_EQ(c.restarts(), 0);
}

TEST(AgentMcp, ConcurrentCallsAreInFlightTogetherAndMatchedById) {
    REQUIRE_EVERYTHING(server);
    McpClient c({server}, 60.0);
    c.start();
    std::vector<ToolCallRequest> calls;
    for (int i = 0; i < 4; ++i) calls.push_back({"trigger-long-running-operation", {{"duration", 2}, {"steps", 1}}});
    for (int i = 0; i < 8; ++i) calls.push_back({"get-sum", {{"a", i}, {"b", 100}}});
    const double t0 = monotonic_s();
    auto r = c.call_many(calls);
    const double wall = monotonic_s() - t0;
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(r[static_cast<size_t>(i)].is_error) << r[static_cast<size_t>(i)].text;
    for (int i = 0; i < 8; ++i)
        EXPECT_EQ(r[static_cast<size_t>(4 + i)].text, fmt::format("The sum of {} and 100 is {}.", i, i + 100));
    // One after the other would take 4 x 2 s; all in flight at once takes ~2 s (generous bound).
    EXPECT_LT(wall, 6.5);
    // The quick calls were not held up behind the long ones.
    for (int i = 0; i < 8; ++i) EXPECT_LT(r[static_cast<size_t>(4 + i)].latency_s, 1.9);
}

// submit/poll (the continuous agent loop's use): poll(0) never waits, calls are in flight together
// and come back by ticket; a timeout is a completion like any other.
TEST(AgentMcp, SubmitAndPollDoNotBlock) {
    McpClient c({fault_server("slow:0.6")}, 10.0, 20.0);
    c.start();
    const double t0 = monotonic_s();
    std::map<int64_t, int> x_of;
    for (int x = 1; x <= 3; ++x) x_of[c.submit({"probe", {{"x", x}}})] = x;
    EXPECT_TRUE(c.poll(0.0).empty());
    EXPECT_LT(monotonic_s() - t0, 0.5);
    EXPECT_EQ(c.in_flight(), 3u);
    std::map<int, std::string> got;
    while (got.size() < 3)
        for (auto& [ticket, r] : c.poll(5.0)) got[x_of.at(ticket)] = r.text;
    EXPECT_EQ(got, (std::map<int, std::string>{{1, "probe 1"}, {2, "probe 2"}, {3, "probe 3"}}));
    EXPECT_LT(monotonic_s() - t0, 0.6 * 3 * 0.8);  // together, not one after the other (generous)
    EXPECT_EQ(c.in_flight(), 0u);
    EXPECT_EQ(c.poll(0.0).size(), 0u);
    McpClient h({fault_server("hang")}, 0.5, 20.0);
    h.start();
    const int64_t t = h.submit({"probe", {{"x", 1}}});
    std::vector<std::pair<int64_t, ToolResult>> back;
    while (back.empty()) back = h.poll(5.0);
    EXPECT_EQ(back[0].first, t);
    EXPECT_EQ(back[0].second.error_kind, "timeout");
}

TEST(AgentMcp, HangingServerTimesOutAndIsRestarted) {
    McpClient c({fault_server("hang")}, 1.0, 20.0);
    c.start();
    const double t0 = monotonic_s();
    auto r = c.call_many({{"probe", {{"x", 1}}}, {"probe", {{"x", 2}}}});
    EXPECT_LT(monotonic_s() - t0, 8.0);
    for (const auto& x : r) {
        EXPECT_TRUE(x.is_error);
        EXPECT_EQ(x.error_kind, "timeout");
        EXPECT_NE(x.text.find("Error executing tool 'probe': no reply within 1 s"), std::string::npos) << x.text;
    }
    r = c.call_many({{"probe", {{"x", 3}}}});
    EXPECT_EQ(r[0].error_kind, "timeout");
    EXPECT_EQ(c.restarts(), 1);
}

TEST(AgentMcp, CrashingServerBecomesAnErrorObservationAndRestarts) {
    McpClient c({fault_server("crash")}, 10.0, 20.0);
    c.start();
    auto r = c.call_many({{"probe", {{"x", 1}}}});
    EXPECT_EQ(r[0].error_kind, "crash");
    EXPECT_NE(r[0].text.find("exited with status 3"), std::string::npos) << r[0].text;
    r = c.call_many({{"probe", {{"x", 1}}}});  // restarted, crashes again
    EXPECT_EQ(r[0].error_kind, "crash");
    EXPECT_EQ(c.restarts(), 1);
}

TEST(AgentMcp, GarbageFromServerIsAnErrorObservation) {
    McpClient c({fault_server("garbage"), fault_server("ok")}, 10.0, 20.0);
    EXPECT_THROW(c.start(), IoError);  // both offer "probe": refused, naming both commands
    McpClient g({fault_server("garbage")}, 10.0, 20.0);
    g.start();
    auto r = g.call_many({{"probe", {{"x", 1}}}});
    EXPECT_EQ(r[0].error_kind, "garbage");
    EXPECT_NE(r[0].text.find("not JSON-RPC"), std::string::npos) << r[0].text;
    McpClient ok({fault_server("ok")}, 10.0, 20.0);
    ok.start();
    EXPECT_EQ(ok.call_many({{"probe", {{"x", 7}}}})[0].text, "probe 7");
}

TEST(AgentMcp, ServerThatCannotStartIsAClearError) {
    McpClient c({"exit 4"}, 5.0, 5.0);
    try {
        c.start();
        FAIL() << "no error";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("MCP server 'exit 4'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("exited with status 4"), std::string::npos) << e.what();
    }
}

TEST(AgentLineProcess, StopKillsTheWholeProcessGroup) {
    // A command that leaves a child behind in its group (as `npx` leaves `node`).
    LineProcess p("sleep 300 & exec cat", "test");
    const pid_t pgid = p.pid();
    p.send_line("hello", 5.0);
    EXPECT_EQ(p.read_line(10.0).value_or(""), "hello");
    EXPECT_TRUE(group_alive(pgid));
    p.stop(0.2);
    EXPECT_TRUE(group_gone_within(pgid, 5.0)) << "a process of the group outlived stop()";
}

TEST(AgentLineProcess, ProcessesDieWithTheirRank) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t rank = ::fork();
    if (rank == 0) {  // a "rank" that starts a server and is then SIGKILLed: no destructor runs
        LineProcess p("sleep 300 & exec sleep 300", "test");
        const pid_t pgid = p.pid();
        (void)!::write(fds[1], &pgid, sizeof(pgid));
        ::pause();
        ::_exit(0);
    }
    pid_t pgid = -1;
    ASSERT_EQ(::read(fds[0], &pgid, sizeof(pgid)), static_cast<ssize_t>(sizeof(pgid)));
    EXPECT_TRUE(group_alive(pgid));
    ::kill(rank, SIGKILL);
    ::waitpid(rank, nullptr, 0);
    EXPECT_TRUE(group_gone_within(pgid, 5.0)) << "the server's process group outlived its rank";
    ::close(fds[0]);
    ::close(fds[1]);
}

}  // namespace
}  // namespace rlpt::agent
