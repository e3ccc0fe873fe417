// Logits against scripts/reference_forward.py, an independent float64 PyTorch implementation.
// It runs with the Python whose torch provided rlpt's LibTorch (RLPT_TORCH_PYTHON:
// scripts/setup.sh's .venv, with numpy); skipped when that Python lacks torch or numpy (a build
// from a libtorch zip).
// And against Hugging Face transformers itself: tiny random checkpoints it made, with its float64
// logits and greedy decode, and its float64 gradients of one training loss, committed under
// tests/fixtures/hf/ (scripts/make_hf_fixtures.py); these need no Python at test time.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "init_model.h"
#include "rlpt/build_config.h"
#include "rlpt/model/safetensors.h"
#include "rlpt/model/transformer.h"
#include "rlpt/model/value_model.h"
#include "rlpt/rollout/generator.h"
#include "test_model_helpers.h"
#include "test_tolerance.h"

using namespace rlpt::model;
using rlpt::model::testing::Batch;
using rlpt::model::testing::left_padded;
using rlpt::model::testing::TempDir;

namespace {

std::string python() { return RLPT_TORCH_PYTHON[0] != '\0' ? RLPT_TORCH_PYTHON : "python3"; }

// The transformers-made tiny Qwen3 (scripts/make_hf_fixtures.py) and its JSON files.
std::string qwen3_tiny_dir() { return rlpt::model::testing::source_dir() + "/tests/fixtures/hf/qwen3_tiny"; }
nlohmann::json fixture_json(const std::string& path) {
    std::ifstream in(path);
    if (!in.good()) throw std::runtime_error("cannot open fixture " + path);
    return nlohmann::json::parse(in);
}

bool python_torch_available() {
    return std::system((python() + " -c 'import torch, numpy' >/dev/null 2>&1").c_str()) == 0;
}

// Runs the reference on `dir` and returns its output shaped `shape`.
torch::Tensor reference(const std::string& dir, const Batch& b, std::vector<int64_t> shape) {
    nlohmann::json in;
    auto rows = [](const torch::Tensor& t) {
        std::vector<std::vector<int64_t>> r;
        auto c = t.contiguous();
        for (int64_t i = 0; i < c.size(0); ++i)
            r.emplace_back(c[i].data_ptr<int64_t>(), c[i].data_ptr<int64_t>() + c.size(1));
        return r;
    };
    in["input_ids"] = rows(b.ids);
    in["attention_mask"] = rows(b.mask);
    in["position_ids"] = rows(b.pos);
    const std::string in_path = dir + "/ref_input.json", out_path = dir + "/ref_output.bin";
    std::ofstream(in_path) << in.dump();
    const std::string cmd = fmt::format("{} {}/scripts/reference_forward.py {} {} {}", python(),
                                        rlpt::model::testing::source_dir(), dir, in_path, out_path);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out_path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    auto out = torch::empty(shape, torch::kFloat32);
    EXPECT_EQ(bytes.size(), static_cast<size_t>(out.numel()) * 4) << "reference output size";
    if (bytes.size() == static_cast<size_t>(out.numel()) * 4) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
    return out;
}

// Max |a - b| over real (mask = 1) positions; a, b [B, T, ...].
float masked_max_diff(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
    auto m = mask.to(torch::kBool);
    while (m.dim() < a.dim()) m = m.unsqueeze(-1);
    return ((a - b).abs() * m).max().item<float>();
}

// rlpt's fp32 forward against the float64 reference rounded to float32: γ_N(u32) relative to
// max(1, max|ref|) for the N terms along a logit's path (tests/unit/test_tolerance.h), plus the
// reference's own rounding to float32 (u32 relative).
double reference_bound(const ModelArgs& args, int64_t seq_len) {
    return rlpt::tol::gamma(rlpt::tol::transformer_logit_terms(args, seq_len), rlpt::tol::kUnitRoundoffFp32) +
           rlpt::tol::kUnitRoundoffFp32;
}

void check_causal_lm(const ModelArgs& args, uint64_t seed, const Batch& b) {
    TempDir dir("ref");
    auto m = make_random_causal_lm(args, seed, torch::kFloat32);
    {
        // Non-trivial norm weights and biases so every parameter matters, and sharper attention
        // (larger q/k weights) so position encoding errors show in the logits.
        torch::NoGradGuard ng;
        for (auto& p : m->named_parameters()) {
            if (p.key().find("norm") != std::string::npos || p.key().find("bias") != std::string::npos)
                p.value().uniform_(0.5, 1.5);
            if (p.key().find("q_proj.weight") != std::string::npos ||
                p.key().find("k_proj.weight") != std::string::npos)
                p.value().mul_(10.0);
        }
    }
    save_pretrained(*m, dir.str());
    torch::Tensor got;
    {
        torch::NoGradGuard ng;
        got = m->forward_logits(b.ids, b.mask, b.pos);
    }
    auto ref = reference(dir.str(), b, got.sizes().vec());
    const float scale = ref.abs().max().item<float>();
    EXPECT_GT(scale, 0.05f) << "logits too small for a meaningful comparison";
    EXPECT_LT(masked_max_diff(got, ref, b.mask), reference_bound(args, b.ids.size(1)) * rlpt::tol::scale_of(ref))
        << args.architecture() << " (max |logit| " << scale << ")";
}

}  // namespace

