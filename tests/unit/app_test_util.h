#pragma once
// Helpers for the tests of the RL trainer's parts (src/app): error expectations and small
// hand-made batches of generated responses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "rlpt/batch/batch.h"
#include "rlpt/core/error.h"

namespace rlpt::app::test {

// Runs `fn`, expects an error of type E whose message contains `needle`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::string& needle) {
    try {
        fn();
        ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const E& e) {
        EXPECT_NE(e.message().find(needle), std::string::npos) << "message: " << e.message();
    }
}

inline std::vector<double> to_vec(const torch::Tensor& t) {
    auto f = t.detach().to(torch::kFloat64).contiguous().reshape({-1});
    return std::vector<double>(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
}

inline void expect_near(const torch::Tensor& got, const std::vector<double>& want, double tol = 1e-6) {
    const std::vector<double> g = to_vec(got);
    ASSERT_EQ(g.size(), want.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "at flat index " << i;
}

// A generated batch as RolloutSource returns it, one row per entry of `texts`: uid, data_source
// "test", ground_truth "", extra "{}", response_text, and R = 4 response tokens of which the first
// `lengths[i]` are valid (responses, response_mask int64 [B, 4]); prompts [B, 2] and
// attention_mask [B, 6] (prompt then response mask).
inline Batch generated(const std::vector<std::string>& uids, const std::vector<std::string>& texts,
                       const std::vector<int64_t>& lengths) {
    const int64_t B = static_cast<int64_t>(uids.size()), R = 4, P = 2;
    Batch b(B);
    auto mask = torch::zeros({B, R}, torch::kInt64);
    for (int64_t i = 0; i < B; ++i) mask[i].slice(0, 0, lengths[static_cast<size_t>(i)]).fill_(1);
    b.set("responses", torch::arange(B * R, torch::kInt64).reshape({B, R}));
    b.set("response_mask", mask);
    b.set("prompts", torch::full({B, P}, 7, torch::kInt64));
    b.set("attention_mask", torch::cat({torch::ones({B, P}, torch::kInt64), mask}, 1));
    b.set_strings("uid", uids);
    b.set_strings("data_source", std::vector<std::string>(static_cast<size_t>(B), "test"));
    b.set_strings("ground_truth", std::vector<std::string>(static_cast<size_t>(B), ""));
    b.set_strings("extra", std::vector<std::string>(static_cast<size_t>(B), "{}"));
    b.set_strings("response_text", texts);
    return b;
}

}  // namespace rlpt::app::test
