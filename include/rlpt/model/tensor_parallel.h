#pragma once
// Tensor parallelism (DESIGN §4b): one model split Megatron-style across the `tp` ranks of a
// role's model-parallel block (the role's `mp` communicator, always inside one node).
//
//   q/k/v, gate/up    column-parallel: each rank holds a slice of the output rows (its query
//                     heads / KV heads / intermediate columns); the input goes through tp_copy
//                     (forward identity, backward all-reduce of the input gradient)
//   o, down           row-parallel: each rank holds the matching input columns; the partial
//                     outputs are summed by tp_reduce (forward all-reduce, backward identity);
//                     their biases are replicated and added after the sum
//   embedding         vocabulary-parallel: each rank looks up the ids of its vocabulary slice,
//                     zeros elsewhere, then tp_reduce
//   LM head           vocabulary-parallel: each rank computes the logits of its slice only;
//                     log-probs and entropies come from vocab_parallel_logprob_entropy, which
//                     exchanges per-row statistics (log-sum-exp, entropy, target logit), never
//                     the logits themselves
//   norms, value head replicated: their inputs and input gradients are identical on every
//                     rank, so their gradients are too (no collective needed)
//   q/k norms         (Qwen3, per head_dim, shared by the heads) replicated, but each rank
//                     normalises its own heads: the weight goes through tp_copy, so its
//                     gradient is summed over the block
//   KV heads          split when tp divides num_key_value_heads; otherwise (tp a multiple of
//                     it) each rank keeps the one head its query heads use and the gradient of
//                     that replica is summed over the tp/nkv ranks sharing it (tp_kv_replica).
//
// Where rlpt differs from Megatron-LM / vLLM:
//  * The padded vocabulary rows (vocabulary padded to a multiple of tp) are zero and their
//    logits are -inf, so the distribution is exactly the unpadded model's (Megatron lets the
//    padded rows take part in the softmax; vLLM masks them as here). Without padding nothing
//    changes.
//  * Activations of a bf16 model are all-reduced in fp32 (one rounding instead of one per
//    rank), the collectives' all-reduce being fp32-only; Megatron reduces in the model dtype.
//  * Sampling gathers the last position's logits of the block ([rows, V] per decode step, as
//    vLLM's logits processor does) and every rank runs the same sampler on them, so the
//    sampled token is the one tp = 1 picks with the same per-row random streams; log-probs and
//    entropies for training never gather logits.
//  * All-gathers (sampling, export, the hybrid engine's resharding) are real all-gathers that
//    land every rank's slice in its place of the destination (MPI_Allgatherv, or an
//    MPI_Allgather with a strided receive type for column slices; ncclAllGather / grouped
//    ncclBroadcast): no padding slots, no assembling copies. Only slices NCCL cannot place
//    (strided) or uneven strided ones go through a contiguous buffer and one copy each.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rlpt/model/model_config.h"

namespace rlpt::comm {
class Communicator;
class Collectives;
}  // namespace rlpt::comm

namespace rlpt::model {

// The collectives of one model-parallel block. Every call is collective on the block and must
// be issued in the same order on every rank. Not thread-safe.
class TensorParallel {
  public:
    // The block `mp` (this rank's model-parallel communicator; it must outlive the object) for
    // tensors on `device`, with comm::make_collectives: MPI for CPU tensors; NCCL for CUDA
    // tensors, or MPI through host copies when device collectives are MPI. Collective on `mp`
    // (NCCL bootstraps a communicator). On a GPU, the backward functions of tp_copy / tp_reduce
    // run these collectives on autograd's device thread (rlpt/comm/mpi.h, "Threads").
    static std::shared_ptr<TensorParallel> over(const comm::Communicator& mp, torch::Device device);
    ~TensorParallel();
    TensorParallel(const TensorParallel&) = delete;
    TensorParallel& operator=(const TensorParallel&) = delete;