class ReferenceForward : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!python_torch_available())
            GTEST_SKIP() << python()
                         << " with torch+numpy is not available (RLPT_TORCH_PYTHON); "
                            "the independent reference forward cannot run";
    }
};

TEST_F(ReferenceForward, LlamaGqaUntiedEmbeddings) {
    auto a = tiny_model_args(ModelFamily::kLlama, 67);
    a.hidden_size = 48;
    a.num_attention_heads = 6;
    a.num_key_value_heads = 2;
    a.head_dim = 12;  // q dim 72 != hidden 48
    a.intermediate_size = 80;
    a.num_hidden_layers = 3;
    a.rope_theta = 500000.0;
    a.rms_norm_eps = 1e-5;
    check_causal_lm(a, 1, left_padded({{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}}));
}

TEST_F(ReferenceForward, LlamaWithAttentionAndMlpBiasesAndLlama3RopeScaling) {
    auto a = tiny_model_args(ModelFamily::kLlama, 61);
    a.qkv_bias = a.o_proj_bias = a.mlp_bias = true;
    a.tie_word_embeddings = true;
    a.rope_scaling.type = RopeScalingType::kLlama3;
    a.rope_scaling.factor = 8.0;
    a.rope_scaling.low_freq_factor = 1.0;
    a.rope_scaling.high_freq_factor = 4.0;
    a.rope_scaling.original_max_position_embeddings = 64;  // small, so all three bands occur for head_dim 16
    a.rope_theta = 10000.0;
    a.validate();
    std::vector<int64_t> row;
    for (int i = 0; i < 40; ++i) row.push_back((i * 7 + 3) % 61);
    check_causal_lm(a, 2, left_padded({row}));
}

TEST_F(ReferenceForward, Qwen2BiasesTiedEmbeddingsLeftPaddedBatch) {
    auto a = tiny_model_args(ModelFamily::kQwen2, 71);
    a.rope_theta = 1000000.0;
    a.num_hidden_layers = 3;
    check_causal_lm(a, 3, left_padded({{10, 20, 30, 40, 50, 60, 70}, {5, 6}, {1, 2, 3, 4}}, /*pad_id=*/0));
}

TEST_F(ReferenceForward, Qwen3QkNormsHeadDimAboveHiddenOverHeadsLeftPaddedBatch) {
    auto a = tiny_model_args(ModelFamily::kQwen3, 73);
    a.head_dim = 24;  // q dim 96 != hidden 64
    a.rope_theta = 1000000.0;
    a.num_hidden_layers = 3;
    check_causal_lm(a, 6, left_padded({{10, 20, 30, 40, 50, 60, 70}, {5, 6}, {1, 2, 3, 4}}, /*pad_id=*/0));
}

