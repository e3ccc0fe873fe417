#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "rlpt/build_config.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

using rlpt::Config;
using rlpt::config_from_yaml;
using rlpt::ConfigError;

namespace {
// Expects a ConfigError whose text contains every fragment.
template <typename F>
void expect_config_error(F&& f, std::initializer_list<const char*> fragments) {
    try {
        f();
        ADD_FAILURE() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        for (const char* frag : fragments) {
            EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "'" << frag << "' not in: " << e.what();
        }
    }
}
}  // namespace

TEST(Config, DefaultsAreValid) {
    Config c = rlpt::load_config("");
    EXPECT_EQ(c.algorithm.adv_estimator, "grpo");
    EXPECT_DOUBLE_EQ(c.actor.policy_loss.clip_ratio, 0.2);
    EXPECT_DOUBLE_EQ(c.critic.optim.lr, 1e-5);
    EXPECT_EQ(c.placement.groups.size(), 1u);
}

TEST(Config, ReadsValuesAndRecordsOrigins) {
    Config c = config_from_yaml("trainer:\n  total_epochs: 3\nactor:\n  optim:\n    lr: 0.001\n", "x.yaml");
    EXPECT_EQ(c.trainer.total_epochs, 3);
    EXPECT_DOUBLE_EQ(c.actor.optim.lr, 0.001);
    EXPECT_EQ(rlpt::origin_of(c, "actor.optim.lr"), "x.yaml:5");
    EXPECT_EQ(rlpt::origin_of(c, "rollout.n"), "default");
}

TEST(Config, UnknownKeyNamesPathAndLine) {
    expect_config_error([] { config_from_yaml("actor:\n  optim:\n    lrr: 1\n", "bad.yaml"); },
                        {"bad.yaml:3", "unknown key 'actor.optim.lrr'", "lr"});
    expect_config_error([] { config_from_yaml("nonsense: 1\n", "bad.yaml"); }, {"unknown key 'nonsense'"});
}

TEST(Config, WrongTypesAreErrors) {
    expect_config_error([] { config_from_yaml("rollout:\n  n: two\n", "t.yaml"); },
                        {"t.yaml:2", "'rollout.n' must be an integer", "'two'"});
    expect_config_error([] { config_from_yaml("rollout:\n  n: 1.5\n", "t.yaml"); }, {"must be an integer"});
    expect_config_error([] { config_from_yaml("trainer:\n  val_before_train: maybe\n", "t.yaml"); }, {"true or false"});
    expect_config_error([] { config_from_yaml("actor: 3\n", "t.yaml"); }, {"'actor' must be a mapping"});
    expect_config_error([] { config_from_yaml("rollout:\n  stop_token_ids: 5\n", "t.yaml"); },
                        {"must be a list of integers"});
    expect_config_error([] { config_from_yaml("rollout:\n  n: null\n", "t.yaml"); }, {"got null"});
}

