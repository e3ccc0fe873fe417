#pragma once
// The agent loop's step metrics, from the per-sample columns tool_agent returns
// (agent/tool_agent.h). verl's names where it has them:
//   num_turns/{min,max,mean}          turns per sample (assistant + observation turns + 1)
//   tool_call_counts/{min,max,mean}   tool calls per sample
// and rlpt's:
//   agent/tool_errors                 failed calls in the batch (malformed, unknown tool, bad
//                                     arguments, timeout, crash, garbage, isError results)
//   agent/tool_error_rate             tool_errors / calls
//   agent/tool_latency_s/{mean,max}   per call
//   agent/observation_tokens/mean     observation tokens per sample (masked out of the loss)
//   agent/model_tokens/mean           response tokens the model sampled, per sample
//   agent/env_reward/mean, agent/env_errors   environment runs only
// Adds nothing when the batch has no num_turns column (another generator).
#include <map>
#include <string>

#include "rlpt/batch/batch.h"

namespace rlpt::agent {

void add_agent_metrics(const Batch& batch, std::map<std::string, double>& metrics);

}  // namespace rlpt::agent
