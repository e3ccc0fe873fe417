// CPU reference (and production CPU path) of the fused log-prob / entropy kernels.
//
// Each row is processed in tiles of kTile elements. Per tile: a max pass, then an exp pass that
// re-reads the tile from L1 and accumulates, relative to the running max m,
//   s = Σ exp(z − m)   and   t = Σ exp(z − m)·(z − m),
// rescaling (s, t) when the max grows (online softmax at tile granularity). Then
//   lse = m + log s,   entropy = log s − t / s.
// Keeping t relative to m avoids the cancellation of lse − Σ p·z when |z| is large (±1e4).
//
// The inner loops use GCC vector extensions (8 float lanes) and a Cephes-style polynomial exp so
// the compiler emits SIMD code; on x86-64 GCC builds an AVX2 clone picked at load time.
// Per-lane partial sums are folded into double accumulators once per tile.

#include "logprob_ref.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // 32-byte vectors only cross always-inline helpers
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RLPT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RLPT_CPU_CLONES
#endif
#define RLPT_ALWAYS_INLINE inline __attribute__((always_inline))

namespace rlpt::kernels::detail {
namespace {

constexpr int kLanes = 8;
using VecF = float __attribute__((vector_size(32)));
using VecI = int32_t __attribute__((vector_size(32)));
using VecU32 = uint32_t __attribute__((vector_size(32)));
using VecU16 = uint16_t __attribute__((vector_size(16)));

constexpr int64_t kTile = 2048;         // 8 KiB of fp32: stays in L1 between the two passes
constexpr float kMinLogRatio = -86.0f;  // exp(z − m) below e^-86 (< 5e-38) is clamped to it
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

RLPT_ALWAYS_INLINE VecF splat(float x) { return VecF{} + x; }
RLPT_ALWAYS_INLINE VecF vmax(const VecF& a, const VecF& b) { return a > b ? a : b; }
// Clamp from below; NaN passes through (the comparison is false).
RLPT_ALWAYS_INLINE VecF clamp_low(const VecF& d) { return d < kMinLogRatio ? splat(kMinLogRatio) : d; }

RLPT_ALWAYS_INLINE float hmax(const VecF& v) {
    float r = v[0];
    for (int k = 1; k < kLanes; ++k) r = v[k] > r ? v[k] : r;
    return r;
}
RLPT_ALWAYS_INLINE double hsum(const VecF& v) {
    float r = 0.0f;
    for (int k = 0; k < kLanes; ++k) r += v[k];
    return r;
}
RLPT_ALWAYS_INLINE VecI lane_index() { return VecI{0, 1, 2, 3, 4, 5, 6, 7}; }

// exp(x) for x in [kMinLogRatio, 88]: x = n·ln2 + r, |r| ≤ ln2/2, exp(r) by the Cephes expf
// polynomial (≈1 ulp), 2^n added to the exponent bits.
RLPT_ALWAYS_INLINE VecF vexp(const VecF& x) {
    const VecF magic = splat(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
    const VecF t = x * 1.44269504088896341f + magic;
    const VecI n_int = (VecI)t - 0x4B400000;
    const VecF n = t - magic;
    VecF r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    VecF p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const VecF y = p * r * r + r + 1.0f;
    return (VecF)((VecI)y + (n_int << 23));
}

struct F32 {
    using T = float;
    static constexpr T kNegInf = -kInf;
    static RLPT_ALWAYS_INLINE VecF load(const T* p) {
        VecF v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    static RLPT_ALWAYS_INLINE float load1(const T* p) { return *p; }
    static RLPT_ALWAYS_INLINE void store(T* p, const VecF& g) { std::memcpy(p, &g, sizeof g); }
    static RLPT_ALWAYS_INLINE void store1(T* p, float g) { *p = g; }
};

// bfloat16 as raw bits: widening is a 16-bit shift; narrowing rounds to nearest even, NaN kept.
struct Bf16 {
    using T = uint16_t;
    static constexpr T kNegInf = 0xFF80;
    static RLPT_ALWAYS_INLINE VecF load(const T* p) {
        VecU16 h;
        std::memcpy(&h, p, sizeof h);
        return (VecF)(__builtin_convertvector(h, VecU32) << 16);
    }
    static RLPT_ALWAYS_INLINE float load1(const T* p) {
        const uint32_t w = uint32_t(*p) << 16;
        float f;
        std::memcpy(&f, &w, sizeof f);
        return f;
    }
    static RLPT_ALWAYS_INLINE void store(T* p, const VecF& g) {
        const VecU32 u = (VecU32)g;
        VecU32 r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        r = (g != g) ? (VecU32{} + 0x7FC0u) : r;
        const VecU16 h = __builtin_convertvector(r, VecU16);
        std::memcpy(p, &h, sizeof h);
    }
    static RLPT_ALWAYS_INLINE void store1(T* p, float g) {
        uint32_t u;
        std::memcpy(&u, &g, sizeof u);
        *p = std::isnan(g) ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
};

// Loads `rem` < kLanes elements, padding the rest with `pad`.
template <class L>
RLPT_ALWAYS_INLINE VecF load_tail(const typename L::T* p, int64_t rem, typename L::T pad) {
    typename L::T buf[kLanes];
    for (int k = 0; k < kLanes; ++k) buf[k] = k < rem ? p[k] : pad;
    return L::load(buf);
}

template <class L>
RLPT_ALWAYS_INLINE void store_tail(typename L::T* p, int64_t rem, const VecF& g) {
    typename L::T buf[kLanes];
    L::store(buf, g);
    for (int64_t k = 0; k < rem; ++k) p[k] = buf[k];
}

// lse = max + log_sum; log p_y is formed as (z_y − max) − log_sum, which stays exact when |z| is
// large and z_y is near the max (z_y − lse would round at the scale of |lse|).
struct RowStats {
    float max, log_sum, entropy;
};

template <class L>
RLPT_ALWAYS_INLINE RowStats forward_row(const typename L::T* x, int64_t v, float inv_t) {
    float m = -kInf;
    double s = 0.0, t = 0.0;
    VecI bad = VecI{};  // lanes that saw NaN or +inf in z
    for (int64_t t0 = 0; t0 < v; t0 += kTile) {
        const typename L::T* xt = x + t0;
        const int64_t len = std::min(kTile, v - t0);
        const int64_t full = len & ~int64_t(kLanes - 1);
        // Two independent accumulators per quantity hide the add / compare latency.
        VecF vm0 = splat(-kInf), vm1 = splat(-kInf);
        int64_t i = 0;
        for (; i + 2 * kLanes <= full; i += 2 * kLanes) {
            vm0 = vmax(vm0, L::load(xt + i));
            vm1 = vmax(vm1, L::load(xt + i + kLanes));
        }
        if (i < full) vm0 = vmax(vm0, L::load(xt + i));
        if (full < len) vm1 = vmax(vm1, load_tail<L>(xt + full, len - full, L::kNegInf));
        const float tile_max = hmax(vmax(vm0, vm1)) * inv_t;
        if (tile_max > m) {
            if (s > 0.0) {
                const double d = double(m) - double(tile_max);
                const double c = std::exp(d);
                t = c * (t + d * s);
                s *= c;
            }
            m = tile_max;
        }
        if (m == -kInf) continue;  // everything so far is −inf: contributes nothing
        const VecF vm2 = splat(m);
        VecF vs0 = VecF{}, vt0 = VecF{}, vs1 = VecF{}, vt1 = VecF{};
        const auto step = [&](const VecF& z, VecF& vs, VecF& vt) {
            bad |= (z != z) | (z > std::numeric_limits<float>::max());
            const VecF d = clamp_low(z - vm2);
            const VecF e = vexp(d);
            vs += e;
            vt += e * d;
        };
        for (i = 0; i + 2 * kLanes <= full; i += 2 * kLanes) {
            step(L::load(xt + i) * inv_t, vs0, vt0);
            step(L::load(xt + i + kLanes) * inv_t, vs1, vt1);
        }
        if (i < full) step(L::load(xt + i) * inv_t, vs0, vt0);
        if (full < len) {
            const VecF z = load_tail<L>(xt + full, len - full, L::kNegInf) * inv_t;
            bad |= (z != z) | (z > std::numeric_limits<float>::max());
            const VecF d = clamp_low(z - vm2);
            const VecF e = lane_index() < VecI{} + int32_t(len - full) ? vexp(d) : VecF{};
            vs1 += e;
            vt1 += e * d;
        }
        const VecF vs = vs0 + vs1, vt = vt0 + vt1;
        s += hsum(vs);
        t += hsum(vt);
    }
    bool any_bad = false;
    for (int k = 0; k < kLanes; ++k) any_bad = any_bad || bad[k] != 0;
    if (any_bad || m == -kInf) return {kNaN, kNaN, kNaN};
    const double log_s = std::log(s);
    return {m, float(log_s), float(log_s - t / s)};
}

template <class L>
RLPT_ALWAYS_INLINE void forward_rows(const typename L::T* logits, const int64_t* labels, int64_t begin, int64_t end,
                                     int64_t v, float inv_t, float* logp, float* entropy, float* lse) {
    for (int64_t r = begin; r < end; ++r) {
        const typename L::T* x = logits + r * v;
        const RowStats st = forward_row<L>(x, v, inv_t);
        lse[r] = st.max + st.log_sum;
        logp[r] = (L::load1(x + labels[r]) * inv_t - st.max) - st.log_sum;
        if (entropy != nullptr) entropy[r] = st.entropy;
    }
}

// grad_z_j = −p_j·(gl + gh·(log p_j + H)) + gl·1[j = y], grad_logits = grad_z / T.
template <class L>
RLPT_ALWAYS_INLINE void backward_rows(const typename L::T* logits, const int64_t* labels, const float* lse,
                                      const float* entropy, const float* grad_logp, const float* grad_entropy,
                                      int64_t begin, int64_t end, int64_t v, float inv_t, typename L::T* grad_logits) {
    for (int64_t r = begin; r < end; ++r) {
        const typename L::T* x = logits + r * v;
        typename L::T* out = grad_logits + r * v;
        const float gl = grad_logp != nullptr ? grad_logp[r] : 0.0f;
        const float gh = grad_entropy != nullptr ? grad_entropy[r] : 0.0f;
        const float h = grad_entropy != nullptr ? entropy[r] : 0.0f;
        const float row_lse = lse[r];
        const int64_t full = v & ~int64_t(kLanes - 1);
        if (gl == 0.0f && gh == 0.0f) {  // masked token: the gradient is exactly zero
            std::memset(static_cast<void*>(out), 0, sizeof(typename L::T) * size_t(v));
            continue;
        }
        if (!std::isfinite(row_lse) || !std::isfinite(h)) {
            for (int64_t j = 0; j < v; ++j) L::store1(out + j, kNaN);
            continue;
        }
        // g = p·(a + b·d) with d = log p
        const VecF a = splat(-(gl + gh * h) * inv_t);
        const VecF b = splat(-gh * inv_t);
        const VecF vl = splat(row_lse);
        for (int64_t i = 0; i < full; i += kLanes) {
            const VecF d = clamp_low(L::load(x + i) * inv_t - vl);
            L::store(out + i, vexp(d) * (a + b * d));
        }
        if (full < v) {
            const VecF d = clamp_low(load_tail<L>(x + full, v - full, L::kNegInf) * inv_t - vl);
            store_tail<L>(out + full, v - full, vexp(d) * (a + b * d));
        }
        const int64_t y = labels[r];
        const float d = L::load1(x + y) * inv_t - row_lse;
        const float p = std::exp(d);
        L::store1(out + y, (gl * (1.0f - p) - gh * p * (d + h)) * inv_t);
    }
}

RLPT_CPU_CLONES void forward_rows_f32(const float* logits, const int64_t* labels, int64_t begin, int64_t end, int64_t v,
                                      float inv_t, float* logp, float* entropy, float* lse) {
    forward_rows<F32>(logits, labels, begin, end, v, inv_t, logp, entropy, lse);
}

RLPT_CPU_CLONES void forward_rows_bf16(const uint16_t* logits, const int64_t* labels, int64_t begin, int64_t end,
                                       int64_t v, float inv_t, float* logp, float* entropy, float* lse) {
    forward_rows<Bf16>(logits, labels, begin, end, v, inv_t, logp, entropy, lse);
}

RLPT_CPU_CLONES void backward_rows_f32(const float* logits, const int64_t* labels, const float* lse,
                                       const float* entropy, const float* grad_logp, const float* grad_entropy,
                                       int64_t begin, int64_t end, int64_t v, float inv_t, float* grad_logits) {
    backward_rows<F32>(logits, labels, lse, entropy, grad_logp, grad_entropy, begin, end, v, inv_t, grad_logits);
}

RLPT_CPU_CLONES void backward_rows_bf16(const uint16_t* logits, const int64_t* labels, const float* lse,
                                        const float* entropy, const float* grad_logp, const float* grad_entropy,
                                        int64_t begin, int64_t end, int64_t v, float inv_t, uint16_t* grad_logits) {
    backward_rows<Bf16>(logits, labels, lse, entropy, grad_logp, grad_entropy, begin, end, v, inv_t, grad_logits);
}

// Rows per parallel task: at least ~32k elements so small vocabularies don't drown in overhead.
int64_t row_grain(int64_t v) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(v, 1)); }

}  // namespace

void logprob_forward_ref(const float* logits, const int64_t* labels, int64_t n, int64_t v, float inv_temperature,
                         float* logp, float* entropy, float* lse) {
    at::parallel_for(0, n, row_grain(v), [&](int64_t begin, int64_t end) {
        forward_rows_f32(logits, labels, begin, end, v, inv_temperature, logp, entropy, lse);
    });
}

void logprob_forward_ref(const uint16_t* logits_bf16, const int64_t* labels, int64_t n, int64_t v,
                         float inv_temperature, float* logp, float* entropy, float* lse) {
    at::parallel_for(0, n, row_grain(v), [&](int64_t begin, int64_t end) {
        forward_rows_bf16(logits_bf16, labels, begin, end, v, inv_temperature, logp, entropy, lse);
    });
}

void logprob_backward_ref(const float* logits, const int64_t* labels, const float* lse, const float* entropy,
                          const float* grad_logp, const float* grad_entropy, int64_t n, int64_t v,
                          float inv_temperature, float* grad_logits) {
    at::parallel_for(0, n, row_grain(v), [&](int64_t begin, int64_t end) {
        backward_rows_f32(logits, labels, lse, entropy, grad_logp, grad_entropy, begin, end, v, inv_temperature,
                          grad_logits);
    });
}

void logprob_backward_ref(const uint16_t* logits_bf16, const int64_t* labels, const float* lse, const float* entropy,
                          const float* grad_logp, const float* grad_entropy, int64_t n, int64_t v,
                          float inv_temperature, uint16_t* grad_logits_bf16) {
    at::parallel_for(0, n, row_grain(v), [&](int64_t begin, int64_t end) {
        backward_rows_bf16(logits_bf16, labels, lse, entropy, grad_logp, grad_entropy, begin, end, v, inv_temperature,
                           grad_logits_bf16);
    });
}

}  // namespace rlpt::kernels::detail
