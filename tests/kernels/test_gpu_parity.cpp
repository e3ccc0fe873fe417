// The same tiny model on the CPU and on the GPU, in fp32: log-probs of one fixed batch agree
// within 1e-4, greedy decoding emits identical tokens, and sampled output does not depend on
// the slot a sequence is decoded in (on the GPU, as tests/unit checks on the CPU). Skipped
// without a GPU (label gpu; scripts/gpu_check.sh runs it on a GPU node).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpu_test_util.h"

#include "rlpt/engine/policy_ops.h"
#include "rlpt/kernels/logprob.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"

namespace rlpt {
namespace {

using rlpt::testing::gpu_usable;

std::vector<std::vector<int64_t>> prompts() {
    return {{5, 17, 3, 44, 90}, {1, 2}, {60, 61, 62, 63, 64, 65, 66, 67}, {9}, {5, 17, 3, 44, 90}, {33, 71, 8}};
}

struct Twins {
    std::shared_ptr<model::CausalLM> cpu, gpu;
};

Twins twins() {
    Twins t;
    t.cpu = model::make_random_causal_lm(model::tiny_model_args(model::ModelFamily::kQwen2, 97), 1234, torch::kFloat32,
                                         torch::kCPU);
    t.gpu = model::clone_causal_lm(*t.cpu, torch::kFloat32, torch::Device(torch::kCUDA, 0));
    return t;
}

TEST(GpuParity, LogProbsOfOneBatchMatchTheCpuWithin1e4) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    torch::NoGradGuard no_grad;
    Twins m = twins();
    rollout::SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 12;
    const auto ps = prompts();
    const std::vector<uint64_t> seeds(ps.size(), 7);
    const auto out = rollout::generate(*m.cpu, ps, seeds, p);
    engine::SequenceBatch seq{out.input_ids, out.attention_mask, out.position_ids, out.responses.size(1)};
    const auto cpu = engine::compute_log_probs(*m.cpu, seq, 0.8, true);
    const torch::Device cuda(torch::kCUDA, 0);
    engine::SequenceBatch dseq{seq.input_ids.to(cuda), seq.attention_mask.to(cuda), seq.position_ids.to(cuda),
                               seq.response_length};
    const auto gpu = engine::compute_log_probs(*m.gpu, dseq, 0.8, true);
    ASSERT_TRUE(gpu.log_probs.is_cuda());
    const auto mask = out.response_mask.to(torch::kBool);
    const double lp_err = (gpu.log_probs.cpu() - cpu.log_probs).abs().masked_select(mask).max().item<double>();
    const double ent_err = (gpu.entropy.cpu() - cpu.entropy).abs().masked_select(mask).max().item<double>();
    EXPECT_LE(lp_err, 1e-4);
    EXPECT_LE(ent_err, 1e-4);
}

TEST(GpuParity, GreedyTokensAreIdentical) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    Twins m = twins();
    rollout::SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 24;
    const auto ps = prompts();
    const std::vector<uint64_t> seeds(ps.size(), 7);
    const auto cpu = rollout::generate(*m.cpu, ps, seeds, p);
    const auto gpu = rollout::generate(*m.gpu, ps, seeds, p);
    EXPECT_TRUE(torch::equal(cpu.responses, gpu.responses)) << cpu.responses << "\n" << gpu.responses;
    const auto mask = cpu.response_mask.to(torch::kBool);
    EXPECT_LE((cpu.rollout_log_probs - gpu.rollout_log_probs).abs().masked_select(mask).max().item<double>(), 1e-4);
}

TEST(GpuParity, SampledOutputDoesNotDependOnTheSlot) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    Twins m = twins();
    rollout::SamplingParams p;
    p.temperature = 1.0;
    p.top_p = 0.9;
    p.max_new_tokens = 16;
    const auto ps = prompts();
    std::vector<uint64_t> seeds;
    for (size_t i = 0; i < ps.size(); ++i) seeds.push_back(1000 + i);
    // All six in one batch vs two slots (sequences refilled into freed slots, other neighbours).
    const auto wide = rollout::generate(*m.gpu, ps, seeds, p, rollout::BatchLimits(6));
    const auto narrow = rollout::generate(*m.gpu, ps, seeds, p, rollout::BatchLimits(2));
    EXPECT_TRUE(torch::equal(wide.responses, narrow.responses)) << wide.responses << "\n" << narrow.responses;
}

}  // namespace
}  // namespace rlpt
