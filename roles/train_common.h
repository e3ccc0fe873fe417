#pragma once
// Helpers shared by the roles that train or score sequences (private to roles/).
#include <torch/torch.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/algo/agg_loss.h"
#include "rlpt/batch/batch.h"
#include "rlpt/config/config.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"

namespace rlpt::roles::detail {

// The sequences of rows [b, e) of a batch, with all-padding columns trimmed: left prompt
// columns no row uses and response columns past the longest response. `kept_r` receives
// how many response columns remain (pad results back to R with pad_response_columns).
engine::SequenceBatch trimmed_sequences(const Batch& b, int64_t* kept_r);
// Slices a [rows, R] tensor to its first `r` columns.
torch::Tensor first_columns(const torch::Tensor& t, int64_t r);
// Pads [rows, r] to [rows, R] with zeros.
torch::Tensor pad_response_columns(const torch::Tensor& t, int64_t R);

// Micro-batches of a local mini-batch: fixed size, or token-budget (use_dynamic_bsz) with the
// count agreed over the DP communicator. Returns row index lists.
std::vector<std::vector<int64_t>> micro_batches(const Batch& mini, int64_t micro_size, bool dynamic,
                                                int64_t max_tokens, const comm::Communicator& dp);

// One output column of forward_micro_batches: per token ([rows, r], padded back to the batch's
// R response columns) or per sequence ([rows]).
struct ForwardColumn {
    std::string name;
    bool per_token = true;
};
// The forward loop of the scoring methods (log-probs, values, reward scores): `forward` runs on
// each micro-batch of `in` (rows in order, `micro_size` rows each, all-padding columns trimmed)
// and returns one tensor per entry of `columns`. Returns in.size() rows with those columns on
// the CPU ([0, R] / [0] for an empty input). Collective only where `forward` is: a tensor-parallel
// model's forward runs on its mp communicator, so every rank of the block calls this with its
// (identical) shard.
using MicroForward = std::function<std::vector<torch::Tensor>(const engine::SequenceBatch& seq)>;
Batch forward_micro_batches(const Batch& in, int64_t micro_size, const std::vector<ForwardColumn>& columns,
                            const MicroForward& forward);

// The PPO update loop of the actor and the critic (verl's update_policy / update_critic).
struct PpoLoop {
    std::string role;                       // "actor": metric names <role>/grad_norm, <role>/lr
    int64_t num_mini_batches = 1;           // per epoch; the local rows divide evenly into them
    int64_t epochs = 1;
    double global_mini_batch_rows = 0;      // rows of one mini-batch over all DP ranks
    std::optional<double> loss_scale_factor;  // unset: the response length R
    int64_t micro_batch_size = 1;           // fixed micro-batches, or with use_dynamic_bsz
    bool use_dynamic_bsz = false;           // token-budget micro-batches of max_token_len
    int64_t max_token_len = 0;
    std::string loss_metric;                // per optimizer step: the sum of the micro-steps' losses
    bool skipped_steps_metric = false;      // <role>/skipped_steps (non-finite gradients)
};
// `micro_step` runs the forward, the loss and its backward on one micro-batch and returns the
// loss value; `info` describes the mini-batch over all DP ranks; `micro_index` counts the
// micro-batches of the mini-batch from 0.
using MicroStep =
    std::function<double(const Batch& mb, const algo::GlobalBatchInfo& info, int64_t micro_index)>;
// epochs x mini-batches of `in` (rows in order): zero_grad, micro_step on each micro-batch, one
// optimizer step; the lr schedule then advances once (once per training step, as verl's).
// Adds the per-step metrics to `metrics`. Collective over `dp` (token counts, dynamic
// micro-batch counts, the engine's gradient all-reduce).
void ppo_update_loop(engine::TrainEngine& engine, const comm::Communicator& dp, int64_t dp_size, const Batch& in,
                     const PpoLoop& loop, Batch& metrics, const MicroStep& micro_step);

// total_steps: training steps (the engine's schedule advances once per training step).
engine::OptimOptions optim_options(const OptimConfig& o, int64_t total_steps);

// A 64-bit seed for a random stream named by `keys` (SplitMix64 mixing of each key in turn):
// distinct keys give independent streams, equal keys the same one.
uint64_t stream_seed(std::initializer_list<uint64_t> keys);

// Writes `<dir>/<role>_rank<k>.h5` via `save`, returns a 1-row batch with fields file, bytes,
// crc32 (for the checkpoint manifest).
Batch checkpoint_file_info(const std::string& dir, const std::string& file, uint64_t bytes, uint32_t crc);

}  // namespace rlpt::roles::detail
