#pragma once
// Fused per-token log-probability and entropy under softmax(logits / temperature).
//
// For a row z = logits[i, :] / T over a vocabulary of V entries and its label y = labels[i]:
//   lse[i]     = log Σ_j exp(z_j)
//   logp[i]    = z_y − lse[i]                       (log p_y)
//   entropy[i] = −Σ_j p_j log p_j = lse[i] − Σ_j p_j z_j
// computed in one online-softmax pass over the row (fp32 accumulation) without materialising
// softmax or log_softmax. The backward pass recomputes p_j from (logits, lse):
//   d logp / d z_j    = 1[j = y] − p_j
//   d entropy / d z_j = −p_j (log p_j + entropy)
//   grad_logits       = (grad_logp · dlogp/dz + grad_entropy · dH/dz) / T
//
// Devices: CPU tensors use the CPU reference (kernels/logprob_ref.cpp, vectorised, parallel over
// rows with at::parallel_for); CUDA tensors use kernels/logprob.cu, which exists only when rlpt was
// built with CUDA (RLPT_HAVE_CUDA) — otherwise a CUDA tensor gets a ValueError saying so. The CUDA
// kernels run on the legacy default stream of the tensor's device.
//
// Inputs are validated: logits 2-D [N, V] (V ≥ 1; N may be 0), float32 or bfloat16; labels int64
// [N] on the same device, each in [0, V) (out-of-range labels are a ValueError: on CUDA this costs
// one device-to-host sync); temperature finite and > 0. Non-contiguous inputs are copied to
// contiguous ones. Logits of −inf are allowed (p = 0 for them); NaN logits give NaN outputs.
// Thread safety: the functions are re-entrant; they share nothing between calls.

#include <torch/torch.h>

namespace rlpt::kernels {

// Result of the forward pass; every tensor is float32 [N] on the logits' device.
struct LogProbForward {
    torch::Tensor logp;     // log p(label)
    torch::Tensor entropy;  // undefined unless with_entropy
    torch::Tensor lse;      // row log-sum-exp of logits / temperature (needed by the backward)
};

// Forward pass. logits [N, V] float32|bfloat16, labels [N] int64.
LogProbForward logprob_forward(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                               bool with_entropy);

// Same, writing into caller-owned outputs: logp_out and lse_out float32 [N], entropy_out float32
// [N] or undefined (entropy not computed). Outputs must be contiguous and on the logits' device;
// nothing outside their N elements is written (views into larger buffers are fine).
// labels_checked: the caller has already checked every label against [0, V) (check_label_range),
// so this call skips it (on CUDA: no device-to-host sync; model::chunked_head_logprob checks once
// per call, not per chunk). A label outside the range then reads out of bounds: pass true only for
// checked labels.
void logprob_forward_out(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                         const torch::Tensor& logp_out, const torch::Tensor& entropy_out, const torch::Tensor& lse_out,
                         bool labels_checked = false);

// Backward pass. lse float32 [N] from the forward; entropy float32 [N] from the forward, required
// iff grad_entropy is defined; grad_logp / grad_entropy float32 [N] or undefined (treated as zero).
// Returns grad_logits [N, V] in the logits' dtype (the 1/temperature factor included).
torch::Tensor logprob_backward(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& lse,
                               const torch::Tensor& entropy, const torch::Tensor& grad_logp,
                               const torch::Tensor& grad_entropy, double temperature);

// Same, writing into grad_logits_out: contiguous [N, V], logits' dtype and device; every one of its
// N·V elements is written. labels_checked as logprob_forward_out's.
void logprob_backward_out(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& lse,
                          const torch::Tensor& entropy, const torch::Tensor& grad_logp,
                          const torch::Tensor& grad_entropy, double temperature, const torch::Tensor& grad_logits_out,
                          bool labels_checked = false);

// Every label in [0, V), else a ValueError naming the first one outside (on CUDA: one
// device-to-host sync).
void check_label_range(const torch::Tensor& labels, int64_t v);

// Differentiable outputs of logprob_entropy; both have the labels' shape, float32.
struct LogProbEntropy {
    torch::Tensor logp;
    torch::Tensor entropy;  // undefined unless with_entropy
};

// Autograd entry point. logits [..., V] (float32|bfloat16), labels [...] int64 with the same
// leading shape. Gradients flow to logits only (labels and temperature are constants); the
// backward is not itself differentiable (no double backward).
LogProbEntropy logprob_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double temperature,
                               bool with_entropy);

// True when this build contains the CUDA kernels (RLPT_HAVE_CUDA).
bool logprob_cuda_built();

}  // namespace rlpt::kernels