TEST(Config, RangeErrorsNameKeyAndOrigin) {
    expect_config_error([] { config_from_yaml("actor:\n  optim:\n    lr: -1\n", "r.yaml"); },
                        {"r.yaml:3", "actor.optim.lr", "must be >= 0"});
    expect_config_error([] { config_from_yaml("rollout:\n  top_p: 0\n", "r.yaml"); }, {"rollout.top_p"});
    expect_config_error([] { config_from_yaml("rollout:\n  max_num_seqs: 0\n", "r.yaml"); },
                        {"r.yaml:2", "rollout.max_num_seqs", "must be > 0"});
    // The KV budget must hold one sequence: 512 + 512 - 1 positions with the default lengths.
    expect_config_error([] { config_from_yaml("rollout:\n  max_num_batched_tokens: 1000\n", "r.yaml"); },
                        {"r.yaml:2", "rollout.max_num_batched_tokens", "1023", "got 1000"});
    EXPECT_EQ(config_from_yaml("rollout:\n  max_num_batched_tokens: 1023\n", "r.yaml").rollout.max_num_batched_tokens,
              1023);
    EXPECT_FALSE(config_from_yaml("", "r.yaml").rollout.max_num_batched_tokens.has_value());
    expect_config_error([] { config_from_yaml("critic:\n  optim:\n    zero_stage: 4\n", "r.yaml"); },
                        {"r.yaml:3", "critic.optim.zero_stage", "must be 0, 1, 2 or 3 (got 4)"});
    EXPECT_EQ(config_from_yaml("actor:\n  optim:\n    zero_stage: 3\n", "r.yaml").actor.optim.zero_stage, 3);
    // Hybrid shard and the sharded reference.
    expect_config_error([] { config_from_yaml("actor:\n  optim:\n    zero_stage: 3\n    fsdp_size: -2\n", "r.yaml"); },
                        {"actor.optim.fsdp_size", "must be -1 (all DP ranks), 0 (the DP ranks on a node)", "got -2"});
    expect_config_error([] { config_from_yaml("critic:\n  optim:\n    fsdp_size: 2\n", "r.yaml"); },
                        {"critic.optim.fsdp_size", "critic.optim.zero_stage is 0"});
    EXPECT_EQ(
        config_from_yaml("actor:\n  optim:\n    zero_stage: 2\n    fsdp_size: 0\n", "r.yaml").actor.optim.fsdp_size, 0);
    expect_config_error([] { config_from_yaml("ref:\n  zero_stage: 2\n", "r.yaml"); },
                        {"ref.zero_stage",
                         "must be -1 (follow actor.optim.zero_stage), 0 (a full copy per rank) or 3"});
    EXPECT_EQ(config_from_yaml("ref:\n  zero_stage: 3\n", "r.yaml").ref.zero_stage, 3);
    expect_config_error([] { config_from_yaml("placement:\n  groups:\n    - roles: [actor, actor]\n", "r.yaml"); },
                        {"placement.groups.0.roles", "more than one group"});
    expect_config_error(
        [] { config_from_yaml("placement:\n  groups:\n    - roles: [actor]\n      ranks: -2\n", "r.yaml"); },
        {"placement.groups.0.ranks"});
    // The agent demo's task: plain, exact answers (the calculator's), a share of tool demonstrations in [0, 1].
    expect_config_error(
        [] {
            config_from_yaml("data:\n  builtin:\n    task: arithmetic_tools\n    reversed_answer: true\n", "r.yaml");
        },
        {"data.builtin.task", "arithmetic_tools answers in plain order"});
    expect_config_error([] { config_from_yaml("data:\n  builtin:\n    tool_demo_rate: 1.5\n", "r.yaml"); },
                        {"data.builtin.tool_demo_rate", "must be in [0, 1]"});
    expect_config_error([] { config_from_yaml("data:\n  builtin:\n    task: calendar\n", "r.yaml"); },
                        {"data.builtin.task", "arithmetic_tools"});
    EXPECT_EQ(config_from_yaml("data:\n  builtin:\n    task: arithmetic_tools\n", "r.yaml").data.builtin.tool_demo_rate,
              0.2);
}

