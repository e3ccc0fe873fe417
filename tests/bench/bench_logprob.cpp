// Fused log-prob + entropy (CPU reference, the production CPU path) against unfused torch:
//   forward  unfused: lsm = log_softmax(z / T); logp = lsm.gather(label); H = −(exp(lsm)·lsm).sum
//   backward unfused: autograd through the above; fused: logprob_backward.
// Checks the two agree first, then times warm-up + timed iterations (median) and prints a table
// plus one JSON line per shape. GB/s counts the compulsory traffic: the logits once for the
// forward; logits read + grad_logits written for the backward.
// Usage: rlpt_bench_logprob [iters [N V]] (default 5 iterations over a fixed set of shapes).
// Threads: LibTorch's intra-op pool (OMP_NUM_THREADS).

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/kernels/logprob.h"

namespace {

// Median time of `timed(setup())` over iters runs after one warm-up; setup is not timed.
template <class S, class F>
double median_ms(int iters, S&& setup, F&& timed) {
    timed(setup());
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
        auto arg = setup();
        const auto t0 = std::chrono::steady_clock::now();
        timed(arg);
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

template <class F>
double median_ms(int iters, F&& f) {
    return median_ms(
        iters, [] { return 0; }, [&](int) { f(); });
}

struct Unfused {
    torch::Tensor logp, entropy;
};

Unfused unfused(const torch::Tensor& logits, const torch::Tensor& labels, double temperature) {
    const torch::Tensor lsm = torch::log_softmax(logits.to(torch::kFloat) / temperature, -1);
    return {lsm.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(lsm.exp() * lsm).sum(-1)};
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
    return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    const double temperature = 0.9;
    struct Shape {
        int64_t n, v;
        torch::ScalarType dtype;
    };
    std::vector<Shape> shapes = {{4096, 1000, torch::kFloat},
                                 {512, 32000, torch::kFloat},
                                 {512, 32000, torch::kBFloat16},
                                 {128, 151936, torch::kFloat},
                                 {128, 151936, torch::kBFloat16}};
    if (argc > 3) {
        const int64_t n = std::atoll(argv[2]), v = std::atoll(argv[3]);
        if (n < 1 || v < 1) {
            std::fprintf(stderr, "usage: %s [iters [N V]] with N, V >= 1\n", argv[0]);
            return 2;
        }
        shapes = {{n, v, torch::kFloat}, {n, v, torch::kBFloat16}};
    }
    std::printf("rlpt %s, %d threads, %d timed iterations (median), T = %.2f\n", RLPT_GIT_SHA, torch::get_num_threads(),
                iters, temperature);
    std::printf("%6s %7s %5s | %10s %10s %7s %7s | %10s %10s %7s %7s | %9s %9s\n", "N", "V", "dtype", "fwd fused",
                "unfused", "GB/s", "speedup", "bwd fused", "unfused", "GB/s", "speedup", "max|dlogp|", "max|dgrad|");
    std::vector<std::string> json;
    for (const Shape& s : shapes) {
        torch::manual_seed(0);
        const torch::Tensor logits = (torch::randn({s.n, s.v}) * 3).to(s.dtype);
        const torch::Tensor labels = torch::randint(0, s.v, {s.n}, torch::kLong);
        const torch::Tensor wl = torch::randn({s.n}), wh = torch::randn({s.n});

        // Correctness first.
        const auto f = rlpt::kernels::logprob_forward(logits, labels, temperature, true);
        const Unfused u = unfused(logits, labels, temperature);
        const double dlogp = std::max(max_abs_diff(f.logp, u.logp), max_abs_diff(f.entropy, u.entropy));
        const torch::Tensor x = logits.detach().clone().requires_grad_(true);
        const Unfused ux = unfused(x, labels, temperature);
        ((ux.logp * wl).sum() + (ux.entropy * wh).sum()).backward();
        const torch::Tensor g = rlpt::kernels::logprob_backward(logits, labels, f.lse, f.entropy, wl, wh, temperature);
        const double dgrad = max_abs_diff(g, x.grad());

        const double fwd_fused =
            median_ms(iters, [&] { rlpt::kernels::logprob_forward(logits, labels, temperature, true); });
        const double fwd_unfused = median_ms(iters, [&] {
            torch::NoGradGuard no_grad;
            unfused(logits, labels, temperature);
        });
        const double bwd_fused = median_ms(iters, [&] {
            rlpt::kernels::logprob_backward(logits, labels, f.lse, f.entropy, wl, wh, temperature);
        });
        // Unfused backward: autograd through the unfused graph (building the graph is not timed).
        const double bwd_unfused = median_ms(
            iters,
            [&] {
                const torch::Tensor xi = logits.detach().requires_grad_(true);
                const Unfused ui = unfused(xi, labels, temperature);
                return (ui.logp * wl).sum() + (ui.entropy * wh).sum();
            },
            [](const torch::Tensor& loss) { loss.backward(); });
        const double bytes = double(s.n) * double(s.v) * double(c10::elementSize(s.dtype));
        const double fwd_gbs = bytes / (fwd_fused * 1e6);
        const double bwd_gbs = 2.0 * bytes / (bwd_fused * 1e6);
        const char* dt = s.dtype == torch::kFloat ? "fp32" : "bf16";
        std::printf("%6lld %7lld %5s | %8.2fms %8.2fms %7.2f %6.1fx | %8.2fms %8.2fms %7.2f %6.1fx | %9.2e %9.2e\n",
                    (long long)s.n, (long long)s.v, dt, fwd_fused, fwd_unfused, fwd_gbs, fwd_unfused / fwd_fused,
                    bwd_fused, bwd_unfused, bwd_gbs, bwd_unfused / bwd_fused, dlogp, dgrad);
        char line[512];
        std::snprintf(line, sizeof line,
                      "{\"bench\":\"logprob\",\"git\":\"%s\",\"device\":\"cpu\",\"threads\":%d,"
                      "\"n\":%lld,\"v\":%lld,\"dtype\":\"%s\",\"fwd_fused_ms\":%.3f,"
                      "\"fwd_unfused_ms\":%.3f,\"bwd_fused_ms\":%.3f,\"bwd_unfused_ms\":%.3f,"
                      "\"fwd_gbs\":%.3f,\"bwd_gbs\":%.3f,\"max_diff_fwd\":%.3e,\"max_diff_grad\":%.3e}",
                      RLPT_GIT_SHA, torch::get_num_threads(), (long long)s.n, (long long)s.v, dt, fwd_fused,
                      fwd_unfused, bwd_fused, bwd_unfused, fwd_gbs, bwd_gbs, dlogp, dgrad);
        json.emplace_back(line);
        if (dlogp > 1e-3 || dgrad > 1e-2) {
            std::fprintf(stderr, "fused and unfused disagree for N=%lld V=%lld %s\n", (long long)s.n, (long long)s.v,
                         dt);
            return 1;
        }
    }
    for (const auto& l : json) std::printf("%s\n", l.c_str());
    return 0;
}
