// TrainEngine::save_state / load_state: bit-identical continuation (fp32 and bf16 masters) and
// the layout-mismatch errors.
#include <gtest/gtest.h>

#include "rlpt/ckpt/h5_store.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "test_engine_helpers.h"
#include "test_model_helpers.h"

namespace rlpt::engine {
namespace {

using model::testing::TempDir;

void train(TrainEngine& eng, model::CausalLM& m, int from, int to) {
    for (int k = from; k < to; ++k) {
        eng.zero_grad();
        auto s = testing::make_sequences(4, 3, 6, 20, 1000 + k);
        auto lp = compute_log_probs(m, s, 0.7, false).log_probs;
        auto mask = s.attention_mask.narrow(1, 3, 6).to(torch::kFloat32);
        (-(lp * mask).sum() / mask.sum()).backward();
        ASSERT_FALSE(eng.step().skipped);
    }
}

OptimOptions options(int64_t zero_stage) {
    OptimOptions o;
    o.lr = 5e-3;
    o.scheduler = "cosine";
    o.warmup_steps = 1;
    o.total_steps = 6;
    o.min_lr_ratio = 0.1;
    o.zero_stage = zero_stage;
    return o;
}

class EngineState : public ::testing::TestWithParam<std::tuple<torch::Dtype, int64_t>> {};

TEST_P(EngineState, SaveLoadContinuesBitIdentically) {
    const auto [dtype, zero] = GetParam();
    const auto args = testing::tiny_args();
    comm::Communicator none;
    TempDir dir("engine_state");
    const int n = 6;

    auto straight = model::make_random_causal_lm(args, 11, dtype);
    TrainEngine es(straight, none, options(zero), 42);
    train(es, *straight, 0, n);

    auto first = model::make_random_causal_lm(args, 11, dtype);
    TrainEngine e1(first, none, options(zero), 42);
    train(e1, *first, 0, n / 2);
    {
        ckpt::H5Writer w(dir.file("state.h5"));
        e1.save_state(w, "actor");
        w.commit();
    }
    // A different initialisation and RNG seed: everything must come from the file.
    auto resumed = model::make_random_causal_lm(args, 99, dtype);
    TrainEngine e2(resumed, none, options(zero), 7);
    {
        ckpt::H5Reader r(dir.file("state.h5"));
        EXPECT_TRUE(r.contains("actor/shards/0/param"));
        EXPECT_TRUE(r.contains("actor/shards/0/exp_avg"));
        EXPECT_EQ(r.contains("actor/shards/0/master"), dtype == torch::kBFloat16);
        const auto layout = saved_layout(r, "actor/");
        EXPECT_EQ(layout.format, 2);
        EXPECT_EQ(layout.zero_stage, zero);
        EXPECT_EQ(layout.dp_size, 1);
        e2.load_state(r, "actor/");
    }
    EXPECT_EQ(e2.global_step(), n / 2);
    EXPECT_EQ(e2.applied_updates(), n / 2);
    EXPECT_DOUBLE_EQ(e2.current_lr(), e1.current_lr());
    EXPECT_TRUE(testing::bitwise_equal(*first, *resumed));
    train(e2, *resumed, n / 2, n);
    EXPECT_TRUE(testing::bitwise_equal(*straight, *resumed));
    // The RNG continues where the saved one was.
    EXPECT_TRUE(
        torch::equal(torch::randint(0, 1 << 30, {4}, e1.generator()), torch::randint(0, 1 << 30, {4}, e2.generator())));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndZero, EngineState,
                         ::testing::Combine(::testing::Values(torch::kFloat32, torch::kBFloat16),
                                            ::testing::Values(int64_t{0}, int64_t{1})));

void expect_io_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
    model::testing::expect_error<IoError>(f, parts);
}

TEST(EngineStateErrors, LayoutMismatchesNameTheTensor) {
    const auto args = testing::tiny_args();
    comm::Communicator none;
    TempDir dir("engine_state_err");
    auto m = model::make_random_causal_lm(args, 1);
    TrainEngine e(m, none, options(0), 0);
    train(e, *m, 0, 1);
    {
        ckpt::H5Writer w(dir.file("s.h5"));
        e.save_state(w, "actor/");
        w.commit();
    }
    ckpt::H5Reader r(dir.file("s.h5"));

    // Another architecture: the first parameter whose shape differs is named.
    auto wide_args = args;
    wide_args.hidden_size = 48;
    wide_args.head_dim = 12;
    auto wide = model::make_random_causal_lm(wide_args, 1);
    TrainEngine ew(wide, none, options(0), 0);
    auto before = wide->parameters()[0].detach().clone();
    expect_io_error([&] { ew.load_state(r, "actor/"); }, {"model.embed_tokens.weight", "[20, 32]", "[20, 48]"});
    EXPECT_TRUE(torch::equal(before, wide->parameters()[0]));  // nothing changed

    // Another prefix: missing tensors.
    auto m2 = model::make_random_causal_lm(args, 1);
    TrainEngine e2(m2, none, options(0), 0);
    expect_io_error([&] { e2.load_state(r, "critic/"); }, {"critic/engine/layout"});

    // A model with fewer parameters: the checkpoint's extra tensor is named.
    auto small_args = args;
    small_args.num_hidden_layers = 1;
    auto small = model::make_random_causal_lm(small_args, 1);
    TrainEngine e3(small, none, options(0), 0);
    expect_io_error([&] { e3.load_state(r, "actor/"); }, {"model.layers.1.", "matches no trainable parameter"});

    // A ZeRO-0 file (full optimizer state) loads under ZeRO-1 too (elastic resume): its padded
    // range is cut from the full vectors, and the parameters come back exactly.
    ASSERT_NE(e.num_parameters() % 64, 0);
    auto m4 = model::make_random_causal_lm(args, 2);
    TrainEngine e4(m4, none, options(1), 0);
    e4.load_state(r, "actor/");
    for (size_t i = 0; i < m->parameters().size(); ++i)
        EXPECT_TRUE(torch::equal(m->parameters()[i], m4->parameters()[i])) << i;

    // Another dtype: the parameters' dtype is checked.
    auto m5 = model::make_random_causal_lm(args, 1, torch::kBFloat16);
    TrainEngine e5(m5, none, options(0), 0);
    expect_io_error([&] { e5.load_state(r, "actor/"); }, {"model.", "Float", "BFloat16"});
}

}  // namespace
}  // namespace rlpt::engine