TEST_F(ReferenceForward, ValueModelHead) {
    TempDir dir("ref");
    auto policy = make_random_causal_lm(tiny_model_args(ModelFamily::kQwen2, 40), 4);
    auto vm = value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 5);
    {
        torch::NoGradGuard ng;
        vm->score_bias().fill_(0.25);
    }
    save_value_model(*vm, dir.str());
    auto b = left_padded({{1, 2, 3, 4, 5}, {7, 8}});
    torch::Tensor got;
    {
        torch::NoGradGuard ng;
        got = vm->forward_values(b.ids, b.mask, b.pos);
    }
    auto ref = reference(dir.str(), b, {2, 5});
    EXPECT_LT(masked_max_diff(got, ref, b.mask), reference_bound(vm->args(), b.ids.size(1)) * rlpt::tol::scale_of(ref));
}

namespace {

// A fixture folder of scripts/make_hf_fixtures.py and its reference.json.
std::string fixture_dir(const char* name) { return rlpt::model::testing::source_dir() + "/tests/fixtures/hf/" + name; }
nlohmann::json read_fixture(const std::string& dir) { return fixture_json(dir + "/reference.json"); }

// rlpt's forward of the fixture's prompt within the float64 bound of transformers' float64 logits,
// and rlpt's greedy decode (the fused CPU decode step, and the plain LibTorch one) the same tokens
// with per-token log-probs within 1e-4 of transformers' float64 generate().
void check_fixture_logits_and_greedy(CausalLM& model, const nlohmann::json& ref) {
    const std::vector<int64_t> prompt = ref["prompt"];
    auto b = left_padded({prompt});
    torch::Tensor got;
    {
        torch::NoGradGuard ng;
        got = model.forward_logits(b.ids, b.mask, b.pos)[0].to(torch::kFloat64);
    }
    std::vector<double> flat;
    for (const auto& row : ref["logits"])
        for (const auto& v : row) flat.push_back(v.get<double>());
    const auto want = torch::tensor(flat, torch::kFloat64).view(got.sizes());
    EXPECT_LT((got - want).abs().max().item<double>(),
              reference_bound(model.args(), b.ids.size(1)) * rlpt::tol::scale_of(want));

    const std::vector<int64_t> want_tokens = ref["greedy_tokens"];
    const std::vector<double> want_logprobs = ref["greedy_logprobs"];
    for (const bool kernels : {true, false}) {
        SCOPED_TRACE(kernels ? "decode kernels (fused step)" : "LibTorch decode");
        model.use_decode_kernels(kernels);
        rlpt::rollout::SamplingParams p;
        p.greedy = true;
        p.temperature = 0.0;  // log-probs of softmax(logits), as transformers' scores
        p.max_new_tokens = static_cast<int64_t>(want_tokens.size());
        const auto out = rlpt::rollout::generate(model, {prompt}, {1}, p);
        ASSERT_EQ(out.responses.size(1), p.max_new_tokens);
        for (int64_t i = 0; i < p.max_new_tokens; ++i) {
            EXPECT_EQ(out.responses[0][i].item<int64_t>(), want_tokens[i]) << "token " << i;
            EXPECT_NEAR(out.rollout_log_probs[0][i].item<double>(), want_logprobs[i], 1e-4) << "token " << i;
        }
    }
}

}  // namespace

// Qwen3 (q/k norms, head_dim 32 != hidden 64 / 4 heads, GQA, tied embeddings) as transformers
// saved it.
TEST(HfFixture, Qwen3LogitsAndGreedyDecodeMatchTransformers) {
    const auto dir = fixture_dir("qwen3_tiny");
    auto model = load_pretrained(dir, torch::kFloat32);
    ASSERT_TRUE(model->args().qk_norm);
    check_fixture_logits_and_greedy(*model, read_fixture(dir));
}

