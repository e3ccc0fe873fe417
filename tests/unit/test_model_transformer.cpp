#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "rlpt/model/safetensors.h"
#include "rlpt/model/transformer.h"
#include "test_model_helpers.h"
#include "test_tolerance.h"

using namespace rlpt::model;
using rlpt::model::testing::expect_error;
using rlpt::model::testing::left_padded;
using rlpt::model::testing::TempDir;

namespace {

ModelArgs llama_gqa() {
    auto a = tiny_model_args(ModelFamily::kLlama, 53);
    a.hidden_size = 48;
    a.num_attention_heads = 6;
    a.num_key_value_heads = 2;
    a.head_dim = 10;  // != hidden / heads
    a.intermediate_size = 72;
    a.num_hidden_layers = 3;
    a.validate();
    return a;
}

std::set<std::string> param_names(const torch::nn::Module& m) {
    std::set<std::string> out;
    for (const auto& p : m.named_parameters()) out.insert(p.key());
    return out;
}

// Two fp32 forwards of the same model and tokens that sum in other orders (another batch
// shape, padding, a KV cache): within fp32_order_bound of the terms along a logit's path over
// `seq_len` positions, relative to max(1, max|ref|) (tests/unit/test_tolerance.h).
void expect_same_logits(const torch::Tensor& got, const torch::Tensor& ref, const ModelArgs& a, int64_t seq_len,
                        const std::string& what = "") {
    const double bound = rlpt::tol::fp32_order_bound(rlpt::tol::transformer_logit_terms(a, seq_len));
    EXPECT_LE(rlpt::tol::max_abs_diff(got, ref), bound * rlpt::tol::scale_of(ref)) << what;
}

}  // namespace

TEST(Transformer, ParameterNamesAndShapesAreHuggingFaces) {
    auto a = tiny_model_args(ModelFamily::kQwen2, 40);  // tied, q/k/v bias
    CausalLM qwen(a);
    auto names = param_names(qwen);
    EXPECT_EQ(names.size(), 1 + a.num_hidden_layers * 12 + 1);
    for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "model.layers.1.self_attn.q_proj.weight",
                          "model.layers.1.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
                          "model.layers.0.self_attn.v_proj.bias", "model.layers.0.self_attn.o_proj.weight",
                          "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                          "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
                          "model.layers.0.post_attention_layernorm.weight"})
        EXPECT_TRUE(names.count(n)) << n;
    EXPECT_FALSE(names.count("lm_head.weight"));
    EXPECT_FALSE(names.count("model.layers.0.self_attn.o_proj.bias"));
    EXPECT_EQ(qwen.lm_head_weight().data_ptr(), qwen.backbone().embed_weight().data_ptr());

    auto l = llama_gqa();
    l.qkv_bias = l.o_proj_bias = l.mlp_bias = true;
    CausalLM llama(l);
    auto p = llama.named_parameters();
    EXPECT_EQ(p["lm_head.weight"].sizes(), (std::vector<int64_t>{53, 48}));
    EXPECT_EQ(p["model.layers.2.self_attn.q_proj.weight"].sizes(), (std::vector<int64_t>{60, 48}));
    EXPECT_EQ(p["model.layers.2.self_attn.k_proj.weight"].sizes(), (std::vector<int64_t>{20, 48}));
    EXPECT_EQ(p["model.layers.2.self_attn.o_proj.weight"].sizes(), (std::vector<int64_t>{48, 60}));
    EXPECT_EQ(p["model.layers.2.self_attn.o_proj.bias"].sizes(), (std::vector<int64_t>{48}));
    EXPECT_EQ(p["model.layers.2.mlp.down_proj.weight"].sizes(), (std::vector<int64_t>{48, 72}));
    EXPECT_EQ(p["model.layers.2.mlp.down_proj.bias"].sizes(), (std::vector<int64_t>{48}));
}

