#pragma once
// The optimizer settings of a training role, as the config spells them (actor.optim, critic.optim,
// sft.optim; the config includes this header) and as the roles receive them in their settings
// (include/rlpt/roles/settings.h). A role turns them into the engine's OptimOptions at init, when
// the run's training steps and the role's shard groups are known. Torch-free.
#include <cstdint>
#include <string>

namespace rlpt {

struct OptimConfig {
    double lr = 1e-6;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;
    // The schedule advances once per TRAINING step (verl), not per optimizer step: RL roles step
    // the optimizer once per mini-batch and epoch but move the lr only after the whole update.
    int64_t warmup_steps = -1;  // training steps; -1: use warmup_ratio x total training steps
    double warmup_ratio = 0.0;
    std::string scheduler = "constant";  // constant | cosine
    double min_lr_ratio = 0.0;           // cosine floor, as a fraction of lr
    double num_cycles = 0.5;             // cosine cycles
    double clip_grad = 1.0;              // max global grad norm; <= 0 disables clipping
    // 0: everything replicated; 1: AdamW moments sharded over the DP ranks; 2: + gradients
    // (reduce-scattered); 3: + parameters (gathered per decoder layer, FSDP-style). See
    // engine/train_engine.h for the bytes per parameter each keeps.
    int64_t zero_stage = 0;
    // Hybrid shard (verl's fsdp_config.fsdp_size; FSDP HYBRID_SHARD): the ZeRO state is sharded
    // inside groups of DP ranks and replicated across them. -1: one group of all DP ranks (plain
    // ZeRO); 0: the DP ranks on one node (placement's node map); N >= 1: N consecutive DP ranks
    // (N must divide the role's DP size). Needs zero_stage >= 1 unless -1.
    int64_t fsdp_size = -1;
    double grad_bucket_mb = 25.0;  // gradient all-reduce bucket size

    // Every field, for the roles' settings on the wire (rlpt/protocol/args.h).
    template <typename V>
    void visit(V& v) {
        v("lr", lr);
        v("beta1", beta1);
        v("beta2", beta2);
        v("eps", eps);
        v("weight_decay", weight_decay);
        v("warmup_steps", warmup_steps);
        v("warmup_ratio", warmup_ratio);
        v("scheduler", scheduler);
        v("min_lr_ratio", min_lr_ratio);
        v("num_cycles", num_cycles);
        v("clip_grad", clip_grad);
        v("zero_stage", zero_stage);
        v("fsdp_size", fsdp_size);
        v("grad_bucket_mb", grad_bucket_mb);
    }
};

}  // namespace rlpt
