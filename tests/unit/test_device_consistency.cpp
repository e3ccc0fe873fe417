// Device contracts below the role handlers, checked without a GPU: one input on the `meta`
// device among host tensors stands for a tensor left on the host among GPU ones (or the
// reverse). Every function must refuse the mix with a ValueError naming the tensor and both
// devices, before torch's own "expected all tensors on the same device" (a c10::Error naming
// neither) or a raw read of device memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "rlpt/algo/advantage.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/kl.h"
#include "rlpt/algo/masked_ops.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/algo/rollout_correction.h"
#include "rlpt/algo/value_loss.h"
#include "rlpt/batch/batch.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/model/value_model.h"
#include "test_algo_util.h"
#include "test_engine_helpers.h"

namespace rlpt {
namespace {

using algo::test::expect_value_error;

torch::Tensor on_meta(const torch::Tensor& t) { return torch::empty_like(t, t.options().device(torch::kMeta)); }

// [2, 4] log-probs, advantages and a mask with a valid token in every row.
struct Inputs {
    torch::Tensor lp = torch::tensor({{-1.0, -2.0, -0.5, -1.5}, {-0.7, -0.2, -3.0, -1.0}});
    torch::Tensor old_lp = lp + 0.1;
    torch::Tensor adv = torch::tensor({{1.0, -1.0, 0.5, 2.0}, {-0.5, 0.3, 1.0, -2.0}});
    torch::Tensor mask = torch::tensor({{1, 1, 1, 0}, {1, 1, 0, 0}});
    algo::PolicyLossInputs policy() const {
        algo::PolicyLossInputs in;
        in.log_prob = lp;
        in.old_log_prob = old_lp;
        in.advantages = adv;
        in.response_mask = mask;
        in.generator = at::detail::createCPUGenerator(1);
        return in;
    }
};

TEST(DeviceConsistency, EveryPolicyLossRefusesInputsOnTwoDevices) {
    const Inputs x;
    algo::PolicyLossConfig cfg;
    cfg.dro_beta = 0.1;
    for (const auto& name : algo::policy_loss_names()) {
        auto in = x.policy();
        in.advantages = on_meta(x.adv);
        expect_value_error([&] { algo::compute_policy_loss(name, in, cfg); }, "'advantages' is on meta");
        in = x.policy();
        in.response_mask = on_meta(x.mask);
        expect_value_error([&] { algo::compute_policy_loss(name, in, cfg); }, "'response_mask' is on meta");
        in = x.policy();
        in.rollout_is_weights = on_meta(x.lp);
        expect_value_error([&] { algo::compute_policy_loss(name, in, cfg); }, "'rollout_is_weights' is on meta");
    }
}

TEST(DeviceConsistency, LossTermsRefuseInputsOnTwoDevices) {
    const Inputs x;
    const auto meta_mask = on_meta(x.mask);
    expect_value_error([&] { algo::agg_loss(x.lp, meta_mask, algo::AggMode::kTokenMean, {}); },
                       "'loss_mask' is on meta");
    expect_value_error([&] { algo::masked_mean(x.lp, meta_mask); }, "'mask' is on meta");
    expect_value_error([&] { algo::kl_penalty(x.lp, on_meta(x.old_lp), "low_var_kl"); },
                       "'ref_log_prob' is on meta but 'log_prob' is on cpu");
    expect_value_error(
        [&] { algo::compute_value_loss(x.lp, on_meta(x.old_lp), x.lp, x.mask, 0.5, algo::AggMode::kTokenMean, {}); },
        "'returns' is on meta");
    expect_value_error(
        [&] {
            algo::logprobs_from_logits(torch::zeros({2, 5}), on_meta(torch::zeros({2}, torch::kLong)));
        },
        "'labels' is on meta");
    algo::ActorLossInputs a;
    a.policy = x.policy();
    a.entropy = on_meta(x.lp);
    algo::ActorLossConfig ac;
    expect_value_error([&] { algo::compute_actor_loss(a, ac); }, "'entropy' is on meta");
    algo::RolloutCorrectionParams rc;
    expect_value_error([&] { algo::compute_rollout_correction(x.old_lp, on_meta(x.lp), x.mask, rc); },
                       "'rollout_log_prob' is on meta");
}

TEST(DeviceConsistency, AdvantageEstimatorsRefuseInputsOnTwoDevices) {
    const Inputs x;
    const auto index = torch::tensor({0, 0}, torch::kLong);
    expect_value_error([&] { algo::compute_grpo(x.adv, on_meta(x.mask), index); }, "'response_mask' is on meta");
    expect_value_error([&] { algo::compute_gae(x.adv, on_meta(x.lp), x.mask); }, "'values' is on meta");
    expect_value_error([&] { algo::compute_remax(x.adv, x.mask, on_meta(torch::zeros({2}, torch::kDouble))); },
                       "'reward_baselines' is on meta");
    expect_value_error(
        [&] {
            algo::compute_gdpo(on_meta(torch::zeros({3, 2}, torch::kDouble)), x.mask, index, {});
        },
        "'reward_components' is on meta");
    expect_value_error([&] { algo::compute_optimal_token_baseline(x.adv, x.mask, index, x.lp, on_meta(x.lp), true); },
                       "'sum_pi_squared' is on meta");
}

TEST(DeviceConsistency, PolicyOpsRefuseInputsOffTheModelsDevice) {
    auto m = model::make_random_causal_lm(engine::testing::tiny_args(), 5);
    const auto s = engine::testing::make_sequences(2, 3, 4, 20, 1);
    torch::NoGradGuard no_grad;
    for (const char* name : {"input_ids", "attention_mask", "position_ids"}) {
        auto bad = s;
        torch::Tensor& t = std::string(name) == "input_ids"        ? bad.input_ids
                           : std::string(name) == "attention_mask" ? bad.attention_mask
                                                                   : bad.position_ids;
        t = on_meta(t);
        const std::string want = fmt::format("{} is on meta but the model is on cpu", name);
        expect_value_error([&] { engine::compute_log_probs(*m, bad, 1.0, false); }, "compute_log_probs: " + want);
        expect_value_error([&] { m->forward_hidden(bad.input_ids, bad.attention_mask, bad.position_ids); },
                           "forward: " + want);
    }
    // The loss mask meets the model's hidden states in an index_select: checked before.
    auto loss_mask = torch::zeros_like(s.input_ids);
    loss_mask.narrow(1, 3, 4).fill_(1);
    expect_value_error(
        [&] { engine::sft_token_nll_sum(*m, s.input_ids, s.attention_mask, s.position_ids, on_meta(loss_mask)); },
        "sft_token_nll_sum: loss_mask is on meta");
    auto vm = model::value_model_from_policy(*m, torch::kFloat32, torch::kCPU, model::ValueHeadInit::kZero);
    auto bad = s;
    bad.attention_mask = on_meta(s.attention_mask);
    expect_value_error([&] { engine::compute_values(*vm, bad); }, "compute_values: attention_mask is on meta");
    expect_value_error([&] { engine::compute_sequence_scores(*vm, bad); },
                       "compute_sequence_scores: attention_mask is on meta");
}

TEST(DeviceConsistency, BatchConcatRefusesAColumnOnTwoDevices) {
    Batch a(2), b(1);
    a.set("x", torch::zeros({2, 3}));
    b.set("x", torch::empty({1, 3}, torch::TensorOptions().device(torch::kMeta)));
    expect_value_error([&] { Batch::concat({a, b}); }, "column 'x' is on meta in part 1 but on cpu in part 0");
    // Indices on one device select columns on another (each column stays where it is).
    Batch c(3);
    c.set("y", torch::arange(3));
    EXPECT_TRUE(torch::equal(c.index(torch::tensor({2, 0})).at("y"), torch::tensor({2, 0}, torch::kLong)));
}

}  // namespace
}  // namespace rlpt
