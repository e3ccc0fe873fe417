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
// bias-corrected; engine/adamw.h's adamw_update_multi_, LibTorch's fused multi-tensor kernel, one
// call per weight-decay class), and advances the learning-rate schedule (linear warm-up, then constant or
// cosine down to min_lr_ratio). The same global batch gives the same update, within fp32
// tolerance, whether the DP group has 1, 2 or 3 ranks.
//
// ZeRO-1 (zero_stage = 1): each DP rank keeps the AdamW moments only for its slice of the
// flattened parameters, updates that slice, and the slices are all-gathered back into the
// parameters; optimizer memory per rank drops from 8 bytes/param to 8/dp_size. The gradients
// are still all-reduced in full (not reduce-scattered): the same arithmetic and buffers as
// ZeRO-0, and the global norm needs no extra collective. ZeRO-0 and ZeRO-1 give bit-identical
// parameters at the same DP size. Shards are equal: the flat buffers are padded to a multiple
// of 64·dp_size elements.
//
// ZeRO-2 (zero_stage = 2): gradients are reduce-scattered instead of all-reduced; each rank
// keeps (between steps: only) the fp32 sum of its slice. The norm is the all-reduced sum of the
// slices' squares; clipping and AdamW run on the slice; the updated slices are all-gathered
// into the (replicated) parameters as under ZeRO-1. With a transformer (a module holding a
// model::Backbone) the flat buffers are split per unit (each decoder layer; the root: embeddings,
// final norm, heads) and the engine installs model::LayerHooks: a layer's full gradient buffer
// exists only during its backward (allocated before, reduce-scattered and freed right after,
// every micro-batch); the root's from the first forward with gradients to step(). Without a
// Backbone the whole module is one unit reduce-scattered in step().
//
// ZeRO-3 (zero_stage = 3, FSDP-style; needs a Backbone): parameters are sharded too. Each rank
// stores only its slice of every unit; the module's parameter tensors keep their shapes but
// have no data (storage freed) outside the windows where a unit is gathered: a decoder layer
// just before its forward (freed right after) and again before its backward (freed after its
// gradients are reduce-scattered); the root unit from the start of a forward to step() (or
// release_parameters()). With zero3_prefetch the next layer's all-gather is started
// (non-blocking) while the current one computes. Anything that reads parameters outside a
// forward must hold them: hold_full_parameters() (or model::hold_full_parameters on the
// module), gather_parameter() one tensor at a time, or read the slices (held_parameters()).
// Per parameter element and rank between steps (fp32; bf16 adds 4 bytes of master per slice):
//   ZeRO-0  4 + 4 + 8 = 16     ZeRO-1  4 + 4 + 8/dp     ZeRO-2  4 + 12/dp     ZeRO-3  16/dp
// (+ padding to 64·dp elements per unit; ZeRO-2/3 add one gathered layer and its gradient
// during a forward/backward, and the root unit from the forward to the step).
// After step() under ZeRO-2/3 the .grad tensors are not the DP-mean gradient (use the norm).
//
// All DP ranks must hold identical parameters: the constructor broadcasts them from DP rank 0.
// The constructor and step(), save_state(), load_state() are collective on `dp`.
//
// Memory layout (what the engine does to the module): the trainable parameters of each dtype
// are moved into one flat, padded buffer per dtype (Tensor::set_data: the parameter tensors
// stay the same objects, now views into the buffer) and their .grad tensors are views into a
// flat gradient buffer of the same layout, so backward() accumulates straight into the
// buffer that is all-reduced (no copy in, no copy out). Do not move or re-create the
// parameters (Module::to, loading into new tensors) after building the engine: step() checks
// and throws a ValueError naming the parameter. Copying values in place (copy_) is fine.
// module->zero_grad() is tolerated (it zeroes through a detached alias, or drops the .grad
// tensors with set_to_none): step() treats a missing gradient as zero, copies a gradient that
// lives elsewhere into the buffer, and zero_grad() re-attaches the views.
//
// Dtypes: float32 parameters are updated in place (the flat buffer is the fp32 state).
// bfloat16 parameters get float32 master copies that the optimizer updates; the parameters are
// the masters rounded to bf16 (round to nearest even) after every update. Gradients are float32
// for both: the .grad of a bf16 parameter is a float32 tensor (autograd's in-place
// accumulation `grad += new_grad` promotes), so micro-batch gradients accumulate, all-reduce
// and clip in fp32, as under FSDP mixed precision, instead of rounding to 8 bits at every
// micro-batch. Per parameter element and rank, persistent memory is
//   fp32: 4 (param) + 4 (grad) + 8 (moments)              = 16 bytes, ZeRO-1: 8 + 8/dp
//   bf16: 2 (param) + 4 (grad) + 4 (master) + 8 (moments)  = 18 bytes, ZeRO-1: 6 + 12/dp
// Collectives (rlpt/comm/collectives.h): no communication when the DP group has one rank (or `dp` is
// an invalid Communicator, which means exactly that: a single-process engine for tools and tests);
// MPI for CPU parameters; for CUDA parameters NCCL, or MPI through host copies when device
// collectives are MPI (trainer.device_collectives, rlpt/comm/device.h) or the build has no NCCL.
// The constructor bootstraps the NCCL communicators (collective on `dp`; bounded by
// comm::kNcclBootstrapTimeoutS). On a GPU, backward() runs the ZeRO-3 hooks on autograd's device
// thread, which then calls MPI (rlpt/comm/mpi.h, "Threads").
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/engine/param_memory.h"

