#pragma once
// Chunked LM-head log-probabilities: log p(label), entropy and Σ_v π_v² of softmax(hidden·Wᵀ / T)
// without ever holding the logits of every row at once.
//
// The plain path (CausalLM::local_logits_fp32 + kernels::logprob_entropy) materialises [N, V]
// fp32 logits and autograd keeps them until the backward: for a log-prob micro-batch of 32 rows of
// R = 1024 tokens over V = 152k that is ≈ 20 GB. Here the rows are processed in chunks:
//   forward   per chunk: logits_c = hidden_c.float() @ W.float()ᵀ  ([rows, V] fp32), the fused kernel
//             (kernels::logprob_forward_out) writes logp, entropy and the row log-sum-exp, optional
//             Σπ² = exp(logsumexp(2z) − 2·logsumexp(z)) with z = logits_c / T; logits_c is dropped.
//             Saved for the backward: hidden, W, labels, lse [N] and entropy [N] — never logits.
//   backward  per chunk: recompute logits_c, grad_logits_c from the kernel's backward
//             (kernels::logprob_backward_out with the saved lse/entropy), then
//               grad_hidden[c] = grad_logits_c @ W.float()
//               grad_W        += grad_logits_cᵀ @ hidden_c.float()      (fp32 accumulator)
//             and both are cast to their parameter's dtype at the end.
//
// Memory bound (beyond inputs and outputs): one chunk's [rows, V] fp32 logits plus, in the
// backward, its [rows, V] fp32 gradient (2·rows·V·4 bytes), plus W.float() (V·H·4 bytes, only when W
// is not already fp32) and the fp32 grad_W accumulator (V·H·4 bytes) and grad_hidden (N·H·4 bytes) in
// the backward. rows is chosen so that rows·V·4 ≤ budget_bytes (kHeadChunkBudgetBytes by default),
// at least 1 row; when the whole [N, V] fits the budget the pass is one chunk.
//
// Exactness: with one chunk the arithmetic is the plain path's operation for operation (the same
// mm calls on the same operands, the same kernel, the same logsumexps; the backward's mm calls
// match those autograd runs for matmul(h.float(), W.float().t())), so results are bit-identical to
// it. With several chunks each row's values come from a [rows, H] × [H, V] product instead of an
// [N, H] one (BLAS may block the reduction differently per shape) and grad_W is summed chunk by
// chunk: equal within float32 rounding, not bitwise.
// Determinism: for given inputs and chunk size the result is deterministic (no atomics; grad_W is
// accumulated in chunk order).
//
// Contract: hidden [N, H] float32|bfloat16 (N ≥ 0), weight [V, H] float32|bfloat16 (the LM head
// weight, or the tied embedding; no bias — the rlpt causal-LM head has none), labels [N] int64 in
// [0, V). All three on one device (CPU, or CUDA when rlpt was built with the CUDA kernels). Results
// are float32 [N] on that device. Differentiable w.r.t. hidden and weight (no double backward);
// sum_pi_squared carries no gradient. Under NoGradGuard nothing is saved.
//
// Tensor parallelism: not handled here. A vocabulary-parallel head needs the per-row statistics
// exchanged over the block (model::vocab_parallel_logprob_entropy); callers with tp > 1 stay on
// the unchunked local_logits_fp32 path (a documented limit: their transient is [N, V / tp]).
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace rlpt::model {

// Precision of the LM head's matmuls (config key model.head_precision; CausalLM::set_head_precision).
//   kFp32  IEEE float32 operands and accumulation: the default, the behaviour before the option.
//   kTf32  float32 tensors through TF32 tensor cores on CUDA (operands rounded to 10-bit mantissas
//          inside cuBLAS, float32 accumulation); on the CPU exactly kFp32 (no TF32 there).
//   kBf16  operands rounded to bfloat16, products accumulated and returned in float32 (CUDA:
//          at::mm with out_dtype float32, bf16 tensor cores; the CPU computes the same numbers,
//          float32 matmul of the bf16-rounded operands, whose products are exact in float32, with
//          no speed-up there). Each logit z = Σ_k h_k·W_k then moves by at most
//          ((1 + u_bf16)² − 1)·Σ_k |h_k|·|W_k| (plus float32 summation order), and a log-prob by at
//          most the moved label logit plus the largest moved logit (log-sum-exp is 1-Lipschitz in
//          the max norm): tests/unit/test_chunked_head.cpp derives and checks that bound.
// Gradients: the backward's two matmuls (grad_hidden, grad_W) run at the same precision.
enum class HeadPrecision { kFp32, kTf32, kBf16 };
HeadPrecision head_precision_from_name(const std::string& name);  // "fp32" | "tf32" | "bf16", else ValueError
const char* head_precision_name(HeadPrecision p);

// An operand of the head's matmuls at precision p: float32 (kFp32, kTf32: t itself when it is
// float32), bfloat16 on CUDA under kBf16, its bf16-rounded float32 image on the CPU.
torch::Tensor head_operand(const torch::Tensor& t, HeadPrecision p);
// a [M, K] · b [K, N] of two head_operand()s -> float32 [M, N] at precision p (kTf32 enables TF32
// in cuBLAS for this call only). Differentiable (plain torch ops).
torch::Tensor head_mm(const torch::Tensor& a, const torch::Tensor& b, HeadPrecision p);

// Default bytes of one chunk's fp32 logits (the backward holds this twice: logits + gradient).
inline constexpr int64_t kHeadChunkBudgetBytes = int64_t{256} << 20;

// Rows per chunk for N rows over V vocabulary entries: max(1, budget_bytes / (4·V)), capped at N
// (N ≥ 1; for N = 0, 1). budget_bytes must be > 0, V ≥ 1.
int64_t head_chunk_rows(int64_t n, int64_t v, int64_t budget_bytes = kHeadChunkBudgetBytes);

struct ChunkedHeadOptions {
    double temperature = 1.0;  // finite, > 0
    bool with_entropy = false;
    bool with_sum_pi_squared = false;
    int64_t budget_bytes = kHeadChunkBudgetBytes;  // per-chunk logits budget (see head_chunk_rows)
    int64_t chunk_rows = 0;  // > 0: exactly this many rows per chunk (tests); 0: from budget_bytes
    HeadPrecision precision = HeadPrecision::kFp32;  // of the logits' and the gradients' matmuls
};

struct ChunkedHeadLogProbs {
    torch::Tensor logp;            // [N] float32
    torch::Tensor entropy;         // [N] float32, undefined unless with_entropy
    torch::Tensor sum_pi_squared;  // [N] float32 (no gradient), undefined unless with_sum_pi_squared
};

// See the file comment. Invalid shapes/dtypes/devices, labels outside [0, V) and a bad temperature
// are ValueErrors. The labels are checked once per call (on CUDA one device-to-host sync), not per
// chunk. Exactness (above) is for precision kFp32.
ChunkedHeadLogProbs chunked_head_logprob(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& labels, const ChunkedHeadOptions& options);

}  // namespace rlpt::model
