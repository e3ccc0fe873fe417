#pragma once
// CPU reference of the fused log-prob / entropy kernels (kernels/logprob_ref.cpp). Raw pointers,
// row-major [n, v] logits; bfloat16 values travel as their uint16_t bit patterns. Callers (the
// glue in logprob.cpp) have validated shapes and that every label is in [0, v).
// Parallel over rows with at::parallel_for; each row is one vectorised online-softmax pass.

#include <cstdint>

namespace rlpt::kernels::detail {

// logp, lse: [n] outputs; entropy: [n] output or nullptr (not computed).
void logprob_forward_ref(const float* logits, const int64_t* labels, int64_t n, int64_t v, float inv_temperature,
                         float* logp, float* entropy, float* lse);
void logprob_forward_ref(const uint16_t* logits_bf16, const int64_t* labels, int64_t n, int64_t v,
                         float inv_temperature, float* logp, float* entropy, float* lse);

// grad_logp / grad_entropy: [n] or nullptr (zero). entropy: [n], needed iff grad_entropy.
// grad_logits: [n, v] output, every element written.
void logprob_backward_ref(const float* logits, const int64_t* labels, const float* lse, const float* entropy,
                          const float* grad_logp, const float* grad_entropy, int64_t n, int64_t v,
                          float inv_temperature, float* grad_logits);
void logprob_backward_ref(const uint16_t* logits_bf16, const int64_t* labels, const float* lse, const float* entropy,
                          const float* grad_logp, const float* grad_entropy, int64_t n, int64_t v,
                          float inv_temperature, uint16_t* grad_logits_bf16);

}  // namespace rlpt::kernels::detail
