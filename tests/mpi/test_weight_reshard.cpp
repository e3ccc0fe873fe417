// Shard-to-shard weight sync between tensor-parallel layouts (rlpt/weights/weight_reshard.h,
// rlpt/weights/reshard_plan.h), at 3, 4 and 6 ranks (tests/mpi/weight_reshard.cmake). For each
// (actor tp, rollout tp) pair that fits the world, the first tp_from ranks hold the "actor"
// model (seed 11) split over tp_from, the next ranks hold "rollout" blocks of tp_to ranks built
// from another seed; after one sync every rollout parameter must equal its slice of the tp = 1
// model bit for bit, and the rollout's logits and greedy generations must match the whole
// model's (logits within the fp32 order bound, tokens identical). Ranks beyond the pair's need sit
// the case out.
//
// ColocatedReshardTest, at 2, 4 and 8 ranks: the hybrid engine's colocated resharding
// (HeldReshard with every rank a source and a destination). Every rank holds the actor (a seed-11 model split over blocks of tp_a
// consecutive ranks, trained by a TrainEngine at ZeRO stage z over the DP ranks, optionally in
// hybrid-shard groups) and a rollout copy in another layout (blocks of tp_r ranks) with no
// storage. After one reshard every rollout parameter must equal its slice of the tp = 1 model bit
// for bit, the rollout's greedy generations must be the whole model's token for token, nothing
// may be gathered (the engine's memory unchanged, the staging within one - deliberately small -
// bucket, so transfers are cut into rows and rounds), a rank receives only what it does not hold
// (nothing at all when it holds the whole actor), and releasing the copy must free all of it.
// DisaggregatedReshardTest, at 4 and 8 ranks: the ZeRO-3 actor's weight sync to rollout ranks of
// their own (HeldReshard with source-only actor ranks and destination-only rollout ranks): every
// rollout parameter is its slice of the tp = 1 model bit for bit (padding rows zeroed over a
// scribbled copy), twice (the second time with the transfer list reused), and no actor rank
// gathers anything (the engine's peak memory after reset_peak_memory plus the exchange's staging
// stays within its shards + one bucket; holding the full parameters is shown to pass it).
// RegionExchangeTest: a transfer list that differs between ranks is refused on every rank before
// anything moves, and the object still works afterwards; strided regions on both ends (column
// slices, a transposed view, more runs than IOV_MAX, the two ends cut into different runs) land
// byte for byte, with single copy and without.
//
// Single copy (process_vm_readv / writev between same-host ranks, src/weights/single_copy.h) is on by default:
// where the test's own probe (cma_works) can read every peer's memory, every message of the
// cases above must go that way and stage nothing; the *WithoutSingleCopy cases turn it off
// (WeightSyncOptions::single_copy, or RLPT_RESHARD_CMA=0 for the colocated one) and must send
// MPI messages only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>

#include "rlpt/comm/mpi.h"
#include "rlpt/comm/shared_arena.h"
#include "rlpt/comm/shared_tensor.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/weights/held_reshard.h"
#include "rlpt/weights/reshard_plan.h"
#include "unit/test_tolerance.h"

namespace rlpt::model {
namespace {

using engine::HeldSlice;
using weights::allocated_parameter_bytes;
using weights::HeldReshard;
using weights::HeldReshardStats;
using weights::HeldSource;
using weights::release_parameter_storage;
using weights::reshard_plan;

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

// fp32 forwards of one model at two tp layouts: the same sums cut into tp partial sums and added
// in another order, so within fp32_order_bound of the terms along the path of a logit of a
// sequence of `seq_len` tokens, relative to max(1, max|ref|) (tests/unit/test_tolerance.h).
void expect_same_forward(const torch::Tensor& got, const torch::Tensor& ref, const ModelArgs& args, int64_t seq_len,
                         const std::string& what) {
    ASSERT_EQ(got.sizes(), ref.sizes()) << what;
    const double bound = tol::fp32_order_bound(tol::transformer_logit_terms(args, seq_len));
    EXPECT_LE(tol::max_abs_diff(got, ref), bound * tol::scale_of(ref)) << what;
}

// This rank's slice of `full` in `layout` (padding rows zero), as the split model holds it.
torch::Tensor slice_of(const torch::Tensor& full, const torch::Tensor& like, const ShardSpec& s) {
    if (s.dim < 0) return full;
    auto out = torch::zeros_like(like);
    if (s.real() > 0) out.narrow(s.dim, 0, s.real()).copy_(full.narrow(s.dim, s.start, s.real()));
    return out;
}

// Every parameter of `m` is its slice of `whole`'s (padding rows zero), bit for bit.
void expect_slices_of(CausalLM& m, CausalLM& whole, const std::string& what) {
    auto full = whole.named_parameters();
    for (const auto& item : m.named_parameters()) {
        const auto expected = slice_of(full[item.key()], item.value(), shard_spec(item.key(), m.tp_layout()));
        EXPECT_TRUE(torch::equal(item.value(), expected)) << what << " " << item.key();
    }
}

// `m`'s greedy generations (collective over its tp block) are `whole`'s token for token.
void expect_same_greedy(CausalLM& m, CausalLM& whole, const std::string& what) {
    torch::NoGradGuard ng;
    std::vector<std::vector<int64_t>> prompts{{3, 4, 5}, {7}, {9, 2, 2, 8}};
    rollout::SamplingParams sp;
    sp.greedy = true;
    sp.max_new_tokens = 8;
    auto a = rollout::generate(m, prompts, {1, 2, 3}, sp);
    auto b = rollout::generate(whole, prompts, {1, 2, 3}, sp);
    EXPECT_TRUE(torch::equal(a.responses, b.responses)) << what << " greedy tokens";
    expect_same_forward(a.rollout_log_probs, b.rollout_log_probs, whole.args(), 4 + sp.max_new_tokens,
                        what + " rollout log-probs");
}

// Whether every rank of `comm` can read every other rank's memory with process_vm_readv (the
// test's own probe of a random word, independent of the transport's). Collective.
bool cma_works(const comm::Communicator& comm) {
    static uint64_t word = std::random_device{}() | (uint64_t(1) << 40);
    struct Card {
        int64_t pid;
        uint64_t address, word;
    };
    const Card mine{getpid(), reinterpret_cast<uint64_t>(&word), word};
    std::vector<Card> all(static_cast<size_t>(comm.size()));
    comm.allgather(&mine, all.data(), sizeof(Card));
    int64_t ok = 1;
    for (const Card& c : all) {
        uint64_t got = 0;
        iovec local{&got, sizeof(got)}, remote{reinterpret_cast<void*>(c.address), sizeof(got)};
        if (process_vm_readv(static_cast<pid_t>(c.pid), &local, 1, &remote, 1, 0) != 8 || got != c.word) ok = 0;
    }
    return comm.allreduce_min_i64(ok) == 1;
}

// Sets RLPT_RESHARD_CMA=0 for its lifetime.
struct SingleCopyOffByEnvironment {
    SingleCopyOffByEnvironment() { setenv("RLPT_RESHARD_CMA", "0", 1); }
    ~SingleCopyOffByEnvironment() { unsetenv("RLPT_RESHARD_CMA"); }
};

// Sets RLPT_SHARED_WEIGHTS=0 for its lifetime: no arenas made, no peer's arena mapped.
struct ArenasOffByEnvironment {
    ArenasOffByEnvironment() { setenv("RLPT_SHARED_WEIGHTS", "0", 1); }
    ~ArenasOffByEnvironment() { unsetenv("RLPT_SHARED_WEIGHTS"); }
};

struct Case {
    int tp_from, tp_to, n_blocks;
};

// Where a case's tensors live: ordinary memory (the single copy uses CMA); shared arenas (the
// copying end maps the peer's arena, every single-copy message a memcpy); shared arenas with
// RLPT_SHARED_WEIGHTS=0 during the sync (CMA into and out of arena memory).
enum class Arenas { kNone, kShared, kSharedButOff };

class WeightReshardTest : public ::testing::Test {
  protected:
    void SetUp() override { torch::set_num_threads(1); }
    comm::Communicator world_ = comm::Communicator::world();