namespace rlpt::ckpt {
class H5Writer;
class H5Reader;
struct FileDigest;
}  // namespace rlpt::ckpt

namespace rlpt::engine {

class SavedState;

struct OptimOptions {
    double lr = 1e-6;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;  // applied to matrices and embeddings only (not norms, not biases)
    int64_t warmup_steps = 0;
    std::string scheduler = "constant";  // constant | cosine
    double min_lr_ratio = 0.0;
    double num_cycles = 0.5;
    int64_t total_steps = 1;  // for the cosine schedule
    double clip_grad = 1.0;   // <= 0: no clipping
    int64_t zero_stage = 0;   // 0 | 1 | 2 | 3 (see above)
    // Hybrid shard (FSDP HYBRID_SHARD; DeepSpeed hpZ/MiCS): the ZeRO-1/2/3 state is sharded inside
    // groups of this many consecutive DP ranks (DP rank r is in group r / S at position r % S)
    // and replicated across the groups. 0: one group of all DP ranks (plain ZeRO). It must divide
    // the DP size (ValueError on every rank otherwise). Gradients under ZeRO-0/1 are all-reduced
    // over all DP ranks as before; under ZeRO-2/3 they are reduce-scattered inside the group,
    // then each slice is all-reduced across the groups (over the ranks at the same position).
    // Parameter and optimizer-state all-gathers stay inside the group: per fp32 parameter
    // ZeRO-3 keeps 16/S bytes instead of 16/dp, and its gathers never leave the group (a node).
    int64_t shard_group_size = 0;
    // A model that only runs forwards (the sharded reference policy): every parameter is taken
    // (requires_grad or not), no gradient buffers, no optimizer state. With zero_stage 3 each
    // rank keeps only its parameter slices (4/S bytes per fp32 parameter) and every decoder layer
    // is gathered for its forward (the root unit until release_parameters()); zero_stage 0 keeps
    // the parameters whole. zero_stage must be 0 or 3; zero_grad(), step(), save_state() and
    // load_state() throw a ValueError.
    bool frozen = false;
    bool zero3_prefetch = true;  // ZeRO-3: start the next layer's all-gather before it is needed
    int64_t grad_bucket_bytes = 25 << 20;
};

// Tensor parallelism (model/tensor_parallel.h): the module is this rank's slice of a model split
// over a block of ranks. Gradients are still averaged over `dp` only (the engine's DP
// communicator joins the ranks holding the same slice: same mp_rank in every block); the
// gradient norm sums the squares over the block, every replicated parameter counted once, so
// the clip factor (and the skip decision) is the tp = 1 one on every rank. ZeRO-1 shards the
// optimizer state over dp as before.
struct TensorParallelInfo {
    const comm::Communicator* block = nullptr;  // the role's mp communicator; null or size 1: none
    // Parameters whose values on this rank another rank of the block counts in the norm
    // (model::uncounted_parameters).
    std::set<std::string> not_counted;
};

struct StepResult {
    double grad_norm = 0;  // global L2 norm before clipping (NaN/inf when skipped)
    double lr = 0;         // learning rate used for this step
    bool skipped = false;  // non-finite gradient: no update was applied
    // Wall-clock split of this call on this rank, seconds (steady clock; for logs and benchmarks):
    // allreduce_s  entry agreement + gradient all-reduce (ZeRO-2/3: the reduce-scatters the layer
    //              hooks left, e.g. the root unit) + division by dp_size; with several
    //              ranks it includes waiting for the slowest one (0-ish with one rank)
    // allgather_s  the ZeRO-1/2 parameter all-gather (ZeRO-3: gathering again inside a
    //              hold_full_parameters() window; 0 without ZeRO)
    // optimizer_s  everything else: norm, clip, AdamW, bf16 master copies
    double allreduce_s = 0;
    double allgather_s = 0;
    double optimizer_s = 0;
};

// Learning rate at scheduler step `step` (0-based) of a schedule: pure function, tested alone.
// Validates `o` (ValueError naming the field).
double scheduled_lr(const OptimOptions& o, int64_t step);
// ValueError naming the first out-of-range field (lr < 0, beta outside [0, 1), eps <= 0,
// unknown scheduler, min_lr_ratio outside [0, 1], total_steps < 1, zero_stage not 0..3, ...).
void validate_optim_options(const OptimOptions& o);

class TrainEngine {
  public:
    // `module` is the model (CausalLM, ValueModel, ...) whose trainable parameters are
    // optimised. `dp` is the role's DP communicator (not duplicated; the engine's collectives
    // use it serially; it must outlive the engine). `seed` seeds the engine's RNG (dropout-free
    // models still save it). Every DP rank must pass the same parameter names, shapes and
    // dtypes and the same options: otherwise every rank throws a CommError naming the first
    // difference (never a hang). ValueError: no trainable parameters, parameters on several
    // devices, a dtype other than float32/bfloat16, invalid options.
    // With `tp`, step() is also collective on tp.block (one 8-byte all-reduce for the norm).
    TrainEngine(std::shared_ptr<torch::nn::Module> module, const comm::Communicator& dp, OptimOptions opts,
                uint64_t seed, TensorParallelInfo tp = {});
    ~TrainEngine();
    TrainEngine(const TrainEngine&) = delete;
    TrainEngine& operator=(const TrainEngine&) = delete;

