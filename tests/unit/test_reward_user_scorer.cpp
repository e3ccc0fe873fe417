// User scorers loaded at run time: the example in scripts/examples/user_scorer.c and
// small broken libraries, all compiled by the test with the system C compiler (skipped
// when there is none).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlpt/core/error.h"
#include "rlpt/reward/registry.h"
#include "rlpt/reward/user_scorer.h"
#include "rlpt/reward/user_scorer_loader.h"

using namespace rlpt::reward;
namespace fs = std::filesystem;

namespace {

fs::path source_dir() {
    if (const char* env = std::getenv("RLPT_SOURCE_DIR")) return env;
    return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

bool have_c_compiler() { return std::system("command -v cc > /dev/null 2>&1") == 0; }

class UserScorerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!have_c_compiler()) GTEST_SKIP() << "no C compiler 'cc' on PATH: cannot build user scorer libraries";
        char tmpl[] = "/tmp/rlpt_user_scorer_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }

    // Compiles `source` (a file) into <dir>/<name>.so; fails the test on a compiler error.
    std::string build(const fs::path& source, const std::string& name) {
        const fs::path out = dir_ / (name + ".so");
        const std::string cmd = "cc -shared -fPIC -I '" + (source_dir() / "include").string() + "' '" +
                                source.string() + "' -o '" + out.string() + "' 2>'" + (dir_ / "cc.log").string() + "'";
        if (std::system(cmd.c_str()) != 0) {
            std::ifstream log(dir_ / "cc.log");
            std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
            ADD_FAILURE() << "compiling " << source << " failed:\n" << text;
        }
        return out.string();
    }

    std::string build_inline(const std::string& code, const std::string& name) {
        const fs::path src = dir_ / (name + ".c");
        std::ofstream(src) << "#include \"rlpt/reward/user_scorer.h\"\n#include <stdio.h>\n" << code;
        return build(src, name);
    }

    std::string build_example() { return build(source_dir() / "scripts/examples/user_scorer.c", "example"); }

    fs::path dir_;
};

ScoreRequest request(std::string_view solution, std::string_view truth, int64_t index = 0) {
    ScoreRequest r;
    r.data_source = "my/dataset";
    r.solution = solution;
    r.ground_truth = truth;
    r.index = index;
    return r;
}

}  // namespace

TEST_F(UserScorerTest, ExampleScorerScores) {
    auto scorer = UserScorer::load(build_example());
    EXPECT_EQ(scorer->name(), "user(" + (dir_ / "example.so").string() + ")");
    ScoreResult r = scorer->score(request("  Paris\n", "paris"));
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "Paris");
    r = scorer->score(request("London", "paris"));
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_EQ(r.pred, "London");
    // Embedded NULs travel by length.
    r = scorer->score(request(std::string_view("a\0b", 3), std::string_view("A\0B", 3)));
    EXPECT_EQ(r.score, 1.0);
}

TEST_F(UserScorerTest, ScorerErrorNamesLibrarySampleAndDataSource) {
    auto scorer = UserScorer::load(build_example());
    try {
        scorer->score(request("x", "   ", 7));
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        const std::string msg = e.message();
        EXPECT_NE(msg.find("example.so' failed on sample 7 (data_source 'my/dataset'), code 1: empty ground "
                           "truth for sample 7"),
                  std::string::npos)
            << msg;
    }
}

TEST_F(UserScorerTest, ThroughRegistryAndBatch) {
    const std::string path = build_example();
    nlohmann::json config;
    config["scorers"]["my/dataset"] = {{"type", "user"}, {"path", path}};
    ScorerRegistry reg = make_scorer_registry(config, "reward");
    std::vector<std::string> ds = {"my/dataset", "openai/gsm8k", "my/dataset"};
    std::vector<std::string> sol = {"yes", "#### 4", "no"};
    std::vector<std::string> gt = {"YES", "4", "yes"};
    std::vector<ScoreResult> r = score_batch(reg, ds, sol, gt);
    EXPECT_EQ(r[0].score, 1.0);
    EXPECT_EQ(r[1].score, 1.0);
    EXPECT_EQ(r[2].score, 0.0);
    gt[2] = "";
    try {
        score_batch(reg, ds, sol, gt);
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("scoring sample 2 (data_source 'my/dataset'): user scorer"), std::string::npos)
            << e.message();
    }
}

