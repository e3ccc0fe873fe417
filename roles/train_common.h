#pragma once
// Helpers shared by the roles that train or score sequences (private to roles/).
#include <torch/torch.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

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

// total_steps: training steps (the engine's schedule advances once per training step).
engine::OptimOptions optim_options(const OptimConfig& o, int64_t total_steps);

// A 64-bit seed for a random stream named by `keys` (SplitMix64 mixing of each key in turn):
// distinct keys give independent streams, equal keys the same one.
uint64_t stream_seed(std::initializer_list<uint64_t> keys);

// A training role's checkpoint (the actor's and the critic's save/load methods): this rank's file
// `<dir>/<role>_rank<role_rank>.h5` holding the engine's state under "<role>/" plus whatever
// `extra` writes. Save returns the manifest row (one-row batch: dir, file, bytes, crc32);
// collective on the engine's DP communicator. Load reads this rank's file, or when the checkpoint
// was written with fewer ranks (another DP size: elastic resume) the file of the same mp rank in
// DP block 0 (`<role>_rank<mp_rank>.h5`); the engine takes its slices of it or refuses a layout
// it cannot reshard (IoError). A missing file is an IoError naming it. `extra` gets the open file.
Batch save_engine_checkpoint(const engine::TrainEngine& engine, const std::string& dir, const std::string& role,
                             int role_rank, const std::function<void(ckpt::H5Writer&)>& extra = {});
void load_engine_checkpoint(engine::TrainEngine& engine, const std::string& dir, const std::string& role, int role_rank,
                            int mp_rank, const std::function<void(ckpt::H5Reader&)>& extra = {});

}  // namespace rlpt::roles::detail