TEST(Config, KeysThatCannotWorkAreRefusedNotIgnored) {
    // dro needs its beta (verl has no default): refused at load, not at the first update.
    expect_config_error([] { config_from_yaml("", "o", {"actor.policy_loss.loss_mode=dro"}); },
                        {"actor.policy_loss.dro_beta", "needs dro_beta > 0"});
    EXPECT_EQ(*config_from_yaml("", "o", {"actor.policy_loss.loss_mode=dro", "actor.policy_loss.dro_beta=0.1"})
                   .actor.policy_loss.dro_beta,
              0.1);
    expect_config_error([] { config_from_yaml("", "o", {"actor.shuffle=true"}); }, {"actor.shuffle", "not supported"});
    expect_config_error(
        [] {
            config_from_yaml("", "o",
                             {"algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=true"});
        },
        {"algorithm.filter_groups.metric", "seq_final_reward"});
    expect_config_error([] { config_from_yaml("", "o", {"algorithm.adv_estimator=gdpo"}); },
                        {"algorithm.gdpo_reward_keys", "gdpo needs"});
    expect_config_error(
        [] {
            config_from_yaml("", "o", {"algorithm.gdpo_reward_keys=[score, acc]", "algorithm.gdpo_reward_weights=[1]"});
        },
        {"algorithm.gdpo_reward_weights", "one weight per"});
    Config c = config_from_yaml("", "o",
                                {"algorithm.gdpo_reward_keys=[score, acc]", "algorithm.gdpo_reward_weights=[1, 0.25]"});
    EXPECT_EQ(c.algorithm.advantage.gdpo_weights, (std::vector<double>{1.0, 0.25}));
    EXPECT_EQ(config_from_yaml(rlpt::to_yaml(c), "dump").algorithm.advantage.gdpo_weights,
              c.algorithm.advantage.gdpo_weights);
}

// The estimators' hyperparameters are one algo struct in the config, passed whole to the estimator:
// its keys fill it, and by default it holds algo's defaults (the estimator's when nothing is set).
TEST(Config, AdvantageKeysFillTheEstimatorsParams) {
    const rlpt::algo::AdvantageParams defaults;
    const auto d = config_from_yaml("", "o").algorithm.advantage;
    EXPECT_EQ(d.gamma, defaults.gamma);
    EXPECT_EQ(d.lam, defaults.lam);
    EXPECT_EQ(d.norm_adv_by_std_in_grpo, defaults.norm_adv_by_std_in_grpo);
    EXPECT_EQ(d.gdpo_weights, defaults.gdpo_weights);
    EXPECT_EQ(d.epsilon, defaults.epsilon);
    EXPECT_EQ(d.gpg_f_norm, defaults.gpg_f_norm);
    EXPECT_EQ(d.otb_handle_zero_tail, defaults.otb_handle_zero_tail);
    const auto c = config_from_yaml("algorithm:\n  gamma: 0.9\n  lam: 0.95\n  norm_adv_by_std_in_grpo: false\n", "o")
                       .algorithm.advantage;
    EXPECT_EQ(c.gamma, 0.9);
    EXPECT_EQ(c.lam, 0.95);
    EXPECT_FALSE(c.norm_adv_by_std_in_grpo);
    expect_config_error([] { config_from_yaml("", "o", {"algorithm.lam=1.5"}); }, {"algorithm.lam", "[0, 1]"});
}

