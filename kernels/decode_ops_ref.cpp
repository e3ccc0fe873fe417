// Plain references of the element-wise decode kernels: double precision, one element at a time.

#include "decode_ops_ref.h"

#include <cmath>
#include <vector>

namespace rlpt::kernels::detail {

void rms_norm_ref(const float* x, int64_t ldx, const float* w, double eps, int64_t m, int64_t h, float* out,
                  int64_t ldo) {
    for (int64_t i = 0; i < m; ++i) {
        double ss = 0;
        for (int64_t e = 0; e < h; ++e) ss += static_cast<double>(x[i * ldx + e]) * x[i * ldx + e];
        const double r = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
        for (int64_t e = 0; e < h; ++e) out[i * ldo + e] = static_cast<float>(w[e] * (x[i * ldx + e] * r));
    }
}

void rotary_ref(float* x, int64_t ldx, int64_t m, int64_t width, const float* cos, int64_t ldc, const float* sin,
                int64_t lds, int64_t hd) {
    const int64_t half = hd / 2;
    std::vector<double> v(static_cast<size_t>(hd));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t h0 = 0; h0 < width; h0 += hd) {
            float* row = x + i * ldx + h0;
            for (int64_t e = 0; e < hd; ++e) {
                const double rot = e < half ? -static_cast<double>(row[e + half]) : static_cast<double>(row[e - half]);
                v[static_cast<size_t>(e)] = row[e] * static_cast<double>(cos[i * ldc + e]) + rot * sin[i * lds + e];
            }
            for (int64_t e = 0; e < hd; ++e) row[e] = static_cast<float>(v[static_cast<size_t>(e)]);
        }
    }
}

}  // namespace rlpt::kernels::detail
