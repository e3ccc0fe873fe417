// Plain reference of the few-row matmul: one double-precision dot product per output element.

#include "small_matmul_ref.h"

#include "cpu_simd.h"

namespace rlpt::kernels::detail {
namespace {

template <typename W>
void reference(const float* x, int64_t ldx, const W* w, const float* bias, int64_t m, int64_t n, int64_t k, float* y) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double s = bias != nullptr ? bias[j] : 0.0;
            for (int64_t l = 0; l < k; ++l)
                s += static_cast<double>(x[i * ldx + l]) * static_cast<double>(scalar(w[j * k + l]));
            y[i * n + j] = static_cast<float>(s);
        }
    }
}

}  // namespace

void small_matmul_ref(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n, int64_t k,
                      float* y) {
    reference(x, ldx, w, bias, m, n, k, y);
}

void small_matmul_ref(const float* x, int64_t ldx, const uint16_t* w_bf16, const float* bias, int64_t m, int64_t n,
                      int64_t k, float* y) {
    reference(x, ldx, w_bf16, bias, m, n, k, y);
}

}  // namespace rlpt::kernels::detail