    int64_t rank() const { return rank_; }
    int64_t size() const { return size_; }
    // In-place sum over the block. Any floating dtype (summed in fp32), any layout.
    void allreduce_sum_(const torch::Tensor& t) const;
    // Every rank's `t` (same shape and dtype everywhere) concatenated along `dim` (negative
    // counts from the end) in rank order, into a new contiguous tensor (`t` itself on a block of
    // one rank). Any dtype.
    torch::Tensor allgather(const torch::Tensor& t, int64_t dim) const;
    // Every rank's slice placed straight into `out`: rank r's local.narrow(dim, 0, counts[r])
    // lands at out.narrow(dim, starts[r], counts[r]) on every rank (this rank's own slice
    // included). `out` must be contiguous with local's dtype, device and sizes except along
    // `dim`; starts/counts hold one entry per block rank, identical on every rank; counts[r]
    // may be 0 (rank r sends nothing: padding only, or a replica another rank sends) and
    // slices may be uneven; regions must not overlap (InternalError otherwise). Parts of `out`
    // no slice covers are left alone. No temporary buffer, except for strided uneven slices
    // (any transport) and strided slices under NCCL, which go through one buffer of tp × local
    // bytes (freed on return) and one copy each.
    void allgather_into(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                        const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) const;
    // Seconds spent in this object's collectives so far (for benchmarks).
    double seconds_in_collectives() const { return seconds_; }

  private:
    TensorParallel() = default;
    int64_t rank_ = 0, size_ = 1;
    std::unique_ptr<comm::Collectives> collectives_;
    mutable double seconds_ = 0;
};

// Where a parameter of this rank sits in the full Hugging Face tensor of the same name.
struct ShardSpec {
    int64_t dim = -1;         // -1: the parameter is the full tensor (replicated)
    int64_t start = 0;        // first index of this rank's slice along dim
    int64_t length = 0;       // slice length (vocabulary padding included)
    int64_t full = 0;         // the full tensor's size along dim (no padding)
    bool counted = true;      // this rank's copy counts in the block's gradient norm (replicated
                              // parameters count on one rank of their sharers only)
    bool kv_replica = false;  // a KV head replicated on several ranks of the block
    int64_t real() const;     // rows/columns of the slice that exist in the full tensor
};
// ShardSpec of parameter `name` (HF naming, see transformer.h / value_model.h).
ShardSpec shard_spec(const std::string& name, const TpLayout& layout);
// Names of `module`'s parameters whose copy on this rank another rank of the block counts in
// the gradient norm (ShardSpec::counted false): for engine::TensorParallelInfo.
std::set<std::string> uncounted_parameters(const torch::nn::Module& module, const TpLayout& layout);
// The full tensor's shape of a parameter whose local shape is `local`.
std::vector<int64_t> full_shape(const ShardSpec& s, std::vector<int64_t> local);

// The full (Hugging Face) tensor of parameter `name` from every rank's slice `local` (padding
// dropped, a replicated KV head taken once): collective on the block, every rank gets it.
// `local` itself when the parameter is not split.
torch::Tensor gather_full_parameter(const std::string& name, const torch::Tensor& local, const ModelArgs& args,
                                    const TensorParallel& tp);

// Megatron's f: forward identity, backward all-reduce (sum) of the gradient over the block.
// `tp` may be null (tp = 1): identity both ways.
torch::Tensor tp_copy(const torch::Tensor& x, const TensorParallel* tp);
// Megatron's g: forward all-reduce (sum) over the block, backward identity.
torch::Tensor tp_reduce(const torch::Tensor& x, const TensorParallel* tp);
// A replicated KV-head parameter: forward identity; backward sums the gradient over the ranks
// of the block holding the same head (kv head `layout.kv_first` of `num_kv_heads`).
torch::Tensor tp_kv_replica(const torch::Tensor& w, const TensorParallel* tp, const TpLayout& layout,
                            int64_t num_kv_heads);

// Log-probs and entropies under softmax(logits / T) over the whole vocabulary from this rank's
// slice of the logits: local_logits [N, Vl] float32 (columns [vocab_first, vocab_first + Vl) of
// the vocabulary; padding columns -inf), labels [N] int64 global ids in [0, V). One all-reduce of
// (2·tp + 1)·N floats in the forward (each rank's log-sum-exp and entropy, the target logit);
// the backward is local. Differentiable w.r.t. local_logits. Returns float32 [N] each
// (entropy undefined unless with_entropy). With a null `tp` this is kernels::logprob_entropy.
struct VocabLogProbs {
    torch::Tensor logp;
    torch::Tensor entropy;
};
VocabLogProbs vocab_parallel_logprob_entropy(const torch::Tensor& local_logits, const torch::Tensor& labels,
                                             int64_t vocab_first, const TensorParallel* tp, double temperature,
                                             bool with_entropy);

}  // namespace rlpt::model