    // Runs one case (ranks beyond its need sit it out).
    void run(const Case& c, const ModelArgs& args, weights::WeightSyncOptions opts, const std::string& what,
             Arenas arenas = Arenas::kNone) {
        const int used = c.tp_from + c.n_blocks * c.tp_to, me = world_.rank();
        if (used > world_.size()) GTEST_SKIP() << what << " needs " << used << " ranks";
        auto sync_comm = world_.split(me < used ? 0 : 1, me);
        if (me >= used) return;
        const bool single_copy = opts.single_copy && cma_works(sync_comm);
        const bool sender = me < c.tp_from;
        const int tp = sender ? c.tp_from : c.tp_to;
        const int block = sender ? -1 : (me - c.tp_from) / c.tp_to;
        auto mp = sync_comm.split(block + 1, me);
        auto tpo = tp > 1 ? TensorParallel::over(mp, torch::kCPU) : nullptr;
        auto model = make_random_causal_lm(args, sender ? 11 : 99, torch::kFloat32, torch::kCPU, tpo);
        auto whole = make_random_causal_lm(args, 11);

        std::vector<std::string> names;
        const auto plan = reshard_plan(*model, model->tp_layout(), args, c.tp_from, c.tp_to, c.n_blocks, &names);
        auto reshard = weights::make_weight_reshard("auto", sync_comm, opts);
        std::vector<torch::Tensor> params;
        for (auto& p : model->named_parameters()) params.push_back(p.value());
        if (arenas != Arenas::kNone) {
            auto shared = params;
            EXPECT_TRUE(comm::share_tensors(shared, "test-params")) << what;
            for (const auto& p : params)
                EXPECT_NE(comm::arena_of(p.data_ptr(), static_cast<size_t>(p.numel() * 4)).id, 0u) << what;
        }
        uint64_t version = sender ? 7 : 0;
        {
            std::unique_ptr<ArenasOffByEnvironment> off;
            if (arenas == Arenas::kSharedButOff) off = std::make_unique<ArenasOffByEnvironment>();
            reshard->sync(plan, names, params, version);
        }
        EXPECT_EQ(version, 7u) << what;
        EXPECT_EQ(reshard->backend_name(), "mpi");
        const auto& st = reshard->last_stats();
        if (single_copy) {  // every message read from the sender's memory, nothing staged
            EXPECT_EQ(st.n_single_copy_messages, st.n_messages) << what;
            EXPECT_EQ(st.packed_bytes + st.unpacked_bytes, 0) << what;
        } else if (!opts.single_copy) {
            EXPECT_EQ(st.n_single_copy_messages, 0) << what;
        }
        // Both ends count a single-copy message, only the copying end a mapped one: with arenas
        // every single-copy message went through a mapping, else none did.
        const int64_t single_sum = sync_comm.allreduce_sum_i64(st.n_single_copy_messages);
        const int64_t mapped_sum = sync_comm.allreduce_sum_i64(st.n_mapped_messages);
        if (arenas == Arenas::kShared && single_copy) {
            EXPECT_GT(mapped_sum, 0) << what;
            EXPECT_EQ(2 * mapped_sum, single_sum) << what;
        } else {
            EXPECT_EQ(mapped_sum, 0) << what;
        }
        if (sender) {
            EXPECT_EQ(st.bytes_received, 0) << what;
            return;
        }
        // Every parameter is exactly its slice of the tp = 1 model.
        expect_slices_of(*model, *whole, what);
        auto full = whole->named_parameters();
        int64_t local_bytes = 0, full_bytes = 0;
        for (const auto& item : model->named_parameters()) {
            local_bytes += item.value().numel() * 4;
            full_bytes += full[item.key()].numel() * 4;
        }
        // It received its slices only.
        EXPECT_GT(st.bytes_received, 0) << what;
        EXPECT_LE(st.bytes_received, local_bytes) << what;
        if (c.tp_to > 1) EXPECT_LT(st.bytes_received, full_bytes) << what;
        EXPECT_EQ(st.bytes_sent, 0) << what;
        EXPECT_GT(st.n_direct_messages, 0) << what;                                   // row slices land in place
        if (opts.bucket_bytes < 4096) EXPECT_GT(st.n_messages, st.n_pieces) << what;  // pieces cut into rows

        // The rollout layout computes what tp = 1 computes.
        torch::NoGradGuard ng;
        auto ids = torch::tensor({{3, 4, 5, 6, 1}, {0, 0, 7, 2, 9}}, torch::kInt64);
        auto mask = torch::tensor({{1, 1, 1, 1, 1}, {0, 0, 1, 1, 1}}, torch::kInt64);
        auto pos = (mask.cumsum(1) - 1).clamp_min(0);
        expect_same_forward(model->forward_logits(ids, mask, pos), whole->forward_logits(ids, mask, pos), whole->args(),
                            ids.size(1), what + " logits");
        expect_same_greedy(*model, *whole, what);
    }

