// Few-row matmul y = x W^T (+ b): tensor glue and the blocked, vectorised CPU kernels.
//
// One tile computes y[i0..i0+MB, j0..j0+NB] for NB = 4 weight rows and MB <= 4 (AVX-512) or 2
// (AVX2, portable) rows of x: per step of L lanes along K it loads NB weight vectors and, for each
// x row, one x vector and NB fused multiply-adds into MB x NB accumulators. The weight rows are
// read from memory once per tile and re-read from L1 by the following x-row blocks, so every
// weight element crosses the memory bus once per call whatever M is. The lanes of each
// accumulator are summed at the end, then the K % L tail and the bias are added in scalar code:
// the order depends only on K and L (see the header's "Numerics").
//
// Variants are the same template instantiated for 16 lanes (AVX-512), 8 (AVX2) and 4 (baseline
// SIMD of any target) using GCC vector extensions; the x86 variants carry target attributes and
// are picked by a run-time CPU check. bfloat16 weights are widened to float32 in registers.

#include "rlpt/kernels/small_matmul.h"
#include "rlpt/kernels/cpu_features.h"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>

#include "rlpt/core/error.h"
#include "cpu_simd.h"
#include "small_matmul_ref.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only cross always-inline helpers
#endif

namespace rlpt::kernels {
namespace detail {
namespace {

template <typename W>
struct Args {
    const float* x;
    int64_t ldx;
    const W* w;
    const float* bias;  // or nullptr
    int64_t m, n, k;
    float* y;
};

// y[i, j] for i in [i0, i0 + MB), j in [j0, j0 + NB).
template <int L, int NB, int MB, typename W>
RLPT_ALWAYS_INLINE void tile(const Args<W>& a, int64_t i0, int64_t j0) {
    using F = typename Vec<L>::F;
    const int64_t k = a.k, kv = k - k % L;
    const float* x = a.x + i0 * a.ldx;
    const W* w = a.w + j0 * k;
    F acc[MB][NB];
    for (int i = 0; i < MB; ++i)
        for (int j = 0; j < NB; ++j) acc[i][j] = F{};
    for (int64_t l = 0; l < kv; l += L) {
        F wv[NB];
        for (int j = 0; j < NB; ++j) wv[j] = load<L>(w + j * k + l);
        for (int i = 0; i < MB; ++i) {
            const F xv = load<L>(x + i * a.ldx + l);
            for (int j = 0; j < NB; ++j) acc[i][j] += xv * wv[j];
        }
    }
    for (int i = 0; i < MB; ++i) {
        for (int j = 0; j < NB; ++j) {
            float s = hsum<L>(acc[i][j]);
            for (int64_t l = kv; l < k; ++l) s += x[i * a.ldx + l] * scalar(w[j * k + l]);
            if (a.bias != nullptr) s += a.bias[j0 + j];
            a.y[(i0 + i) * a.n + j0 + j] = s;
        }
    }
}

// Every x row against weight rows [j0, j0 + NB): blocks of MBMAX rows, then the remainder.
template <int L, int NB, int MBMAX, typename W>
RLPT_ALWAYS_INLINE void column_block(const Args<W>& a, int64_t j0) {
    int64_t i = 0;
    for (; i + MBMAX <= a.m; i += MBMAX) tile<L, NB, MBMAX>(a, i, j0);
    const int64_t rest = a.m - i;
    if constexpr (MBMAX > 3) {
        if (rest == 3) tile<L, NB, 3>(a, i, j0);
    }
    if constexpr (MBMAX > 2) {
        if (rest == 2) tile<L, NB, 2>(a, i, j0);
    }
    if (rest == 1) tile<L, NB, 1>(a, i, j0);
}

constexpr int64_t kNb = 4;

// Output columns [j0, j1).
template <int L, int MBMAX, typename W>
RLPT_ALWAYS_INLINE void columns(const Args<W>& a, int64_t j0, int64_t j1) {
    int64_t j = j0;
    for (; j + kNb <= j1; j += kNb) column_block<L, kNb, MBMAX>(a, j);
    for (; j < j1; ++j) column_block<L, 1, MBMAX>(a, j);
}

template <typename W>
void columns_portable(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<4, 2>(a, j0, j1);
}

#if RLPT_CPU_X86
template <typename W>
RLPT_TARGET_AVX2 void columns_avx2(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<8, 2>(a, j0, j1);
}
template <typename W>
RLPT_TARGET_AVX512 void columns_avx512(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<16, 4>(a, j0, j1);
}
#endif

template <typename W>
void run(const Args<W>& a, SmallMatmulIsa isa) {
    void (*cols)(const Args<W>&, int64_t, int64_t) = columns_portable<W>;
#if RLPT_CPU_X86
    if (isa == SmallMatmulIsa::kAvx512) cols = columns_avx512<W>;
    if (isa == SmallMatmulIsa::kAvx2) cols = columns_avx2<W>;
#endif
    // Blocks of kNb columns; a task gets at least ~64K weight elements so small layers do not
    // pay the thread pool's overhead for little work.
    const int64_t blocks = (a.n + kNb - 1) / kNb;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, kNb * a.k));
    at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
        cols(a, b0 * kNb, std::min(a.n, b1 * kNb));
    });
}

}  // namespace
}  // namespace detail

bool cpu_has_avx512_bf16() {
#if RLPT_CPU_X86
    // RLPT_CPU_ISA below avx512 (the test knob of detail::best_isa) also hides AVX512_BF16.
    if (detail::best_isa() != SmallMatmulIsa::kAvx512) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
#else
    return false;
#endif
}

