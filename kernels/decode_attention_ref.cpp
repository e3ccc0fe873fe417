// Plain reference of the decode attention: double precision, one (row, head, query) at a time.

#include "decode_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_simd.h"

namespace rlpt::kernels::detail {
namespace {

template <typename T>
void reference(const float* q, const T* k, const T* v, const bool* masked, RowMap rows, const AttentionShape& a,
               float scale, float* out) {
    std::vector<double> p;
    for (int64_t b = 0; b < a.b; ++b) {
        const int64_t s_n = rows.len ? rows.len[b] : a.s;
        p.assign(static_cast<size_t>(s_n), 0.0);
        for (int64_t n = 0; n < a.n_kv; ++n) {
            const int64_t kv_off = (rows.slot ? rows.slot[b] : b) * a.sb + n * a.sh;
            for (int64_t g = 0; g < a.g; ++g) {
                const float* qr = q + ((b * a.n_kv + n) * a.g + g) * a.hd;
                double mx = -std::numeric_limits<double>::infinity();
                for (int64_t s = 0; s < s_n; ++s) {
                    double d = 0;
                    for (int64_t e = 0; e < a.hd; ++e)
                        d += static_cast<double>(qr[e]) * scalar(k[kv_off + s * a.hd + e]);
                    const bool off = masked != nullptr && masked[b * a.s + s];
                    p[static_cast<size_t>(s)] = off ? std::numeric_limits<float>::lowest() : d * scale;
                    mx = std::max(mx, p[static_cast<size_t>(s)]);
                }
                double sum = 0;
                for (auto& x : p) sum += (x = std::exp(x - mx));
                float* o = out + ((b * a.n_kv + n) * a.g + g) * a.hd;
                for (int64_t e = 0; e < a.hd; ++e) {
                    double acc = 0;
                    for (int64_t s = 0; s < s_n; ++s)
                        acc += p[static_cast<size_t>(s)] * scalar(v[kv_off + s * a.hd + e]);
                    o[e] = static_cast<float>(acc / sum);
                }
            }
        }
    }
}

}  // namespace

void decode_attention_ref(const float* q, const float* k, const float* v, const bool* masked, RowMap rows,
                          const AttentionShape& shape, float scale, float* out) {
    reference(q, k, v, masked, rows, shape, scale, out);
}
void decode_attention_ref(const float* q, const uint16_t* k, const uint16_t* v, const bool* masked, RowMap rows,
                          const AttentionShape& shape, float scale, float* out) {
    reference(q, k, v, masked, rows, shape, scale, out);
}

}  // namespace rlpt::kernels::detail
