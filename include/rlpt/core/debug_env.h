#pragma once
// Environment variables are only debugging knobs (STYLE §4), all read here, once.
//
//   RLPT_LOG_LEVEL          overrides trainer.log_level (trace|debug|info|warn|error|off)
//   RLPT_SIMULATE_NODES     pretend the ranks sit on several nodes: "8" = 8 ranks per node
//                           (node = world_rank / 8), or "0,0,1,1,1" = a node label per rank.
//                           For testing multi-node placement on one machine.
//   RLPT_FAULT              inject a fault for the fault tests: "<kind>:<world rank>:<method>[:<step>]"
//                           with kind throw|kill|hang (protocol::FaultPlan, include/rlpt/protocol/runtime.h)
//   RLPT_ASSET_DIR          where tests find downloaded test assets (tokenizers)
//   RLPT_SHARED_DIR         where tests find ../shared (GSM8K data)
#include <string>
#include <vector>

namespace rlpt {

struct DebugEnv {
    std::string log_level;       // empty: not set
    std::string simulate_nodes;  // empty: not set
    std::string fault;           // empty: not set
};

// Reads the variables (cheap; call once in main and pass the result down).
DebugEnv read_debug_env();

// Node label of `world_rank` under RLPT_SIMULATE_NODES `spec`; throws ConfigError on a
// malformed spec or a label list of the wrong length.
int simulated_node_label(const std::string& spec, int world_rank, int world_size);

}  // namespace rlpt
