#pragma once
// Shared helpers for the model and safetensors unit tests.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::model::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
  public:
    explicit TempDir(const std::string& tag) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = fmt::format("rlpt_{}_{}_{}_{}", tag, info ? info->test_suite_name() : "x",
                                       info ? info->name() : "x", static_cast<long>(getpid()));
        path_ = std::filesystem::temp_directory_path() / name;
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

// Runs f, expects an exception of type E whose what() contains every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
    try {
        f();
    } catch (const E& e) {
        const std::string what = e.what();
        for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
        return;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
        return;
    }
    ADD_FAILURE() << "no exception thrown";
}

// Left-padded batch from token rows: ids [B, T] (pad = `pad_id`), mask [B, T] int64 and
// position_ids = clamp(cumsum(mask) - 1, min=0).
struct Batch {
    torch::Tensor ids, mask, pos;
};
inline Batch left_padded(const std::vector<std::vector<int64_t>>& rows, int64_t pad_id = 0) {
    size_t t = 0;
    for (const auto& r : rows) t = std::max(t, r.size());
    const auto b = static_cast<int64_t>(rows.size());
    auto ids = torch::full({b, static_cast<int64_t>(t)}, pad_id, torch::kInt64);
    auto mask = torch::zeros({b, static_cast<int64_t>(t)}, torch::kInt64);
    for (int64_t i = 0; i < b; ++i) {
        const auto& r = rows[static_cast<size_t>(i)];
        const int64_t off = static_cast<int64_t>(t - r.size());
        for (size_t j = 0; j < r.size(); ++j) {
            ids[i][off + static_cast<int64_t>(j)] = r[j];
            mask[i][off + static_cast<int64_t>(j)] = 1;
        }
    }
    auto pos = (mask.cumsum(1) - 1).clamp_min(0);
    return {ids, mask, pos};
}

inline std::string source_dir() {
    std::filesystem::path here(__FILE__);  // <src>/tests/unit/test_model_helpers.h
    return here.parent_path().parent_path().parent_path().string();
}

}  // namespace rlpt::model::testing