TEST(Transformer, InitIsDeterministicAndHuggingFaceStyle) {
    auto a = tiny_model_args(ModelFamily::kQwen2, 40);
    a.pad_token_id = 3;
    auto m1 = make_random_causal_lm(a, 11);
    auto m2 = make_random_causal_lm(a, 11);
    auto m3 = make_random_causal_lm(a, 12);
    auto mb = make_random_causal_lm(a, 11, torch::kBFloat16);
    auto p1 = m1->named_parameters(), p2 = m2->named_parameters(), p3 = m3->named_parameters();
    auto pb = mb->named_parameters();
    for (const auto& kv : p1) {
        EXPECT_TRUE(torch::equal(kv.value(), p2[kv.key()])) << kv.key();
        EXPECT_TRUE(torch::equal(kv.value().to(torch::kBFloat16), pb[kv.key()])) << kv.key();
    }
    EXPECT_FALSE(torch::equal(p1["model.layers.0.mlp.up_proj.weight"], p3["model.layers.0.mlp.up_proj.weight"]));
    EXPECT_TRUE(torch::equal(p1["model.norm.weight"], torch::ones({a.hidden_size})));
    EXPECT_TRUE(torch::equal(p1["model.layers.1.self_attn.q_proj.bias"], torch::zeros({a.hidden_size})));
    EXPECT_TRUE(torch::equal(p1["model.embed_tokens.weight"][3], torch::zeros({a.hidden_size})));
    // N(0, 0.02²) draws (HF's initializer_range): mean and std within kStatSigmas standard errors.
    auto w = p1["model.layers.0.mlp.gate_proj.weight"];
    EXPECT_NEAR(w.mean().item<float>(), 0.0, rlpt::tol::mean_tolerance(0.02, w.numel()));
    EXPECT_NEAR(w.std().item<float>(), 0.02, rlpt::tol::std_tolerance(0.02, w.numel()));
}

TEST(Transformer, LeftPaddedRowsMatchUnpaddedRows) {
    for (auto fam : {ModelFamily::kLlama, ModelFamily::kQwen2}) {
        auto a = fam == ModelFamily::kLlama ? llama_gqa() : tiny_model_args(fam, 53);
        auto m = make_random_causal_lm(a, 5);
        torch::NoGradGuard ng;
        std::vector<std::vector<int64_t>> rows = {{5, 9, 2, 7, 1, 1, 30}, {4, 8}, {12, 3, 3, 50}};
        auto batch = left_padded(rows, /*pad_id=*/0);
        auto logits = m->forward_logits(batch.ids, batch.mask, batch.pos);
        ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, 7, 53}));
        EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
        EXPECT_TRUE(torch::isfinite(logits).all().item<bool>()) << "padded positions must not produce NaN";
        for (size_t r = 0; r < rows.size(); ++r) {
            auto single = left_padded({rows[r]});
            auto ref = m->forward_logits(single.ids, single.mask, single.pos)[0];
            const int64_t n = static_cast<int64_t>(rows[r].size());
            auto got = logits[static_cast<int64_t>(r)].narrow(0, 7 - n, n);
            expect_same_logits(got, ref, a, 7, "row " + std::to_string(r));
        }
    }
}

