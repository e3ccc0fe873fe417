// Decode attention over a KV cache: tensor glue and the vectorised CPU kernel.
//
// One task per (row, KV head): the G query rows against the S cached keys (dot products
// vectorised over head_dim, keys read once from memory, again from L1 for the other query
// rows), a float32 softmax per query row, then out[g] accumulated over the cached values.
// Same AVX-512 / AVX2 / portable variants as small_matmul (cpu_simd.h).

#include "rlpt/kernels/decode_attention.h"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu_simd.h"
#include "decode_attention_ref.h"
#include "rlpt/core/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only cross always-inline helpers
#endif

namespace rlpt::kernels {
namespace detail {
namespace {

template <typename T>
struct Task {
    const float* q;
    const T* k;
    const T* v;
    const bool* masked;  // null: no key masked
    RowMap rows;
    AttentionShape shape;
    float scale;
    float* out;
};

template <int L, typename T>
RLPT_ALWAYS_INLINE float dot(const float* q, const T* k, int64_t hd) {
    using F = typename Vec<L>::F;
    const int64_t hv = hd - hd % L;
    F acc{};
    for (int64_t e = 0; e < hv; e += L) acc += load<L>(q + e) * load<L>(k + e);
    float s = hsum<L>(acc);
    for (int64_t e = hv; e < hd; ++e) s += q[e] * scalar(k[e]);
    return s;
}

// Tasks [t0, t1) of the B * n_kv (row, head) pairs; `scores` holds G * S floats.
template <int L, typename T>
RLPT_ALWAYS_INLINE void attend(const Task<T>& a, int64_t t0, int64_t t1, float* scores) {
    using F = typename Vec<L>::F;
    const AttentionShape& sh = a.shape;
    const int64_t g_n = sh.g, hd = sh.hd, hv = hd - hd % L;
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / sh.n_kv, n = t % sh.n_kv;
        const int64_t row = a.rows.slot ? a.rows.slot[b] : b;
        const int64_t s_n = a.rows.len ? a.rows.len[b] : sh.s;  // keys this row attends to
        const T* k = a.k + row * sh.sb + n * sh.sh;
        const T* v = a.v + row * sh.sb + n * sh.sh;
        const bool* masked = a.masked ? a.masked + b * sh.s : nullptr;
        const float* q = a.q + t * g_n * hd;
        float* out = a.out + t * g_n * hd;
        for (int64_t s = 0; s < s_n; ++s) {
            const bool off = masked != nullptr && masked[s];
            for (int64_t g = 0; g < g_n; ++g)
                scores[g * s_n + s] =
                    off ? std::numeric_limits<float>::lowest() : dot<L>(q + g * hd, k + s * hd, hd) * a.scale;
        }
        for (int64_t g = 0; g < g_n; ++g) {
            float* p = scores + g * s_n;
            const float mx = *std::max_element(p, p + s_n);
            float sum = 0;
            for (int64_t s = 0; s < s_n; ++s) sum += (p[s] = std::exp(p[s] - mx));
            const float inv = 1.0f / sum;
            float* o = out + g * hd;
            std::fill(o, o + hd, 0.0f);
            for (int64_t s = 0; s < s_n; ++s) {
                const float w = p[s] * inv;
                const T* vr = v + s * hd;
                for (int64_t e = 0; e < hv; e += L) {
                    F acc = load<L>(o + e) + w * load<L>(vr + e);
                    std::memcpy(o + e, &acc, sizeof acc);
                }
                for (int64_t e = hv; e < hd; ++e) o[e] += w * scalar(vr[e]);
            }
        }
    }
}

template <typename T>
void attend_portable(const Task<T>& a, int64_t t0, int64_t t1, float* scores) {
    attend<4>(a, t0, t1, scores);
}
#if RLPT_CPU_X86
template <typename T>
RLPT_TARGET_AVX2 void attend_avx2(const Task<T>& a, int64_t t0, int64_t t1, float* scores) {
    attend<8>(a, t0, t1, scores);
}
template <typename T>
RLPT_TARGET_AVX512 void attend_avx512(const Task<T>& a, int64_t t0, int64_t t1, float* scores) {
    attend<16>(a, t0, t1, scores);
}
#endif

template <typename T>
void run(const Task<T>& a) {
    void (*fn)(const Task<T>&, int64_t, int64_t, float*) = attend_portable<T>;
#if RLPT_CPU_X86
    const SmallMatmulIsa isa = best_isa();
    if (isa == SmallMatmulIsa::kAvx512) fn = attend_avx512<T>;
    if (isa == SmallMatmulIsa::kAvx2) fn = attend_avx2<T>;
#endif
    const AttentionShape& sh = a.shape;
    // A task reads 2 * S * hd cached elements; aim for ~64K per thread-pool chunk.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, 2 * sh.s * sh.hd));
    at::parallel_for(0, sh.b * sh.n_kv, grain, [&](int64_t t0, int64_t t1) {
        std::vector<float> scores(static_cast<size_t>(sh.g * sh.s));
        fn(a, t0, t1, scores.data());
    });
}

// k/v with row-major [S, hd] blocks keep their storage; anything else is copied.
torch::Tensor cache_layout(const torch::Tensor& t) {
    return t.stride(3) == 1 && (t.size(2) <= 1 || t.stride(2) == t.size(3)) ? t : t.contiguous();
}

// q [B, n_kv, G, hd] -> out, running the kernel (or its reference) over k/v of `shape`.
torch::Tensor launch(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const bool* masked,
                     RowMap rows, AttentionShape shape, double scale, bool reference) {
    const auto dt = q.scalar_type();
    const auto qf = q.to(torch::kFloat32).contiguous();
    auto out = torch::empty(q.sizes(), q.options().dtype(torch::kFloat32));
    if (out.numel() == 0) return out.to(dt);
    if (shape.s == 0) return out.zero_().to(dt);  // no keys: nothing to attend to
    const float sc = static_cast<float>(scale);
    auto go = [&](const auto* kp, const auto* vp) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(kp)>>;
        if (reference)
            detail::decode_attention_ref(qf.data_ptr<float>(), kp, vp, masked, rows, shape, sc, out.data_ptr<float>());
        else detail::run(detail::Task<T>{qf.data_ptr<float>(), kp, vp, masked, rows, shape, sc, out.data_ptr<float>()});
    };
    if (dt == torch::kFloat32) go(k.data_ptr<float>(), v.data_ptr<float>());
    else go(static_cast<const uint16_t*>(k.data_ptr()), static_cast<const uint16_t*>(v.data_ptr()));
    return out.to(dt);
}

// The checks both entry points share: dtypes alike (float32 or bfloat16), CPU, k/v in a
// layout the kernel reads (copied otherwise; same batch/head strides).
std::pair<torch::Tensor, torch::Tensor> checked_kv(const torch::Tensor& q, const torch::Tensor& k_in,
                                                   const torch::Tensor& v_in) {
    const auto dt = q.scalar_type();
    RLPT_CHECK((dt == torch::kFloat32 || dt == torch::kBFloat16) && k_in.scalar_type() == dt &&
                   v_in.scalar_type() == dt,
               "decode_attention: q, k, v must all be float32 or all bfloat16, got {} {} {}", c10::toString(dt),
               c10::toString(k_in.scalar_type()), c10::toString(v_in.scalar_type()));
    RLPT_CHECK(q.is_cpu() && k_in.is_cpu() && v_in.is_cpu(), "decode_attention: CPU tensors only");
    auto k = cache_layout(k_in), v = cache_layout(v_in);
    if (k.stride(0) != v.stride(0) || k.stride(1) != v.stride(1)) {
        k = k.contiguous();
        v = v.contiguous();
    }
    return {k, v};
}

torch::Tensor attention_impl(const torch::Tensor& q, const torch::Tensor& k_in, const torch::Tensor& v_in,
                             const torch::Tensor& key_masked, double scale, bool reference) {
    RLPT_CHECK(q.defined() && k_in.defined() && v_in.defined() && key_masked.defined() && q.dim() == 4 &&
                   k_in.dim() == 4 && k_in.sizes() == v_in.sizes() && q.size(0) == k_in.size(0) &&
                   q.size(1) == k_in.size(1) && q.size(3) == k_in.size(3) && key_masked.dim() == 2 &&
                   key_masked.size(0) == k_in.size(0) && key_masked.size(1) == k_in.size(2),
               "decode_attention: expected q [B, n_kv, G, hd], k and v [B, n_kv, S, hd], key_masked [B, S]; got q "
               "{} k {} v {} key_masked {}",
               q.sizes(), k_in.sizes(), v_in.sizes(), key_masked.sizes());
    RLPT_CHECK(key_masked.scalar_type() == torch::kBool && key_masked.is_cpu(),
               "decode_attention: key_masked must be a CPU bool tensor, got {}",
               c10::toString(key_masked.scalar_type()));
    const auto [k, v] = checked_kv(q, k_in, v_in);
    const auto masked = key_masked.contiguous();
    AttentionShape shape{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), k.stride(0), k.stride(1)};
    return launch(q, k, v, masked.data_ptr<bool>(), RowMap{}, shape, scale, reference);
}

