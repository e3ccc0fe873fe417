#pragma once
// Building models on a worker from its settings (private to roles/).
#include <memory>
#include <string>

#include "rlpt/engine/train_engine.h"
#include "rlpt/comm/placement.h"
#include "rlpt/model/transformer.h"
#include "rlpt/model/value_model.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/roles/settings.h"
#include "rlpt/weights/held_reshard.h"
#include "rlpt/weights/served_weights.h"
#include "rlpt/weights/weight_reshard.h"
#include "rlpt/weights/weight_sync.h"

namespace rlpt::roles::detail {

// A model.dtype name's dtype: bfloat16, else float32.
torch::Dtype dtype_for(const std::string& dtype);

// The role's tensor-parallel block (its mp communicator) when model_parallel_size > 1, else
// null. Collective on the role's mp communicator.
std::shared_ptr<const model::TensorParallel> tensor_parallel(const protocol::WorkerContext& ctx, torch::Device device);

// The policy named by `m.path`, or a built-in random model (m.builtin sizes, init_seed) whose
// vocabulary size comes from the controller's tokenizer (`vocab_size`). Every call with the same
// settings gives identical weights; with `tp` this rank's slices of them.
std::shared_ptr<model::CausalLM> build_policy(const ModelSettings& m, torch::Device device, int64_t vocab_size,
                                              std::shared_ptr<const model::TensorParallel> tp = nullptr);

// The engine's view of a tensor-parallel model (empty for tp = 1).
engine::TensorParallelInfo engine_tp_info(const protocol::WorkerContext& ctx, const torch::nn::Module& m,
                                          const model::TpLayout& layout);

// Parameters in a fixed order (named_parameters), e.g. for weight sync.
std::vector<torch::Tensor> parameter_list(torch::nn::Module& m);

using comm::weight_sync_ranks;

// Tags for MPI_Comm_create_group of the weight-sync communicators (+ mp_rank for the
// per-mp_rank broadcasts).
constexpr int kWeightSyncGroupTag = 4242;
constexpr int kWeightReshardGroupTag = 4241;
constexpr int kWeightExchangeGroupTag = 4240;

// The actor -> rollout weight sync state of one rank (actor or rollout side), built at its first
// sync: with a ZeRO-3 actor (weight_sync_from_shards) every actor rank's shards straight to the
// rollout ranks (weights::HeldReshard over comm::weight_exchange_ranks); otherwise a per-mp_rank
// broadcast between equal layouts, or a shard-to-shard reshard from the actor's first block when
// the rollout's model_parallel_size differs (comm::weight_reshard_ranks).
struct PolicySync {
    comm::Communicator comm;
    std::unique_ptr<weights::WeightSync> broadcast;
    std::unique_ptr<weights::WeightReshard> reshard;
    weights::ReshardPlan plan;
    std::vector<std::string> names;
    std::unique_ptr<weights::RegionExchange> exchange;
    std::unique_ptr<weights::HeldReshard> from_shards;
};
// The actor -> rollout weight transfer options: the bucket (MiB -> bytes) and the deadline (the
// broadcast, the reshard and the hybrid engine's region exchange all take these).
weights::WeightSyncOptions weight_sync_options(const WeightSyncSettings& s);

// Whether the actor -> separate rollout sync goes from the actor's shards (the actor trains at
// ZeRO-3 and some rollout rank does not host the actor): then no actor rank holds the full model
// for it.
bool weight_sync_from_shards(const WeightSyncSettings& s, const protocol::WorkerContext& ctx);

// One sync of `m`'s parameters: the actor's ranks send (`version` is published), the separate
// rollout ranks receive (`version` is set after their last byte landed). Ranks that take no part
// return at once (actor ranks outside the sending block or mp group). Actor ranks pass `held`
// (what the rank holds of the actor, TrainEngine::held_parameters), which the sync from the
// shards sends from (weight_sync_from_shards: every actor rank takes part, `m`'s storage is not
// read; the version then reaches the rollout by one broadcast from the actor's first rank,
// after the data). Collective over the sync group, on its first call also over the group's
// creation (MPI_Comm_create_group on the control communicator).
// `s`: the same settings on both sides (the actor's, and the rollout's from the same config).
void sync_policy_weights(PolicySync& sync, const WeightSyncSettings& s, const protocol::WorkerContext& ctx,
                         model::CausalLM& m, uint64_t& version,
                         const std::function<std::vector<engine::HeldSlice>()>& held = {});

// What resuming a model at another tensor-parallel size needs of it: its parameters (Hugging
// Face names, this rank's local shapes), its layout and its arguments (model::shard_spec places
// each slice). The actor's CausalLM and the critic's ValueModel (whose value head is replicated);
// `module` must outlive the target.
struct ResliceTarget {
    const torch::nn::Module* module = nullptr;
    model::TpLayout layout;
    model::ModelArgs args;
};
ResliceTarget reslice_target(const model::CausalLM& m);
ResliceTarget reslice_target(const model::ValueModel& m);

// Resume at another tensor-parallel size: the checkpoint's files of each old tp rank
// (`old_tp_ranks[t]`), presented in `target`'s layout. Each tensor (and each optimizer kind of
// it) is assembled full from the old block's slices, one tensor at a time (cached until the next
// one), and this rank's slice is cut from it. Step counters, RNG and attributes come from
// old_tp_ranks[own_tp]. Local (no collective).
std::unique_ptr<engine::SavedState> resliced_checkpoint(std::vector<std::unique_ptr<engine::ShardedState>> old_tp_ranks,
                                                        size_t own_tp, const ResliceTarget& target);

// The shared key under which a colocated actor publishes its model (and the weight version).
constexpr const char* kSharedPolicy = "policy";
using weights::SharedPolicy;

}  // namespace rlpt::roles::detail