TEST(Transformer, KvCacheDecodeMatchesFullForwardIncludingDroppedRows) {
    for (auto fam : {ModelFamily::kLlama, ModelFamily::kQwen2}) {
        auto a = fam == ModelFamily::kLlama ? llama_gqa() : tiny_model_args(fam, 53);
        auto m = make_random_causal_lm(a, 9);
        torch::NoGradGuard ng;
        // Full sequences: left-padded prompts followed by 6 generated tokens (no padding after).
        std::vector<std::vector<int64_t>> prompts = {{5, 9, 2, 7}, {4, 8}, {12, 3, 3}, {1}};
        auto p = left_padded(prompts, 0);
        const int64_t tp = p.ids.size(1), steps = 6;
        auto gen = torch::randint(1, 53, {4, steps}, torch::kInt64);
        auto ids = torch::cat({p.ids, gen}, 1);
        auto mask = torch::cat({p.mask, torch::ones({4, steps}, torch::kInt64)}, 1);
        auto pos = (mask.cumsum(1) - 1).clamp_min(0);
        auto full = m->forward_logits(ids, mask, pos);

        KVCache cache = m->make_cache(4, tp + steps);
        auto out = m->forward_logits(p.ids, p.mask, p.pos, &cache);
        EXPECT_EQ(cache.length(), tp);
        // Padded query positions hold garbage that depends on the key count; compare real ones.
        auto real = p.mask.to(torch::kBool).unsqueeze(-1).expand_as(out);
        expect_same_logits(out.masked_select(real), full.narrow(1, 0, tp).masked_select(real), a, tp + steps);
        // rows[i] = original row index of cache row i.
        auto rows = torch::arange(4, torch::kInt64);
        for (int64_t s = 0; s < steps; ++s) {
            if (s == 2) {  // drop original row 1, reorder the rest
                auto keep = torch::tensor({2, 0, 3}, torch::kInt64);
                cache.keep_rows(keep);
                rows = rows.index_select(0, keep);
            }
            if (s == 4) {  // drop what is now row 0 (original 2)
                auto keep = torch::tensor({1, 2}, torch::kInt64);
                cache.keep_rows(keep);
                rows = rows.index_select(0, keep);
            }
            const int64_t t = tp + s;
            auto step_ids = ids.index_select(0, rows).narrow(1, t, 1);
            auto step_mask = mask.index_select(0, rows).narrow(1, 0, t + 1);
            auto step_pos = pos.index_select(0, rows).narrow(1, t, 1);
            auto step = m->forward_logits(step_ids, step_mask, step_pos, &cache);
            ASSERT_EQ(step.sizes(), (std::vector<int64_t>{rows.size(0), 1, 53}));
            auto ref = full.index_select(0, rows).narrow(1, t, 1);
            expect_same_logits(step, ref, a, tp + steps, "step " + std::to_string(s));
        }
        EXPECT_EQ(cache.batch_size(), 2);
        EXPECT_EQ(cache.length(), tp + steps);
        // One more position than reserved overflows with a clear error.
        expect_error<rlpt::ValueError>(
            [&] {
                m->forward_logits(torch::ones({2, 1}, torch::kInt64), torch::ones({2, tp + steps + 1}, torch::kInt64),
                                  torch::ones({2, 1}, torch::kInt64), &cache);
            },
            {"KVCache overflow"});
    }
}

// n samples of a prompt share one prefill: repeat_rows / fork_rows copy the cached prefix, and
// decoding the forked rows gives the logits of decoding separately prefilled rows.
TEST(Transformer, KvCacheForkedRowsDecodeLikeSeparatePrefills) {
    auto m = make_random_causal_lm(llama_gqa(), 4);
    torch::NoGradGuard ng;
    auto p = left_padded({{5, 9, 2, 7}, {4, 8}}, 0);
    const int64_t tp = p.ids.size(1), steps = 3;
    // Reference: every (prompt, sample) row prefilled on its own; 3 samples of prompt 0, 2 of prompt 1.
    auto rows = torch::tensor({0, 0, 0, 1, 1}, torch::kInt64);
    auto gen = torch::randint(1, 53, {5, steps}, torch::kInt64);
    auto ids = torch::cat({p.ids.index_select(0, rows), gen}, 1);
    auto mask = torch::cat({p.mask.index_select(0, rows), torch::ones({5, steps}, torch::kInt64)}, 1);
    auto pos = (mask.cumsum(1) - 1).clamp_min(0);
    auto full = m->forward_logits(ids, mask, pos);

    KVCache cache = m->make_cache(2, tp + steps);
    m->forward_logits(p.ids, p.mask, p.pos, &cache);
    cache.fork_rows(rows);
    EXPECT_EQ(cache.batch_size(), 5);
    EXPECT_EQ(cache.length(), tp);
    for (int64_t s = 0; s < steps; ++s) {
        const int64_t t = tp + s;
        auto step = m->forward_logits(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), pos.narrow(1, t, 1), &cache);
        expect_same_logits(step, full.narrow(1, t, 1), llama_gqa(), tp + steps, "step " + std::to_string(s));
    }
    // repeat_rows(n) is fork_rows of each row n times in a row.
    KVCache twice = m->make_cache(2, tp + 1);
    m->forward_logits(p.ids, p.mask, p.pos, &twice);
    twice.repeat_rows(2);
    EXPECT_EQ(twice.batch_size(), 4);
    auto r = torch::tensor({0, 0, 1, 1}, torch::kInt64);
    auto next = torch::full({4, 1}, 3, torch::kInt64);
    auto next_mask = torch::cat({p.mask.index_select(0, r), torch::ones({4, 1}, torch::kInt64)}, 1);
    auto next_pos = (next_mask.cumsum(1) - 1).narrow(1, tp, 1);
    auto got = m->forward_logits(next, next_mask, next_pos, &twice);
    auto want = m->forward_logits(torch::cat({p.ids.index_select(0, r), next}, 1), next_mask,
                                  (next_mask.cumsum(1) - 1).clamp_min(0));
    expect_same_logits(got, want.narrow(1, tp, 1), llama_gqa(), tp + 1);
    expect_error<rlpt::ValueError>([&] { twice.fork_rows(torch::tensor({4}, torch::kInt64)); }, {"[0, 4)"});
    expect_error<rlpt::ValueError>([&] { twice.repeat_rows(0); }, {"n must be >= 1"});
}

