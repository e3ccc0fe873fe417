#pragma once
// Helpers shared by the roles that train or score sequences (private to roles/).
#include <torch/torch.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/algo/agg_loss.h"
#include "rlpt/batch/batch.h"
#include "rlpt/engine/optim_config.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/roles/settings.h"

namespace rlpt::roles::detail {

struct ResliceTarget;  // model_setup.h

// The sequences of rows [b, e) of a batch, with all-padding columns trimmed: left prompt
// columns no row uses and response columns past the longest response. `kept_r` receives
// how many response columns remain (pad results back to R with pad_response_columns).
engine::SequenceBatch trimmed_sequences(const Batch& b, int64_t* kept_r);
// Slices a [rows, R] tensor to its first `r` columns.
torch::Tensor first_columns(const torch::Tensor& t, int64_t r);
// The [rows·T, moe layers, k] routes of a trimmed `seq` (trimmed_sequences of the same rows)
// from `column` of `b` ([rows, P+R, moe layers, k], e.g. routed_experts): model::MoeRouting's layout.
torch::Tensor sequence_routes(const Batch& b, const std::string& column, const engine::SequenceBatch& seq);
// Pads [rows, r] to [rows, R] with zeros.
torch::Tensor pad_response_columns(const torch::Tensor& t, int64_t R);

// Micro-batches of a local mini-batch: fixed size, or token-budget (use_dynamic_bsz) with the
// count agreed over the DP communicator. Returns row index lists (read on the host; the batch
// may be on any device).
std::vector<std::vector<int64_t>> micro_batches(const Batch& mini, int64_t micro_size, bool dynamic, int64_t max_tokens,
                                                const comm::Communicator& dp);

// One output column of forward_micro_batches: per token ([rows, r], padded back to the batch's
// R response columns) or per sequence ([rows]).
struct ForwardColumn {
    std::string name;
    bool per_token = true;
};
// The forward loop of the scoring methods (log-probs, values, reward scores): `forward` runs on
// each micro-batch of `in` (rows in order, `micro_size` rows each, all-padding columns trimmed)
// (`mb`, its rows, and `seq`, their sequences) and returns one tensor per entry of `columns`. Returns in.size() rows with those columns on
// the CPU ([0, R] / [0] for an empty input). Collective only where `forward` is: a tensor-parallel
// model's forward runs on its mp communicator, so every rank of the block calls this with its
// (identical) shard.
using MicroForward = std::function<std::vector<torch::Tensor>(const Batch& mb, const engine::SequenceBatch& seq)>;
Batch forward_micro_batches(const Batch& in, int64_t micro_size, const std::vector<ForwardColumn>& columns,
                            const MicroForward& forward);

// The PPO update loop of the actor and the critic (verl's update_policy / update_critic).
struct PpoLoop {
    std::string role;              // "actor": metric names <role>/grad_norm, <role>/lr
    int64_t num_mini_batches = 1;  // per epoch; the local rows divide evenly into them
    int64_t epochs = 1;
    double global_mini_batch_rows = 0;        // rows of one mini-batch over all DP ranks
    std::optional<double> loss_scale_factor;  // unset: the response length R
    int64_t micro_batch_size = 1;             // fixed micro-batches, or with use_dynamic_bsz
    bool use_dynamic_bsz = false;             // token-budget micro-batches of max_token_len
    int64_t max_token_len = 0;
    std::string loss_metric;            // per optimizer step: the sum of the micro-steps' losses
    bool skipped_steps_metric = false;  // <role>/skipped_steps (non-finite gradients)
};
// A role's PpoLoop from its update args (num_mini_batches, global_mini_batch_rows: ActorUpdateArgs,
// CriticUpdateArgs) and its settings.
template <typename Args>
PpoLoop make_ppo_loop(std::string role, const Args& args, const PpoSettings& s, std::string loss_metric) {
    PpoLoop loop;
    loop.role = std::move(role);
    loop.num_mini_batches = args.num_mini_batches;
    loop.epochs = s.epochs;
    loop.global_mini_batch_rows = args.global_mini_batch_rows;
    loop.loss_scale_factor = s.loss_scale_factor;
    loop.micro_batch_size = s.micro_batch_size_per_rank;
    loop.use_dynamic_bsz = s.use_dynamic_bsz;
    loop.max_token_len = s.max_token_len_per_rank;
    loop.loss_metric = std::move(loss_metric);
    return loop;
}
// `micro_step` runs the forward, the loss and its backward on one micro-batch and returns the
// loss value; `info` describes the mini-batch over all DP ranks; `micro_index` counts the
// micro-batches of the mini-batch from 0.
using MicroStep = std::function<double(const Batch& mb, const algo::GlobalBatchInfo& info, int64_t micro_index)>;
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

// A training role's checkpoint (the actor's and the critic's save/load methods): this rank's file
// `<dir>/<role>_rank<role_rank>.h5` holding the engine's state under "<role>/" (its shards,
// TrainEngine::save_state; none on a DP rank whose state replicates a lower rank's: ZeRO-0 DP
// ranks > 0, hybrid-shard groups past the first) plus whatever `extra` writes (every rank). Save
// returns the manifest row (one-row batch: dir, file, bytes, crc32); collective on the engine's
// DP communicator.
// Load: the checkpoint's layout (DP size D, tensor parallelism T) from `<role>_rank0.h5`; this
// rank reads the files of its tp rank (`<role>_rank<d·T + mp_rank>.h5`, d < D; the shards from
// those that hold them, TrainEngine::load_state), taking its step counters and attributes from
// the file of its own DP block (block 0's when the checkpoint had fewer blocks). At another T,
// `reslice` (the role's model: the actor's policy, the critic's value model; null: IoError)
// reslices every old tp rank's files into this rank's layout (resliced_checkpoint). Collective on
// `role_comm` (the failures of opening the checkpoint are agreed) and on the engine's DP
// communicator. A missing file is an IoError naming it. `extra` gets this rank's file.
Batch save_engine_checkpoint(const engine::TrainEngine& engine, const std::string& dir, const std::string& role,
                             int role_rank, const std::function<void(ckpt::H5Writer&)>& extra = {});
void load_engine_checkpoint(engine::TrainEngine& engine, const std::string& dir, const std::string& role, int role_rank,
                            const comm::Communicator& role_comm,
                            const std::function<void(const ckpt::H5Reader&)>& extra = {},
                            const ResliceTarget* reslice = nullptr);

}  // namespace rlpt::roles::detail
