// Decode setup: rollout.dtype=bfloat16 (a bfloat16 copy of a float32 policy generates with
// log-probs within a tested tolerance of the float32 model's own on the same tokens, with the
// decode kernels and with the plain LibTorch path; the config key only takes the dtypes it
// documents) and the core count thread defaults derive from (the affinity mask).
#include <gtest/gtest.h>
#include <sched.h>
#include <torch/torch.h>

#include <thread>

#include "rlpt/config/config.h"
#include "rlpt/core/cpu_cores.h"
#include "rlpt/core/error.h"
#include "rlpt/kernels/cpu_features.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"

namespace {

// Max and mean |log p_bf16 - log p_fp32| over the generated tokens of a bfloat16 copy of `fp32`.
std::pair<double, double> bf16_log_prob_error(rlpt::model::CausalLM& fp32, bool decode_kernels) {
    auto bf16 = rlpt::model::clone_causal_lm(fp32, torch::kBFloat16, torch::kCPU);
    bf16->use_decode_kernels(decode_kernels);
    std::vector<std::vector<int64_t>> prompts{{3, 4, 5}, {6, 7, 8, 9, 10, 11}, {13}, {14, 15, 3, 4, 5}};
    std::vector<uint64_t> seeds;
    for (int64_t i = 0; i < 4; ++i) seeds.push_back(rlpt::rollout::sample_seed(5, 0, i));
    rlpt::rollout::SamplingParams p;
    p.max_new_tokens = 12;
    auto out = rlpt::rollout::generate(*bf16, prompts, seeds, p);
    torch::NoGradGuard ng;
    auto logits = fp32.forward_logits(out.input_ids, out.attention_mask, out.position_ids);
    const int64_t pl = out.prompts.size(1), r = out.responses.size(1);
    auto lp = torch::log_softmax(logits.narrow(1, pl - 1, r), -1).gather(2, out.responses.unsqueeze(-1)).squeeze(-1);
    auto diff = (lp - out.rollout_log_probs).abs().mul(out.response_mask);
    const double n = out.response_mask.sum().item<double>();
    EXPECT_GT(n, 0);
    return {diff.max().item<double>(), diff.sum().item<double>() / n};
}

TEST(RolloutDtype, BFloat16LogProbsWithinToleranceOfFloat32) {
    auto a = rlpt::model::tiny_model_args(rlpt::model::ModelFamily::kLlama, 64);
    auto fp32 = rlpt::model::make_random_causal_lm(a, 3, torch::kFloat32);
    // bfloat16 keeps 8 mantissa bits (relative rounding 2^-9 per weight and activation); on
    // this tiny model that moves log-probs by ~1e-3 on average, a few 1e-2 at worst. A bound
    // far above that would not catch a wrong dtype path (e.g. garbage from misread weights).
    for (bool kernels : {true, false}) {
        SCOPED_TRACE(kernels ? "decode kernels" : "LibTorch path");
        const auto [max_err, mean_err] = bf16_log_prob_error(*fp32, kernels);
        EXPECT_LT(max_err, 0.1);
        EXPECT_LT(mean_err, 0.02);
        EXPECT_GT(max_err, 0.0);  // it really ran in bfloat16
    }
    // Where the CPU has no AVX512_BF16 the same tolerance holds: small_matmul widens bfloat16
    // weights in registers on every instruction set (tests/kernels/test_small_matmul.cpp).
    RecordProperty("avx512_bf16", rlpt::kernels::cpu_has_avx512_bf16() ? "yes" : "no");
}

TEST(RolloutDtype, ConfigKey) {
    EXPECT_EQ(rlpt::config_from_yaml("", "x.yaml").rollout.dtype, "auto");
    EXPECT_EQ(rlpt::config_from_yaml("rollout:\n  dtype: bfloat16\n", "x.yaml").rollout.dtype, "bfloat16");
    try {
        rlpt::config_from_yaml("rollout:\n  dtype: float16\n", "x.yaml");
        ADD_FAILURE() << "expected a ConfigError";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("rollout.dtype"), std::string::npos) << e.what();
    }
}

TEST(DecodeThreads, UsableCoresFollowsTheAffinityMask) {
    cpu_set_t saved;
    ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    EXPECT_EQ(rlpt::usable_cores(),
              std::min<int>(CPU_COUNT(&saved), static_cast<int>(std::thread::hardware_concurrency())));
    int first = 0;
    while (!CPU_ISSET(first, &saved)) ++first;
    int last = first;
    while (CPU_ISSET(last + 1, &saved)) ++last;
    if (CPU_COUNT(&saved) == last - first + 1)  // one run of cores: "a-b" (or "a")
        EXPECT_EQ(rlpt::affinity_list(),
                  std::to_string(first) + (last > first ? "-" + std::to_string(last) : std::string()));
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // as mpirun --bind-to core leaves a rank
    EXPECT_EQ(rlpt::usable_cores(), 1);
    EXPECT_EQ(rlpt::affinity_list(), std::to_string(first));  // what the start-up log prints per rank
    ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
}

}  // namespace