    void run_all(const Case& c) {
        const std::string name =
            "tp " + std::to_string(c.tp_from) + " -> " + std::to_string(c.tp_to) + " x" + std::to_string(c.n_blocks);
        weights::WeightSyncOptions defaults;
        weights::WeightSyncOptions small;
        small.bucket_bytes = 1000;  // pieces cut by rows, rows wider than a bucket alone, many rounds
        run(c, llama_kv2(), defaults, name + " llama kv2, shared arenas", Arenas::kShared);
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
// 8 ranks: every rank of the world in the sync.
TEST_F(WeightReshardTest, Tp4ToTp2TwoBlocks) { run_all({4, 2, 2}); }
TEST_F(WeightReshardTest, Tp2ToThreeTp2Blocks) { run_all({2, 2, 3}); }
// MPI messages and staging only: the column slices are packed on the sender (tp 2 -> 4) and
// unpacked on the receiver (tp 4 -> 2).
TEST_F(WeightReshardTest, WithoutSingleCopy) {
    weights::WeightSyncOptions off;
    off.single_copy = false;
    run({2, 4, 1}, llama_kv2(), off, "tp 2 -> 4 without single copy");
    off.bucket_bytes = 1000;
    run({4, 2, 1}, qwen2_kv1(), off, "tp 4 -> 2 without single copy, small buckets", Arenas::kShared);
}
// Tensors in shared arenas, mapping turned off in the environment: CMA moves every message.
TEST_F(WeightReshardTest, SharedArenasOffByEnvironment) {
    weights::WeightSyncOptions defaults;
    run({2, 1, 1}, qwen2_kv1(), defaults, "tp 2 -> 1, arenas not mapped", Arenas::kSharedButOff);
    run({2, 4, 1}, llama_kv2(), defaults, "tp 2 -> 4, arenas not mapped", Arenas::kSharedButOff);
}

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
    auto reshard = weights::make_weight_reshard("mpi", sync_comm, {});
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

// A hand-made plan over every rank: senders [0, s) hold row slices of tensor 0 ([4, 6] each of
// [4s, 6]) and column slices of tensor 1 ([3, 2] each of [3, 2s]); every receiver holds both whole
// (the column pieces land strided). Sender k's values in round `round`: `round * 1000 + 100 * k + i`.
struct HandPlan {
    int n = 0, s = 0, me = 0;
    weights::ReshardPlan plan;
    std::vector<std::string> names{"rows", "cols"};
    std::vector<torch::Tensor> tensors;
    explicit HandPlan(const comm::Communicator& world) : n(world.size()), s(world.size() / 2), me(world.rank()) {
        plan.n_senders = s;
        plan.full_shapes = {{4 * s, 6}, {3, 2 * s}};
        for (int k = 0; k < s; ++k) {
            for (int r = s; r < n; ++r) {
                plan.pieces.push_back({0, k, r, 0, 0, 4 * k, 4});
                plan.pieces.push_back({1, k, r, 1, 0, 2 * k, 2});
            }
        }
        tensors = sender() ? std::vector<torch::Tensor>{torch::zeros({4, 6}), torch::zeros({3, 2})}
                           : std::vector<torch::Tensor>{torch::full({4 * s, 6}, -1.0f), torch::full({3, 2 * s}, -1.0f)};
    }
    bool sender() const { return me < s; }
    static torch::Tensor values(int round, int k, std::vector<int64_t> shape) {
        int64_t numel = 1;
        for (int64_t d : shape) numel *= d;
        return (torch::arange(numel, torch::kFloat32) + 1000.0 * round + 100.0 * k).view(shape);
    }
    // Senders write round `round`'s values in place (same memory as before).
    void fill(int round) {
        if (!sender()) return;
        tensors[0].copy_(values(round, me, {4, 6}));
        tensors[1].copy_(values(round, me, {3, 2}));
    }
    // A receiver's tensors hold round `round`'s values of every sender.
    void expect_landed(int round, const std::string& what) const {
        if (sender()) return;
        for (int k = 0; k < s; ++k) {
            EXPECT_TRUE(torch::equal(tensors[0].narrow(0, 4 * k, 4), values(round, k, {4, 6})))
                << what << " rows of " << k;
            EXPECT_TRUE(torch::equal(tensors[1].narrow(1, 2 * k, 2), values(round, k, {3, 2})))
                << what << " cols of " << k;
        }
    }
};

// The cached message list (a second sync of the same plan and tensors skips recomputing it and,
// between single-copy pairs, resending the layouts) moves the right bytes, and never hides a
// change: a re-allocated tensor on one rank makes every rank recompute; another shape or another
// plan on one rank after cached syncs is refused on every rank, naming that rank, nothing moved;
// with the tensors in shared arenas, a new arena at a freed one's address is new memory.
TEST_F(WeightReshardTest, CachedSyncMovesRightBytesAndNeverHidesAChange) {
    if (world_.size() < 2) GTEST_SKIP() << "needs 2 ranks";
    for (const Arenas arenas : {Arenas::kNone, Arenas::kShared})
        for (const bool single_copy : {true, false}) {
            if (arenas == Arenas::kShared && !single_copy) continue;
            const std::string mode = !single_copy                ? "MPI only"
                                     : arenas == Arenas::kShared ? "single copy, arenas"
                                                                 : "single copy";
            weights::WeightSyncOptions opts;
            opts.single_copy = single_copy;
            HandPlan h(world_);
            if (arenas == Arenas::kShared) EXPECT_TRUE(comm::share_tensors(h.tensors, "test-hand-plan")) << mode;
            const int bad = world_.size() - 1;  // a receiver
            auto reshard = weights::make_weight_reshard("mpi", world_, opts);
            uint64_t version = 0;
            auto sync_round = [&](int round, bool expect_reused, const std::string& what) {
                h.fill(round);
                if (h.sender()) version = static_cast<uint64_t>(round);
                reshard->sync(h.plan, h.names, h.tensors, version);
                EXPECT_EQ(version, static_cast<uint64_t>(round)) << what;
                EXPECT_EQ(reshard->last_stats().reused_transfers, expect_reused) << what;
                h.expect_landed(round, what);
            };
            sync_round(1, false, mode + " first sync");
            sync_round(2, true, mode + " second sync (cached)");
            sync_round(3, true, mode + " third sync (cached)");
            // One receiver re-allocates a tensor (same shape, new memory): every rank recomputes.
            if (world_.rank() == bad) h.tensors[0] = torch::full({4 * h.s, 6}, -1.0f);
            sync_round(4, false, mode + " after a re-allocated tensor");
            sync_round(5, true, mode + " cached again");
            // Another shape on one rank after cached syncs: refused on every rank, nothing moved.
            auto expect_refused = [&](const weights::ReshardPlan& plan, const std::vector<torch::Tensor>& tensors,
                                      const std::string& problem, const std::string& what) {
                h.fill(6);
                uint64_t v = h.sender() ? 6 : 5;
                std::vector<torch::Tensor> t = tensors;
                try {
                    reshard->sync(plan, h.names, t, v);
                    ADD_FAILURE() << what << ": expected a CommError";
                } catch (const CommError& e) {
                    const std::string msg = e.what();
                    EXPECT_NE(msg.find("refused before any payload moved"), std::string::npos) << what << ": " << msg;
                    EXPECT_NE(msg.find(fmt::format("rank(s) {} disagree", bad)), std::string::npos)
                        << what << ": " << msg;
                    EXPECT_NE(msg.find(fmt::format("rank {}: ", bad)), std::string::npos) << what << ": " << msg;
                    EXPECT_NE(msg.find(problem), std::string::npos) << what << ": " << msg;
                }
                EXPECT_EQ(v, h.sender() ? 6u : 5u) << what;
                h.expect_landed(5, what + " (nothing moved)");
            };
            auto reshaped = h.tensors;
            if (world_.rank() == bad) reshaped[0] = torch::zeros({4 * h.s, 7});  // rows of 7, not 6
            expect_refused(h.plan, reshaped, "cannot hold piece", mode + " another shape on one rank");
            // Another plan on one rank (valid locally: one column of each column piece), after cached syncs.
            auto other = h.plan;
            for (auto& p : other.pieces)
                if (world_.rank() == bad && p.tensor == 1) p.length = 1;
            expect_refused(other, h.tensors, "first difference", mode + " another plan on one rank");
            // The unchanged plan and tensors: the cache of syncs 4-5 is still right.
            sync_round(7, true, mode + " cached after the refusals");
            if (arenas != Arenas::kShared) continue;
            reshaped.clear();
            // A sender frees its arena and moves its tensors into a new one, which the kernel
            // usually maps at the freed one's address (same data pointers, sizes and strides): the
            // receivers' cached layouts and mappings name the old arena (whose pages stay alive while
            // mapped), so every rank must recompute, and the bytes must be read from the new memory.
            if (world_.rank() == 0) {
                std::vector<size_t> in_arena;
                for (size_t i = 0; i < h.tensors.size(); ++i)
                    if (comm::arena_of(h.tensors[i].data_ptr(), 4).id != 0) in_arena.push_back(i);
                EXPECT_FALSE(in_arena.empty()) << mode;
                const void* old_address = in_arena.empty() ? nullptr : h.tensors[in_arena[0]].data_ptr();
                for (size_t i : in_arena) h.tensors[i] = h.tensors[i].clone();  // the old arena's last tensors go
                EXPECT_EQ(comm::arena_of(old_address, 4).id, 0u) << mode << ": the old arena is still live";
                std::vector<torch::Tensor> moved;
                for (size_t i : in_arena) moved.push_back(h.tensors[i]);
                EXPECT_TRUE(comm::share_tensors(moved, "test-hand-plan-2")) << mode;
                const bool same = !in_arena.empty() && h.tensors[in_arena[0]].data_ptr() == old_address;
                std::printf("[ info ] rank %d: the new arena %s the freed one's address\n", world_.rank(),
                            same ? "reuses" : "does not reuse");
            }
            sync_round(8, false, mode + " after a new arena on one rank");
            sync_round(9, true, mode + " cached with the new arena");
        }
}

// The actor's training engine at ZeRO stage `zero` (hybrid-shard groups of `shard_group`, 0: all
// DP ranks) over `dp`, with its tp block `mp` when it is split.
std::unique_ptr<engine::TrainEngine> actor_engine(const std::shared_ptr<CausalLM>& actor, const comm::Communicator& dp,
                                                  const comm::Communicator& mp, int zero, int shard_group) {
    engine::OptimOptions opts;
    opts.zero_stage = zero;
    opts.shard_group_size = shard_group;
    engine::TensorParallelInfo tpi;
    if (actor->tp_layout().tp > 1) {
        tpi.block = &mp;
        tpi.not_counted = uncounted_parameters(*actor, actor->tp_layout());
    }
    return std::make_unique<engine::TrainEngine>(actor, dp, opts, 5, tpi);
}

struct ColocatedCase {
    int tp_a, zero_stage, tp_r;
    int shard_group = 0;      // OptimOptions::shard_group_size (0: all DP ranks)
    bool single_copy = true;  // false: RLPT_RESHARD_CMA=0 on every rank
};

class ColocatedReshardTest : public ::testing::Test {
  protected:
    void SetUp() override { torch::set_num_threads(1); }
    comm::Communicator world_ = comm::Communicator::world();

    void run(const ColocatedCase& c) {
        const int n = world_.size(), me = world_.rank();
        const std::string what = "actor tp " + std::to_string(c.tp_a) + " ZeRO-" + std::to_string(c.zero_stage) +
                                 (c.shard_group > 0 ? " in groups of " + std::to_string(c.shard_group) : "") +
                                 " -> rollout tp " + std::to_string(c.tp_r) + " on " + std::to_string(n) + " ranks";
        if (n % c.tp_a != 0 || n % c.tp_r != 0 || (c.shard_group > 0 && c.shard_group >= n / c.tp_a))
            GTEST_SKIP() << what;
        ModelArgs args = llama_kv2();  // with four decoder layers
        args.num_hidden_layers = 4;
        auto actor_mp = world_.split(me / c.tp_a, me % c.tp_a);
        auto actor_dp = world_.split(me % c.tp_a, me / c.tp_a);
        auto rollout_mp = world_.split(me / c.tp_r, me % c.tp_r);
        auto actor_tp = c.tp_a > 1 ? TensorParallel::over(actor_mp, torch::kCPU) : nullptr;
        auto rollout_tp = c.tp_r > 1 ? TensorParallel::over(rollout_mp, torch::kCPU) : nullptr;

        auto actor = make_random_causal_lm(args, 11, torch::kFloat32, torch::kCPU, actor_tp);
        auto engine_ptr = actor_engine(actor, actor_dp, actor_mp, c.zero_stage, c.shard_group);
        engine::TrainEngine& engine = *engine_ptr;
        auto rollout = std::make_shared<CausalLM>(args, torch::kFloat32, torch::kCPU, rollout_tp);
        release_parameter_storage(*rollout);
        ASSERT_EQ(allocated_parameter_bytes(*rollout), 0) << what;
        weights::WeightSyncOptions xopts;
        xopts.bucket_bytes = 64 << 10;  // smaller than the largest tensors: rows cut, several rounds
        std::unique_ptr<SingleCopyOffByEnvironment> off;
        if (!c.single_copy) off = std::make_unique<SingleCopyOffByEnvironment>();
        auto exchange = weights::make_region_exchange("mpi", world_, xopts);
        const bool single_copy = c.single_copy && cma_works(world_);

        auto whole = make_random_causal_lm(args, 11);
        const int64_t before = engine.memory_bytes().params;
        engine.reset_peak_memory();
        const auto& src_layout = actor->tp_layout();
        HeldReshard resharder(args, *exchange);
        const HeldSource src{engine.held_parameters(), src_layout.tp, src_layout.rank};
        const auto st = resharder.run(&src, rollout.get(), rollout->tp_layout());
        EXPECT_TRUE(st.planned) << what;

        int64_t rollout_bytes = 0, real_bytes = 0;
        for (const auto& item : rollout->named_parameters()) {
            const auto& p = item.value();
            rollout_bytes += p.numel() * p.element_size();
            const auto spec = shard_spec(item.key(), rollout->tp_layout());
            real_bytes += (spec.dim < 0 ? p.numel() : p.numel() / spec.length * spec.real()) * p.element_size();
        }
        EXPECT_EQ(st.dst_bytes, rollout_bytes) << what;
        // Every real element once (copied, or the rank's own held memory), padding zeroed.
        EXPECT_EQ(st.copied_bytes + st.aliased_bytes, real_bytes) << what;
        EXPECT_EQ(allocated_parameter_bytes(*rollout), rollout_bytes) << what;
        // Aliased: the rollout tensors whose memory is inside what the rank holds (by address).
        const auto held_now = engine.held_parameters();
        const auto inside_held = [&](const torch::Tensor& t) {
            const auto* p = static_cast<const char*>(t.data_ptr());
            return std::any_of(held_now.begin(), held_now.end(), [&](const HeldSlice& h) {
                const auto* b = static_cast<const char*>(h.data.data_ptr());
                return h.data.numel() > 0 && p >= b && p + t.nbytes() <= b + h.data.nbytes();
            });
        };
        int64_t aliased = 0;
        for (const auto& p : rollout->parameters())
            if (inside_held(p)) aliased += p.numel() * p.element_size();
        EXPECT_EQ(st.aliased_bytes, aliased) << what;
        // Row slices of a tp 1 actor lie whole in its tensors (ZeRO-0) or, for some, in a shard.
        if (c.tp_a == 1 && c.tp_r > 1) EXPECT_GT(world_.allreduce_sum_i64(st.aliased_bytes), 0) << what;
        // Nothing gathered: the engine allocated nothing, the staging stayed within one bucket.
        EXPECT_EQ(engine.memory_bytes().params, before) << what;
        EXPECT_LE(engine.peak_memory_bytes(), engine.memory_bytes().total()) << what;
        EXPECT_LE(st.staging_bytes, xopts.bucket_bytes) << what;
        const bool holds_whole_actor = c.tp_a == 1 && c.zero_stage < 3;
        if (holds_whole_actor) {
            EXPECT_EQ(st.received_bytes, 0) << what;
            EXPECT_EQ(st.sent_bytes, 0) << what;
        } else {
            EXPECT_GT(world_.allreduce_sum_i64(st.received_bytes), 0) << what;
            EXPECT_LT(st.received_bytes, real_bytes) << what;  // never what the rank holds itself
        }
        EXPECT_EQ(world_.allreduce_sum_i64(st.received_bytes), world_.allreduce_sum_i64(st.sent_bytes)) << what;
        const auto& xs = exchange->last_stats();
        if (single_copy) {
            EXPECT_EQ(xs.n_single_copy_messages, xs.n_messages) << what;
            EXPECT_EQ(xs.packed_bytes + xs.unpacked_bytes + xs.staging_bytes, 0) << what;
            // The actor's parameters / shards are in arenas, the rollout copy is not: every
            // message is copied by its rollout (receiving) end through its mapping of the actor's
            // arena (counted by both ends as single copy, by the copying end as mapped), none
            // pushed by CMA into the fresh rollout copy.
            if (comm::shared_arenas_enabled())
                EXPECT_EQ(2 * world_.allreduce_sum_i64(xs.n_mapped_messages),
                          world_.allreduce_sum_i64(xs.n_single_copy_messages))
                    << what;
        } else if (!c.single_copy) {
            EXPECT_EQ(xs.n_single_copy_messages, 0) << what;
        }

        expect_slices_of(*rollout, *whole, what);
        expect_same_greedy(*rollout, *whole, what);

        release_parameter_storage(*rollout);
        EXPECT_EQ(allocated_parameter_bytes(*rollout), 0) << what;
        // The actor is untouched and usable: a second reshard (the transfer list reused, the
        // regions bound to the new storage) gives the same values.
        const auto again = resharder.run(&src, rollout.get(), rollout->tp_layout());
        EXPECT_FALSE(again.planned) << what;
        EXPECT_EQ(again.copied_bytes + again.aliased_bytes, real_bytes) << what;
        expect_slices_of(*rollout, *whole, what + " again");
        release_parameter_storage(*rollout);
        check_lent_windows(c, what, *actor, engine, *rollout, rollout_tp, resharder, *whole, actor_mp, actor_dp,
                           real_bytes);
    }

    // The window as the trainer runs it (roles/rollout.cpp): the rollout copy in the actor's lent
    // gradient buffers, released before the next zero_grad(). Training interleaved with such
    // windows must follow an engine that never lent anything bit for bit, and the last window
    // must equal a fill from that engine.
    void check_lent_windows(const ColocatedCase& c, const std::string& what, CausalLM& actor,
                            engine::TrainEngine& engine, CausalLM& rollout,
                            std::shared_ptr<const TensorParallel> rollout_tp, HeldReshard& resharder, CausalLM& whole,
                            const comm::Communicator& actor_mp, const comm::Communicator& actor_dp,
                            int64_t real_bytes) {
        const auto& src_layout = actor.tp_layout();
        auto twin = make_random_causal_lm(actor.args(), 11, torch::kFloat32, torch::kCPU,
                                          c.tp_a > 1 ? TensorParallel::over(actor_mp, torch::kCPU) : nullptr);
        auto twin_engine = actor_engine(twin, actor_dp, actor_mp, c.zero_stage, c.shard_group);
        engine::SequenceBatch seq;
        seq.input_ids = torch::tensor({{3, 4, 5, 6, 1}, {0, 0, 7, 2, 9}}, torch::kInt64);
        seq.attention_mask = torch::tensor({{1, 1, 1, 1, 1}, {0, 0, 1, 1, 1}}, torch::kInt64);
        seq.position_ids = (seq.attention_mask.cumsum(1) - 1).clamp_min(0);
        seq.response_length = 3;
        const auto train = [&](CausalLM& m, engine::TrainEngine& e) {  // through the vocabulary-parallel head
            e.zero_grad();
            (engine::compute_log_probs(m, seq, 1.0, false).log_probs.sum() * -0.1).backward();
            e.step();
        };
        const auto lent_window = [&](const std::string& when) {
            const HeldSource src{engine.held_parameters(), src_layout.tp, src_layout.rank};
            auto lease = engine.lend_gradient_memory();
            ASSERT_FALSE(lease.spans.empty()) << what;
            int64_t lent = 0;
            for (const auto& sp : lease.spans) lent += sp.numel();
            const auto st = resharder.run(&src, &rollout, rollout.tp_layout(), lease);
            EXPECT_EQ(st.copied_bytes + st.aliased_bytes, real_bytes) << what << when;
            EXPECT_GT(st.scratch_bytes, 0) << what << when;
            // What is not aliased lands in the lent buffers while they have room (64-byte aligned).
            if (st.dst_bytes - st.aliased_bytes + 64 * 64 <= lent)
                EXPECT_EQ(st.scratch_bytes, st.dst_bytes - st.aliased_bytes) << what << when;
            EXPECT_THROW(engine.lend_gradient_memory(), InternalError) << what << when;
        };
        for (int step = 0; step < 2; ++step) {
            const std::string when = " lent window " + std::to_string(step);
            lent_window(when);
            if (step == 0) expect_slices_of(rollout, whole, what + when);
            // The copy lives in the gradient buffers: zeroing them now is refused, on each rank.
            EXPECT_THROW(engine.zero_grad(), InternalError) << what << when;
            release_parameter_storage(rollout);
            if (step == 1) {  // lent and released, but not zeroed: the step refuses
                engine.lend_gradient_memory();
                EXPECT_THROW(engine.step(), InternalError) << what << when;
            }
            train(actor, engine);
            train(*twin, *twin_engine);
            const auto a = engine.held_parameters(), b = twin_engine->held_parameters();
            ASSERT_EQ(a.size(), b.size()) << what;
            for (size_t i = 0; i < a.size(); ++i)
                EXPECT_TRUE(torch::equal(a[i].data, b[i].data)) << what << when << " then a step: " << a[i].name;
        }
        lent_window(" after training");
        auto rollout_twin = std::make_shared<CausalLM>(actor.args(), torch::kFloat32, torch::kCPU, rollout_tp);
        release_parameter_storage(*rollout_twin);
        weights::WeightSyncOptions xopts;
        auto exchange = weights::make_region_exchange("mpi", world_, xopts);
        HeldReshard twin_resharder(actor.args(), *exchange);
        const HeldSource twin_src{twin_engine->held_parameters(), src_layout.tp, src_layout.rank};
        twin_resharder.run(&twin_src, rollout_twin.get(), rollout_twin->tp_layout());
        auto want = rollout_twin->named_parameters();
        for (const auto& item : rollout.named_parameters())
            EXPECT_TRUE(torch::equal(item.value(), want[item.key()])) << what << " after training: " << item.key();
        release_parameter_storage(rollout);
        engine.zero_grad();
        // A fill that fails (rank 0's held slices under another name) is refused on every rank and
        // frees what it gave the rollout copy: the lease ends, zero_grad() works.
        auto held = engine.held_parameters();
        if (world_.rank() == 0) held[0].name = "not." + held[0].name;
        const HeldSource bad{held, src_layout.tp, src_layout.rank};
        EXPECT_THROW(resharder.run(&bad, &rollout, rollout.tp_layout(), engine.lend_gradient_memory()), InternalError)
            << what;
        EXPECT_EQ(allocated_parameter_bytes(rollout), 0) << what;
        EXPECT_NO_THROW(engine.zero_grad()) << what;
    }
};

TEST_F(ColocatedReshardTest, Zero3Tp1ToTp2) { run({1, 3, 2}); }
TEST_F(ColocatedReshardTest, Zero0Tp1ToTp2) { run({1, 0, 2}); }
TEST_F(ColocatedReshardTest, Zero3Tp2ToTp1) { run({2, 3, 1}); }
TEST_F(ColocatedReshardTest, Zero2Tp2ToTp1) { run({2, 2, 1}); }
TEST_F(ColocatedReshardTest, Zero3Tp1ToTp4) { run({1, 3, 4}); }
TEST_F(ColocatedReshardTest, Zero3Tp2ToTp4) { run({2, 3, 4}); }
TEST_F(ColocatedReshardTest, Zero1Tp4ToTp2) { run({4, 1, 2}); }
TEST_F(ColocatedReshardTest, Zero3HybridShardTp1ToTp2) { run({1, 3, 2, 2}); }
TEST_F(ColocatedReshardTest, Zero3Tp4ToTp1) { run({4, 3, 1}); }
TEST_F(ColocatedReshardTest, Zero3Tp2ToTp1WithoutSingleCopy) { run({2, 3, 1, 0, false}); }
TEST_F(ColocatedReshardTest, Zero3Tp1ToTp2WithoutSingleCopy) { run({1, 3, 2, 0, false}); }

// The ZeRO-3 actor's sync to rollout ranks of their own: actor tp_a x dp_a at ZeRO-3 (optionally
// in hybrid-shard groups) on the first ranks, n_r rollout ranks in blocks of tp_r after them.
struct DisaggregatedCase {
    int tp_a, dp_a, tp_r, n_r;
    int shard_group = 0;
};

class DisaggregatedReshardTest : public ::testing::Test {
  protected:
    void SetUp() override { torch::set_num_threads(1); }
    comm::Communicator world_ = comm::Communicator::world();

    void run(const DisaggregatedCase& c) {
        const int n_actor = c.tp_a * c.dp_a, used = n_actor + c.n_r, me = world_.rank();
        const std::string what = "actor ZeRO-3 tp " + std::to_string(c.tp_a) + " x dp " + std::to_string(c.dp_a) +
                                 (c.shard_group > 0 ? " in groups of " + std::to_string(c.shard_group) : "") + " -> " +
                                 std::to_string(c.n_r) + " rollout ranks at tp " + std::to_string(c.tp_r);
        if (used > world_.size()) GTEST_SKIP() << what << " needs " << used << " ranks";
        auto group = world_.split(me < used ? 0 : 1, me);
        if (me >= used) return;
        const bool is_actor = me < n_actor;
        ModelArgs args = llama_kv2();
        args.num_hidden_layers = 4;
        auto role = group.split(is_actor ? 0 : 1, me);
        const int tp = is_actor ? c.tp_a : c.tp_r, rr = role.rank();
        auto mp = role.split(rr / tp, rr % tp);
        auto dp = role.split(rr % tp, rr / tp);
        auto tpo = tp > 1 ? TensorParallel::over(mp, torch::kCPU) : nullptr;
        weights::WeightSyncOptions xopts;
        xopts.bucket_bytes = 16 << 10;  // below a full model's bytes: rows cut, several rounds
        auto exchange = weights::make_region_exchange("mpi", group, xopts);
        HeldReshard resharder(args, *exchange);
        auto whole = make_random_causal_lm(args, 11);

        HeldReshardStats st;
        if (is_actor) {
            auto actor = make_random_causal_lm(args, 11, torch::kFloat32, torch::kCPU, tpo);
            auto engine_ptr = actor_engine(actor, dp, mp, 3, c.shard_group);
            engine::TrainEngine& engine = *engine_ptr;
            const auto before = engine.memory_bytes();
            engine.reset_peak_memory();
            const HeldSource src{engine.held_parameters(), actor->tp_layout().tp, actor->tp_layout().rank};
            st = resharder.run(&src, nullptr, {});
            EXPECT_TRUE(st.planned) << what;
            EXPECT_EQ(st.received_bytes, 0) << what;
            EXPECT_EQ(st.dst_bytes, 0) << what;
            // Nothing gathered: the engine's peak stays at its shards (+ its gradient and optimizer
            // slices), the exchange stages at most one bucket on top.
            EXPECT_EQ(engine.memory_bytes().params, before.params) << what;
            EXPECT_LE(st.staging_bytes, xopts.bucket_bytes) << what;
            EXPECT_LE(engine.peak_memory_bytes() + st.staging_bytes, before.total() + xopts.bucket_bytes) << what;
            const auto again = resharder.run(&src, nullptr, {});
            EXPECT_FALSE(again.planned) << what;
            // The same measure sees a gather: holding the full parameters passes shards + one bucket.
            { const auto hold = engine.hold_full_parameters(); }
            EXPECT_GT(engine.peak_memory_bytes(), before.total() + xopts.bucket_bytes) << what;
        } else {
            auto rollout = make_random_causal_lm(args, 99, torch::kFloat32, torch::kCPU, tpo);
            {  // as the rollout role keeps its own copy (roles/rollout.cpp): in a shared arena
                std::vector<torch::Tensor> params;
                for (auto& p : rollout->parameters()) params.push_back(p);
                EXPECT_TRUE(comm::share_tensors(params, "test-rollout")) << what;
            }
            int64_t real_bytes = 0;
            for (const auto& item : rollout->named_parameters()) {
                const auto spec = shard_spec(item.key(), rollout->tp_layout());
                const auto& p = item.value();
                real_bytes += (spec.dim < 0 ? p.numel() : p.numel() / spec.length * spec.real()) * p.element_size();
            }
            auto check = [&](const HeldReshardStats& got, const std::string& when) {
                EXPECT_EQ(got.received_bytes, real_bytes) << what << when;  // every real element, from the actor
                EXPECT_EQ(got.copied_bytes, real_bytes) << what << when;
                EXPECT_EQ(got.sent_bytes, 0) << what << when;
                EXPECT_LE(got.staging_bytes, xopts.bucket_bytes) << what << when;
                expect_slices_of(*rollout, *whole, what + when);
            };
            auto scribble = [&] {  // padding rows included: the reshard must zero them
                torch::NoGradGuard ng;
                for (auto& p : rollout->parameters()) p.fill_(7);
            };
            scribble();
            st = resharder.run(nullptr, rollout.get(), rollout->tp_layout());
            EXPECT_TRUE(st.planned) << what;
            check(st, "");
            expect_same_greedy(*rollout, *whole, what);
            scribble();
            const auto again = resharder.run(nullptr, rollout.get(), rollout->tp_layout());
            EXPECT_FALSE(again.planned) << what;
            check(again, " (transfer list reused)");
        }
        // Every byte sent was received, and every actor rank sent some: the shards (and, under
        // hybrid shard, the replicas of the same bytes) share the sends.
        EXPECT_EQ(group.allreduce_sum_i64(st.sent_bytes), group.allreduce_sum_i64(st.received_bytes)) << what;
        // The actor's shards and the rollout's tensors live in shared arenas (the engine's and the
        // rollout role's choice): the copying ends mapped them.
        const auto& xs = exchange->last_stats();
        const int64_t single = group.allreduce_sum_i64(xs.n_single_copy_messages);
        if (single > 0) EXPECT_EQ(2 * group.allreduce_sum_i64(xs.n_mapped_messages), single) << what;
        if (is_actor) EXPECT_GT(st.sent_bytes, 0) << what;
    }
};

// 3-4 ranks: equal tp (where a ZeRO-3 actor used to gather and broadcast) and another tp.
TEST_F(DisaggregatedReshardTest, Zero3Dp2Tp1ToTp1) { run({1, 2, 1, 1}); }
TEST_F(DisaggregatedReshardTest, Zero3Dp2Tp1ToTwoTp1Ranks) { run({1, 2, 1, 2}); }
TEST_F(DisaggregatedReshardTest, Zero3Dp2Tp1ToTp2) { run({1, 2, 2, 2}); }
// 6-8 ranks: a tp 2 actor to tp 1 and tp 4 rollouts; hybrid-shard replicas spread the sends.
TEST_F(DisaggregatedReshardTest, Zero3Tp2Dp2ToTp1) { run({2, 2, 1, 2}); }
TEST_F(DisaggregatedReshardTest, Zero3Tp2Dp2ToTp4) { run({2, 2, 4, 4}); }
TEST_F(DisaggregatedReshardTest, Zero3HybridShardDp4ToTwoTp1Ranks) { run({1, 4, 1, 2, 2}); }

TEST(RegionExchangeTest, MismatchIsRefusedOnEveryRankAndRecoverable) {
    auto world = comm::Communicator::world();
    const int n = world.size(), me = world.rank();
    auto exchange = weights::make_region_exchange("mpi", world, {});
    // Rank r sends 8 floats to rank r + 1; rank 0 is told the message is one float longer.
    auto src = torch::arange(8, torch::kFloat32) + 100 * me;
    auto dst = torch::zeros({8});
    auto list = [&](bool wrong) {
        std::vector<weights::RegionTransfer> out;
        for (int r = 0; r < n; ++r) {
            weights::RegionTransfer t;
            t.src = r;
            t.dst = (r + 1) % n;
            t.bytes = (wrong && r == 0 ? 9 : 8) * 4;
            if (t.src == me) t.src_region = src;
            if (t.dst == me) t.dst_region = dst;
            out.push_back(t);
        }
        return out;
    };
    try {
        exchange->run(list(me == 0));
        ADD_FAILURE() << "expected a CommError";
    } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("another transfer list"), std::string::npos) << e.what();
        if (me == 0) {
            EXPECT_NE(std::string(e.what()).find("rank 0: transfer 0"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(torch::equal(dst, torch::zeros({8})));  // nothing moved
    exchange->run(list(false));
    const int from = (me + n - 1) % n;
    EXPECT_TRUE(torch::equal(dst, torch::arange(8, torch::kFloat32) + 100 * from));
}

// Rank r sends rank r + 1 five regions, strided on both ends in different ways; every byte of the
// destination tensors (inside and outside the regions) must be as expected afterwards.
void strided_both_ends(bool single_copy) {
    auto world = comm::Communicator::world();
    const int n = world.size(), me = world.rank(), from = (me + n - 1) % n;
    weights::WeightSyncOptions opts;
    opts.single_copy = single_copy;
    opts.bucket_bytes = 4096;  // without single copy: several rounds of staging
    auto exchange = weights::make_region_exchange("mpi", world, opts);
    // The source tensors of rank r (values unique per rank and element).
    auto sources = [](int r) {
        auto base = [r](std::vector<int64_t> shape, torch::Dtype dt) {
            int64_t numel = 1;
            for (auto d : shape) numel *= d;
            return (torch::arange(numel, torch::kFloat64) + 1e6 * r).to(dt).view(shape);
        };
        return std::vector<torch::Tensor>{base({40, 300}, torch::kFloat32), base({6, 10, 50}, torch::kFloat32),
                                          base({3000, 8}, torch::kFloat32), base({20, 64}, torch::kInt64),
                                          base({30, 40}, torch::kFloat64)};
    };
    auto src_regions = [](const std::vector<torch::Tensor>& s) {
        return std::vector<torch::Tensor>{s[0].narrow(1, 7, 150),                 // 40 runs of 600 bytes
                                          s[1].narrow(0, 1, 4).narrow(2, 3, 20),  // 3-D, 40 runs of 80 bytes
                                          s[2].narrow(1, 2, 4),                   // 3000 runs of 16 bytes (> IOV_MAX)
                                          s[3].narrow(0, 2, 16),                  // contiguous
                                          s[4].narrow(1, 5, 20)};  // strided into a contiguous destination
    };
    auto destinations = [] {
        return std::vector<torch::Tensor>{torch::full({40, 400}, -1.0f), torch::full({4, 12, 64}, -1.0f),
                                          torch::full({4, 3000}, -1.0f), torch::full({16, 100}, int64_t(-1)),
                                          torch::full({30, 20}, -1.0, torch::kFloat64)};
    };
    auto dst_regions = [](const std::vector<torch::Tensor>& d) {
        return std::vector<torch::Tensor>{d[0].narrow(1, 200, 150),                 // another column slice
                                          d[1].narrow(1, 1, 10).narrow(2, 40, 20),  // 3-D, other strides
                                          d[2].t(),                                 // transposed: 12000 runs of 4 bytes
                                          d[3].narrow(1, 10, 64),  // strided where the source is contiguous
                                          d[4]};                   // contiguous (single copy: the sender writes)
    };
    const auto mine = sources(me);
    auto dst = destinations();
    const auto sr = src_regions(mine), dr = dst_regions(dst);
    std::vector<weights::RegionTransfer> list;
    for (int r = 0; r < n; ++r) {
        for (size_t k = 0; k < sr.size(); ++k) {
            weights::RegionTransfer t;
            t.src = r;
            t.dst = (r + 1) % n;
            t.bytes = sr[k].numel() * static_cast<int64_t>(sr[k].element_size());
            t.src_contiguous = k == 3;
            t.dst_contiguous = k == 4;
            if (t.src == me) t.src_region = sr[k];
            if (t.dst == me) t.dst_region = dr[k];
            list.push_back(t);
        }
    }
    exchange->run(list);
    auto expected = destinations();
    const auto theirs = sources(from);
    const auto er = dst_regions(expected), tr = src_regions(theirs);
    for (size_t k = 0; k < er.size(); ++k) er[k].copy_(tr[k]);
    for (size_t k = 0; k < dst.size(); ++k) EXPECT_TRUE(torch::equal(dst[k], expected[k])) << "region " << k;
    const auto& st = exchange->last_stats();
    EXPECT_EQ(st.n_messages, n > 1 ? 10 : 0);
    if (!single_copy) {
        EXPECT_EQ(st.n_single_copy_messages, 0);
        EXPECT_GT(st.unpacked_bytes, 0);
    } else if (cma_works(world)) {
        EXPECT_EQ(st.n_single_copy_messages, st.n_messages);
        EXPECT_EQ(st.packed_bytes + st.unpacked_bytes + st.staging_bytes, 0);
    }
    // A second run with the same object lands the same bytes again.
    for (auto& d : dst) d.fill_(-1);
    exchange->run(list);
    for (size_t k = 0; k < dst.size(); ++k) EXPECT_TRUE(torch::equal(dst[k], expected[k])) << "again, region " << k;
}

TEST(RegionExchangeTest, StridedBothEndsLandByteForByte) { strided_both_ends(true); }
TEST(RegionExchangeTest, StridedBothEndsWithoutSingleCopy) { strided_both_ends(false); }

}  // namespace
}  // namespace rlpt::model
