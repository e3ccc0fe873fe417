// The real GSM8K files (/work/shared/data/gsm8k): every line loads with verl's
// preprocessing, and the GSM8K scorer gives each reference solution full marks against its
// own extracted answer. Skipped when the files are not there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "rlpt/data/dataset.h"
#include "rlpt/reward/gsm8k.h"

namespace fs = std::filesystem;
using namespace rlpt;

namespace {

// $RLPT_SHARED_DIR, else $RLPT_SOURCE_DIR/../shared, else <source>/../shared from __FILE__.
fs::path gsm8k_dir() {
    if (const char* env = std::getenv("RLPT_SHARED_DIR")) return fs::path(env) / "data/gsm8k";
    fs::path source = std::getenv("RLPT_SOURCE_DIR") ? fs::path(std::getenv("RLPT_SOURCE_DIR"))
                                                     : fs::path(__FILE__).parent_path().parent_path().parent_path();
    return source / ".." / "shared/data/gsm8k";
}

void check_split(const std::string& name, std::size_t expected_lines) {
    const fs::path path = gsm8k_dir() / name;
    if (!fs::exists(path)) GTEST_SKIP() << "GSM8K file not found: " << path << " (set RLPT_SHARED_DIR)";
    data::DatasetOptions o = data::gsm8k_dataset_options();
    o.extra_keys = {"answer"};  // the worked reference solution
    std::vector<data::Example> ex = data::load_dataset(path.string(), o);
    ASSERT_EQ(ex.size(), expected_lines);

    reward::Gsm8kScorer strict;
    std::size_t perfect = 0, perturbed_zero = 0;
    for (const data::Example& e : ex) {
        ASSERT_EQ(e.data_source, "openai/gsm8k");
        ASSERT_FALSE(e.ground_truth.empty());
        ASSERT_EQ(e.ground_truth.find(','), std::string::npos);
        const std::size_t suffix = e.prompt.rfind(data::kGsm8kInstruction);
        ASSERT_EQ(suffix + data::kGsm8kInstruction.size(), e.prompt.size()) << e.index;
        const std::string solution = e.extra.at("answer");
        reward::ScoreRequest req;
        req.data_source = e.data_source;
        req.solution = solution;
        req.ground_truth = e.ground_truth;
        const reward::ScoreResult r = strict.score(req);
        perfect += r.score == 1.0 && r.acc == 1.0 && r.pred == e.ground_truth;
        EXPECT_EQ(r.score, 1.0) << name << " line " << e.index + 1 << ": pred '" << r.pred << "' vs '" << e.ground_truth
                                << "'";
        const std::string wrong = e.ground_truth + "1";
        req.ground_truth = wrong;
        perturbed_zero += strict.score(req).score == 0.0;
        EXPECT_EQ(reward::gsm8k_compute_score(solution + "1", e.ground_truth), 0.0) << name << " " << e.index;
    }
    EXPECT_EQ(perfect, expected_lines);
    EXPECT_EQ(perturbed_zero, expected_lines);
}

}  // namespace

TEST(DataGsm8kReal, TrainSplitLoadsAndScoresPerfectly) { check_split("train.jsonl", 7473); }

TEST(DataGsm8kReal, TestSplitLoadsAndScoresPerfectly) { check_split("test.jsonl", 1319); }
