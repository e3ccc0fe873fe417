// Tensor parallelism (DESIGN §4b, include/rlpt/model/tensor_parallel.h), run at 2 and 4 ranks
// (tests/mpi/tensor_parallel.cmake). Every rank builds the whole model (tp = 1, no
// communication) and its slice of the same model in blocks of tp = 2 and tp = 4 ranks from the
// same seed, and compares: logits, log-probs, entropies, values, the SFT loss, the gradients of
// every slice, greedy and seeded sampled generation.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <stdlib.h>

#include <filesystem>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"
#include "rlpt/model/value_model.h"
#include "rlpt/rollout/generator.h"
#include "unit/test_tolerance.h"

namespace rlpt::model {
namespace {

// Hidden 32, 4 query heads over `kv_heads` KV heads, of `family`'s tiny model.
ModelArgs small(ModelFamily family, int64_t vocab, int64_t intermediate, int64_t kv_heads, int64_t head_dim) {
    auto a = tiny_model_args(family, vocab);
    a.hidden_size = 32;
    a.intermediate_size = intermediate;
    a.num_attention_heads = 4;
    a.num_key_value_heads = kv_heads;
    a.head_dim = head_dim;
    return a;
}
// Llama (untied, optionally with attention/MLP biases) and Qwen2 (q/k/v biases, tied) with GQA.
// Vocabularies that 2 and 4 do not divide exercise the padding.
ModelArgs llama(int64_t kv_heads, bool biases) {
    auto a = small(ModelFamily::kLlama, 37, 48, kv_heads, 8);
    a.qkv_bias = a.o_proj_bias = a.mlp_bias = biases;
    a.pad_token_id = 0;
    a.validate();
    return a;
}
ModelArgs qwen2(int64_t kv_heads, bool tied) {
    auto a = small(ModelFamily::kQwen2, 30, 64, kv_heads, 8);
    a.tie_word_embeddings = tied;
    a.validate();
    return a;
}
// Qwen3: per-head q/k norms (replicated, each rank normalising its own heads), head_dim 12 !=
// hidden 32 / 4 heads, tied.
ModelArgs qwen3(int64_t kv_heads) {
    auto a = small(ModelFamily::kQwen3, 30, 64, kv_heads, 12);
    a.validate();
    return a;
}

// Qwen3-MoE: 4 experts of width 8 (split over the block like the dense MLP), top 2, the router
// replicated with its gradient summed over the block; layer 0 dense (mlp_only_layers).
ModelArgs qwen3_moe(int64_t kv_heads) {
    auto a = small(ModelFamily::kQwen3Moe, 30, 64, kv_heads, 12);
    a.num_hidden_layers = 3;
    a.moe_intermediate_size = 8;
    a.mlp_only_layers = {0};
    a.validate();
    return a;
}

engine::SequenceBatch batch(int64_t vocab, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t b = 5, p = 4, r = 6, t = p + r;
    engine::SequenceBatch s;
    s.input_ids = torch::randint(1, vocab, {b, t}, gen, torch::kInt64);
    s.attention_mask = torch::ones({b, t}, torch::kInt64);
    for (int64_t i = 0; i < b; ++i) {
        if (i % 3) s.attention_mask[i].narrow(0, 0, i % 3).zero_();
        if (i % 2) s.attention_mask[i].narrow(0, t - i, i).zero_();
    }
    s.input_ids.masked_fill_(s.attention_mask == 0, 0);
    s.position_ids = (s.attention_mask.cumsum(1) - 1).clamp_min(0);
    s.response_length = r;
    return s;
}

// max |got − ref| <= rel · max(1, max |ref|): `rel` a first-order bound relative to the magnitudes
// the values are computed at (tests/unit/test_tolerance.h).
void expect_close(const torch::Tensor& got, const torch::Tensor& ref, double rel, const std::string& what) {
    ASSERT_EQ(got.sizes(), ref.sizes()) << what;
    EXPECT_LE(tol::max_abs_diff(got, ref), rel * tol::scale_of(ref)) << what;
}

// fp32, split vs whole: the same sums cut into tp partial sums (row-parallel layers, the
// vocabulary-parallel head and log-softmax) and added in another order. A forward value sums
// transformer_logit_terms terms along its path; a gradient retraces it and sums over every token;
// a sum over tokens (the SFT loss) adds them.
constexpr int64_t kRows = 5, kSeq = 10;  // batch(): 5 rows of 4 + 6 tokens
double forward_bound(const ModelArgs& a) { return tol::fp32_order_bound(tol::transformer_logit_terms(a, kSeq)); }
double grad_bound(const ModelArgs& a) {
    return tol::fp32_order_bound(tol::transformer_grad_terms(a, kSeq, kRows * kSeq));
}
double token_sum_bound(const ModelArgs& a) {
    return tol::fp32_order_bound(tol::transformer_logit_terms(a, kSeq) + kRows * kSeq);
}

class TensorParallelTest : public ::testing::TestWithParam<int> {
  protected:
    void SetUp() override {
        torch::set_num_threads(1);
        tp_size_ = GetParam();
        if (world_.size() % tp_size_ != 0) GTEST_SKIP() << "tp " << tp_size_ << " needs a multiple of ranks";
        mp_ = world_.split(world_.rank() / tp_size_, world_.rank() % tp_size_);
        tp_ = TensorParallel::over(mp_, torch::kCPU);
    }
    comm::Communicator world_ = comm::Communicator::world();
    comm::Communicator mp_;
    std::shared_ptr<TensorParallel> tp_;
    int tp_size_ = 1;

