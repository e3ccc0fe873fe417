// Scorer registry (data_source dispatch), scorers from JSON specs, batch scoring.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "rlpt/core/error.h"
#include "rlpt/reward/registry.h"

using namespace rlpt::reward;
using nlohmann::json;

namespace {

ScoreRequest request(std::string_view ds, std::string_view solution, std::string_view truth) {
    ScoreRequest r;
    r.data_source = ds;
    r.solution = solution;
    r.ground_truth = truth;
    return r;
}

// Always throws: for the batch error-context test.
class ThrowingScorer final : public Scorer {
  public:
    std::string name() const override { return "throwing"; }
    ScoreResult score(const ScoreRequest&) const override { throw std::runtime_error("boom"); }
};

template <typename E>
std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected an exception";
    return {};
}

}  // namespace

TEST(RewardRegistry, BuiltinsDispatchLikeVerl) {
    ScorerRegistry reg;
    add_builtin_scorers(reg);
    EXPECT_EQ(reg.data_sources(),
              (std::vector<std::string>{"DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
                                        "lighteval/MATH", "math", "math_dapo", "math_dapo_reasoning", "openai/gsm8k",
                                        "rlpt/arithmetic", "rlpt/arithmetic_tools"}));
    EXPECT_EQ(reg.get("aime2024").name(), "math_dapo");  // verl's startswith("aime")
    EXPECT_EQ(reg.get("openai/gsm8k").name(), "gsm8k(strict)");
    EXPECT_EQ(reg.get("lighteval/MATH").name(), "math");
    EXPECT_EQ(reg.get("DigitalLearningGmbH/MATH-lighteval").name(), "math");
    EXPECT_EQ(reg.get("HuggingFaceH4/MATH-500").name(), "math");
    EXPECT_EQ(reg.get("rlpt/arithmetic").name(), "arithmetic");
    EXPECT_EQ(reg.get("rlpt/arithmetic_tools").name(), "number(last_number)");
    EXPECT_EQ(reg.score(request("openai/gsm8k", "#### 3.50", "3.5")).score, 0.0);
    EXPECT_EQ(reg.score(request("lighteval/MATH", "\\boxed{0.5}", "\\frac{1}{2}")).score, 1.0);
    EXPECT_EQ(reg.score(request("rlpt/arithmetic", "522", "522")).score, 1.0);
}

TEST(RewardRegistry, UnknownDataSourceNamesItAndTheKnownOnes) {
    ScorerRegistry reg;
    add_builtin_scorers(reg);
    std::string msg = message_of<rlpt::ConfigError>([&] { reg.get("numina_olympiads"); });
    EXPECT_NE(msg.find("'numina_olympiads'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("openai/gsm8k"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rlpt/arithmetic"), std::string::npos) << msg;

    ScorerRegistry empty;
    msg = message_of<rlpt::ConfigError>([&] { empty.get("x"); });
    EXPECT_NE(msg.find("known data_sources: none"), std::string::npos) << msg;

    reg.set_default(make_scorer(json{{"type", "number"}}, "default"));
    EXPECT_EQ(reg.get("numina_olympiads").name(), "number(last_number)");
    EXPECT_EQ(reg.get("openai/gsm8k").name(), "gsm8k(strict)");  // entries win over the default
}

TEST(RewardRegistry, SetValidates) {
    ScorerRegistry reg;
    EXPECT_THROW(reg.set("", make_scorer(json{{"type", "math"}}, "x")), rlpt::ConfigError);
    EXPECT_THROW(reg.set("a", nullptr), rlpt::ConfigError);
    reg.set("a", make_scorer(json{{"type", "math"}}, "x"));
    reg.set("a", make_scorer(json{{"type", "number"}}, "x"));  // replaces
    EXPECT_EQ(reg.get("a").name(), "number(last_number)");
    EXPECT_TRUE(reg.contains("a"));
    EXPECT_FALSE(reg.contains("b"));
}