TEST_F(UserScorerTest, InputsAreDeliveredWithLengthsAndExtraJson) {
    // Echoes what it received: score = total input length, pred = the extra JSON.
    const std::string path = build_inline(R"(
RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return RLPT_SCORER_ABI_VERSION; }
RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) {
    out->score = (double)(in->data_source_len * 1000000 + in->solution_len * 10000 + in->ground_truth_len * 100 +
                          (size_t)in->index);
    snprintf(out->pred, out->pred_capacity, "%s|%c", in->extra_info_json, in->solution[in->solution_len]);
    return 0;
})",
                                          "echo");
    auto scorer = UserScorer::load(path);
    ScoreRequest req = request("abcde", "xyz", 9);
    nlohmann::json extra = {{"k", 1}};
    req.extra_info = &extra;
    ScoreResult r = scorer->score(req);
    EXPECT_EQ(r.score, 10 * 1000000 + 5 * 10000 + 3 * 100 + 9);
    EXPECT_EQ(r.pred, "{\"k\":1}|");  // NUL-terminated solution: solution[len] == '\0'
    EXPECT_FALSE(r.acc.has_value());
    req.extra_info = nullptr;
    EXPECT_EQ(scorer->score(req).pred, "{}|");
}

TEST_F(UserScorerTest, MissingFileAndNonLibrary) {
    try {
        UserScorer::load((dir_ / "absent.so").string());
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_NE(e.message().find("absent.so' does not exist"), std::string::npos) << e.message();
    }
    const fs::path text = dir_ / "text.so";
    std::ofstream(text) << "not an ELF file\n";
    try {
        UserScorer::load(text.string());
        FAIL() << "no throw";
    } catch (const rlpt::IoError& e) {
        EXPECT_NE(e.message().find("cannot load '" + text.string() + "'"), std::string::npos) << e.message();
    }
    EXPECT_THROW(UserScorer::load(dir_.string()), rlpt::IoError);  // a directory
    EXPECT_THROW(UserScorer::load(""), rlpt::IoError);
}

TEST_F(UserScorerTest, MissingSymbols) {
    const std::string no_score =
        build_inline("RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return RLPT_SCORER_ABI_VERSION; }\n",
                     "no_score");
    try {
        UserScorer::load(no_score);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("does not export 'rlpt_score_v1'"), std::string::npos) << e.message();
    }
    const std::string no_version = build_inline(
        "RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) { return "
        "0; }\n",
        "no_version");
    try {
        UserScorer::load(no_version);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("does not export 'rlpt_scorer_abi_version'"), std::string::npos) << e.message();
    }
}

TEST_F(UserScorerTest, AbiVersionMismatch) {
    const std::string path = build_inline(R"(
RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return 99; }
RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) { return 0; }
)",
                                          "v99");
    try {
        UserScorer::load(path);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("built for scorer ABI version 99, this rlpt supports version 1"), std::string::npos)
            << e.message();
    }
}

TEST_F(UserScorerTest, NonFiniteScoreAndMissingMessage) {
    const std::string path = build_inline(R"(
RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return RLPT_SCORER_ABI_VERSION; }
RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) {
    if (in->solution_len == 0) return 5;
    out->score = 1.0 / 0.0;
    return 0;
})",
                                          "nonfinite");
    auto scorer = UserScorer::load(path);
    try {
        scorer->score(request("x", "y", 3));
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("non-finite score inf for sample 3"), std::string::npos) << e.message();
    }
    try {
        scorer->score(request("", "y", 4));
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("failed on sample 4 (data_source 'my/dataset'), code 5: (no message)"),
                  std::string::npos)
            << e.message();
    }
}