int decode_kernel_threads() {
    std::atomic<uint64_t> seen{0};
    at::parallel_for(0, 64, 1, [&](int64_t, int64_t) { seen |= uint64_t{1} << (at::get_thread_num() % 64); });
    return __builtin_popcountll(seen.load());
}

bool small_matmul_isa_supported(SmallMatmulIsa isa) {
    const SmallMatmulIsa best = detail::best_isa();
    switch (isa) {
        case SmallMatmulIsa::kAuto:
        case SmallMatmulIsa::kPortable: return true;
        case SmallMatmulIsa::kAvx2: return best == SmallMatmulIsa::kAvx2 || best == SmallMatmulIsa::kAvx512;
        case SmallMatmulIsa::kAvx512: return best == SmallMatmulIsa::kAvx512;
    }
    return false;
}

const char* small_matmul_isa_name() {
    switch (detail::best_isa()) {
        case SmallMatmulIsa::kAvx512: return "avx512";
        case SmallMatmulIsa::kAvx2: return "avx2";
        default: return "portable";
    }
}

bool small_matmul_applies(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias) {
    if (!x.defined() || !w.defined() || x.dim() < 1 || w.dim() != 2 || !x.is_cpu() || !w.is_cpu()) return false;
    const auto dt = w.scalar_type();
    if ((dt != torch::kFloat32 && dt != torch::kBFloat16) || x.scalar_type() != dt || !w.is_contiguous()) return false;
    if (bias.defined() && (bias.scalar_type() != dt || !bias.is_cpu())) return false;
    const int64_t k = w.size(1);
    if (x.size(-1) != k || k == 0) return false;
    const int64_t rows = x.numel() / k;
    // bfloat16: past a few rows oneDNN's AVX512_BF16 path (2x the multiply-adds per
    // instruction) beats widening the weights to fp32 here; without those instructions
    // LibTorch's bfloat16 matmul is slower than this kernel at every size up to the limit.
    static const bool onednn_bf16 = cpu_has_avx512_bf16();
    const int64_t max_rows = dt == torch::kBFloat16 && onednn_bf16 ? kSmallMatmulMaxRowsBf16 : kSmallMatmulMaxRows;
    if (rows < 1 || rows > max_rows) return false;
    return !torch::GradMode::is_enabled() ||
           !(x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
}

namespace {

torch::Tensor matmul_impl(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                          SmallMatmulIsa isa, bool reference) {
    RLPT_CHECK(x.defined() && w.defined() && w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
               "small_matmul: x must be [..., K] and w [N, K], got x {} w {}",
               x.defined() ? x.sizes() : torch::IntArrayRef{}, w.defined() ? w.sizes() : torch::IntArrayRef{});
    const auto dt = w.scalar_type();
    RLPT_CHECK((dt == torch::kFloat32 || dt == torch::kBFloat16) && x.scalar_type() == dt &&
                   (!bias.defined() || bias.scalar_type() == dt),
               "small_matmul: x, w and bias must all be float32 or all bfloat16, got {} / {} / {}",
               c10::toString(x.scalar_type()), c10::toString(dt),
               bias.defined() ? c10::toString(bias.scalar_type()) : "none");
    RLPT_CHECK(x.is_cpu() && w.is_cpu() && (!bias.defined() || bias.is_cpu()),
               "small_matmul: CPU tensors only, got x on {} w on {}", x.device().str(), w.device().str());
    const int64_t n = w.size(0), k = w.size(1);
    RLPT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n), "small_matmul: bias must be [{}], got {}", n,
               bias.sizes());
    RLPT_CHECK(small_matmul_isa_supported(isa), "small_matmul: this CPU lacks the requested instruction set");

    auto out_shape = x.sizes().vec();
    out_shape.back() = n;
    if (k == 0)  // empty dot products: the bias alone
        return bias.defined() ? bias.expand(out_shape).clone() : torch::zeros(out_shape, x.options());
    auto x2 = x.reshape({-1, k}).to(torch::kFloat32);
    const int64_t m = x2.size(0);
    if (x2.stride(1) != 1 || (m > 1 && x2.stride(0) < k)) x2 = x2.contiguous();
    const auto wc = w.contiguous();
    const auto bc = bias.defined() ? bias.to(torch::kFloat32).contiguous() : torch::Tensor();
    auto y = torch::empty({m, n}, x.options().dtype(torch::kFloat32));
    if (m > 0 && n > 0) {
        const float* xp = x2.data_ptr<float>();
        const int64_t ldx = m > 1 ? x2.stride(0) : k;
        const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
        float* yp = y.data_ptr<float>();
        if (dt == torch::kFloat32) {
            const float* wp = wc.data_ptr<float>();
            if (reference) detail::small_matmul_ref(xp, ldx, wp, bp, m, n, k, yp);
            else detail::run(detail::Args<float>{xp, ldx, wp, bp, m, n, k, yp},
                             isa == SmallMatmulIsa::kAuto ? detail::best_isa() : isa);
        } else {
            const auto* wp = static_cast<const uint16_t*>(wc.data_ptr());
            if (reference) detail::small_matmul_ref(xp, ldx, wp, bp, m, n, k, yp);
            else detail::run(detail::Args<uint16_t>{xp, ldx, wp, bp, m, n, k, yp},
                             isa == SmallMatmulIsa::kAuto ? detail::best_isa() : isa);
        }
    }
    return y.view(out_shape).to(dt);
}

}  // namespace

torch::Tensor small_matmul(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           SmallMatmulIsa isa) {
    return matmul_impl(x, w, bias, isa, /*reference=*/false);
}

torch::Tensor small_matmul_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias) {
    return matmul_impl(x, w, bias, SmallMatmulIsa::kPortable, /*reference=*/true);
}

}  // namespace rlpt::kernels
