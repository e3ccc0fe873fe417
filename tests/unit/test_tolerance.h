#pragma once
// Numeric tolerances derived from the arithmetic, never tuned to one CPU (issue 29).
//
// Two correct computations of one quantity differ by rounding only: the order of their sums
// (BLAS/oneDNN blocking, SIMD width, the MPI reduction tree, tensor-parallel partial sums) and
// the precision each operation rounds to. Every tolerance of a numerics test is built here from
//   * the unit roundoff u = eps/2 of a type (2^-8 bfloat16, 2^-24 float32, 2^-53 float64):
//     rounding to nearest moves a value by at most u·|value|;
//   * the forward error bound of a sum or dot product of n terms, γ_{n-1}·Σ|terms| in any order
//     (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1), so two orders
//     differ by at most twice that; a computation through several sums counts their terms;
//   * bounds of the algorithm itself (Adam's first step moves an element by less than lr);
// times a scale the test names (a magnitude, a norm). Deep computations (a transformer) are
// bounded to first order: the errors of the sums along a path add, each relative to the
// magnitudes it is summed at, hence max(1, max|ref|) as the scale of such comparisons.
// A check that cannot be bounded per element by something that still catches bugs states the
// per-element bound that holds and adds an aggregate one (rms_rounding_bound).
// tests/CMakeLists.txt runs these tests again on other kernels (numerics_other_kernels_*), so a
// tolerance that only fits one rounding family fails in CI.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace rlpt::tol {

// Unit roundoff u = eps/2 = 2^-p for p significand bits (the implicit bit included).
constexpr double kUnitRoundoffFp64 = 0x1p-53;
constexpr double kUnitRoundoffFp32 = 0x1p-24;
constexpr double kUnitRoundoffBf16 = 0x1p-8;

inline double unit_roundoff(c10::ScalarType t) {
    switch (t) {
        case c10::ScalarType::Double: return kUnitRoundoffFp64;
        case c10::ScalarType::Float: return kUnitRoundoffFp32;
        case c10::ScalarType::BFloat16: return kUnitRoundoffBf16;
        default: throw std::invalid_argument(std::string("unit_roundoff: no bound for ") + c10::toString(t));
    }
}

// γ_n = n·u / (1 − n·u): the relative effect of n roundings in a row. Refused where n·u is not
// small: such a test needs another argument.
inline double gamma(int64_t n, double u) {
    const double nu = static_cast<double>(n) * u;
    if (n < 0 || nu >= 0.5) throw std::invalid_argument("tol::gamma: n·u = " + std::to_string(nu) + " is not small");
    return nu / (1.0 - nu);
}

// Two computations that differ in the order of `terms` summed terms: at most 2·γ_terms relative to
// the magnitudes summed.
inline double order_bound(int64_t terms, double u) { return 2.0 * gamma(terms, u); }
inline double fp32_order_bound(int64_t terms) { return order_bound(terms, kUnitRoundoffFp32); }

// x·wᵀ (+ b), x [..., K], w [N, K], accumulated in float32 in any order (every instruction set,
// every BLAS): within γ_{K+1}(u32)·(|x|·|w|ᵀ + |b|) of the exact value, element-wise (float64).
inline torch::Tensor matmul_error_bound(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) {
    auto sum_abs = torch::matmul(x.detach().to(torch::kFloat64).abs(), w.detach().to(torch::kFloat64).abs().t());
    if (b.defined()) sum_abs = sum_abs + b.detach().to(torch::kFloat64).abs();
    return sum_abs * gamma(w.size(1) + 1, kUnitRoundoffFp32);
}

// ---- transformers ------------------------------------------------------------------------------
// `Args` is model::ModelArgs (a template keeps this header free of the model headers).

