// Few-row matmul y = x W^T (+ b): tensor glue and the blocked, vectorised CPU kernels.
//
// One tile computes y[i0..i0+MB, j0..j0+NB] for NB = 6 weight rows and MB <= 4 rows of x
// (AVX-512: 24 accumulators; 1.3-2x the 4 x 4 tile's rate at 64 rows, measured 2026-11-26) or
// NB = 4 and MB <= 2 (AVX2, portable): per step of L lanes along K it loads NB weight vectors and, for each
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
    int64_t ldy;      // row stride of y (>= n)
    bool accumulate;  // y += result (the result added to what y holds), else y = result
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
            float& out = a.y[(i0 + i) * a.ldy + j0 + j];
            out = a.accumulate ? out + s : s;
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

// Columns are handed to threads in blocks of kNb (a multiple of every variant's NB).
constexpr int64_t kNb = 12;

// Output columns [j0, j1), NB weight rows per tile.
template <int L, int MBMAX, int NB, typename W>
RLPT_ALWAYS_INLINE void columns(const Args<W>& a, int64_t j0, int64_t j1) {
    int64_t j = j0;
    for (; j + NB <= j1; j += NB) column_block<L, NB, MBMAX>(a, j);
    for (; j < j1; ++j) column_block<L, 1, MBMAX>(a, j);
}

template <typename W>
void columns_portable(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<4, 2, 4>(a, j0, j1);
}

#if RLPT_CPU_X86
template <typename W>
RLPT_TARGET_AVX2 void columns_avx2(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<8, 2, 4>(a, j0, j1);
}
template <typename W>
RLPT_TARGET_AVX512 void columns_avx512(const Args<W>& a, int64_t j0, int64_t j1) {
    columns<16, 4, 6>(a, j0, j1);  // 24 accumulators + 6 weights + x: 31 of 32 registers
}
#endif

template <typename W>
using ColumnsFn = void (*)(const Args<W>&, int64_t, int64_t);

template <typename W>
ColumnsFn<W> columns_for(SmallMatmulIsa isa) {
    ColumnsFn<W> cols = columns_portable<W>;
#if RLPT_CPU_X86
    if (isa == SmallMatmulIsa::kAvx512) cols = columns_avx512<W>;
    if (isa == SmallMatmulIsa::kAvx2) cols = columns_avx2<W>;
#endif
    return cols;
}

// Every target's output columns in one parallel region (one barrier for all): blocks of kNb
// columns numbered across the targets in order; a task gets at least ~64K weight elements so
// small layers do not pay the thread pool's overhead for little work. All targets share K.
template <typename W>
void run(const Args<W>* targets, size_t count, SmallMatmulIsa isa) {
    const ColumnsFn<W> cols = columns_for<W>(isa);
    int64_t blocks = 0;
    for (size_t t = 0; t < count; ++t) blocks += (targets[t].n + kNb - 1) / kNb;
    if (blocks == 0) return;
    const int64_t k = targets[0].k;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, kNb * k));
    at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
        int64_t first = 0;  // block number of targets[t]'s column 0
        for (size_t t = 0; t < count && b0 < b1; ++t) {
            const Args<W>& a = targets[t];
            const int64_t nb = (a.n + kNb - 1) / kNb;
            if (b0 < first + nb) {
                const int64_t lo = b0 - first, hi = std::min(b1 - first, nb);
                cols(a, lo * kNb, std::min(a.n, hi * kNb));
                b0 = first + hi;
            }
            first += nb;
        }
    });
}

}  // namespace
}  // namespace detail

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

torch::Tensor matmul_impl(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, SmallMatmulIsa isa,
                          bool reference) {
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
            const detail::Args<float> a{xp, ldx, wp, bp, m, n, k, yp, n, false};
            if (reference) detail::small_matmul_ref(xp, ldx, wp, bp, m, n, k, yp);
            else detail::run(&a, 1, isa == SmallMatmulIsa::kAuto ? detail::best_isa() : isa);
        } else {
            const auto* wp = static_cast<const uint16_t*>(wc.data_ptr());
            const detail::Args<uint16_t> a{xp, ldx, wp, bp, m, n, k, yp, n, false};
            if (reference) detail::small_matmul_ref(xp, ldx, wp, bp, m, n, k, yp);
            else detail::run(&a, 1, isa == SmallMatmulIsa::kAuto ? detail::best_isa() : isa);
        }
    }
    return y.view(out_shape).to(dt);
}