torch::Tensor slots_impl(const torch::Tensor& q, const torch::Tensor& k_in, const torch::Tensor& v_in,
                         const torch::Tensor& slots, const torch::Tensor& lengths, double scale, bool reference) {
    RLPT_CHECK(q.defined() && k_in.defined() && v_in.defined() && slots.defined() && lengths.defined() &&
                   q.dim() == 4 && k_in.dim() == 4 && k_in.sizes() == v_in.sizes() && q.size(1) == k_in.size(1) &&
                   q.size(3) == k_in.size(3) && slots.dim() == 1 && lengths.dim() == 1 && slots.size(0) == q.size(0) &&
                   lengths.size(0) == q.size(0),
               "decode_attention_slots: expected q [B, n_kv, G, hd], k and v [N, n_kv, T, hd], slots and "
               "lengths [B]; "
               "got q {} k {} v {} slots {} lengths {}",
               q.sizes(), k_in.sizes(), v_in.sizes(), slots.sizes(), lengths.sizes());
    RLPT_CHECK(slots.scalar_type() == torch::kInt64 && lengths.scalar_type() == torch::kInt64 && slots.is_cpu() &&
                   lengths.is_cpu(),
               "decode_attention_slots: slots and lengths must be CPU int64 tensors");
    const auto sl = slots.contiguous(), ln = lengths.contiguous();
    const int64_t b = q.size(0), n = k_in.size(0), t = k_in.size(2);
    const int64_t *sp = sl.data_ptr<int64_t>(), *lp = ln.data_ptr<int64_t>();
    int64_t longest = 0;
    for (int64_t i = 0; i < b; ++i) {
        RLPT_CHECK(sp[i] >= 0 && sp[i] < n && lp[i] >= 1 && lp[i] <= t,
                   "decode_attention_slots: row {} reads slot {} (of {}) over {} keys (must be in [1, {}])", i, sp[i],
                   n, lp[i], t);
        longest = std::max(longest, lp[i]);
    }
    // Only the attended positions [0, longest) need the kernel's layout.
    const auto [k, v] = checked_kv(q, k_in.narrow(2, 0, longest), v_in.narrow(2, 0, longest));
    AttentionShape shape{b, q.size(1), q.size(2), longest, q.size(3), k.stride(0), k.stride(1)};
    return launch(q, k, v, nullptr, RowMap{sp, lp}, shape, scale, reference);
}

}  // namespace
}  // namespace detail

