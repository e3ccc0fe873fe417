#include "rlpt/agent/agent_metrics.h"

namespace rlpt::agent {

void add_agent_metrics(const Batch& batch, std::map<std::string, double>& m) {
    if (!batch.has("num_turns") || batch.size() == 0) return;
    auto col = [&](const char* name) { return batch.at(name).to(torch::kFloat64); };
    for (const char* name : {"num_turns", "tool_call_counts"}) {
        const auto v = col(name);
        m[std::string(name) + "/min"] = v.min().item<double>();
        m[std::string(name) + "/max"] = v.max().item<double>();
        m[std::string(name) + "/mean"] = v.mean().item<double>();
    }
    const double calls = col("tool_call_counts").sum().item<double>();
    const double errors = col("tool_errors").sum().item<double>();
    m["agent/tool_errors"] = errors;
    if (calls > 0) {
        m["agent/tool_error_rate"] = errors / calls;
        m["agent/tool_latency_s/mean"] = col("tool_latency_s").sum().item<double>() / calls;
        m["agent/tool_latency_s/max"] = col("tool_latency_max_s").max().item<double>();
    }
    m["agent/observation_tokens/mean"] = col("observation_tokens").mean().item<double>();
    m["agent/model_tokens/mean"] = col("model_tokens").mean().item<double>();
    if (batch.has("env_reward")) {
        m["agent/env_reward/mean"] = col("env_reward").mean().item<double>();
        m["agent/env_errors"] = col("env_errors").sum().item<double>();
    }
}

}  // namespace rlpt::agent
