// Shard-to-shard weight sync between tensor-parallel layouts (rlpt/comm/weight_reshard.h,
// rlpt/model/reshard_plan.h), at 3, 4 and 6 ranks (tests/mpi/weight_reshard.cmake). For each
// (actor tp, rollout tp) pair that fits the world, the first tp_from ranks hold the "actor"
// model (seed 11) split over tp_from, the next ranks hold "rollout" blocks of tp_to ranks built
// from another seed; after one sync every rollout parameter must equal its slice of the tp = 1
// model bit for bit, and the rollout's logits and greedy generations must match the whole
// model's (logits within 1e-5, tokens identical). Ranks beyond the pair's need sit the case out.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/model/reshard_plan.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"

namespace rlpt::model {
namespace {

// GQA with two KV heads (replicated at tp 4), attention and MLP biases, vocabulary 37 (padded
// at tp 2 and 4); and Qwen2 with one KV head and tied embeddings.
ModelArgs llama_kv2() {
    auto a = tiny_model_args(ModelFamily::kLlama, 37);
    a.hidden_size = 32;
    a.intermediate_size = 48;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;
    a.head_dim = 8;
    a.qkv_bias = a.o_proj_bias = a.mlp_bias = true;
    a.validate();
    return a;
}
ModelArgs qwen2_kv1() {
    auto a = tiny_model_args(ModelFamily::kQwen2, 30);
    a.hidden_size = 32;
    a.intermediate_size = 64;
    a.num_attention_heads = 4;
    a.num_key_value_heads = 1;
    a.head_dim = 8;
    a.tie_word_embeddings = true;
    a.validate();
    return a;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& ref, double tol, const std::string& what) {
    ASSERT_EQ(got.sizes(), ref.sizes()) << what;
    const double scale = std::max(1.0, ref.abs().max().item<double>());
    EXPECT_LE((got.to(torch::kFloat64) - ref.to(torch::kFloat64)).abs().max().item<double>(), tol * scale) << what;
}

// This rank's slice of `full` in `layout` (padding rows zero), as the split model holds it.
torch::Tensor slice_of(const torch::Tensor& full, const torch::Tensor& like, const ShardSpec& s) {
    if (s.dim < 0) return full;
    auto out = torch::zeros_like(like);
    if (s.real() > 0) out.narrow(s.dim, 0, s.real()).copy_(full.narrow(s.dim, s.start, s.real()));
    return out;
}

struct Case {
    int tp_from, tp_to, n_blocks;
};

class WeightReshardTest : public ::testing::Test {
  protected:
    void SetUp() override { torch::set_num_threads(1); }
    comm::Communicator world_ = comm::Communicator::world();