TEST(Transformer, KvCacheRejectsBadRows) {
    auto m = make_random_causal_lm(tiny_model_args(ModelFamily::kQwen2, 20), 1);
    KVCache cache = m->make_cache(3, 8);
    expect_error<rlpt::ValueError>([&] { cache.keep_rows(torch::tensor({0, 3}, torch::kInt64)); }, {"[0, 3)"});
    expect_error<rlpt::ValueError>([&] { cache.keep_rows(torch::tensor({1, 1}, torch::kInt64)); }, {"distinct"});
    expect_error<rlpt::ValueError>([&] { cache.keep_rows(torch::tensor({0.0})); }, {"int64"});
    cache.keep_rows(torch::empty({0}, torch::kInt64));
    EXPECT_EQ(cache.batch_size(), 0);
}

TEST(Transformer, Bf16IsCloseToFp32) {
    // The bf16 model is the fp32 one with every weight rounded to bf16 and every operation's output
    // too: R roundings along a logit's path (the operations' and, per layer, the 7 weight matrices
    // and 2 norm weights they read; the embedding and the head), each at most u_bf16 relative.
    // Per element within γ_R of the fp32 logits (the bound that holds, R·u); in RMS within √R·u
    // (independent roundings; the aggregate that would see a bf16 path bug under R·u). One side:
    // the fp32 model is exact to far below that.
    auto a = llama_gqa();
    auto m32 = make_random_causal_lm(a, 3, torch::kFloat32);
    auto m16 = make_random_causal_lm(a, 3, torch::kBFloat16);
    torch::NoGradGuard ng;
    auto b = left_padded({{5, 9, 2, 7, 1, 1, 30, 4, 4}, {4, 8, 17}});
    auto l32 = m32->forward_logits(b.ids, b.mask, b.pos);
    auto l16 = m16->forward_logits(b.ids, b.mask, b.pos);
    EXPECT_EQ(m16->forward_hidden(b.ids, b.mask, b.pos).scalar_type(), torch::kBFloat16);
    auto real = b.mask.to(torch::kBool).unsqueeze(-1).expand_as(l32);
    const int64_t roundings = rlpt::tol::transformer_bf16_roundings(a.num_hidden_layers) + 9 * a.num_hidden_layers + 2;
    const double u = rlpt::tol::kUnitRoundoffBf16;
    const auto lp32 = torch::log_softmax(l32, -1).masked_select(real),
               lp16 = torch::log_softmax(l16, -1).masked_select(real);
    for (const auto& [x32, x16, what] : {std::make_tuple(l32.masked_select(real), l16.masked_select(real), "logits"),
                                         std::make_tuple(lp32, lp16, "log-probs")}) {
        const double scale = rlpt::tol::scale_of(x32);
        EXPECT_LE(rlpt::tol::max_abs_diff(x16, x32), rlpt::tol::gamma(roundings, u) * scale) << what;
        EXPECT_LE(rlpt::tol::rms_diff(x16, x32), std::sqrt(static_cast<double>(roundings)) * u * scale)
            << what << " (RMS)";
    }
    EXPECT_GT(l32.masked_select(real).abs().max().item<float>(), 0.1f)
        << "logits too small for a meaningful comparison";
}

