#pragma once
// The critic role: a value model trained on returns. Table in roles/critic.cpp.
#include <cstdint>
#include <string>

#include "rlpt/algo/loss_config.h"
#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/roles/settings.h"

namespace rlpt::roles {

enum class CriticMethod : uint16_t {
    kPing = 0,       // one_to_all / all
    kInit,           // one_to_all / none. protocol::InitWith<CriticSettings> (total_steps: training
                     //   steps). From critic.model_path, else the policy's weights + a zero value head
    kComputeValues,  // dp_split / concat: input_ids, attention_mask, position_ids, responses
                     //   -> values [B, R] fp32
    kUpdate,         // dp_split unpadded / concat (metrics): + values, returns, response_mask;
                     //   CriticUpdateArgs
    kSave,           // one_to_all / all: protocol::DirArgs -> file info per rank
    kLoad,           // one_to_all / none: protocol::DirArgs
    kCount
};

// The critic's settings (kInit), resolved once from the config by the run plan. The keys it shares
// with the actor come from actor.* (as verl's critic inherits them): the loss aggregation and its
// scale, the dynamic micro-batching, and ppo_epochs unless critic.ppo_epochs is set.
struct CriticSettings {
    ModelSettings policy;    // the policy, whose weights start a critic without model_path
    std::string model_path;  // critic.model_path (a value-head model); empty: the policy + a zero value head
    OptimConfig optim;       // critic.optim
    PpoSettings ppo;         // kUpdate's loop
    algo::AggMode loss_agg_mode = algo::AggMode::kTokenMean;  // actor.loss_agg_mode
    double cliprange_value = 0;                               // critic.cliprange_value
    int64_t forward_micro_batch_size_per_rank = 1;            // kComputeValues's forwards
    int64_t seed = 0;                                         // trainer.seed: the engine's random stream
    template <typename V>
    void visit(V& v) {
        v("policy", policy);
        v("model_path", model_path);
        v("optim", optim);
        v("ppo", ppo);
        v("loss_agg_mode", loss_agg_mode);
        v("cliprange_value", cliprange_value);
        v("forward_micro_batch_size_per_rank", forward_micro_batch_size_per_rank);
        v("seed", seed);
    }
};

struct CriticUpdateArgs {
    int64_t num_mini_batches = 1;       // per epoch
    double global_mini_batch_rows = 0;  // rows of one mini-batch over all DP ranks
    template <typename V>
    void visit(V& v) {
        v("num_mini_batches", num_mini_batches);
        v("global_mini_batch_rows", global_mini_batch_rows);
    }
};

const protocol::RoleSpec& critic_spec();

}  // namespace rlpt::roles

namespace rlpt::protocol {
template <>
struct RoleOf<roles::CriticMethod> {
    static constexpr const char* kName = "critic";
};
template <>
struct ArgsOf<roles::CriticMethod::kInit> {
    using type = InitWith<roles::CriticSettings>;
};
template <>
struct ArgsOf<roles::CriticMethod::kUpdate> {
    using type = roles::CriticUpdateArgs;
};
template <>
struct ArgsOf<roles::CriticMethod::kSave> {
    using type = DirArgs;
};
template <>
struct ArgsOf<roles::CriticMethod::kLoad> {
    using type = DirArgs;
};
}  // namespace rlpt::protocol
