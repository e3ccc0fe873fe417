#pragma once
// Shared by the sampler tests on the CPU (unit/test_device_sampler.cpp) and on the GPU
// (kernels/test_gpu_sampler.cpp): sampling parameters, per-row draws and the rounding bound of a
// log-probability computed by two fp32 softmaxes.
#include <cmath>
#include <cstdint>
#include <vector>

#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout::testing {

constexpr double kUnitRoundoffFp32 = 0x1p-24;

inline SamplingParams sampling(double temperature, double top_p, int64_t top_k, bool greedy = false) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.top_k = top_k;
    p.greedy = greedy;
    return p;
}

// One draw per row: row i uses the stream seeded with seed + i at `counter`.
inline std::vector<double> draws(int64_t b, uint64_t seed, int64_t counter) {
    std::vector<double> u(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) u[static_cast<size_t>(i)] = uniform_draw(seed + static_cast<uint64_t>(i), counter);
    return u;
}

// |Δ log p_y| between two fp32 evaluations of log_softmax(z / T)[y] over V tokens that sum in
// different orders: each sum of V exponentials has relative error <= γ_V (any order, Higham
// §3.1), so the log-sum-exps differ by <= 2·γ_V through the log; the remaining roundings (z/T,
// the max subtraction, exp, division or subtraction, log) are a few u of the magnitudes involved:
// 8·u·(|z_y/T| + |max z/T| + 1).
inline double logp_rounding_bound(int64_t vocab, double zy_over_t, double max_over_t) {
    const double nu = static_cast<double>(vocab) * kUnitRoundoffFp32;
    return 2.0 * nu / (1.0 - nu) + 8.0 * kUnitRoundoffFp32 * (std::abs(zy_over_t) + std::abs(max_over_t) + 1.0);
}

}  // namespace rlpt::rollout::testing
