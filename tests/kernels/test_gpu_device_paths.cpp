// The code below the role handlers with its inputs on a GPU (what the roles get since the
// protocol moves each batch to the role's device): every policy loss and advantage estimator
// gives the CPU's values with its results on the inputs' device (clip_cov draws the same tokens),
// a ZeRO-3 engine gathers a parameter onto its device (the HF export's tensor-parallel all-gather
// reads it there), and, with two GPUs, device memory and kernel launches follow the tensors, not
// the current device. Skipped without a GPU (label gpu; the GPU check runs it).
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpu_test_util.h"

#include <map>
#include <string>

#include "rlpt/algo/advantage.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/engine/param_memory.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/kernels/logprob.h"
#include "rlpt/model/transformer.h"

#if RLPT_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace rlpt {
namespace {

using rlpt::testing::gpus_usable;

const torch::Device kCuda0(torch::kCUDA, 0);

void expect_close(const torch::Tensor& gpu, const torch::Tensor& cpu, double tol, const std::string& what) {
    ASSERT_TRUE(gpu.is_cuda()) << what << " is on " << gpu.device();
    ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
    const double err =
        (gpu.detach().cpu().to(torch::kDouble) - cpu.detach().to(torch::kDouble)).abs().max().item<double>();
    EXPECT_LE(err, tol) << what;
}

// Six rows of eight tokens, three groups of two, every row with at least two valid tokens.
struct Rows {
    torch::Tensor lp, old_lp, adv, mask, rewards, values, sum_pi2, index, baselines, components;
    Rows() {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
        lp = -torch::rand({6, 8}, gen, torch::kFloat32) * 3.0;
        old_lp = lp + (torch::rand({6, 8}, gen, torch::kFloat32) - 0.5) * 0.4;
        adv = torch::randn({6, 8}, gen, torch::kFloat32);
        mask = torch::ones({6, 8}, torch::kInt64);
        for (int64_t i = 0; i < 6; ++i) mask[i].narrow(0, 2 + i, 6 - i).zero_();
        rewards = torch::zeros({6, 8}, torch::kFloat32);
        for (int64_t i = 0; i < 6; ++i) rewards[i][1 + i] = static_cast<float>(i % 3) - 0.5f;
        values = torch::randn({6, 8}, gen, torch::kFloat32);
        sum_pi2 = torch::rand({6, 8}, gen, torch::kFloat32) * 0.5;
        index = torch::tensor({7, 7, 3, 3, 9, 9}, torch::kInt64);
        baselines = torch::randn({6}, gen, torch::kFloat32);
        components = torch::randn({2, 6}, gen, torch::kFloat32);
    }
};

TEST(GpuDevicePaths, EveryPolicyLossMatchesTheCpuWithTheLossOnTheGpu) {
    std::string why;
    if (!gpus_usable(1, &why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const Rows x;
    const auto inputs = [&](const torch::Device& d) {
        algo::PolicyLossInputs in;
        in.log_prob = x.lp.to(d);
        in.old_log_prob = x.old_lp.to(d);
        in.advantages = x.adv.to(d);
        in.response_mask = x.mask.to(d);
        in.rollout_is_weights = (x.lp - x.old_lp).exp().to(d);
        in.generator = at::detail::createCPUGenerator(5);  // a CPU generator for both
        return in;
    };
    algo::PolicyLossConfig cfg;
    cfg.dro_beta = 0.1;
    cfg.clip_cov_ratio = 0.2;  // clip_cov / kl_cov select several tokens out of the 27 valid ones
    cfg.kl_cov_ratio = 0.2;
    cfg.clip_cov_lb = -10.0;
    cfg.clip_cov_ub = 10.0;
    for (const auto& name : algo::policy_loss_names()) {
        const auto cpu = algo::compute_policy_loss(name, inputs(torch::kCPU), cfg);
        const auto gpu = algo::compute_policy_loss(name, inputs(kCuda0), cfg);
        expect_close(gpu.loss, cpu.loss, 1e-5, name + " loss");
        ASSERT_EQ(gpu.metrics.size(), cpu.metrics.size()) << name;
        for (const auto& [k, v] : cpu.metrics) EXPECT_NEAR(gpu.metrics.at(k), v, 1e-5) << name << " " << k;
    }
}

TEST(GpuDevicePaths, EveryAdvantageEstimatorMatchesTheCpuWithItsOutputsOnTheGpu) {
    std::string why;
    if (!gpus_usable(1, &why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const Rows x;
    const auto inputs = [&](const torch::Device& d) {
        algo::AdvantageInputs in;
        in.token_level_rewards = x.rewards.to(d);
        in.response_mask = x.mask.to(d);
        in.values = x.values.to(d);
        in.index = x.index.to(d);
        in.reward_baselines = x.baselines.to(d);
        in.old_log_probs = x.old_lp.to(d);
        in.sum_pi_squared = x.sum_pi2.to(d);
        in.reward_components = x.components.to(d);
        return in;
    };
    for (const auto& name : algo::advantage_estimator_names()) {
        const auto cpu = algo::compute_advantage(name, inputs(torch::kCPU));
        const auto gpu = algo::compute_advantage(name, inputs(kCuda0));
        expect_close(gpu.advantages, cpu.advantages, 1e-5, name + " advantages");
        expect_close(gpu.returns, cpu.returns, 1e-5, name + " returns");
    }
}

TEST(GpuDevicePaths, Zero3GathersAParameterOntoItsDevice) {
    std::string why;
    if (!gpus_usable(1, &why)) GTEST_SKIP() << "GPU test skipped: " << why;
    auto args = model::tiny_model_args(model::ModelFamily::kQwen2, 40);
    auto m = model::make_random_causal_lm(args, 3, torch::kFloat32, kCuda0);
    std::map<std::string, torch::Tensor> before;
    for (const auto& p : m->named_parameters()) before[p.key()] = p.value().detach().clone();
    comm::Communicator none;
    engine::OptimOptions o;
    o.zero_stage = 3;
    engine::TrainEngine eng(m, none, o, 0);
    ASSERT_EQ(eng.num_parameter_tensors(), before.size());
    size_t i = 0;
    for (const auto& p : m->named_parameters()) {
        const auto full = eng.gather_parameter(i++, 0);
        ASSERT_TRUE(full.is_cuda()) << p.key() << " gathered on " << full.device();
        EXPECT_TRUE(torch::equal(full, before.at(p.key()))) << p.key();
    }
    // A forward gathers each layer into freed storage (engine::alloc_storage) on the same device.
    torch::NoGradGuard no_grad;
    auto ids = torch::randint(1, 40, {2, 6}, torch::TensorOptions().dtype(torch::kInt64).device(kCuda0));
    auto mask = torch::ones_like(ids);
    engine::SequenceBatch seq{ids, mask, (mask.cumsum(1) - 1).clamp_min(0), 3};
    const auto lp = engine::compute_log_probs(*m, seq, 1.0, true);
    EXPECT_TRUE(lp.log_probs.is_cuda());
    EXPECT_TRUE(torch::isfinite(lp.log_probs).all().item<bool>());
    eng.release_parameters();
}

#if RLPT_HAVE_CUDA
// Another GPU current than the tensors' one (a thread that never chose its device, or a rank
// bound to another): memory and launches must still go to the tensors' device, and the caller's
// current device must stay what it was.
TEST(GpuDevicePaths, MemoryAndLaunchesFollowTheTensorsNotTheCurrentDevice) {
    std::string why;
    if (!gpus_usable(2, &why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const torch::Device cuda1(torch::kCUDA, 1);
    c10::cuda::set_device(0);
    auto t = torch::arange(1000, torch::TensorOptions().dtype(torch::kFloat32).device(cuda1));
    engine::free_storage(t);
    engine::alloc_storage(t);
    EXPECT_EQ(t.storage().data_ptr().device(), cuda1);
    t.copy_(torch::arange(1000, torch::kFloat32));
    EXPECT_EQ(t.sum().item<double>(), 499500.0);
    EXPECT_EQ(c10::cuda::current_device(), 0);

    auto logits = torch::randn({4, 33}, torch::TensorOptions().device(cuda1)).requires_grad_();
    auto labels = torch::tensor({0, 5, 32, 7}, torch::TensorOptions().dtype(torch::kInt64).device(cuda1));
    auto out = kernels::logprob_entropy(logits, labels, 0.9, true);
    (out.logp.sum() + out.entropy.sum()).backward();
    EXPECT_EQ(c10::cuda::current_device(), 0);
    const auto cpu_logits = logits.detach().cpu().requires_grad_();
    auto ref = kernels::logprob_entropy(cpu_logits, labels.cpu(), 0.9, true);
    (ref.logp.sum() + ref.entropy.sum()).backward();
    expect_close(out.logp, ref.logp, 1e-5, "logp on cuda:1");
    expect_close(logits.grad(), cpu_logits.grad(), 1e-5, "grad on cuda:1");
}
#endif

}  // namespace
}  // namespace rlpt