TEST(RewardRegistry, MakeScorerFromSpecs) {
    auto g = make_scorer(json{{"type", "gsm8k"}, {"method", "flexible"}, {"format_score", 0.1}, {"score", 2}}, "s");
    EXPECT_EQ(g->name(), "gsm8k(flexible)");
    EXPECT_EQ(g->score(request("", "so 17", "17")).score, 2.0);
    EXPECT_EQ(g->score(request("", "so 16", "17")).score, 0.1);

    auto a = make_scorer(json{{"type", "arithmetic"}, {"answer_format", "reversed"}}, "s");
    EXPECT_EQ(a->score(request("", "225", "522")).score, 1.0);

    auto n = make_scorer(json{{"type", "number"}, {"extraction", "whole"}, {"format_score", 0.5}}, "s");
    EXPECT_EQ(n->score(request("", "4", "5")).score, 0.5);

    auto f = make_scorer(json{{"type", "format"}, {"pattern", "^#"}, {"match", "search"}, {"mismatch_score", -1}}, "s");
    EXPECT_EQ(f->score(request("", "no", "")).score, -1.0);

    auto sum = make_scorer(json::parse(R"({"type": "sum", "parts": [
        {"scorer": {"type": "number"}},
        {"weight": 0.5, "scorer": {"type": "format", "pattern": "^[0-9]+$"}}]})"),
                           "s");
    EXPECT_DOUBLE_EQ(sum->score(request("", "7", "7")).score, 1.5);
}

TEST(RewardRegistry, BadSpecsNameTheKeyPath) {
    auto expect_config_error = [](const json& spec, const std::string& needle) {
        std::string msg = message_of<rlpt::ConfigError>([&] { make_scorer(spec, "reward.scorers.my/ds"); });
        EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected: " << needle;
    };
    expect_config_error(json::array(), "reward.scorers.my/ds: expected an object");
    expect_config_error(json::object(), "reward.scorers.my/ds: missing required key 'type'");
    expect_config_error(json{{"type", 3}}, "reward.scorers.my/ds.type: expected a string");
    expect_config_error(json{{"type", "magic"}}, "unknown scorer type 'magic'");
    expect_config_error(json{{"type", "math"}, {"colour", "red"}}, "reward.scorers.my/ds: unknown key 'colour'");
    expect_config_error(json{{"type", "gsm8k"}, {"score", "high"}}, "reward.scorers.my/ds.score: expected a number");
    expect_config_error(json{{"type", "gsm8k"}, {"method", "lenient"}},
                        "reward.scorers.my/ds.method: unknown gsm8k method");
    expect_config_error(json{{"type", "number"}, {"extraction", "x"}}, "reward.scorers.my/ds.extraction");
    expect_config_error(json{{"type", "arithmetic"}, {"answer_format", "x"}}, "reward.scorers.my/ds.answer_format");
    expect_config_error(json{{"type", "format"}}, "missing required key 'pattern'");
    expect_config_error(json{{"type", "format"}, {"pattern", "("}}, "reward.scorers.my/ds: format scorer: invalid");
    expect_config_error(json{{"type", "format"}, {"pattern", "x"}, {"match", "all"}}, "reward.scorers.my/ds.match");
    expect_config_error(json{{"type", "user"}}, "missing required key 'path'");
    expect_config_error(json{{"type", "sum"}}, "missing required key 'parts'");
    expect_config_error(json{{"type", "sum"}, {"parts", json::array()}},
                        "reward.scorers.my/ds.parts: expected a non-empty");
    expect_config_error(json::parse(R"({"type": "sum", "parts": [{"weight": 1}]})"),
                        "reward.scorers.my/ds.parts[0]: missing required key 'scorer'");
    expect_config_error(json::parse(R"({"type": "sum", "parts": [{"scorer": {"type": "nope"}}]})"),
                        "reward.scorers.my/ds.parts[0].scorer.type: unknown scorer type");
    expect_config_error(json::parse(R"({"type": "sum", "parts": [{"scorer": {"type": "math"}, "w": 1}]})"),
                        "reward.scorers.my/ds.parts[0]: unknown key 'w'");
    // A user library that does not exist keeps its IoError kind, with the key path.
    std::string msg = message_of<rlpt::IoError>([] {
        make_scorer(json{{"type", "user"}, {"path", "/nonexistent/libx.so"}}, "reward.scorers.u");
    });
    EXPECT_NE(msg.find("reward.scorers.u: user scorer library '/nonexistent/libx.so' does not exist"),
              std::string::npos)
        << msg;
}

