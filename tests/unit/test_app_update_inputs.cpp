// What the RL trainer's updates take of a batch (update_inputs.h): the mini-batch arrangement
// over data-parallel ranks, with and without sequence balancing, and the columns and arguments
// of the actor's and the critic's kUpdate.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "app_test_util.h"
#include "rlpt/protocol/args.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "update_inputs.h"

namespace rlpt::app {
namespace {

using test::expect_error;
using test::to_vec;

// `rows` rows; input_ids [B, 1] holds the row number; attention_mask row i has lengths[i] ones.
Batch numbered(const std::vector<int64_t>& lengths) {
    const int64_t B = static_cast<int64_t>(lengths.size());
    Batch b(B);
    b.set("input_ids", torch::arange(B, torch::kInt64).reshape({B, 1}));
    auto mask = torch::zeros({B, 16}, torch::kInt64);
    for (int64_t i = 0; i < B; ++i) mask[i].slice(0, 0, lengths[static_cast<size_t>(i)]).fill_(1);
    b.set("attention_mask", mask);
    return b;
}

std::vector<int64_t> row_order(const Batch& b) {
    auto v = to_vec(b.at("input_ids"));
    return std::vector<int64_t>(v.begin(), v.end());
}

TEST(ArrangeForUpdate, EachRankGetsItsPartOfEveryMiniBatch) {
    // 8 rows = 2 mini-batches of 4 over 2 ranks: rank 0 takes rows 0-1 and 4-5.
    Batch b = numbered({1, 1, 1, 1, 1, 1, 1, 1});
    EXPECT_EQ(row_order(arrange_for_update(b, 2, 2, /*balance=*/false)),
              (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
    // One rank: the order is kept, balancing or not.
    EXPECT_EQ(row_order(arrange_for_update(b, 1, 2, true)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    expect_error<ValueError>([&] { arrange_for_update(b, 3, 2, false); },
                             "8 rows do not form 2 mini-batches over 3 ranks");
    expect_error<ValueError>([&] { arrange_for_update(b, 1, 3, false); }, "8 rows do not form 3 mini-batches");
}

TEST(ArrangeForUpdate, BalancedPartsStayInsideTheirMiniBatch) {
    // Mini-batch 0 has one long row; balancing pairs it with the shortest one.
    Batch b = numbered({16, 2, 3, 1, 4, 4, 4, 4});
    const std::vector<int64_t> order = row_order(arrange_for_update(b, 2, 2, /*balance=*/true));
    ASSERT_EQ(order.size(), 8u);
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 8u);  // every row once
    // Rank k's rows: order[4k .. 4k+3]; its local mini-batch j (2 rows) comes from global mini-batch j.
    for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 2; ++j)
            for (int i = 0; i < 2; ++i) {
                const int64_t row = order[static_cast<size_t>(4 * k + 2 * j + i)];
                EXPECT_EQ(row / 4, j) << "rank " << k << " mini-batch " << j;
            }
    // The long row 0 shares its rank with row 3 (length 1), not with 1 or 2.
    const auto pos0 = std::find(order.begin(), order.end(), 0) - order.begin();
    const int64_t partner = order[static_cast<size_t>(pos0 % 2 == 0 ? pos0 + 1 : pos0 - 1)];
    EXPECT_EQ(partner, 3);
}

Batch training_batch(int64_t rows) {
    Batch b = numbered(std::vector<int64_t>(static_cast<size_t>(rows), 4));
    for (const char* c : {"position_ids", "responses", "response_mask", "old_log_probs", "advantages", "ref_log_prob",
                          "values", "returns"})
        b.set(c, torch::zeros({rows, 2}));
    return b;
}

UpdateSettings settings() {
    UpdateSettings s;
    s.prompts_per_step = 4;
    s.n = 2;
    s.actor_mini_batch = 2;
    s.critic_mini_batch = 4;
    s.actor_dp = 2;
    s.critic_dp = 1;
    s.balance_batch = false;
    return s;
}

TEST(UpdateInputs, ActorColumnsAndArguments) {
    Batch b = training_batch(8);
    UpdateSettings s = settings();
    s.temperature = 0.6;
    Batch in = UpdateInputs(s).actor(b);
    EXPECT_EQ(in.column_names(), (std::vector<std::string>{"advantages", "attention_mask", "input_ids", "old_log_probs",
                                                           "position_ids", "response_mask", "responses"}));
    EXPECT_EQ(row_order(in), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));  // 2 mini-batches over 2 ranks
    const auto args = protocol::decode_args<roles::ActorUpdateArgs>(in, "test");
    EXPECT_EQ(args.temperature, 0.6);
    EXPECT_EQ(args.num_mini_batches, 2);
    EXPECT_EQ(args.global_mini_batch_rows, 4.0);  // 2 prompts x 2 samples

    s.actor_kl_loss = true;
    b.set("rollout_is_weights", torch::ones({8, 2}));
    Batch with = UpdateInputs(s).actor(b);
    EXPECT_TRUE(with.has("ref_log_prob"));
    EXPECT_TRUE(with.has("rollout_is_weights"));
    EXPECT_FALSE(with.has("values"));
}

TEST(UpdateInputs, CriticColumnsAndArguments) {
    Batch in = UpdateInputs(settings()).critic(training_batch(8));
    EXPECT_EQ(in.column_names(), (std::vector<std::string>{"attention_mask", "input_ids", "position_ids",
                                                           "response_mask", "responses", "returns", "values"}));
    EXPECT_EQ(row_order(in), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    const auto args = protocol::decode_args<roles::CriticUpdateArgs>(in, "test");
    EXPECT_EQ(args.num_mini_batches, 1);
    EXPECT_EQ(args.global_mini_batch_rows, 8.0);
}

TEST(UpdateInputs, ScoringForwardsTakeTheSequences) {
    Batch s = seq_columns(training_batch(2));
    EXPECT_EQ(s.column_names(), (std::vector<std::string>{"attention_mask", "input_ids", "position_ids", "responses"}));
}

}  // namespace
}  // namespace rlpt::app