bool decode_attention_slots_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    if (!q.defined() || !k.defined() || !v.defined() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
    if (!q.is_cpu() || !k.is_cpu() || !v.is_cpu()) return false;
    const auto dt = q.scalar_type();
    if ((dt != torch::kFloat32 && dt != torch::kBFloat16) || k.scalar_type() != dt || v.scalar_type() != dt)
        return false;
    if (k.sizes() != v.sizes() || q.size(1) != k.size(1) || q.size(3) != k.size(3)) return false;
    return !torch::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad());
}

bool decode_attention_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return decode_attention_slots_applies(q, k, v) && q.size(0) == k.size(0);
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_masked, double scale) {
    return detail::attention_impl(q, k, v, key_masked, scale, /*reference=*/false);
}

torch::Tensor decode_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& key_masked, double scale) {
    return detail::attention_impl(q, k, v, key_masked, scale, /*reference=*/true);
}

torch::Tensor decode_attention_slots(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& slots, const torch::Tensor& lengths, double scale) {
    return detail::slots_impl(q, k, v, slots, lengths, scale, /*reference=*/false);
}

torch::Tensor decode_attention_slots_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& slots, const torch::Tensor& lengths, double scale) {
    return detail::slots_impl(q, k, v, slots, lengths, scale, /*reference=*/true);
}

}  // namespace rlpt::kernels