// Qwen3-MoE (8 experts, top 2 renormalised, layer 1 dense through mlp_only_layers) as transformers
// saved it: logits and greedy decode as above; every MoE layer routes each position of prompt +
// greedy tokens to transformers' experts (the fixture's router margin is far above float32
// rounding); the load-balancing loss equals transformers' aux_loss.
TEST(HfFixture, Qwen3MoeLogitsGreedyDecodeRoutesAndAuxLossMatchTransformers) {
    const auto dir = fixture_dir("qwen3_moe_tiny");
    const auto ref = read_fixture(dir);
    auto model = load_pretrained(dir, torch::kFloat32);
    ASSERT_EQ(model->args().family, ModelFamily::kQwen3Moe);
    ASSERT_EQ(model->args().num_moe_layers(), 2);
    check_fixture_logits_and_greedy(*model, ref);

    std::vector<int64_t> seq = ref["prompt"];
    for (const auto& t : ref["greedy_tokens"]) seq.push_back(t.get<int64_t>());
    seq.pop_back();  // the positions whose next token was scored
    auto b = left_padded({seq});
    rlpt::model::MoeRouting routing;
    routing.record_choices = routing.record_probs = true;
    model->backbone().set_routing(&routing);
    {
        torch::NoGradGuard ng;
        model->forward_hidden(b.ids, b.mask, b.pos);
    }
    model->backbone().set_routing(nullptr);
    const auto& want_routes = ref["routes"];
    ASSERT_EQ(routing.chosen.size(), want_routes.size());
    for (size_t l = 0; l < routing.chosen.size(); ++l) {
        const auto got = std::get<0>(routing.chosen[l].sort(-1));
        ASSERT_EQ(got.size(0), static_cast<int64_t>(want_routes[l].size()));
        for (int64_t r = 0; r < got.size(0); ++r) {
            std::vector<int64_t> want = want_routes[l][static_cast<size_t>(r)];
            std::sort(want.begin(), want.end());
            for (int64_t j = 0; j < got.size(1); ++j)
                EXPECT_EQ(got[r][j].item<int64_t>(), want[static_cast<size_t>(j)]) << "MoE layer " << l << " row " << r;
        }
    }
    // The prompt's aux loss: probabilities of every row (no mask), within float32 rounding of
    // softmax over 8 logits summed over 2 x 12 rows (relative 1e-5 is ~100x that).
    rlpt::model::MoeRouting prompt_routing;
    prompt_routing.record_choices = prompt_routing.record_probs = true;
    model->backbone().set_routing(&prompt_routing);
    {
        torch::NoGradGuard ng;
        auto p = left_padded({ref["prompt"].get<std::vector<int64_t>>()});
        model->forward_hidden(p.ids, p.mask, p.pos);
    }
    model->backbone().set_routing(nullptr);
    const double aux = rlpt::model::load_balancing_loss(prompt_routing, {}, model->args().num_experts).item<double>();
    EXPECT_NEAR(aux, ref["aux_loss"].get<double>(), 1e-5 * ref["aux_loss"].get<double>());
}

// The rollout records, for every position it fed (prompt prefill, shared prefixes copied between
// slots, decode steps), the experts each MoE layer chose: the routes of a full forward over the
// generated sequences, up to ties within rounding (the fixture's margin is ~2e-3); -1 on left
// padding, each response's last token (never fed) and right padding.
TEST(HfFixture, Qwen3MoeRolloutRecordsTheRoutesOfEveryPositionItFed) {
    auto model = load_pretrained(fixture_dir("qwen3_moe_tiny"), torch::kFloat32);
    const auto ref = read_fixture(fixture_dir("qwen3_moe_tiny"));
    const std::vector<int64_t> prompt = ref["prompt"];
    const std::vector<std::vector<int64_t>> prompts{prompt, {5, 6, 7}, prompt};  // the third copies the first's prefix
    rlpt::rollout::SamplingParams p;
    p.temperature = 1.0;
    p.max_new_tokens = 12;
    p.record_routes = true;
    for (const bool kernels : {true, false}) {
        SCOPED_TRACE(kernels ? "fused decode step" : "LibTorch decode");
        model->use_decode_kernels(kernels);
        const auto out = rlpt::rollout::generate(*model, prompts, {1, 2, 3}, p);
        ASSERT_TRUE(out.routed_experts.defined());
        const auto& routes = out.routed_experts;  // [B, P+R, 2, 2]
        ASSERT_EQ(routes.sizes(), (std::vector<int64_t>{3, out.input_ids.size(1), 2, 2}));
        rlpt::model::MoeRouting full;
        full.record_choices = true;
        model->backbone().set_routing(&full);
        {
            torch::NoGradGuard ng;
            model->forward_hidden(out.input_ids, out.attention_mask, out.position_ids);
        }
        model->backbone().set_routing(nullptr);
        const auto want = full.chosen_stacked().view(routes.sizes());
        const int64_t P = out.prompts.size(1);
        for (int64_t i = 0; i < 3; ++i) {
            const int64_t plen = static_cast<int64_t>(prompts[static_cast<size_t>(i)].size());
            const int64_t rlen = out.response_mask[i].sum().item<int64_t>();
            for (int64_t c = 0; c < routes.size(1); ++c) {
                const bool fed = c >= P - plen && c < P + rlen - 1;
                const auto got = routes[i][c];
                if (!fed) {
                    EXPECT_TRUE(got.eq(-1).all().item<bool>()) << "row " << i << " column " << c;
                    continue;
                }
                EXPECT_TRUE(torch::equal(std::get<0>(got.sort(-1)), std::get<0>(want[i][c].sort(-1))))
                    << "row " << i << " column " << c << ": " << got << " vs " << want[i][c];
            }
        }
    }
}

