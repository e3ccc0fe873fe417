#pragma once
// The rollout generators by name (config key rollout.generator), for the rollout role
// (roles/rollout.cpp) and the config check. Rows of roles/generator_table.cpp:
//   sampler      rollout::generate (rollout/generator.h): temperature / top-k / top-p or greedy sampling
//   beam_search  rollout::beam_search (rollout/beam_search.h): rollout.beam_search.{beam_width,
//                length_penalty}; a prompt's n samples are its n best beams
//   multi_stage  rollout::run_stages (rollout/multi_stage.h): rollout.stages
//   tool_agent   agent::tool_agent_generate (agent/tool_agent.h): rollout.multi_turn
// The table lives with the role because its rows come from both src/rollout and src/agent, and
// agent uses rollout, never the reverse. What a generator is: rollout/generators.h.
#include <string>
#include <vector>

#include "rlpt/rollout/generators.h"

namespace rlpt::roles {

struct GeneratorEntry {
    const char* name;
    rollout::GeneratorFn fn;
    const char* what;  // one line for error messages and docs
    // Runs rollout.multi_turn's tools or environment between turns (the agent loop): it reads and
    // writes text with the run's tokenizer, the prompts list its tools, and the config must give it
    // tools or an environment and a chat template with a tool format (app::generator_problems).
    bool runs_tools = false;
};

// Every generator, in a fixed order.
const std::vector<GeneratorEntry>& generator_table();
// The entry named `name`; ConfigError "rollout.generator: unknown generator ... (valid: ...)".
const GeneratorEntry& find_generator(const std::string& name);

}  // namespace rlpt::roles