TEST(Config, RolloutProgramKeys) {
    // Each new key reads back, and a bad value is refused naming its key.
    const auto c = config_from_yaml(
        "rollout:\n  n: 2\n  generator: multi_stage\n  beam_search: {beam_width: 3, length_penalty: 0.5}\n"
        "  include_stop_str_in_output: true\n  stages:\n"
        "    - {generator: sampler, max_tokens: 100, stop: [\"</think>\"], append: \"\\n<a>\", share_across_samples: "
        "true}\n"
        "    - {generator: beam_search, max_tokens: 8}\n",
        "p.yaml");
    ASSERT_EQ(c.rollout.stages.size(), 2u);
    EXPECT_EQ(c.rollout.stages[0].stop, std::vector<std::string>{"</think>"});
    EXPECT_EQ(c.rollout.stages[0].append, "\n<a>");
    EXPECT_TRUE(c.rollout.stages[0].share_across_samples);
    EXPECT_EQ(c.rollout.stages[1].generator, "beam_search");
    EXPECT_EQ(c.rollout.beam_search.beam_width, 3);
    EXPECT_TRUE(c.rollout.include_stop_str_in_output);
    EXPECT_EQ(config_from_yaml(to_yaml(c), "again").rollout.stages[0].append, "\n<a>") << "to_yaml round trip";
    EXPECT_EQ(config_from_yaml("", "o", {"rollout.stop=[\"###\", \"\\n\\n\"]"}).rollout.stop,
              (std::vector<std::string>{"###", "\n\n"}));
    expect_config_error([] { config_from_yaml("", "o", {"rollout.stop=[\"\"]"}); },
                        {"rollout.stop", "entry 0 is empty"});
    expect_config_error(
        [] {
            config_from_yaml("", "o", {"rollout.generator=beam_search", "rollout.n=5"});
        },
        {"rollout.n", "n must be <= beam_width"});
    expect_config_error([] { config_from_yaml("", "o", {"rollout.beam_search.beam_width=0"}); },
                        {"rollout.beam_search.beam_width"});
    expect_config_error([] { config_from_yaml("", "o", {"rollout.beam_search.length_penalty=.nan"}); },
                        {"rollout.beam_search.length_penalty"});
    expect_config_error([] { config_from_yaml("", "o", {"rollout.generator=multi_stage"}); },
                        {"rollout.stages", "at least one stage"});
    expect_config_error([] { config_from_yaml("", "o", {"rollout.stages=[{max_tokens: 2}]"}); },
                        {"rollout.stages", "multi_stage"});
    expect_config_error(
        [] {
            config_from_yaml("", "o",
                             {"rollout.generator=multi_stage", "rollout.stages=[{generator: beam_search, stop: [x]}]"});
        },
        {"rollout.stages[0].stop", "beam_search"});
    expect_config_error(
        [] {
            config_from_yaml("", "o", {"rollout.generator=multi_stage", "rollout.stages=[{generator: greedy}]"});
        },
        {"rollout.stages[0].generator"});
    expect_config_error(
        [] {
            config_from_yaml("", "o", {"rollout.generator=multi_stage", "rollout.stages=[{max_tokens: 0}]"});
        },
        {"rollout.stages[0].max_tokens"});
    expect_config_error(
        [] {
            config_from_yaml("", "o", {"rollout.generator=multi_stage", "rollout.stages=[{max_tokens: 600}]"});
        },
        {"rollout.stages", "over data.max_response_length=512"});
}

TEST(Config, YamlSyntaxErrorHasLine) {
    expect_config_error([] { config_from_yaml("trainer:\n  mode: [rl\n", "s.yaml"); },
                        {"s.yaml:", "YAML syntax error"});
}

TEST(Config, CommandLineOverrides) {
    Config c = config_from_yaml("trainer:\n  total_epochs: 3\n", "o.yaml",
                                {"trainer.total_epochs=5", "rollout.stop_token_ids=[1,2]", "critic.ppo_epochs=null",
                                 "trainer.total_training_steps=10", "placement.groups.0.ranks=2",
                                 "model.path=/tmp/some model"});
    EXPECT_EQ(c.trainer.total_epochs, 5);
    EXPECT_EQ(c.rollout.stop_token_ids, (std::vector<int64_t>{1, 2}));
    EXPECT_FALSE(c.critic.ppo_epochs.has_value());
    EXPECT_EQ(*c.trainer.total_training_steps, 10);
    EXPECT_EQ(c.placement.groups[0].ranks, "2");
    EXPECT_EQ(c.model.path, "/tmp/some model");
    EXPECT_NE(rlpt::origin_of(c, "trainer.total_epochs").find("command line"), std::string::npos);
    expect_config_error([] { config_from_yaml("", "o.yaml", {"trainer.total_stepz=1"}); },
                        {"command line", "unknown key 'trainer.total_stepz'"});
    expect_config_error([] { config_from_yaml("", "o.yaml", {"rollout.n=-3"}); }, {"command line", "rollout.n"});
    expect_config_error([] { config_from_yaml("", "o.yaml", {"novalue"}); }, {"key.path=value"});
}