// A Qwen3-MoE checkpoint without one expert's tensor, or with an expert the config does not have,
// is refused naming the tensor.
TEST(HfFixture, Qwen3MoeCheckpointMissingOrWithExtraExpertTensorsNamesThem) {
    const auto src = fixture_dir("qwen3_moe_tiny");
    auto model = load_pretrained(src, torch::kFloat32);
    NamedTensors all;
    for (const auto& p : model->named_parameters()) all.emplace_back(p.key(), p.value().detach());
    const std::string expert = "model.layers.2.mlp.experts.7.up_proj.weight";
    for (const bool extra : {false, true}) {
        TempDir dir(extra ? "moe_extra" : "moe_missing");
        std::filesystem::copy_file(src + "/config.json", dir.file("config.json"));
        NamedTensors tensors;
        for (const auto& [name, t] : all)
            if (extra || name != expert) tensors.emplace_back(name, t);
        if (extra) tensors.emplace_back("model.layers.2.mlp.experts.8.up_proj.weight", all.back().second);
        save_safetensors(dir.file("model.safetensors"), tensors);
        try {
            load_pretrained(dir.str(), torch::kFloat32);
            ADD_FAILURE() << "loaded a checkpoint " << (extra ? "with an extra expert" : "missing an expert");
        } catch (const rlpt::IoError& e) {
            EXPECT_NE(std::string(e.what()).find(extra ? "model.layers.2.mlp.experts.8.up_proj.weight" : expert),
                      std::string::npos)
                << e.what();
        }
    }
}

// Router replay: a forward that replays the routes another forward recorded is bit for bit that
// forward; replaying other routes changes the output, and the recorded choices are the replayed
// ones (what R2/R3 rely on).
TEST(MoeRouting, ReplayingRecordedRoutesReproducesTheForwardAndOtherRoutesChangeIt) {
    auto a = tiny_model_args(ModelFamily::kQwen3Moe, 50);
    a.num_hidden_layers = 3;
    a.mlp_only_layers = {0};
    a.validate();
    auto model = make_random_causal_lm(a, 11);
    auto b = left_padded({{1, 2, 3, 4, 5, 6}, {7, 8, 9}}, /*pad_id=*/0);
    torch::NoGradGuard ng;
    rlpt::model::MoeRouting rec;
    rec.record_choices = true;
    model->backbone().set_routing(&rec);
    const auto h = model->forward_hidden(b.ids, b.mask, b.pos);
    const auto routes = rec.chosen_stacked();
    ASSERT_EQ(routes.sizes(), (std::vector<int64_t>{2 * 6, 2, 2}));

    rlpt::model::MoeRouting replay;
    replay.replay = routes;
    replay.record_choices = true;
    model->backbone().set_routing(&replay);
    EXPECT_TRUE(torch::equal(model->forward_hidden(b.ids, b.mask, b.pos), h));
    EXPECT_TRUE(torch::equal(replay.chosen_stacked(), routes));
    EXPECT_EQ(rlpt::model::route_mismatch_fraction(routes, replay.chosen_stacked(), b.mask.reshape({-1})), 0.0);

    // Every row's experts shifted by one: different experts, a different output.
    rlpt::model::MoeRouting other;
    other.replay = (routes + 1).remainder(a.num_experts);
    model->backbone().set_routing(&other);
    EXPECT_FALSE(torch::allclose(model->forward_hidden(b.ids, b.mask, b.pos), h));
    EXPECT_EQ(rlpt::model::route_mismatch_fraction(routes, other.replay, b.mask.reshape({-1})), 1.0);
    model->backbone().set_routing(nullptr);
}