TEST(RewardRegistry, RegistryFromConfig) {
    ScorerRegistry reg = make_scorer_registry(json::parse(R"({
        "scorers": {"openai/gsm8k": {"type": "gsm8k", "method": "flexible"}, "my/data": {"type": "number"}},
        "default": {"type": "math"}})"),
                                              "reward");
    EXPECT_EQ(reg.get("openai/gsm8k").name(), "gsm8k(flexible)");  // replaced the builtin
    EXPECT_EQ(reg.get("lighteval/MATH").name(), "math");           // builtins kept
    EXPECT_EQ(reg.get("my/data").name(), "number(last_number)");
    EXPECT_EQ(reg.get("anything").name(), "math");  // default

    ScorerRegistry bare = make_scorer_registry(json{{"builtins", false}}, "reward");
    EXPECT_TRUE(bare.data_sources().empty());
    EXPECT_EQ(bare.default_scorer(), nullptr);
    // The built-in data_sources are there (no count: adding a scorer must not break this test).
    const auto builtin = make_scorer_registry(json(nullptr), "reward").data_sources();
    for (const char* ds : {"openai/gsm8k", "lighteval/MATH", "math_dapo"})
        EXPECT_NE(std::find(builtin.begin(), builtin.end(), ds), builtin.end()) << ds;

    std::string msg = message_of<rlpt::ConfigError>([] { make_scorer_registry(json{{"scorer", 1}}, "reward"); });
    EXPECT_NE(msg.find("reward: unknown key 'scorer'"), std::string::npos) << msg;
    msg = message_of<rlpt::ConfigError>([] { make_scorer_registry(json{{"scorers", 1}}, "reward"); });
    EXPECT_NE(msg.find("reward.scorers: expected a map"), std::string::npos) << msg;
    msg = message_of<rlpt::ConfigError>([] { make_scorer_registry(json{{"builtins", "yes"}}, "reward"); });
    EXPECT_NE(msg.find("reward.builtins: expected true or false"), std::string::npos) << msg;
    msg = message_of<rlpt::ConfigError>(
        [] { make_scorer_registry(json::parse(R"({"scorers": {"a/b": {"type": "x"}}})"), "reward"); });
    EXPECT_NE(msg.find("reward.scorers.a/b.type: unknown scorer type 'x'"), std::string::npos) << msg;
}

TEST(RewardRegistry, ScoreBatchInOrder) {
    ScorerRegistry reg;
    add_builtin_scorers(reg);
    std::vector<std::string> ds = {"openai/gsm8k", "lighteval/MATH", "rlpt/arithmetic", "rlpt/arithmetic"};
    std::vector<std::string> sol = {"#### 72", "\\boxed{3}", "225", "225"};
    std::vector<std::string> gt = {"72", "4", "522", "522"};
    std::vector<json> extra = {json::object(), json::object(), json{{"answer_format", "reversed"}}, json::object()};
    std::vector<ScoreResult> r = score_batch(reg, ds, sol, gt, &extra);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[0].score, 1.0);
    EXPECT_EQ(r[1].score, 0.0);
    EXPECT_EQ(r[2].score, 1.0);
    EXPECT_EQ(r[3].score, 0.0);
    EXPECT_EQ(r[2].pred, "522");
    EXPECT_EQ(score_batch(reg, {}, {}, {}).size(), 0u);

    std::vector<std::string> short_gt = {"72"};
    EXPECT_THROW(score_batch(reg, ds, sol, short_gt), rlpt::ValueError);
}

TEST(RewardRegistry, ScoreBatchErrorsNameSampleAndDataSource) {
    ScorerRegistry reg;
    add_builtin_scorers(reg);
    reg.set("bad/source", std::make_shared<ThrowingScorer>());
    std::vector<std::string> ds = {"openai/gsm8k", "unknown/x"};
    std::vector<std::string> sol = {"#### 1", "1"};
    std::vector<std::string> gt = {"1", "1"};
    std::string msg = message_of<rlpt::ConfigError>([&] { score_batch(reg, ds, sol, gt); });
    EXPECT_NE(msg.find("scoring sample 1 (data_source 'unknown/x'): no reward scorer"), std::string::npos) << msg;

    ds = {"bad/source"};
    sol = {"1"};
    gt = {"1"};
    msg = message_of<rlpt::ValueError>([&] { score_batch(reg, ds, sol, gt); });
    EXPECT_NE(msg.find("scoring sample 0 (data_source 'bad/source'): boom"), std::string::npos) << msg;

    ds = {"rlpt/arithmetic", "rlpt/arithmetic", "rlpt/arithmetic"};
    sol = {"1", "2", "3"};
    gt = {"1", "2", "three"};
    msg = message_of<rlpt::ValueError>([&] { score_batch(reg, ds, sol, gt); });
    EXPECT_NE(msg.find("scoring sample 2 (data_source 'rlpt/arithmetic'): arithmetic scorer: ground truth"),
              std::string::npos)
        << msg;
}