    // Zeroes the flat gradient buffer (and re-attaches the .grad views if they were dropped).
    // After lend_gradient_memory(): InternalError while the lease is held (a storage placed in
    // the buffers not freed yet); otherwise the buffers are gradients again from here on.
    void zero_grad();
    // The gradient buffers as scratch memory until the next zero_grad(): between step() and the
    // next zero_grad() they hold nothing anybody reads, and the hybrid engine's rollout copy
    // lives in them during a generation window (HeldReshard::run's `scratch`) instead of in
    // memory mapped and faulted in for every window. The spans are 1-D uint8 views of every
    // buffer that holds gradients between steps (ZeRO-2/3: this rank's slices, one buffer; else
    // the full flat buffers of each dtype), on the parameters' device; `owner` is the lease,
    // held by every storage placed in them. Their values are undefined from here on: step()
    // before the next zero_grad() is an InternalError, as is a second lend while the first lease
    // is held. A frozen engine lends nothing (empty spans). Local.
    ScratchMemory lend_gradient_memory();
    // step() == step(true). step(false) leaves the learning-rate schedule where it is: verl
    // steps its scheduler once per training step, after the last mini-batch, so an actor with
    // several mini-batches per training step calls step(false) per mini-batch and
    // advance_schedule() once. After step() every .grad holds the DP-mean gradient (before
    // clipping: the clip factor is applied inside the update). A skipped step zeroes them.
    StepResult step();
    StepResult step(bool advance_schedule);
    void advance_schedule();