    // Compares the tp model's gradients with the slices of the whole model's.
    void expect_grads_are_slices(torch::nn::Module& split, torch::nn::Module& whole, const TpLayout& layout, double rel,
                                 const std::string& what) {
        auto full = whole.named_parameters();
        for (const auto& item : split.named_parameters()) {
            const auto& g = item.value().grad();
            ASSERT_TRUE(g.defined()) << what << " " << item.key();
            auto expected = torch::zeros_like(g);
            copy_slice_for_test(expected, full[item.key()].grad(), shard_spec(item.key(), layout));
            expect_close(g, expected, rel, what + " grad " + item.key());
        }
    }
    static void copy_slice_for_test(torch::Tensor& dst, const torch::Tensor& full, const ShardSpec& s) {
        if (s.dim < 0) {
            dst.copy_(full);
            return;
        }
        if (s.real() > 0) dst.narrow(s.dim, 0, s.real()).copy_(full.narrow(s.dim, s.start, s.real()));
    }

    void check_policy(const ModelArgs& args, const std::string& what) {
        auto whole = make_random_causal_lm(args, 11);
        auto split = make_random_causal_lm(args, 11, torch::kFloat32, torch::kCPU, tp_);
        const auto& layout = split->tp_layout();
        ASSERT_EQ(layout.tp, tp_size_);
        {
            // Non-zero biases (the initialiser zeroes them), the same in both models: a
            // row-parallel bias added on every rank of the block shows.
            torch::NoGradGuard ng;
            auto full = whole->named_parameters();
            for (auto& item : full)
                if (item.key().size() > 5 && item.key().compare(item.key().size() - 5, 5, ".bias") == 0)
                    item.value().copy_(torch::linspace(-0.5, 0.5, item.value().numel()).view_as(item.value()));
            for (auto& item : split->named_parameters())
                if (item.key().size() > 5 && item.key().compare(item.key().size() - 5, 5, ".bias") == 0)
                    copy_slice_for_test(item.value(), full[item.key()], shard_spec(item.key(), layout));
        }
        // Slices of the same model: every parameter holds exactly its slice of the tp = 1 tensor.
        {
            auto full = whole->named_parameters();
            for (const auto& item : split->named_parameters()) {
                auto expected = torch::zeros_like(item.value());
                copy_slice_for_test(expected, full[item.key()], shard_spec(item.key(), layout));
                EXPECT_TRUE(torch::equal(item.value(), expected)) << what << " " << item.key();
            }
        }
        auto seq = batch(args.vocab_size, 5);

        // Logits (gathered), log-probs, entropies: forward.
        {
            torch::NoGradGuard ng;
            expect_close(split->forward_logits(seq.input_ids, seq.attention_mask, seq.position_ids),
                         whole->forward_logits(seq.input_ids, seq.attention_mask, seq.position_ids),
                         forward_bound(args), what + " logits");
        }
        auto a = engine::compute_log_probs(*split, seq, 0.7, true);
        auto b = engine::compute_log_probs(*whole, seq, 0.7, true);
        expect_close(a.log_probs, b.log_probs, forward_bound(args), what + " log-probs");
        expect_close(a.entropy, b.entropy, forward_bound(args), what + " entropy");

        // Backward through the vocabulary-parallel head and every split layer.
        auto w = torch::linspace(-1.0, 1.0, a.log_probs.numel()).view(a.log_probs.sizes());
        ((a.log_probs * w).sum() + 0.3 * (a.entropy * w.flip(1)).sum()).backward();
        ((b.log_probs * w).sum() + 0.3 * (b.entropy * w.flip(1)).sum()).backward();
        expect_grads_are_slices(*split, *whole, layout, grad_bound(args), what);

        // The SFT loss.
        auto loss_mask = seq.attention_mask.clone();
        loss_mask.select(1, 0).zero_();
        expect_close(engine::sft_token_nll_sum(*split, seq.input_ids, seq.attention_mask, seq.position_ids, loss_mask),
                     engine::sft_token_nll_sum(*whole, seq.input_ids, seq.attention_mask, seq.position_ids, loss_mask),
                     token_sum_bound(args), what + " sft nll");

        // Values of a critic made from the policy (replicated head).
        auto vw = value_model_from_policy(*whole, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3);
        auto vs = value_model_from_policy(*split, torch::kFloat32, torch::kCPU, ValueHeadInit::kNormal, 3);
        expect_close(engine::compute_values(*vs, seq), engine::compute_values(*vw, seq), forward_bound(args),
                     what + " values");

        // Generation: greedy and seeded sampling pick the tokens tp = 1 picks.
        std::vector<std::vector<int64_t>> prompts{{3, 4, 5}, {7}, {9, 2, 2, 8}, {1, 1}};
        std::vector<uint64_t> seeds{1, 2, 3, 4};
        for (bool greedy : {true, false}) {
            rollout::SamplingParams sp;
            sp.greedy = greedy;
            sp.temperature = 0.9;
            sp.top_p = greedy ? 1.0 : 0.95;
            sp.top_k = greedy ? -1 : 20;
            sp.max_new_tokens = 8;
            auto gs = rollout::generate(*split, prompts, seeds, sp);
            auto gw = rollout::generate(*whole, prompts, seeds, sp);
            EXPECT_TRUE(torch::equal(gs.responses, gw.responses)) << what << (greedy ? " greedy" : " sampled");
            expect_close(gs.rollout_log_probs, gw.rollout_log_probs, forward_bound(args), what + " rollout log-probs");
        }
    }
};

TEST_P(TensorParallelTest, LlamaSplitKvHeadsUntiedNoBias) { check_policy(llama(4, false), "llama kv4"); }
TEST_P(TensorParallelTest, LlamaGqaWithBiases) { check_policy(llama(2, true), "llama kv2 biases"); }
TEST_P(TensorParallelTest, Qwen2ReplicatedKvTied) { check_policy(qwen2(1, true), "qwen2 kv1 tied"); }
TEST_P(TensorParallelTest, Qwen2GqaUntied) { check_policy(qwen2(2, false), "qwen2 kv2 untied"); }
TEST_P(TensorParallelTest, Qwen3QkNormsSplitKv) { check_policy(qwen3(2), "qwen3 kv2"); }
TEST_P(TensorParallelTest, Qwen3QkNormsReplicatedKv) { check_policy(qwen3(1), "qwen3 kv1"); }
TEST_P(TensorParallelTest, Qwen3MoeExpertsSplitRouterReplicated) { check_policy(qwen3_moe(2), "qwen3-moe kv2"); }

TEST_P(TensorParallelTest, LoadsSlicesAndExportsFullTensorsOneAtATime) {
    // World rank 0 writes the whole model; every rank loads its slices; every block exports its
    // split model (sharded, a few tensors per file) and the export equals the whole model.
    std::string root;
    if (world_.rank() == 0) {
        char tmpl[] = "/tmp/rlpt-tp-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root = tmpl;
    }
    world_.bcast_string(root, 0);
    for (const auto& args : {qwen2(1, true), llama(2, true)}) {
        auto whole = make_random_causal_lm(args, 31);
        if (world_.rank() == 0) save_pretrained(*whole, root + "/whole");
        world_.barrier();
        auto split = load_pretrained(root + "/whole", torch::kFloat32, torch::kCPU, tp_);
        auto full = whole->named_parameters();
        for (const auto& item : split->named_parameters()) {
            auto expected = torch::zeros_like(item.value());
            copy_slice_for_test(expected, full[item.key()], shard_spec(item.key(), split->tp_layout()));
            EXPECT_TRUE(torch::equal(item.value(), expected)) << "loaded slice " << item.key();
        }
        const std::string out = root + "/block" + std::to_string(world_.rank() / tp_size_);
        save_pretrained(*split, out, /*max_shard_bytes=*/6000);
        world_.barrier();
        auto back = load_pretrained(out, torch::kFloat32, torch::kCPU);
        auto again = back->named_parameters();
        for (const auto& item : whole->named_parameters())
            EXPECT_TRUE(torch::equal(again[item.key()], item.value())) << "exported " << item.key();
        world_.barrier();
    }
    world_.barrier();
    if (world_.rank() == 0) std::filesystem::remove_all(root);
}

TEST_P(TensorParallelTest, Bf16ModelsAgreeToBf16Precision) {
    // bf16: the row-parallel partial sums are reduced in fp32 and rounded once, the tp = 1 matmul
    // rounds its own fp32 accumulation once, so the two differ by bf16 roundings along the path:
    // per element at most bf16_path_bound (the bound that holds, R·u), in RMS at most
    // rms_rounding_bound (√R·u: the check that would see a real tp bug hidden under R·u).
    const auto args = qwen2(2, false);
    auto whole = make_random_causal_lm(args, 11, torch::kBFloat16);
    auto split = make_random_causal_lm(args, 11, torch::kBFloat16, torch::kCPU, tp_);
    auto seq = batch(args.vocab_size, 9);
    auto a = engine::compute_log_probs(*split, seq, 1.0, true);
    auto b = engine::compute_log_probs(*whole, seq, 1.0, true);
    const int64_t roundings = tol::transformer_bf16_roundings(args.num_hidden_layers);
    for (const auto& [got, want, what] : {std::make_tuple(a.log_probs, b.log_probs, "bf16 log-probs"),
                                          std::make_tuple(a.entropy, b.entropy, "bf16 entropy")}) {
        expect_close(got, want, tol::bf16_path_bound(roundings), what);
        EXPECT_LE(tol::rms_diff(got, want),
                  tol::rms_rounding_bound(roundings, tol::kUnitRoundoffBf16) * tol::scale_of(want))
            << what << " (RMS)";
    }
    a.log_probs.sum().backward();
    for (const auto& p : split->parameters())
        ASSERT_TRUE(p.grad().defined() && torch::isfinite(p.grad()).all().item<bool>());
}

TEST_P(TensorParallelTest, ImpossibleLayoutsAreRefusedNamingTheNumbers) {
    auto a = llama(2, false);
    a.num_attention_heads = 6;
    a.num_key_value_heads = 3;
    a.validate();
    if (tp_size_ == 2) {
        try {
            CausalLM m(a, torch::kFloat32, torch::kCPU, tp_);
            FAIL() << "expected a ConfigError";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("num_key_value_heads 3"), std::string::npos) << e.what();
        }
    }
    auto b = llama(2, false);
    b.intermediate_size = 49;
    EXPECT_THROW(CausalLM(b, torch::kFloat32, torch::kCPU, tp_), ConfigError);
}

INSTANTIATE_TEST_SUITE_P(Tp, TensorParallelTest, ::testing::Values(2, 4));

// ---- training: the same global batch gives the same update at dp x tp as at 1 x 1 -------------

constexpr int64_t kGlobalRows = 8;

engine::OptimOptions optim() {
    engine::OptimOptions o;
    o.lr = 2e-2;
    o.eps = 1e-3;  // a smooth update (see tests/mpi/test_engine.cpp)
    o.weight_decay = 0.1;
    o.clip_grad = 0.5;  // active: the norm over the block must be the tp = 1 norm
    o.grad_bucket_bytes = 4 * 2000;
    return o;
}

struct TrainRun {
    std::shared_ptr<CausalLM> model;
    std::vector<double> norms;
};

// Three AdamW steps; this DP block trains on its share of each global batch (micro-batches of 2
// rows), the loss normalised by the global token count.
TrainRun train(const ModelArgs& args, const comm::Communicator* dp, const comm::Communicator* mp,
               std::shared_ptr<TensorParallel> tp, int64_t zero_stage) {
    TrainRun out;
    out.model = make_random_causal_lm(args, 23, torch::kFloat32, torch::kCPU, tp);
    comm::Communicator none;
    engine::TensorParallelInfo info;
    if (tp) {
        info.block = mp;
        info.not_counted = uncounted_parameters(*out.model, out.model->tp_layout());
    }
    auto o = optim();
    o.zero_stage = zero_stage;
    std::shared_ptr<void> hold;  // outlives the engine: a ZeRO-3 model stays full
    engine::TrainEngine eng(out.model, dp ? *dp : none, o, 0, info);
    const int64_t d = dp ? dp->size() : 1, share = kGlobalRows / d, begin = (dp ? dp->rank() : 0) * share;
    for (int k = 0; k < 3; ++k) {
        auto seq = batch(args.vocab_size, 100 + k);
        auto all = engine::SequenceBatch{torch::cat({seq.input_ids, seq.input_ids.flip(0)}),
                                         torch::cat({seq.attention_mask, seq.attention_mask.flip(0)}),
                                         torch::cat({seq.position_ids, seq.position_ids.flip(0)}), seq.response_length};
        auto rmask = all.attention_mask.narrow(1, all.input_ids.size(1) - all.response_length, all.response_length)
                         .narrow(0, 0, kGlobalRows)
                         .to(torch::kFloat32);
        const double tokens = rmask.sum().item<double>();
        auto adv = torch::linspace(-1.0, 1.5, kGlobalRows).unsqueeze(1);
        eng.zero_grad();
        for (int64_t b = begin; b < begin + share; b += 2) {
            engine::SequenceBatch mb{all.input_ids.narrow(0, b, 2), all.attention_mask.narrow(0, b, 2),
                                     all.position_ids.narrow(0, b, 2), all.response_length};
            auto lp = engine::compute_log_probs(*out.model, mb, 1.0, true);
            auto m = rmask.narrow(0, b, 2);
            auto loss = ((-adv.narrow(0, b, 2) * lp.log_probs - 0.01 * lp.entropy) * m).sum() *
                        (static_cast<double>(d) / tokens);
            loss.backward();
        }
        out.norms.push_back(eng.step().grad_norm);
    }
    hold = eng.hold_full_parameters();
    return out;
}

class TensorParallelEngine : public ::testing::Test {
  protected:
    void SetUp() override { torch::set_num_threads(1); }
    comm::Communicator world_ = comm::Communicator::world();

