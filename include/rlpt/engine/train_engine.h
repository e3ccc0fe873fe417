#pragma once
// Training engine (DESIGN §4): data parallel over a role's DP communicator.
//
// Contract (the actor, critic, reward-model training and SFT all use it this way):
//
//     engine.zero_grad();
//     for (micro-batch mb of this rank's share of the mini-batch) {
//         loss = <a loss that is already this micro-batch's share of the GLOBAL mini-batch
//                 loss times dp_size, as algo::agg_loss computes it with GlobalBatchInfo>;
//         loss.backward();                      // gradients accumulate (sum)
//     }
//     StepResult r = engine.step();             // collective on the DP communicator
//
// step(): all-reduces the gradients (mean over DP ranks) in flattened buckets of
// grad_bucket_bytes (MPI on CPU; NCCL when built with it and the parameters are on CUDA),
// computes the global L2 norm, skips the update and zeroes the gradients when the norm is not
// finite (verl's behaviour), clips to clip_grad, applies AdamW (decoupled weight decay;
// bias-corrected), and advances the learning-rate schedule (linear warm-up, then constant or
// cosine down to min_lr_ratio). The same global batch gives the same update, within fp32
// tolerance, whether the DP group has 1, 2 or 3 ranks.
//
// ZeRO-1 (zero_stage = 1): each DP rank keeps the AdamW moments only for its slice of the
// flattened parameters, updates that slice, and the slices are all-gathered back into the
// parameters; optimizer memory per rank drops from 8 bytes/param to 8/dp_size.
//
// All DP ranks must hold identical parameters: the constructor broadcasts them from DP rank 0.
// The constructor and step(), save_state(), load_state() are collective on `dp`.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "rlpt/comm/mpi.h"

namespace rlpt::ckpt {
class H5Writer;
class H5Reader;
}  // namespace rlpt::ckpt

namespace rlpt::engine {

struct OptimOptions {
    double lr = 1e-6;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;   // applied to matrices and embeddings only (not norms, not biases)
    int64_t warmup_steps = 0;
    std::string scheduler = "constant";  // constant | cosine
    double min_lr_ratio = 0.0;
    double num_cycles = 0.5;
    int64_t total_steps = 1;      // for the cosine schedule
    double clip_grad = 1.0;       // <= 0: no clipping
    int64_t zero_stage = 0;       // 0 | 1
    int64_t grad_bucket_bytes = 25 << 20;
};

struct StepResult {
    double grad_norm = 0;  // global L2 norm before clipping (NaN/inf when skipped)
    double lr = 0;         // learning rate used for this step
    bool skipped = false;  // non-finite gradient: no update was applied
};

// Learning rate at optimizer step `step` (0-based) of a schedule: pure function, tested alone.
double scheduled_lr(const OptimOptions& o, int64_t step);

class TrainEngine {
  public:
    // `module` is the model (CausalLM, ValueModel, ...) whose trainable parameters are
    // optimised. `dp` is the role's DP communicator (not duplicated; the engine's collectives
    // use it serially). `seed` seeds the engine's RNG (dropout-free models still save it).
    TrainEngine(std::shared_ptr<torch::nn::Module> module, const comm::Communicator& dp, OptimOptions opts,
                uint64_t seed);
    ~TrainEngine();
    TrainEngine(const TrainEngine&) = delete;
    TrainEngine& operator=(const TrainEngine&) = delete;

    void zero_grad();
    StepResult step();

    int64_t global_step() const;   // optimizer steps taken (skipped steps count)
    double current_lr() const;     // lr the next step will use
    const OptimOptions& options() const;
    // Bytes of optimizer state held on this rank.
    int64_t optimizer_state_bytes() const;

    // Checkpointing under `prefix` (e.g. "actor/"): parameters (from DP rank 0's view, every rank
    // writes its own file), this rank's optimizer state (its slice under ZeRO-1), step, RNG
    // state. load_state() restores all of it bit-identically; a layout mismatch (other
    // parameter names/shapes, other DP size under ZeRO-1) is an IoError naming the tensor.
    void save_state(ckpt::H5Writer& w, const std::string& prefix) const;
    void load_state(ckpt::H5Reader& r, const std::string& prefix);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rlpt::engine