TEST(Config, DumpRoundTripsExactly) {
    Config c = config_from_yaml("actor:\n  optim:\n    lr: 3.0e-7\n  clip_ratio_high: 0.28\nmodel:\n  path: \"a: b\"\n",
                                "d.yaml", {"rollout.stop_token_ids=[7]"});
    std::string y = rlpt::to_yaml(c);
    Config back = config_from_yaml(y, "dump");
    EXPECT_EQ(rlpt::to_yaml(back), y);
    EXPECT_EQ(rlpt::config_hash(back), rlpt::config_hash(c));
    EXPECT_DOUBLE_EQ(back.actor.optim.lr, 3.0e-7);
    EXPECT_DOUBLE_EQ(*back.actor.policy_loss.clip_ratio_high, 0.28);
    EXPECT_FALSE(back.actor.policy_loss.clip_ratio_low.has_value());
    EXPECT_EQ(back.model.path, "a: b");
    Config other = config_from_yaml("rollout:\n  n: 9\n", "x");
    EXPECT_NE(rlpt::config_hash(other), rlpt::config_hash(c));
}

TEST(Config, EveryShippedConfigParses) {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(RLPT_SOURCE_DIR) / "configs";
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (e.path().extension() != ".yaml") continue;
        SCOPED_TRACE(e.path().string());
        EXPECT_NO_THROW(rlpt::load_config(e.path().string()));
        ++n;
    }
    EXPECT_GT(n, 0) << "no configs found in " << dir;
}

TEST(Config, ScorerMapNamesAndSpecsRoundTrip) {
    Config c = config_from_yaml(
        "reward:\n  scorers:\n    digitsum: number\n    my/text: {type: number, extraction: whole, score: 2}\n",
        "s.yaml", {"reward.scorers.other=exact"});
    ASSERT_EQ(c.reward.scorers.size(), 3u);
    EXPECT_EQ(c.reward.scorers.at("digitsum"), "number");
    EXPECT_EQ(c.reward.scorers.at("other"), "exact");
    EXPECT_EQ(c.reward.scorers.at("my/text"), R"({"extraction":"whole","score":2,"type":"number"})");
    EXPECT_EQ(rlpt::origin_of(c, "reward.scorers.digitsum"), "s.yaml:3");
    const std::string y = rlpt::to_yaml(c);
    Config back = config_from_yaml(y, "dump");
    EXPECT_EQ(back.reward.scorers, c.reward.scorers);
    EXPECT_EQ(rlpt::to_yaml(back), y);
    expect_config_error([] { config_from_yaml("reward:\n  scorers: [number]\n", "b.yaml"); },
                        {"b.yaml:2", "'reward.scorers' must be a mapping"});
}

TEST(Config, ValidationReportsEveryProblemAtOnce) {
    try {
        config_from_yaml("", "v.yaml",
                         {"actor.optim.lr=-1", "rollout.n=0", "trainer.logger=[console, wandb]",
                          "model.builtin.num_heads=0"});
        FAIL() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        const std::string m = e.message();
        for (const char* frag : {"actor.optim.lr: must be >= 0", "rollout.n: must be > 0",
                                 "trainer.logger: 'wandb' is not one of: console, jsonl, tensorboard",
                                 "model.builtin.num_heads: must be > 0"})
            EXPECT_NE(m.find(frag), std::string::npos) << frag << " not in:\n" << m;
        EXPECT_GE(std::count(m.begin(), m.end(), '\n'), 3) << m;
    }
    // Binding errors (unknown keys, wrong types, a section that is not a mapping) are all reported too.
    try {
        config_from_yaml("trainer:\n  total_stepz: 3\n  seed: x\nactor: 5\nrollout:\n  n: [1]\n", "b.yaml");
        FAIL() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        const std::string m = e.message();
        for (const char* frag : {"b.yaml:2: unknown key 'trainer.total_stepz'", "'trainer.seed' must be an integer",
                                 "'actor' must be a mapping", "'rollout.n' must be an integer"})
            EXPECT_NE(m.find(frag), std::string::npos) << frag << " not in:\n" << m;
    }
    // load_config_unchecked binds without the range checks (rlpt check reports them with the rest).
    Config c = rlpt::load_config_unchecked("", {"actor.optim.lr=-1"});
    EXPECT_DOUBLE_EQ(c.actor.optim.lr, -1);
}