// The terms one log-prob sums along its longest path: per layer the two RMSNorms, q/k/v, the
// scores (head_dim), attention times V (seq_len), o_proj, gate/up and down (and with q/k norms,
// Qwen3, their mean over head_dim); then the final norm, the LM head and the log-softmax over the
// vocabulary.
template <class Args>
int64_t transformer_logit_terms(const Args& a, int64_t seq_len) {
    const int64_t per_layer =
        2 * a.hidden_size + a.hidden_size + a.head_dim + seq_len + a.num_attention_heads * a.head_dim + a.hidden_size +
        a.intermediate_size + (a.qk_norm ? a.head_dim : 0) +
        // a sparse layer: the router's matmul and softmax, an expert's
        // down projection and the sum over the k choices
        (a.num_experts > 0 ? a.hidden_size + a.num_experts + a.moe_intermediate_size + a.num_experts_per_tok : 0);
    return a.num_hidden_layers * per_layer + 2 * a.hidden_size + a.vocab_size;
}

// A parameter gradient retraces that path backwards and sums over every token of the step
// (micro-batches and DP ranks included).
template <class Args>
int64_t transformer_grad_terms(const Args& a, int64_t seq_len, int64_t tokens) {
    return 2 * transformer_logit_terms(a, seq_len) + tokens;
}

// bfloat16 with float32 accumulation (LibTorch's and oneDNN's matmuls): the sums are float32
// accurate and each operation rounds its output to bfloat16 once, so those roundings dominate.
// Operations rounding along the longest path: per layer the two norms, q/k/v, the scores, the
// softmax, the attention output, o_proj, two residual adds, gate, up, the activation, its
// product with up and down (14); then the final norm, the LM head and the log-softmax. A
// backward retraces the path and rounds the weight gradient once more.
constexpr int64_t kBf16RoundingsPerLayer = 14;
inline int64_t transformer_bf16_roundings(int64_t layers) { return layers * kBf16RoundingsPerLayer + 3; }

// Two computations through R roundings to bfloat16 each: per element within 2·γ_R(u_bf16)
// relative to the magnitudes along the path (first order). The bound that holds, but loose.
inline double bf16_path_bound(int64_t roundings) { return 2.0 * gamma(roundings, kUnitRoundoffBf16); }

// The aggregate twin of a path bound: R roundings are independent errors of at most u each, so
// their sum has a standard deviation of at most √R·u, and over many elements the RMS difference
// of two computations is at most 2·√R·u relative (variances add; no per-element claim).
inline double rms_rounding_bound(int64_t roundings, double u) {
    return 2.0 * std::sqrt(static_cast<double>(roundings)) * u;
}

// ---- comparisons -------------------------------------------------------------------------------

// max(1, max|ref|): the scale of a first-order bound on values computed at magnitudes ~ |ref|.
inline double scale_of(const torch::Tensor& ref) {
    return std::max(1.0, ref.detach().abs().max().to(torch::kFloat64).item<double>());
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
    return (a.detach().to(torch::kFloat64) - b.detach().to(torch::kFloat64)).abs().max().item<double>();
}

// Root mean square of a − b (float64).
inline double rms_diff(const torch::Tensor& a, const torch::Tensor& b) {
    return (a.detach().to(torch::kFloat64) - b.detach().to(torch::kFloat64)).square().mean().sqrt().item<double>();
}

// |bf16(x) − bf16(y)| <= |x − y| + u·(|x| + |y|): both rounded to nearest. Given the rounded
// values (|x| <= |bf16(x)|/(1 − u)): γ_1(u_bf16)·(|bf16(x)| + |bf16(y)|), element-wise.
inline torch::Tensor bf16_rounding_slack(const torch::Tensor& x, const torch::Tensor& y) {
    return (x.detach().to(torch::kFloat64).abs() + y.detach().to(torch::kFloat64).abs()) * gamma(1, kUnitRoundoffBf16);
}

// ---- sample statistics -------------------------------------------------------------------------
// n independent draws of N(0, σ²): their mean has standard error σ/√n, their standard deviation
// σ/√(2n) (large n). A check at kStatSigmas standard errors fails a correct generator with
// probability 2·Φ(−5) ≈ 6e-7; the draws themselves may differ between CPUs (ATen vectorises
// normal_ per instruction set), so a tolerance fitted to one CPU's draws is not enough.
constexpr double kStatSigmas = 5.0;
inline double mean_tolerance(double sigma, int64_t n) {
    return kStatSigmas * sigma / std::sqrt(static_cast<double>(n));
}
inline double std_tolerance(double sigma, int64_t n) {
    return kStatSigmas * sigma / std::sqrt(2.0 * static_cast<double>(n));
}

