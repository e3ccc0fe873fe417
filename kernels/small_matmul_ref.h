#pragma once
// Raw-pointer kernels behind rlpt/kernels/small_matmul.h: the plain reference
// (small_matmul_ref.cpp) and the blocked, vectorised variants (small_matmul.cpp). The glue in
// small_matmul.cpp has validated shapes and converted x and bias to float32.
//
//   x    [M, K] float32, row i at x + i * ldx (ldx >= K)
//   w    [N, K] contiguous, float32 or bfloat16 (as uint16_t bit patterns)
//   bias [N] float32 or nullptr
//   y    [M, N] float32 contiguous output, every element written

#include <cstdint>

namespace rlpt::kernels::detail {

void small_matmul_ref(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n, int64_t k,
                      float* y);
void small_matmul_ref(const float* x, int64_t ldx, const uint16_t* w_bf16, const float* bias, int64_t m, int64_t n,
                      int64_t k, float* y);

}  // namespace rlpt::kernels::detail
