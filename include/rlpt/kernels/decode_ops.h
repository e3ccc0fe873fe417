#pragma once
// Element-wise pieces of a CPU decode step (src/model/layers.cpp, DecoderLayer::decode_step),
// written into preallocated buffers so that a step allocates nothing per layer and runs no
// LibTorch operator for them (each of those is a dispatch, an allocation and, in the LibTorch
// expressions they replace, several passes: RMSNorm was 6 operators, rotary 6 per tensor).
// float32 only, CPU, no autograd, no threads (each call is a few thousand elements per row).
// Each has a double-precision reference beside it (kernels/decode_ops_ref.cpp) for the tests.

#include <torch/torch.h>

namespace rlpt::kernels {

// Hugging Face's RMSNorm for float32: out = w * (x * rsqrt(mean(x^2) + eps)), per row.
// x, out [M, H] float32 with contiguous rows (out may be x); w [H] float32 contiguous.
// The mean is summed in double. ValueError on bad shapes/dtypes.
void rms_norm_into(const torch::Tensor& x, const torch::Tensor& w, double eps, const torch::Tensor& out);
void rms_norm_into_reference(const torch::Tensor& x, const torch::Tensor& w, double eps, const torch::Tensor& out);

// Rotary position embedding in Hugging Face's rotate-half layout, in place:
// x[m, h, :] = x[m, h, :] * cos[m] + rotate_half(x[m, h, :]) * sin[m], rotate_half(v) = cat(-v2, v1).
// x [M, heads * hd] float32 with contiguous rows (heads consecutive in a row: a projection's
// output); cos, sin [M, hd] float32 contiguous (the rows' positions); hd even. The same
// float32 products and sum per element as the LibTorch expression. ValueError on bad shapes.
void rotary_inplace(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, int64_t head_dim);
void rotary_inplace_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                              int64_t head_dim);

}  // namespace rlpt::kernels
