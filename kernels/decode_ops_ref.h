#pragma once
// Raw-pointer references behind rlpt/kernels/decode_ops.h (double precision, no threads). The
// glue in decode_ops.cpp has validated shapes; row i of a buffer starts at ptr + i * ld.

#include <cstdint>

namespace rlpt::kernels::detail {

// out[i] = w * (x[i] * (1 / sqrt(mean(x[i]^2) + eps))), in double, rounded once.
void rms_norm_ref(const float* x, int64_t ldx, const float* w, double eps, int64_t m, int64_t h, float* out,
                  int64_t ldo);
// x[i, head, :] = x * cos[i] + rotate_half(x) * sin[i] (in double, rounded once), width = heads * hd.
void rotary_ref(float* x, int64_t ldx, int64_t m, int64_t width, const float* cos, int64_t ldc, const float* sin,
                int64_t lds, int64_t hd);

}  // namespace rlpt::kernels::detail