namespace {

// One training step's gradients against transformers' float64 autograd of the same loss (the mean
// next-token cross-entropy of the prompt and its greedy tokens, grads.json) on the same float32
// weights. rlpt runs in float32 (the model has no float64 path: model::dtype_name refuses it), so
// each gradient differs from the float64 one by float32 rounding along its path: γ_N(u32) with N
// tol::transformer_grad_terms (the logit path there and back, plus every token of the loss),
// relative to max(1, max|ref|), plus the reference's own rounding to float32 (u32). The loss
// itself follows one logit path per token: tol::transformer_logit_terms.
void check_fixture_gradients(const std::string& dir) {
    const auto ref = fixture_json(dir + "/grads.json");
    const std::vector<int64_t> seq = ref["sequence"];
    auto model = load_pretrained(dir, torch::kFloat32);
    model->train();
    const auto ids = torch::tensor(seq, torch::kInt64).unsqueeze(0);
    const auto n = ids.size(1);
    const auto logits = model->forward_logits(ids, torch::ones_like(ids), torch::arange(n).unsqueeze(0));
    const auto loss = torch::nn::functional::cross_entropy(logits[0].slice(0, 0, n - 1), ids[0].slice(0, 1, n));
    loss.backward();

    const auto& a = model->args();
    namespace tol = rlpt::tol;
    EXPECT_NEAR(loss.item<double>(), ref["loss"].get<double>(),
                (tol::gamma(tol::transformer_logit_terms(a, n), tol::kUnitRoundoffFp32) + tol::kUnitRoundoffFp32) *
                    std::max(1.0, ref["loss"].get<double>()));
    const double bound =
        tol::gamma(tol::transformer_grad_terms(a, n, n - 1), tol::kUnitRoundoffFp32) + tol::kUnitRoundoffFp32;
    const auto want = rlpt::model::SafetensorsFile::open(dir + "/grads.safetensors");
    std::vector<std::string> seen;
    for (const auto& p : model->named_parameters()) {
        ASSERT_TRUE(want.contains(p.key())) << p.key() << " has no reference gradient";
        ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
        const auto w = want.get(p.key());
        ASSERT_EQ(w.scalar_type(), torch::kFloat64) << p.key();
        const auto g = p.value().grad().to(torch::kFloat64);
        ASSERT_EQ(g.sizes(), w.sizes()) << p.key();
        // An expert no token was routed to has a zero gradient, and rlpt's must be exactly zero
        // too (it runs on zero rows); any other zero reference gradient would check nothing.
        if (p.key().find(".mlp.experts.") != std::string::npos && w.abs().max().item<double>() == 0.0) {
            EXPECT_EQ(g.abs().max().item<double>(), 0.0) << p.key();
            seen.push_back(p.key());
            continue;
        }
        EXPECT_GT(w.abs().max().item<double>(), 0.0) << p.key() << ": a zero reference gradient checks nothing";
        EXPECT_LE(tol::max_abs_diff(g, w), bound * tol::scale_of(w)) << p.key();
        seen.push_back(p.key());
    }
    // Every tensor transformers differentiates is one rlpt trains (q/k norms included).
    EXPECT_EQ(seen.size(), want.names().size());
    EXPECT_EQ(seen.size(), ref["parameters"].size());
}

}  // namespace

TEST(HfFixture, Qwen3GradientsMatchTransformersAutograd) { check_fixture_gradients(qwen3_tiny_dir()); }

// The same for Qwen3-MoE: the router's gradient (through the renormalised top-k weights) and every
// expert's, transformers' fused expert tensors split per expert as checkpoints name them.
TEST(HfFixture, Qwen3MoeGradientsMatchTransformersAutograd) { check_fixture_gradients(fixture_dir("qwen3_moe_tiny")); }