    void check(int tp_size, const ModelArgs& args, int64_t zero_stage, const std::string& what) {
        if (world_.size() % tp_size != 0) return;
        auto mp = world_.split(world_.rank() / tp_size, world_.rank() % tp_size);
        auto dp = world_.split(world_.rank() % tp_size, world_.rank() / tp_size);
        auto tp = TensorParallel::over(mp, torch::kCPU);
        auto ref = train(args, nullptr, nullptr, nullptr, 0);
        auto got = train(args, &dp, &mp, tp, zero_stage);
        // fp32 runs that sum the same terms in other orders (tp partial sums, the DP reduction):
        // gradients and norms to fp32_order_bound of the terms a gradient sums (every token of the
        // global batch), parameters to the Adam trajectory bound of that plus the masters' roundings.
        const double grad_rel = tol::fp32_order_bound(tol::transformer_grad_terms(args, kSeq, kGlobalRows * kSeq));
        std::vector<double> lrs;
        for (int k = 0; k < 3; ++k) lrs.push_back(engine::scheduled_lr(optim(), k));
        const double abs = tol::adam_trajectory_bound(lrs, grad_rel), rel = tol::adam_master_rounding(3);
        for (int k = 0; k < 3; ++k)
            EXPECT_NEAR(got.norms[k], ref.norms[k], grad_rel * ref.norms[k]) << what << " step " << k;
        auto full = ref.model->named_parameters();
        for (const auto& item : got.model->named_parameters()) {
            const auto spec = shard_spec(item.key(), got.model->tp_layout());
            auto expected = torch::zeros_like(item.value());
            if (spec.dim < 0) expected.copy_(full[item.key()]);
            else if (spec.real() > 0)
                expected.narrow(spec.dim, 0, spec.real())
                    .copy_(full[item.key()].narrow(spec.dim, spec.start, spec.real()));
            const auto excess = (item.value().to(torch::kFloat64) - expected.to(torch::kFloat64)).abs() -
                                rel * expected.to(torch::kFloat64).abs();
            EXPECT_LE(excess.max().item<double>(), abs) << what << " " << item.key();
        }
    }
};

TEST_F(TensorParallelEngine, ThreeAdamWStepsMatchTp1) {
    const std::string dp = std::to_string(world_.size() / 2);
    check(2, qwen2(1, true), 0, "qwen2 tied kv1, dp " + dp + " x tp 2");
    check(2, llama(2, true), 1, "llama biases, ZeRO-1, dp " + dp + " x tp 2");
    if (world_.size() == 4) check(4, llama(2, false), 0, "llama, tp 4");
    check(2, qwen2(1, true), 3, "qwen2 tied kv1, ZeRO-3, dp " + dp + " x tp 2");
    check(2, llama(2, true), 2, "llama biases, ZeRO-2, dp " + dp + " x tp 2");
}

}  // namespace
}  // namespace rlpt::model