TEST(Transformer, BackwardReachesEveryParameter) {
    auto m = make_random_causal_lm(llama_gqa(), 4);
    auto b = left_padded({{5, 9, 2, 7}, {4, 8}});
    auto logits = m->forward_logits(b.ids, b.mask, b.pos);
    auto loss = (torch::log_softmax(logits, -1).select(-1, 3) * b.mask).sum();
    loss.backward();
    for (const auto& p : m->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
        EXPECT_GT(p.value().grad().abs().sum().item<float>(), 0.0f) << p.key();
    }
}

TEST(Transformer, ForwardValidatesInputs) {
    auto m = make_random_causal_lm(tiny_model_args(ModelFamily::kQwen2, 20), 1);
    auto ids = torch::ones({2, 3}, torch::kInt64), mask = torch::ones({2, 3}, torch::kInt64);
    auto pos = torch::arange(3, torch::kInt64).repeat({2, 1});
    expect_error<rlpt::ValueError>(
        [&] {
            m->forward_logits(ids, torch::ones({2, 4}), pos);
        },
        {"attention_mask", "[2, 3]"});
    expect_error<rlpt::ValueError>([&] { m->forward_logits(ids * 20, mask, pos); }, {"[0, 20)", "20"});
    expect_error<rlpt::ValueError>([&] { m->forward_logits(ids.to(torch::kInt32), mask, pos); }, {"int64"});
    expect_error<rlpt::ValueError>([&] { m->forward_logits(ids, mask, pos.narrow(1, 0, 2)); }, {"position_ids"});
    KVCache cache = m->make_cache(3, 8);
    expect_error<rlpt::ValueError>([&] { m->forward_logits(ids, mask, pos, &cache); }, {"cache holds 3 rows"});
}

// ---- save / load -------------------------------------------------------------------------

TEST(Transformer, SaveLoadRoundTripIsBitIdentical) {
    TempDir dir("model");
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        for (uint64_t shard : {uint64_t{0}, uint64_t{20000}}) {
            auto a = llama_gqa();
            a.eos_token_ids = {2, 7};
            auto m = make_random_causal_lm(a, 21, dtype);
            save_pretrained(*m, dir.str(), shard);
            EXPECT_EQ(std::filesystem::exists(dir.file("model.safetensors.index.json")), shard != 0);
            auto cfg = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
            EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
            EXPECT_EQ(cfg["torch_dtype"], dtype == torch::kFloat32 ? "float32" : "bfloat16");
            auto loaded = load_pretrained(dir.str(), dtype);
            EXPECT_EQ(loaded->args().eos_token_ids, a.eos_token_ids);
            auto p = m->named_parameters(), q = loaded->named_parameters();
            ASSERT_EQ(p.size(), q.size());
            for (const auto& kv : p) {
                EXPECT_EQ(q[kv.key()].scalar_type(), dtype);
                EXPECT_TRUE(torch::equal(kv.value(), q[kv.key()])) << kv.key();
            }
            // Same file stores the dtype the model had: load it converted to the other dtype.
            auto other = load_pretrained(dir.str(), dtype == torch::kFloat32 ? torch::kBFloat16 : torch::kFloat32);
            EXPECT_TRUE(torch::equal(other->named_parameters()["model.norm.weight"].to(dtype), p["model.norm.weight"]));
        }
    }
}

