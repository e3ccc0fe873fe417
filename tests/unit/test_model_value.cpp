#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "rlpt/model/safetensors.h"
#include "rlpt/model/value_model.h"
#include "test_model_helpers.h"
#include "test_tolerance.h"

using namespace rlpt::model;
using rlpt::model::testing::expect_error;
using rlpt::model::testing::left_padded;
using rlpt::model::testing::TempDir;

TEST(ValueModel, InitFromPolicyCopiesBackboneAndStartsHeadAsDocumented) {
    TempDir dir("value");
    auto policy = make_random_causal_lm(tiny_model_args(ModelFamily::kLlama, 30), 8);
    save_pretrained(*policy, dir.str());
    auto b = left_padded({{1, 2, 3, 4}, {5, 6}});
    torch::NoGradGuard ng;
    auto hidden = policy->forward_hidden(b.ids, b.mask, b.pos);

    for (bool from_disk : {false, true}) {
        auto zero = from_disk ? value_model_from_policy_checkpoint(dir.str(), torch::kFloat32, torch::kCPU,
                                                                   ValueHeadInit::kZero)
                              : value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kZero);
        EXPECT_EQ(zero->args().architecture(), "LlamaForTokenClassification");
        EXPECT_TRUE(torch::equal(zero->forward_hidden(b.ids, b.mask, b.pos), hidden));
        auto v = zero->forward_values(b.ids, b.mask, b.pos);
        EXPECT_EQ(v.sizes(), (std::vector<int64_t>{2, 4}));
        EXPECT_EQ(v.scalar_type(), torch::kFloat32);
        EXPECT_TRUE(torch::equal(v, torch::zeros({2, 4})));
        // Backbone copied, not shared.
        EXPECT_NE(zero->backbone().embed_weight().data_ptr(), policy->backbone().embed_weight().data_ptr());

        auto normal =
            from_disk
                ? value_model_from_policy_checkpoint(dir.str(), torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3)
                : value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3);
        // N(0, 0.02²) draws: the std of `hidden` of them within kStatSigmas standard errors.
        const auto head = normal->score_weight();
        EXPECT_NEAR(head.std().item<float>(), 0.02, rlpt::tol::std_tolerance(0.02, head.numel()));
        EXPECT_TRUE(torch::equal(normal->score_bias(), torch::zeros({1})));
        // The head is a dot product over hidden_size terms, summed here by another kernel: within
        // 2·γ_hidden(u32)·Σ|terms| of each other.
        auto expected = torch::matmul(hidden, head.t()).squeeze(-1);
        const auto sum_abs = torch::matmul(hidden.abs(), head.abs().t()).squeeze(-1);
        EXPECT_TRUE((normal->forward_values(b.ids, b.mask, b.pos) - expected)
                        .abs()
                        .le(rlpt::tol::fp32_order_bound(head.numel()) * sum_abs)
                        .all()
                        .item<bool>());
    }
    // Same seed, same head; different seed, different head.
    auto h1 = value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3)->score_weight();
    auto h2 = value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3)->score_weight();
    auto h3 = value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 4)->score_weight();
    EXPECT_TRUE(torch::equal(h1, h2));
    EXPECT_FALSE(torch::equal(h1, h3));
}

TEST(ValueModel, SaveLoadRoundTripWritesTokenClassificationConfig) {
    TempDir dir("value");
    auto policy = make_random_causal_lm(tiny_model_args(ModelFamily::kQwen2, 30), 8);
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        auto vm = value_model_from_policy(*policy, dtype, torch::kCPU, ValueHeadInit::kNormal, 1);
        {
            torch::NoGradGuard ng;
            vm->score_bias().fill_(0.5);
        }
        save_value_model(*vm, dir.str(), /*max_shard_bytes=*/30000);
        auto cfg = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
        EXPECT_EQ(cfg["architectures"][0], "Qwen2ForTokenClassification");
        EXPECT_EQ(cfg["num_labels"], 1);
        EXPECT_EQ(cfg["id2label"]["0"], "LABEL_0");
        auto ck = SafetensorsCheckpoint::open(dir.str());
        EXPECT_EQ(ck.info("score.weight").shape, (std::vector<int64_t>{1, 64}));
        EXPECT_EQ(ck.info("score.bias").shape, (std::vector<int64_t>{1}));
        EXPECT_FALSE(ck.contains("lm_head.weight"));

        auto loaded = load_value_model(dir.str(), dtype);
        auto p = vm->named_parameters(), q = loaded->named_parameters();
        ASSERT_EQ(p.size(), q.size());
        for (const auto& kv : p) EXPECT_TRUE(torch::equal(kv.value(), q[kv.key()])) << kv.key();
    }
}

TEST(ValueModel, LoadsSequenceClassificationRewardModelsWithoutBias) {
    TempDir dir("value");
    auto args = value_model_args(tiny_model_args(ModelFamily::kLlama, 30));
    args.head = ModelHead::kSequenceClassification;
    ValueModel rm(args);
    rm.init_weights(6);
    EXPECT_FALSE(rm.score_bias().defined());
    save_value_model(rm, dir.str());
    auto cfg = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
    EXPECT_EQ(cfg["architectures"][0], "LlamaForSequenceClassification");
    auto loaded = load_value_model(dir.str());
    EXPECT_EQ(loaded->args().head, ModelHead::kSequenceClassification);
    EXPECT_TRUE(torch::equal(loaded->score_weight(), rm.score_weight()));
    auto b = left_padded({{1, 2, 3}, {4}});
    torch::NoGradGuard ng;
    auto expected = torch::matmul(rm.forward_hidden(b.ids, b.mask, b.pos), rm.score_weight().t()).squeeze(-1);
    EXPECT_TRUE(torch::equal(loaded->forward_values(b.ids, b.mask, b.pos), expected));
}

TEST(ValueModel, ErrorsNameTheProblem) {
    TempDir dir("value");
    auto policy = make_random_causal_lm(tiny_model_args(ModelFamily::kQwen2, 30), 8);
    save_pretrained(*policy, dir.str());
    expect_error<rlpt::ConfigError>([&] { load_value_model(dir.str()); },
                                    {"is a causal LM", "value_model_from_policy_checkpoint"});
    auto vm = value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kZero);
    save_value_model(*vm, dir.str());
    expect_error<rlpt::ConfigError>(
        [&] { value_model_from_policy_checkpoint(dir.str(), torch::kFloat32, torch::kCPU, ValueHeadInit::kZero); },
        {"not a policy"});
    // A value checkpoint without its head is incomplete.
    NamedTensors kept;
    {
        auto f = SafetensorsFile::open(dir.file("model.safetensors"));
        for (const auto& n : f.names())
            if (n != "score.bias") kept.emplace_back(n, f.get(n).clone());
    }
    save_safetensors(dir.file("model.safetensors"), kept);
    expect_error<rlpt::IoError>([&] { load_value_model(dir.str()); }, {"loading value model", "'score.bias'"});
    expect_error<rlpt::ValueError>([&] { ValueModel bad(tiny_model_args(ModelFamily::kQwen2, 30)); },
                                   {"classification config"});
}
