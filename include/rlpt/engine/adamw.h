#pragma once
// The TrainEngine's optimizer arithmetic on flat fp32 buffers, public so it can be tested on
// its own (tests/unit/test_engine_adamw.cpp) and reused by tools.
//
// adamw_update_() is torch.optim.AdamW (decoupled weight decay, bias-corrected) for one step:
//   g      = grad · grad_scale                       (grad_scale: clip coefficient, 1 = none)
//   param  = param · (1 − lr · weight_decay)
//   m      = β1 · m + (1 − β1) · g
//   v      = β2 · v + (1 − β2) · g²
//   param  = param − lr / (1 − β1^step) · m / (√v / √(1 − β2^step) + eps)
// `step` is the 1-based number of updates applied so far including this one (bias correction).
//
// Tensors: param, grad, exp_avg, exp_avg_sq are contiguous float32 with the same numel, on one
// device. param/exp_avg/exp_avg_sq are updated in place (no autograd). On the CPU the update is
// one fused pass (float arithmetic as in torch's fp32 AdamW, per-step constants computed in
// double), parallel over chunks with at::parallel_for: the result does not depend on the
// thread count. Elsewhere (CUDA) it is a sequence of torch ops (adamw_update_torch_), which is
// also available on the CPU as a reference; the two agree to float rounding. The engine runs
// adamw_update_multi_ (below).
#include <torch/torch.h>

#include <cstdint>

namespace rlpt::engine {

struct AdamWStep {
    double lr = 0;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
    int64_t step = 1;         // >= 1
    double grad_scale = 1.0;  // multiplies the gradient before use
};

void adamw_update_(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                   const torch::Tensor& exp_avg_sq, const AdamWStep& s);

// The same step for lists of tensors (one weight decay for all), as the TrainEngine runs it: one
// call of LibTorch's fused multi-tensor AdamW (at::_fused_adamw_, torch.optim.AdamW(fused=True)'s
// kernel) on the CPU and on CUDA, instead of a pass (CPU) or ~7 kernels (CUDA) per tensor. Each
// entry as adamw_update_'s (contiguous float32, same numel per index, one device for all). Equal
// to adamw_update_ within Adam's float32 bound (tol::adam_fp32_bound), independent of the thread
// count. On the development VM (1 thread, 50M elements, AVX-512 dispatch) it takes 0.05 s against
// the loop's 0.20 s. A clipped step (grad_scale != 1) runs adamw_update_ per tensor instead: the
// fused kernel applies a gradient scale by dividing the gradients in place (AMP's unscale), and
// the gradients are left untouched here, as everywhere in the engine's step.
void adamw_update_multi_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, const AdamWStep& s);
void adamw_update_torch_(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                         const torch::Tensor& exp_avg_sq, const AdamWStep& s);

// Σ x² of a contiguous float32 tensor, accumulated in double over fixed chunks of
// kSumSquaresChunk elements whose partial sums are added in order: the same bits for any
// number of threads (every DP rank derives the same clip coefficient). Non-CPU tensors through
// sum_of_squares_chunked (fp64 accumulation, order-dependent): one host read at the end.
inline constexpr int64_t kSumSquaresChunk = 1 << 16;
double sum_of_squares(const torch::Tensor& x);

// Σ x² with torch ops on x's device, in float64 one chunk of `chunk` elements at a time: the
// transient is one chunk's float64 copy (chunk · 8 bytes; kSumSquaresDeviceChunk: 128 MiB), never
// the whole tensor's; the partial sums are added on the device (no sync until the result is read).
// Any device (tests run it on the CPU); x contiguous float32, chunk >= 1.
inline constexpr int64_t kSumSquaresDeviceChunk = int64_t{1} << 24;
double sum_of_squares_chunked(const torch::Tensor& x, int64_t chunk = kSumSquaresDeviceChunk);

}  // namespace rlpt::engine
