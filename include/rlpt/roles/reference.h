#pragma once
// The reference role: the frozen initial policy, for KL terms. Table in roles/reference.cpp.
#include <cstdint>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/roles/settings.h"

namespace rlpt::roles {

enum class ReferenceMethod : uint16_t {
    kPing = 0,        // one_to_all / all
    kInit,            // one_to_all / none. protocol::InitWith<ReferenceSettings>
    kComputeLogProb,  // dp_split / concat: input_ids, attention_mask, position_ids, responses;
                      //   ReferenceLogProbArgs -> ref_log_prob [B, R] fp32
    kCount
};

// The reference's settings (kInit), resolved once from the config by the run plan.
struct ReferenceSettings {
    ModelSettings model;
    int64_t log_prob_micro_batch_size_per_rank = 1;  // ref.log_prob_micro_batch_size_per_rank
    // ref.zero_stage resolved: 0 a full copy per rank; 3 the parameters sharded over the reference's
    // DP ranks (by default when the actor runs ZeRO-3), in groups of fsdp_size.
    int64_t zero_stage = 0;
    int64_t fsdp_size = -1;  // actor.optim.fsdp_size
    template <typename V>
    void visit(V& v) {
        v("model", model);
        v("log_prob_micro_batch_size_per_rank", log_prob_micro_batch_size_per_rank);
        v("zero_stage", zero_stage);
        v("fsdp_size", fsdp_size);
    }
};

struct ReferenceLogProbArgs {
    double temperature = 1.0;
    template <typename V>
    void visit(V& v) {
        v("temperature", temperature);
    }
};

const protocol::RoleSpec& reference_spec();

}  // namespace rlpt::roles

namespace rlpt::protocol {
template <>
struct RoleOf<roles::ReferenceMethod> {
    static constexpr const char* kName = "reference";
};
template <>
struct ArgsOf<roles::ReferenceMethod::kInit> {
    using type = InitWith<roles::ReferenceSettings>;
};
template <>
struct ArgsOf<roles::ReferenceMethod::kComputeLogProb> {
    using type = roles::ReferenceLogProbArgs;
};
}  // namespace rlpt::protocol