    int64_t global_step() const;      // optimizer steps taken (skipped steps count)
    int64_t schedule_step() const;    // scheduler steps taken (== global_step() with step())
    int64_t applied_updates() const;  // non-skipped updates: AdamW's bias-correction count
    double current_lr() const;        // lr the next step will use (scheduled_lr at schedule_step())
    const OptimOptions& options() const;
    // Bytes of optimizer state held on this rank: exp_avg + exp_avg_sq (+ fp32 masters of bf16
    // parameters) for the elements this rank updates (all of them, or its ZeRO-1 shard).
    int64_t optimizer_state_bytes() const;
    // Trainable parameter elements (over all dtypes, without padding).
    int64_t num_parameters() const;
    // Bytes this rank holds right now, by kind (allocated storage, padding included):
    //   params     flat parameter buffers (ZeRO-3: gathered units) + ZeRO-3 parameter slices
    //   grads      full gradient buffers (ZeRO-2/3: while allocated) + ZeRO-2/3 gradient slices
    //   optimizer  optimizer_state_bytes()
    struct MemoryBytes {
        int64_t params = 0, grads = 0, optimizer = 0;
        int64_t total() const { return params + grads + optimizer; }
    };
    MemoryBytes memory_bytes() const;
    // The highest memory_bytes().total() since construction or reset_peak_memory(), updated at
    // every allocation of an engine buffer (a gathered unit, a unit's full gradient) and at the
    // end of step(): e.g. under ZeRO-3 the slices + one gathered layer and its gradient + the
    // root unit. Temporaries of one slice (the reduce-scatter's receive buffer) are not counted.
    int64_t peak_memory_bytes() const;
    void reset_peak_memory();
    // Ranks in this rank's ZeRO shard group (OptimOptions::shard_group_size; the DP size when
    // 0 or without ZeRO) and this rank's position in it.
    int shard_group_size() const;
    int shard_group_rank() const;

    // ZeRO-3: every parameter of the module holds its full, current values until the returned
    // handle is dropped (a step() inside the window gathers the updated values again).
    // Collective on `dp`; dropping the handle is local. Other stages: nothing to do (null).
    // Use it around generation and copies of the module (the weight sync to separate rollout
    // ranks goes from the shards instead: held_parameters()).
    std::shared_ptr<void> hold_full_parameters();
    // ZeRO-3: frees whatever is gathered outside a hold (the root unit after a forward without
    // gradients, e.g. log-probs). Local; nothing under other stages.
    void release_parameters();

    // "self", "mpi" or "nccl".
    const char* transport_name() const;
    // The engine's RNG (CPU generator seeded with `seed`; saved and restored with the state).
    torch::Generator generator() const;

