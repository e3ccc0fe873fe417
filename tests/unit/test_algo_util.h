#pragma once
// Small helpers for the rlpt::algo unit tests.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::algo::test {

inline torch::Tensor t2d(const std::vector<std::vector<double>>& rows, torch::Dtype dtype = torch::kFloat64) {
    const int64_t b = static_cast<int64_t>(rows.size());
    const int64_t t = b ? static_cast<int64_t>(rows[0].size()) : 0;
    auto out = torch::zeros({b, t}, torch::kFloat64);
    auto a = out.accessor<double, 2>();
    for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < t; ++j) a[i][j] = rows[i][j];
    return out.to(dtype);
}

inline torch::Tensor t1d(const std::vector<double>& v, torch::Dtype dtype = torch::kFloat64) {
    return torch::tensor(v, torch::kFloat64).to(dtype);
}

inline std::vector<double> to_vec(const torch::Tensor& t) {
    auto f = t.detach().to(torch::kFloat64).contiguous().reshape({-1});
    return std::vector<double>(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
}

// Element-wise |got - want| <= abs_tol + rel_tol·|want|.
inline void expect_close(const torch::Tensor& got, const std::vector<double>& want, double abs_tol = 1e-9,
                         double rel_tol = 0.0, const std::string& what = "") {
    auto g = to_vec(got);
    ASSERT_EQ(g.size(), want.size()) << what;
    for (size_t i = 0; i < g.size(); ++i)
        EXPECT_NEAR(g[i], want[i], abs_tol + rel_tol * std::abs(want[i])) << what << " at flat index " << i;
}

// Runs `fn`, expects a ValueError whose message contains `needle`.
template <typename Fn>
void expect_value_error(Fn&& fn, const std::string& needle) {
    try {
        fn();
        ADD_FAILURE() << "expected ValueError containing '" << needle << "'";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find(needle), std::string::npos) << "message: " << e.message();
    }
}

}  // namespace rlpt::algo::test
