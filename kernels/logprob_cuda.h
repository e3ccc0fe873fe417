#pragma once
// Launchers of the CUDA kernels in kernels/logprob.cu (built only with RLPT_HAVE_CUDA). Torch-free
// and CUDA-header-free so the C++ glue can call them: pointers are device pointers on `device`,
// with the same contracts as the CPU reference in logprob_ref.h. `device` must be the current
// device (the caller switches with c10::cuda::CUDAGuard, which restores its previous device
// without creating a context there; a launcher finding another device current throws
// InternalError). The kernels run on the legacy default stream of `device`. Launch errors throw
// CudaError (RLPT_CUDA_CHECK on cudaGetLastError after each launch); the launch is asynchronous.

#include <cstdint>

namespace rlpt::kernels::detail {

void logprob_forward_cuda(int device, const float* logits, const int64_t* labels, int64_t n, int64_t v,
                          float inv_temperature, float* logp, float* entropy, float* lse);
void logprob_forward_cuda(int device, const uint16_t* logits_bf16, const int64_t* labels, int64_t n, int64_t v,
                          float inv_temperature, float* logp, float* entropy, float* lse);

void logprob_backward_cuda(int device, const float* logits, const int64_t* labels, const float* lse,
                           const float* entropy, const float* grad_logp, const float* grad_entropy, int64_t n,
                           int64_t v, float inv_temperature, float* grad_logits);
void logprob_backward_cuda(int device, const uint16_t* logits_bf16, const int64_t* labels, const float* lse,
                           const float* entropy, const float* grad_logp, const float* grad_entropy, int64_t n,
                           int64_t v, float inv_temperature, uint16_t* grad_logits_bf16);

}  // namespace rlpt::kernels::detail