    // Checkpointing under `prefix` (e.g. "actor/"), sharded (engine state format 2): every rank
    // writes only what it holds and no other rank writes, into its own file: under ZeRO-1/2/3
    // its slice [own_begin, own_end) of every flat group (parameters and optimizer state; the
    // ZeRO-1/2 parameters are replicated, so the slices of all DP ranks together hold them once),
    // under ZeRO-0 everything, both only on DP ranks k < shard_group_size (ZeRO-0: 1; hybrid
    // shard: S): DP rank k >= shard_group_size holds a replica of DP rank k mod
    // shard_group_size's state and writes no parameters or optimizer state. Every rank writes
    // its step counters and RNG. The layout blob `<prefix>engine/layout` records what the file
    // holds: zero stage, DP size and
    // rank, tensor-parallel size and rank, shard_group_size, "replica_of <k>" on a replica's
    // file, per flat group its dtype, numel, padding and shard size (file k < shard_group_size
    // holds [k·shard, (k+1)·shard) of each group, clipped to numel; ZeRO-0: all of it), per
    // tensor its group, offset and shape. Tensor-parallel ranks hold distinct slices: each
    // writes its own (replicas are over DP only). No gathers: save_state is collective on `dp`
    // only for the error agreement.
    // load_state takes this rank's ranges from a SavedState: at the same layout exactly what its
    // own file holds (bit-identical), at another DP size or ZeRO stage the byte ranges of the files
    // that hold them (never the full optimizer state; ZeRO-1/2 read their slice of the parameters
    // and all-gather them, ZeRO-0 reads the whole). Everything is read and checked before anything
    // changes; a tensor of another name, shape or dtype, a missing range or file, or another
    // tensor-parallel layout is an IoError naming the file and the tensor. Collective on `dp`.
    // load_state(reader) loads from that one file (ranges held elsewhere, or a replica's file,
    // are an IoError). Hybrid shard (OptimOptions::shard_group_size S < DP size): the slices are
    // over the shard group; only the first group writes them, the layout records
    // shard_group_size S and a loader reads shard k from DP rank k's file (k < S). Files written
    // before replicas were left out (every rank's full copy / every group's shards) load as well.
    void save_state(ckpt::H5Writer& w, const std::string& prefix) const;
    void load_state(const ckpt::H5Reader& r, const std::string& prefix);
    void load_state(SavedState& saved);
    // The tensor-parallel size and rank this engine was built with (1, 0 without).
    int tp_size() const;
    int tp_rank() const;
    // The full tensor of trainable parameter `index` (named_parameters() order), for writing it
    // somewhere: under ZeRO-3 the slices are sent to DP rank `root` only (point to point, one
    // tensor at a time; other ranks get an undefined tensor), otherwise the parameter itself on
    // every rank (no communication). Collective on `dp` under ZeRO-3 (every rank calls it with
    // the same index, in the same order). On the parameters' device (under ZeRO-3 the slices
    // travel through host memory and the assembled tensor is moved there).
    torch::Tensor gather_parameter(size_t index, int root);
    size_t num_parameter_tensors() const;
    // What this rank holds of every trainable parameter, in named_parameters() order, without
    // communication: elements [begin, end) of the parameter flattened row-major (in this rank's
    // tensor-parallel slice), as a 1-D view `data` into the engine's storage (valid until the
    // next step() or load; do not write). ZeRO-3: the part of the rank's shard that falls in the
    // tensor (possibly empty); other stages: the whole tensor. `shape` is the parameter's local
    // shape. What a colocated rollout and the ZeRO-3 weight sync reshard from
    // (weights::HeldReshard). Local.
    std::vector<HeldSlice> held_parameters() const;
    ckpt::FileDigest save_state_file(const std::string& path, const std::string& prefix,
                                     const std::function<void(ckpt::H5Writer&)>& extra = {}) const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A saved engine state as load_state reads it, presented in the loading engine's
// tensor-parallel layout. ShardedState reads the files of one checkpoint; the actor and critic
// roles wrap several of them to reslice another tensor-parallel size (roles/model_setup.h,
// resliced_checkpoint).
class SavedState {
  public:
    enum class Kind { kParam, kExpAvg, kExpAvgSq, kMaster };
    struct Tensor {
        torch::ScalarType dtype;  // of the parameter (optimizer kinds are float32)
        std::vector<int64_t> shape;
    };
    virtual ~SavedState() = default;
    // The file(s), for messages.
    virtual std::string where() const = 0;
    // What wrote it, for messages: "ZeRO-3 over 4 DP rank(s), tensor parallelism 1".
    virtual std::string written_by() = 0;
    // The tensor-parallel layout the tensors are presented in: "" (tp 1) or "<size> rank <rank>".
    virtual std::string tensor_parallel() = 0;
    // Every saved trainable tensor by name.
    virtual const std::map<std::string, Tensor>& tensors() = 0;
    // Elements [begin, end) of flattened tensor `name` (kParam in its dtype, the others float32;
    // kMaster exists for bfloat16 tensors only). CPU tensor.
    virtual torch::Tensor read(Kind kind, const std::string& name, int64_t begin, int64_t end) = 0;
    // The file with this rank's step counters, RNG and role attributes, and the prefix they
    // are under ("actor/").
    virtual const ckpt::H5Reader& own() = 0;
    virtual std::string prefix() const = 0;
};

// The layout line values of a file written by save_state (format 2).
struct SavedLayout {
    int format = 0;
    int zero_stage = 0;
    int dp_size = 1, dp_rank = 0;
    int tp_size = 1, tp_rank = 0;
};
// IoError naming the file when `<prefix>engine/layout` is missing or not format 2 (a format 1
// checkpoint of an earlier rlpt: full tensors in every file).
SavedLayout saved_layout(const ckpt::H5Reader& r, const std::string& prefix);

// The files of one tensor-parallel rank of a checkpoint: `dp_paths[k]` written by DP rank k
// (all saved_layout().dp_size of them), this rank's counters and RNG from dp_paths[own]. Files
// are opened when first needed: at the same layout only dp_paths[own] (and, when that is a
// replica's file, the file of the DP rank it replicates). A missing or unreadable
// file is an IoError naming it and what was needed from it.
class ShardedState : public SavedState {
  public:
    ShardedState(std::vector<std::string> dp_paths, size_t own, std::string prefix);
    // One open file (not owned; it must outlive this object): what it holds, nothing else.
    ShardedState(const ckpt::H5Reader& file, std::string prefix);
    ~ShardedState() override;
    std::string where() const override;
    std::string written_by() override;
    std::string tensor_parallel() override;
    const std::map<std::string, Tensor>& tensors() override;
    torch::Tensor read(Kind kind, const std::string& name, int64_t begin, int64_t end) override;
    const ckpt::H5Reader& own() override;
    std::string prefix() const override;
    const SavedLayout& layout();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rlpt::engine