    // Runs one case (ranks beyond its need sit it out).
    void run(const Case& c, const ModelArgs& args, comm::WeightSyncOptions opts, const std::string& what) {
        const int used = c.tp_from + c.n_blocks * c.tp_to, me = world_.rank();
        if (used > world_.size()) GTEST_SKIP() << what << " needs " << used << " ranks";
        auto sync_comm = world_.split(me < used ? 0 : 1, me);
        if (me >= used) return;
        const bool sender = me < c.tp_from;
        const int tp = sender ? c.tp_from : c.tp_to;
        const int block = sender ? -1 : (me - c.tp_from) / c.tp_to;
        auto mp = sync_comm.split(block + 1, me);
        auto tpo = tp > 1 ? TensorParallel::over(mp, torch::kCPU) : nullptr;
        auto model = make_random_causal_lm(args, sender ? 11 : 99, torch::kFloat32, torch::kCPU, tpo);
        auto whole = make_random_causal_lm(args, 11);

        std::vector<std::string> names;
        const auto plan = reshard_plan(*model, model->tp_layout(), args, c.tp_from, c.tp_to, c.n_blocks, &names);
        auto reshard = comm::make_weight_reshard("auto", sync_comm, opts);
        std::vector<torch::Tensor> params;
        for (auto& p : model->named_parameters()) params.push_back(p.value());
        uint64_t version = sender ? 7 : 0;
        reshard->sync(plan, names, params, version);
        EXPECT_EQ(version, 7u) << what;
        EXPECT_EQ(reshard->backend_name(), "mpi");
        const auto& st = reshard->last_stats();
        if (sender) {
            EXPECT_EQ(st.bytes_received, 0) << what;
            return;
        }
        // Every parameter is exactly its slice of the tp = 1 model.
        auto full = whole->named_parameters();
        int64_t local_bytes = 0, full_bytes = 0;
        for (const auto& item : model->named_parameters()) {
            const auto expected = slice_of(full[item.key()], item.value(), shard_spec(item.key(), model->tp_layout()));
            EXPECT_TRUE(torch::equal(item.value(), expected)) << what << " " << item.key();
            local_bytes += item.value().numel() * 4;
            full_bytes += full[item.key()].numel() * 4;
        }
        // It received its slices only (bucket alignment adds at most 16 bytes per piece).
        EXPECT_GT(st.bytes_received, 0) << what;
        EXPECT_LE(st.bytes_received, local_bytes + 16 * st.n_pieces) << what;
        if (c.tp_to > 1) EXPECT_LT(st.bytes_received, full_bytes) << what;
        EXPECT_EQ(st.bytes_sent, 0) << what;
        if (opts.inplace_min_bytes < 1000) EXPECT_GT(st.n_direct_messages, 0) << what;
        if (opts.inplace_min_bytes > (1 << 16)) EXPECT_EQ(st.n_direct_messages, 0) << what;

        // The rollout layout computes what tp = 1 computes.
        torch::NoGradGuard ng;
        auto ids = torch::tensor({{3, 4, 5, 6, 1}, {0, 0, 7, 2, 9}}, torch::kInt64);
        auto mask = torch::tensor({{1, 1, 1, 1, 1}, {0, 0, 1, 1, 1}}, torch::kInt64);
        auto pos = (mask.cumsum(1) - 1).clamp_min(0);
        expect_close(model->forward_logits(ids, mask, pos), whole->forward_logits(ids, mask, pos), 1e-5,
                     what + " logits");
        std::vector<std::vector<int64_t>> prompts{{3, 4, 5}, {7}, {9, 2, 2, 8}};
        rollout::SamplingParams sp;
        sp.greedy = true;
        sp.max_new_tokens = 8;
        auto a = rollout::generate(*model, prompts, {1, 2, 3}, sp);
        auto b = rollout::generate(*whole, prompts, {1, 2, 3}, sp);
        EXPECT_TRUE(torch::equal(a.responses, b.responses)) << what << " greedy tokens";
        expect_close(a.rollout_log_probs, b.rollout_log_probs, 1e-5, what + " rollout log-probs");
    }