// Checks of small_matmul_into; returns the targets' bias as float32 (converted when bfloat16).
std::vector<torch::Tensor> checked_targets(const torch::Tensor& x, const std::vector<MatmulTarget>& targets,
                                           SmallMatmulIsa isa) {
    RLPT_CHECK(x.defined() && x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_cpu() &&
                   (x.size(0) <= 1 || x.stride(1) == 1),
               "small_matmul_into: x must be a float32 CPU [M, K] tensor with contiguous rows, got {} {}",
               x.defined() ? x.sizes() : torch::IntArrayRef{},
               x.defined() ? c10::toString(x.scalar_type()) : "undefined");
    RLPT_CHECK(!targets.empty(), "small_matmul_into: no targets");
    RLPT_CHECK(small_matmul_isa_supported(isa), "small_matmul_into: this CPU lacks the requested instruction set");
    const int64_t m = x.size(0), k = x.size(1);
    const auto dt = targets[0].w.defined() ? targets[0].w.scalar_type() : torch::kFloat32;
    std::vector<torch::Tensor> biases;
    for (size_t t = 0; t < targets.size(); ++t) {
        const auto& g = targets[t];
        RLPT_CHECK(g.w.defined() && g.w.dim() == 2 && g.w.size(1) == k && g.w.is_contiguous() && g.w.is_cpu() &&
                       g.w.scalar_type() == dt && (dt == torch::kFloat32 || dt == torch::kBFloat16),
                   "small_matmul_into: target {} needs w a contiguous CPU [N, {}] float32 or bfloat16 tensor (all "
                   "targets alike), got {}",
                   t, k, g.w.defined() ? g.w.sizes() : torch::IntArrayRef{});
        const int64_t n = g.w.size(0);
        RLPT_CHECK(!g.bias.defined() || (g.bias.dim() == 1 && g.bias.size(0) == n && g.bias.is_cpu()),
                   "small_matmul_into: target {} bias must be [{}]", t, n);
        RLPT_CHECK(g.out.defined() && g.out.dim() == 2 && g.out.size(0) == m && g.out.size(1) == n &&
                       g.out.scalar_type() == torch::kFloat32 && g.out.is_cpu() && (n <= 1 || g.out.stride(1) == 1) &&
                       (m <= 1 || g.out.stride(0) >= n),
                   "small_matmul_into: target {} out must be a float32 CPU [{}, {}] tensor with contiguous rows, "
                   "got {}",
                   t, m, n, g.out.defined() ? g.out.sizes() : torch::IntArrayRef{});
        biases.push_back(g.bias.defined() ? g.bias.to(torch::kFloat32).contiguous() : torch::Tensor());
    }
    return biases;
}

template <typename W>
void run_into(const torch::Tensor& x, const std::vector<MatmulTarget>& targets,
              const std::vector<torch::Tensor>& biases, SmallMatmulIsa isa, bool reference) {
    const int64_t m = x.size(0), k = x.size(1);
    const float* xp = x.data_ptr<float>();
    const int64_t ldx = m > 1 ? x.stride(0) : k;
    std::vector<detail::Args<W>> args;
    for (size_t t = 0; t < targets.size(); ++t) {
        const auto& g = targets[t];
        const int64_t n = g.w.size(0);
        if (m == 0 || n == 0) continue;
        float* yp = g.out.data_ptr<float>();
        const int64_t ldy = m > 1 ? g.out.stride(0) : n;
        const float* bp = biases[t].defined() ? biases[t].data_ptr<float>() : nullptr;
        const W* wp = static_cast<const W*>(g.w.data_ptr());
        if (k == 0) {  // empty dot products: the bias alone
            for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                    const float s = bp ? bp[j] : 0.0f;
                    yp[i * ldy + j] = g.accumulate ? yp[i * ldy + j] + s : s;
                }
            continue;
        }
        args.push_back(detail::Args<W>{xp, ldx, wp, bp, m, n, k, yp, ldy, g.accumulate});
    }
    if (args.empty()) return;
    if (!reference) {
        detail::run(args.data(), args.size(), isa == SmallMatmulIsa::kAuto ? detail::best_isa() : isa);
        return;
    }
    for (const auto& a : args) {  // the reference into a scratch row block, then stored
        std::vector<float> y(static_cast<size_t>(a.m * a.n));
        detail::small_matmul_ref(a.x, a.ldx, a.w, a.bias, a.m, a.n, a.k, y.data());
        for (int64_t i = 0; i < a.m; ++i)
            for (int64_t j = 0; j < a.n; ++j) {
                float& out = a.y[i * a.ldy + j];
                out = a.accumulate ? out + y[static_cast<size_t>(i * a.n + j)] : y[static_cast<size_t>(i * a.n + j)];
            }
    }
}

void into_impl(const torch::Tensor& x, const std::vector<MatmulTarget>& targets, SmallMatmulIsa isa, bool reference) {
    const auto biases = checked_targets(x, targets, isa);
    if (targets[0].w.scalar_type() == torch::kFloat32) run_into<float>(x, targets, biases, isa, reference);
    else run_into<uint16_t>(x, targets, biases, isa, reference);
}

}  // namespace

void small_matmul_into(const torch::Tensor& x, const std::vector<MatmulTarget>& targets, SmallMatmulIsa isa) {
    into_impl(x, targets, isa, /*reference=*/false);
}

void small_matmul_into_reference(const torch::Tensor& x, const std::vector<MatmulTarget>& targets) {
    into_impl(x, targets, SmallMatmulIsa::kPortable, /*reference=*/true);
}

torch::Tensor small_matmul(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           SmallMatmulIsa isa) {
    return matmul_impl(x, w, bias, isa, /*reference=*/false);
}

torch::Tensor small_matmul_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias) {
    return matmul_impl(x, w, bias, SmallMatmulIsa::kPortable, /*reference=*/true);
}

}  // namespace rlpt::kernels