// HF export round trip: what rlpt's save_pretrained writes loads in transformers
// (scripts/check_hf_export.py, with the .venv's transformers) with the architecture and
// rope_theta rlpt meant and gives rlpt's logits within float32 rounding (reference_bound: rlpt in
// float32 against transformers in float64 on the same float32 weights). Two folders: the
// transformers-made qwen3_tiny loaded and saved again (transformers 5's rope_parameters layout),
// and a Qwen3 from `rlpt init-model` (top-level rope_theta), both with rope_theta 1e6 or 5e5, not
// 10000, so a theta lost on the way shows (the script checks that it would).
namespace {

// `rlpt init-model --out dir/m --chars-from dir/chars.txt <args>`: its exit code.
int init_model(const TempDir& dir, std::vector<std::string> args) {
    std::ofstream(dir.file("chars.txt")) << "0123456789+-*=abcdefghijklmnopqrstuvwxyz";
    args.insert(args.begin(), {"init-model", "--out", dir.file("m"), "--chars-from", dir.file("chars.txt")});
    std::vector<char*> argv;
    for (auto& x : args) argv.push_back(x.data());
    return rlpt::app::init_model_command(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

class HfExport : public ::testing::Test {
  protected:
    void SetUp() override {
        if (std::system((python() + " -c 'import transformers' >/dev/null 2>&1").c_str()) != 0)
            GTEST_SKIP() << python() << " has no transformers (scripts/setup.sh installs it into .venv)";
    }
    // rlpt's logits of `m`, then (save) m written to `dir` by save_pretrained, then the script on `dir`.
    void check(const CausalLM& m, const std::string& dir, bool save = true) {
        const std::vector<int64_t> prompt = {3, 17, 42, 5, 99, 64, 8, 120, 33, 71, 2, 90};
        std::vector<int64_t> ids;
        for (int64_t t : prompt) ids.push_back(t % m.args().vocab_size);
        auto b = left_padded({ids});
        torch::Tensor logits;
        {
            torch::NoGradGuard ng;
            logits = const_cast<CausalLM&>(m).forward_logits(b.ids, b.mask, b.pos)[0].to(torch::kFloat64);
        }
        if (save) save_pretrained(m, dir);
        nlohmann::json j;
        j["input_ids"] = ids;
        std::vector<std::vector<double>> rows;
        for (int64_t i = 0; i < logits.size(0); ++i) {
            auto r = logits[i].contiguous();
            rows.emplace_back(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
        }
        j["logits"] = rows;
        j["bound"] = reference_bound(m.args(), b.ids.size(1)) * rlpt::tol::scale_of(logits);
        j["rope_theta"] = m.args().rope_theta;
        j["architecture"] = m.args().architecture();
        std::ofstream(dir + "/rlpt_logits.json") << j.dump();
        const std::string cmd = fmt::format("{} {}/scripts/check_hf_export.py {} {}/rlpt_logits.json", python(),
                                            rlpt::model::testing::source_dir(), dir, dir);
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
};

TEST_F(HfExport, LoadedQwen3TinyLoadsInTransformersWithTheSameLogits) {
    TempDir dir("export_tiny");
    auto m = load_pretrained(qwen3_tiny_dir(), torch::kFloat32);
    ASSERT_DOUBLE_EQ(m->args().rope_theta, 1e6);
    check(*m, dir.str());
}

TEST_F(HfExport, LoadedQwen3MoeTinyLoadsInTransformersWithTheSameLogits) {
    TempDir dir("export_moe");
    auto m = load_pretrained(fixture_dir("qwen3_moe_tiny"), torch::kFloat32);
    check(*m, dir.str());
}

TEST_F(HfExport, InitModelQwen3MoeLoadsInTransformersWithTheSameLogits) {
    TempDir dir("export_init_moe");
    ASSERT_EQ(init_model(dir, {"--arch", "qwen3_moe", "--experts", "4", "--rope-theta", "500000"}), 0);
    auto m = load_pretrained(dir.file("m"), torch::kFloat32);
    ASSERT_EQ(m->args().num_experts, 4);
    check(*m, dir.file("m"), /*save=*/false);
}

TEST_F(HfExport, InitModelQwen3LoadsInTransformersWithTheSameLogits) {
    TempDir dir("export_init");
    ASSERT_EQ(init_model(dir, {"--arch", "qwen3", "--head-dim", "24", "--rope-theta", "500000"}), 0);
    auto m = load_pretrained(dir.file("m"), torch::kFloat32);
    ASSERT_EQ(m->args().head_dim, 24);         // != hidden 128 / 4 heads
    check(*m, dir.file("m"), /*save=*/false);  // the folder init-model wrote
}
