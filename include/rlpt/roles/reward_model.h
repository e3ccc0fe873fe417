#pragma once
// The reward-model role: a value-head model scoring whole sequences. Table in roles/reward_model.cpp.
#include <cstdint>
#include <string>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class RewardModelMethod : uint16_t {
    kPing = 0,      // one_to_all / all
    kInit,          // one_to_all / none. protocol::InitWith<RewardModelSettings>: loads its model_path
    kComputeScore,  // dp_split / concat: input_ids, attention_mask, position_ids, responses -> rm_scores [B] fp32
    kCount
};

// The reward model's settings (kInit), resolved once from the config by the run plan.
struct RewardModelSettings {
    std::string model_path;  // reward_model.model_path: a *ForSequence/TokenClassification model
    std::string dtype;       // model.dtype
    int64_t micro_batch_size_per_rank = 1;
    template <typename V>
    void visit(V& v) {
        v("model_path", model_path);
        v("dtype", dtype);
        v("micro_batch_size_per_rank", micro_batch_size_per_rank);
    }
};

const protocol::RoleSpec& reward_model_spec();

}  // namespace rlpt::roles

namespace rlpt::protocol {
template <>
struct RoleOf<roles::RewardModelMethod> {
    static constexpr const char* kName = "reward_model";
};
template <>
struct ArgsOf<roles::RewardModelMethod::kInit> {
    using type = InitWith<roles::RewardModelSettings>;
};
}  // namespace rlpt::protocol
