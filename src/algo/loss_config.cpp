// The names of the loss aggregation modes (rlpt/algo/loss_config.h). Torch-free.
#include "rlpt/algo/loss_config.h"

#include <fmt/format.h>

#include "rlpt/core/error.h"

namespace rlpt::algo {

namespace {

struct ModeName {
    AggMode mode;
    const char* name;
};
constexpr ModeName kModeNames[] = {
    {AggMode::kTokenMean, "token-mean"},
    {AggMode::kTokenSum, "token-sum"},
    {AggMode::kSeqMeanTokenSum, "seq-mean-token-sum"},
    {AggMode::kSeqMeanTokenMean, "seq-mean-token-mean"},
    {AggMode::kSeqMeanTokenSumNorm, "seq-mean-token-sum-norm"},
};

}  // namespace

AggMode parse_agg_mode(const std::string& name) {
    for (const auto& m : kModeNames)
        if (name == m.name) return m.mode;
    RLPT_THROW(ValueError, "unknown loss_agg_mode '{}'; valid modes: {}", name, fmt::join(agg_mode_names(), ", "));
}

const char* agg_mode_name(AggMode mode) {
    for (const auto& m : kModeNames)
        if (mode == m.mode) return m.name;
    RLPT_THROW(InternalError, "agg_mode_name: unknown AggMode value {}", static_cast<int>(mode));
}

std::vector<std::string> agg_mode_names() {
    std::vector<std::string> names;
    for (const auto& m : kModeNames) names.emplace_back(m.name);
    return names;
}

}  // namespace rlpt::algo
