#pragma once
// What the roles' settings share (each role's own struct is in its header: ActorSettings,
// CriticSettings, ReferenceSettings, RewardModelSettings). A role receives its settings once, with
// its kInit (protocol::InitWith), resolved on the controller from the run's config by the run plan
// (src/app/role_settings.cpp); it never reads the config. Each struct's `visit` lists every field:
// the encoder, the decoder and the schema of kInit (rlpt/protocol/args.h), so a setting that does
// not arrive is an error at init naming the role and the field, never a default.
#include <cstdint>
#include <optional>
#include <string>

#include "rlpt/engine/optim_config.h"
#include "rlpt/model/model_config.h"

namespace rlpt::roles {

// The policy a role builds (the actor, the reference, a critic started from the policy).
struct ModelSettings {
    std::string path;            // model.path: a Hugging Face folder; empty: the built-in model
    std::string dtype;           // model.dtype: float32 | bfloat16
    std::string head_precision;  // model.head_precision: fp32 | tf32 | bf16
    BuiltinModelConfig builtin;  // model.builtin, when path is empty
    template <typename V>
    void visit(V& v) {
        v("path", path);
        v("dtype", dtype);
        v("head_precision", head_precision);
        v("builtin", builtin);
    }
};

// The PPO update loop of the actor and the critic (detail::PpoLoop).
struct PpoSettings {
    int64_t epochs = 1;                       // passes over each batch per training step
    int64_t micro_batch_size_per_rank = 1;    // samples per forward/backward
    bool use_dynamic_bsz = false;             // micro-batches of max_token_len_per_rank tokens instead
    int64_t max_token_len_per_rank = 0;       // with use_dynamic_bsz
    std::optional<double> loss_scale_factor;  // unset: the response length R
    template <typename V>
    void visit(V& v) {
        v("epochs", epochs);
        v("micro_batch_size_per_rank", micro_batch_size_per_rank);
        v("use_dynamic_bsz", use_dynamic_bsz);
        v("max_token_len_per_rank", max_token_len_per_rank);
        v("loss_scale_factor", loss_scale_factor);
    }
};

// How the actor's weights reach a rollout that does not share its tensors (the actor sends, the
// rollout receives: both resolve the same values).
struct WeightSyncSettings {
    std::string backend;           // rollout.weight_sync.backend: auto | mpi | nccl
    double bucket_mb = 0;          // rollout.weight_sync.bucket_mb
    double timeout_s = 0;          // trainer.call_timeout_s: every transfer's deadline
    int64_t actor_zero_stage = 0;  // the actor's optim.zero_stage (sft.optim's in SFT): 3 sends from its shards
    template <typename V>
    void visit(V& v) {
        v("backend", backend);
        v("bucket_mb", bucket_mb);
        v("timeout_s", timeout_s);
        v("actor_zero_stage", actor_zero_stage);
    }
};

}  // namespace rlpt::roles