// ---- Adam (AdamW) ------------------------------------------------------------------------------
// Step 1 from zero moments: m̂ = g, v̂ = g², so an element moves by lr·g/(|g| + eps): less than lr
// whatever g (weight decay, lr·wd·p, is the same for the same p), and a Lipschitz function of g
// with constant lr/eps. Later steps move an element by at most lr·max(1, (1−β1)/√(1−β2))
// (Kingma & Ba 2015, §2.1), and m̂/(√v̂ + eps) changes relatively by at most twice a relative change
// of every gradient (m̂ is linear in them, √v̂ too).

// Two first steps from the same parameters whose clipped gradients differ by `grad_diff`.
inline torch::Tensor adam_first_step_diff_bound(const torch::Tensor& grad_diff, double lr, double eps) {
    return (grad_diff.detach().to(torch::kFloat64).abs() * (lr / eps)).clamp_max(2.0 * lr);
}

// bfloat16 parameters with float32 masters after one step from the same start, whose clipped
// gradients differ by at most `grad_diff`: Adam's part, the masters' update rounding ~10 times
// each (the same inputs otherwise), and each parameter its master rounded to nearest.
inline torch::Tensor adam_first_step_bf16_bound(const torch::Tensor& grad_diff, const torch::Tensor& got,
                                                const torch::Tensor& want, double lr, double eps) {
    const auto w = want.detach().to(torch::kFloat64);
    return adam_first_step_diff_bound(grad_diff, lr, eps) + 2.0 * gamma(10, kUnitRoundoffFp32) * (w.abs() + lr) +
           bf16_rounding_slack(got, want);
}

// The farthest Adam moves an element over steps with learning rates `lrs`: Σ_t lr_t·max(1,
// (1−β1)/√(1−β2)).
inline double adam_max_travel(const std::vector<double>& lrs, double beta1 = 0.9, double beta2 = 0.999) {
    double sum_lr = 0;
    for (double lr : lrs) sum_lr += lr;
    return sum_lr * std::max(1.0, (1.0 - beta1) / std::sqrt(1.0 - beta2));
}

// Two trajectories of the steps with learning rates `lrs` whose gradients differ by at most
// `grad_rel` relative at every step (first order: the parameters' own differences feed back into
// the gradients at second order): |Δp| <= 2·grad_rel·adam_max_travel.
inline double adam_trajectory_bound(const std::vector<double>& lrs, double grad_rel, double beta1 = 0.9,
                                    double beta2 = 0.999) {
    return 2.0 * grad_rel * adam_max_travel(lrs, beta1, beta2);
}

// The float32 master's own roundings over `steps` steps (the decay, the subtraction, per step),
// relative to |p|, for two computations.
inline double adam_master_rounding(int64_t steps) { return 2.0 * gamma(3 * steps, kUnitRoundoffFp32); }

// |got − want| <= rel·|want| + abs.
struct Bound {
    double rel = 0, abs = 0;
    double at(double want) const { return rel * std::abs(want) + abs; }
};

// Two float32 AdamW computations of the same steps from the same parameters and gradients (the
// fused loop and the tensor ops, or one against a float64 reference: half of it would do): the
// roundings of p itself (adam_master_rounding) plus ~10 roundings computing each step's update,
// relative to the update (adam_max_travel; relative perturbations of g move it by at most as much:
// m̂/(√v̂ + eps) has elasticity <= 1 in a common scale of the gradients).
inline Bound adam_fp32_bound(const std::vector<double>& lrs, double beta1 = 0.9, double beta2 = 0.999) {
    const auto steps = static_cast<int64_t>(lrs.size());
    return {adam_master_rounding(steps),
            2.0 * gamma(10 * steps, kUnitRoundoffFp32) * adam_max_travel(lrs, beta1, beta2)};
}

}  // namespace rlpt::tol
