#pragma once
// Shared by the agent tests: where scripts/fetch_test_assets.sh installs the MCP reference server.
#include <cstdlib>
#include <filesystem>
#include <string>

namespace rlpt::agent::testing {

// $RLPT_ASSET_DIR (default ~/.cache/rlpt/test-assets)/mcp/node_modules/.bin/mcp-server-everything,
// or "" when it or node is missing (the tests then skip).
inline std::string everything_server() {
    std::string dir;
    if (const char* env = std::getenv("RLPT_ASSET_DIR"); env != nullptr && *env) dir = env;
    else dir = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/rlpt/test-assets";
    const std::string bin = dir + "/mcp/node_modules/.bin/mcp-server-everything";
    return std::filesystem::exists(bin) && std::system("command -v node >/dev/null 2>&1") == 0 ? bin : "";
}

}  // namespace rlpt::agent::testing