    void run_all(const Case& c) {
        const std::string name = "tp " + std::to_string(c.tp_from) + " -> " + std::to_string(c.tp_to) + " x" +
                                 std::to_string(c.n_blocks);
        comm::WeightSyncOptions packed;  // the defaults: the tiny models' pieces are all packed
        comm::WeightSyncOptions direct;
        direct.inplace_min_bytes = 0;  // every row-cut piece straight from / into the tensors
        comm::WeightSyncOptions small;
        small.bucket_bytes = 1000;  // many buckets, pieces cut by rows, one-row buckets
        small.inplace_min_bytes = 512;  // and a mix of direct and packed messages
        small.n_buffers = 1;
        run(c, llama_kv2(), packed, name + " llama kv2");
        run(c, llama_kv2(), direct, name + " llama kv2 direct");
        run(c, qwen2_kv1(), small, name + " qwen2 kv1 small buckets");
    }
};

TEST_F(WeightReshardTest, Tp2ToTp1) { run_all({2, 1, 1}); }
TEST_F(WeightReshardTest, Tp1ToTp2) { run_all({1, 2, 1}); }
TEST_F(WeightReshardTest, Tp2ToTp1TwoBlocks) { run_all({2, 1, 2}); }
TEST_F(WeightReshardTest, Tp1ToThreeTp1Blocks) { run_all({1, 1, 3}); }
TEST_F(WeightReshardTest, Tp2ToTp2) { run_all({2, 2, 1}); }
TEST_F(WeightReshardTest, Tp2ToTp4) { run_all({2, 4, 1}); }
TEST_F(WeightReshardTest, Tp4ToTp2) { run_all({4, 2, 1}); }
TEST_F(WeightReshardTest, Tp4ToTp1TwoBlocks) { run_all({4, 1, 2}); }

// The plan covers every real element of every receiver exactly once, from a rank that holds it.
TEST_F(WeightReshardTest, PlanCoversEachReceiverSliceOnce) {
    if (world_.rank() != 0) return;
    const auto args = llama_kv2();
    for (auto [from, to] : {std::pair{1, 2}, {2, 1}, {2, 4}, {4, 2}, {4, 1}, {1, 4}}) {
        auto m = make_random_causal_lm(args, 1);
        std::vector<std::string> names;
        const auto plan = reshard_plan(*m, m->tp_layout(), args, from, to, 2, &names);
        for (int dst = from; dst < from + 2 * to; ++dst) {
            const auto layout = tp_layout(args, to, (dst - from) % to);
            for (size_t t = 0; t < names.size(); ++t) {
                const ShardSpec s = shard_spec(names[t], layout);
                const auto& full = plan.full_shapes[t];
                // Pieces of one tensor all cut the same dimension (-1: whole tensors).
                int64_t dim = -2;
                for (const auto& p : plan.pieces)
                    if (p.dst == dst && p.tensor == static_cast<int>(t)) dim = p.dim;
                ASSERT_NE(dim, -2) << names[t] << " has no piece for dst " << dst;
                const int64_t want = dim < 0 ? 1 : s.dim < 0 ? full[static_cast<size_t>(dim)] : s.real();
                std::vector<int> hits(static_cast<size_t>(want), 0);
                for (const auto& p : plan.pieces) {
                    if (p.dst != dst || p.tensor != static_cast<int>(t)) continue;
                    ASSERT_LT(p.src, from);
                    ASSERT_EQ(p.dim, dim);
                    if (p.dim < 0) {
                        ++hits[0];
                        continue;
                    }
                    ASSERT_GE(p.dst_offset, 0);
                    ASSERT_LE(p.dst_offset + p.length, want) << names[t];
                    for (int64_t i = 0; i < p.length; ++i) ++hits[static_cast<size_t>(p.dst_offset + i)];
                }
                for (int h : hits) EXPECT_EQ(h, 1) << names[t] << " tp " << from << "->" << to << " dst " << dst;
            }
        }
    }
}

// A receiver whose tensors do not fit the plan: every rank gets a CommError before any payload,
// and the object still works afterwards.
TEST_F(WeightReshardTest, MismatchIsRefusedOnEveryRankAndRecoverable) {
    const Case c{2, 1, 1};
    const int me = world_.rank();
    auto sync_comm = world_.split(me < 3 ? 0 : 1, me);
    if (me >= 3) return;
    const auto args = llama_kv2();
    const bool sender = me < 2;
    auto mp = sync_comm.split(sender ? 0 : 1, me);
    auto tpo = sender ? TensorParallel::over(mp, torch::kCPU) : nullptr;
    auto model = make_random_causal_lm(args, sender ? 11 : 99, torch::kFloat32, torch::kCPU, tpo);
    std::vector<std::string> names;
    const auto plan = reshard_plan(*model, model->tp_layout(), args, c.tp_from, c.tp_to, c.n_blocks, &names);
    auto reshard = comm::make_weight_reshard("mpi", sync_comm, {});
    std::vector<torch::Tensor> params;
    for (auto& p : model->named_parameters()) params.push_back(p.value());
    auto wrong = params;
    if (!sender) wrong[1] = torch::zeros({3, 3});
    uint64_t version = sender ? 5 : 0;
    try {
        reshard->sync(plan, names, wrong, version);
        ADD_FAILURE() << "expected a CommError";
    } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("refused before any payload moved"), std::string::npos) << e.what();
        if (!sender) EXPECT_NE(std::string(e.what()).find("cannot hold piece"), std::string::npos) << e.what();
    }
    EXPECT_EQ(version, sender ? 5u : 0u);
    reshard->sync(plan, names, params, version);
    EXPECT_EQ(version, 5u);
}

}  // namespace
}  // namespace rlpt::model