TEST(Transformer, LoadingErrorsNameTheTensor) {
    TempDir dir("model");
    auto a = tiny_model_args(ModelFamily::kQwen2, 30);
    auto m = make_random_causal_lm(a, 2);
    save_pretrained(*m, dir.str());
    const auto st = dir.file("model.safetensors");
    auto tensors = [&] {
        NamedTensors out;
        auto f = SafetensorsFile::open(st);
        for (const auto& n : f.names()) out.emplace_back(n, f.get(n).clone());
        return out;
    }();
    auto rewrite = [&](NamedTensors t) { save_safetensors(st, t); };

    // Old checkpoints' rotary buffers and a redundant tied lm_head are accepted.
    auto extra = tensors;
    extra.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({8}));
    extra.emplace_back("lm_head.weight", torch::zeros({30, 64}));
    rewrite(extra);
    EXPECT_NO_THROW(load_pretrained(dir.str(), torch::kFloat32));

    auto missing = tensors;
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [](const auto& nt) { return nt.first == "model.layers.1.mlp.up_proj.weight"; }),
                  missing.end());
    rewrite(missing);
    expect_error<rlpt::IoError>([&] { load_pretrained(dir.str()); }, {"loading '" + dir.str() + "'", "missing 1 tensor",
                                                                      "'model.layers.1.mlp.up_proj.weight'"});

    auto misshaped = tensors;
    for (auto& nt : misshaped)
        if (nt.first == "model.layers.0.self_attn.k_proj.bias") nt.second = torch::zeros({31});
    rewrite(misshaped);
    expect_error<rlpt::IoError>([&] { load_pretrained(dir.str()); },
                                {"'model.layers.0.self_attn.k_proj.bias'", "shape [31]", "expects [32]", st});

    auto unexpected = tensors;
    unexpected.emplace_back("model.layers.0.self_attn.o_proj.bias", torch::zeros({64}));
    unexpected.emplace_back("model.layers.7.mlp.up_proj.weight", torch::zeros({2}));
    rewrite(unexpected);
    expect_error<rlpt::IoError>([&] { load_pretrained(dir.str()); },
                                {"2 tensor(s) the model does not", "'model.layers.0.self_attn.o_proj.bias'",
                                 "'model.layers.7.mlp.up_proj.weight'"});

    auto ints = tensors;
    for (auto& nt : ints)
        if (nt.first == "model.norm.weight") nt.second = torch::ones({64}, torch::kInt32);
    rewrite(ints);
    expect_error<rlpt::IoError>([&] { load_pretrained(dir.str()); }, {"'model.norm.weight'", "floating-point"});

    rewrite(tensors);
    auto cfg = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
    cfg["architectures"] = {"GPT2LMHeadModel"};
    std::ofstream(dir.file("config.json")) << cfg.dump();
    expect_error<rlpt::ConfigError>([&] { load_pretrained(dir.str()); }, {"'GPT2LMHeadModel' is not supported"});
    cfg["architectures"] = {"Qwen2ForTokenClassification"};
    cfg["num_labels"] = 1;
    std::ofstream(dir.file("config.json")) << cfg.dump();
    expect_error<rlpt::ConfigError>([&] { load_pretrained(dir.str()); }, {"not a causal LM"});
    std::filesystem::remove(dir.file("config.json"));
    expect_error<rlpt::IoError>([&] { load_pretrained(dir.str()); }, {"config.json"});
}

TEST(Transformer, CloneCopiesAndModuleToKeepsDtypeConsistent) {
    auto m = make_random_causal_lm(llama_gqa(), 31);
    auto c = clone_causal_lm(*m, torch::kFloat32, torch::kCPU);
    auto p = m->named_parameters(), q = c->named_parameters();
    for (const auto& kv : p) {
        EXPECT_TRUE(torch::equal(kv.value(), q[kv.key()])) << kv.key();
        EXPECT_NE(kv.value().data_ptr(), q[kv.key()].data_ptr()) << kv.key();
    }
    c->to(torch::kBFloat16);
    EXPECT_EQ(c->dtype(), torch::kBFloat16);
    EXPECT_EQ(c->make_cache(1, 4).batch_size(), 1);
    TempDir dir("model");
    save_pretrained(*c, dir.str());
    auto cfg = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
    EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
    EXPECT_EQ(SafetensorsFile::open(dir.file("model.safetensors")).info("lm_head.weight").dtype, torch::kBFloat16);
}
