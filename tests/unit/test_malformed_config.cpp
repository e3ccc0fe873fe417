// Broken config files and overrides: every one must be a ConfigError naming what is wrong and
// where, never a crash or a yaml-cpp / std exception. Named cases, then a seeded mini-fuzz.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rlpt/config/config.h"
#include "rlpt/core/debug_env.h"
#include "rlpt/protocol/runtime.h"
#include "test_malformed_util.h"

namespace rlpt {
namespace {

using malformed::expect_error;

const char* kSeedYaml = R"(# a valid config
trainer:
  experiment_name: tiny
  total_training_steps: 2
  val_before_train: false
data:
  train_batch_size: 8
  max_prompt_length: 16
  max_response_length: 8
actor:
  ppo_mini_batch_size: 8
  ppo_micro_batch_size_per_rank: 8
  optim:
    lr: 1e-6
rollout:
  n: 2
placement:
  groups:
    - {roles: [actor, rollout], ranks: auto}
)";

struct Case {
    const char* name;
    std::string yaml;
    std::vector<std::string> parts;  // all must appear in what()
};

TEST(MalformedConfig, SeedIsValid) { EXPECT_NO_THROW(config_from_yaml(kSeedYaml, "seed.yaml")); }

TEST(MalformedConfig, NamedCases) {
    const std::vector<Case> cases = {
        {"unclosed flow list", "trainer: [1, 2\n", {"bad.yaml:", "YAML syntax error"}},
        {"bad indentation",
         "trainer:\n  experiment_name: a\n    total_epochs: 2\n",
         {"bad.yaml:3", "YAML syntax error"}},
        {"tab indentation", "trainer:\n\texperiment_name: a\n", {"bad.yaml:", "YAML syntax error"}},
        {"wrong type int",
         "data:\n  train_batch_size: lots\n",
         {"bad.yaml:2", "'data.train_batch_size' must be an integer, got 'lots'"}},
        {"float for int",
         "data:\n  train_batch_size: 1.5\n",
         {"'data.train_batch_size' must be an integer, got '1.5'"}},
        {"wrong type bool",
         "trainer:\n  val_before_train: maybe\n",
         {"bad.yaml:2", "'trainer.val_before_train' must be true or false, got 'maybe'"}},
        {"list for number", "actor:\n  optim:\n    lr: [1, 2]\n", {"'actor.optim.lr' must be a number, got a list"}},
        {"mapping for string",
         "trainer:\n  experiment_name: {a: 1}\n",
         {"'trainer.experiment_name' must be a string, got a mapping"}},
        {"null for int", "data:\n  train_batch_size:\n", {"'data.train_batch_size' must be an integer, got null"}},
        {"unknown key",
         "trainer:\n  bogus: 1\n",
         {"bad.yaml:2", "unknown key 'trainer.bogus'", "known keys in 'trainer'"}},
        {"unknown section", "trainr:\n  total_epochs: 1\n", {"bad.yaml:1", "unknown key 'trainr'"}},
        {"section is a scalar", "trainer: 5\n", {"'trainer' must be a mapping of keys, got '5'"}},
        {"top level is a list", "- a\n- b\n", {"'<top level>' must be a mapping of keys, got a list"}},
        {"top level is a scalar", "just text\n", {"'<top level>' must be a mapping of keys, got 'just text'"}},
        {"huge integer",
         "data:\n  train_batch_size: 99999999999999999999999\n",
         {"bad.yaml:2", "'data.train_batch_size' must be an integer, got '99999999999999999999999'"}},
        {"huge negative integer",
         "trainer:\n  total_training_steps: -99999999999999999999\n",
         {"'trainer.total_training_steps' must be an integer or null"}},
        {"number overflow", "actor:\n  optim:\n    lr: 1e999\n", {"'actor.optim.lr' must be a number, got '1e999'"}},
        {"nan", "actor:\n  optim:\n    lr: .nan\n", {"bad.yaml:3", "'actor.optim.lr' must be a number, got '.nan'"}},
        {"out of range value",
         "data:\n  train_batch_size: -4\n",
         {"bad.yaml:2", "data.train_batch_size", "must be > 0"}},
        {"non-scalar key", "? [a, b]\n: 1\n", {"bad.yaml:1", "key", "must be a plain name, got a list"}},
        {"non-scalar nested key", "trainer:\n  ? {x: 1}\n  : 2\n", {"bad.yaml:2", "trainer", "must be a plain name"}},
        {"duplicate key",
         "trainer:\n  total_epochs: 1\n  total_epochs: 2\n",
         {"bad.yaml:3", "duplicate key 'trainer.total_epochs'", "first set at bad.yaml:2"}},
        {"duplicate section",
         "data:\n  train_batch_size: 8\ndata:\n  train_batch_size: 4\n",
         {"bad.yaml:3", "duplicate key 'data'"}},
        {"list item not a mapping",
         "placement:\n  groups:\n    - actor\n",
         {"'placement.groups.0' must be a mapping of keys, got 'actor'"}},
        {"list is a mapping", "placement:\n  groups: {a: 1}\n", {"'placement.groups' must be a list, got a mapping"}},
        {"self-referencing alias",
         "data:\n  extra_keys: &a [*a]\n",
         {"'data.extra_keys[0]' must be a list of strings"}},
        {"unknown anchor", "data:\n  train_batch_size: *nothere\n", {"bad.yaml:2", "YAML syntax error"}},
        {"deep flow nesting", "trainer: " + std::string(100000, '['), {"bad.yaml:", "YAML syntax error"}},
        {"deep block nesting",
         [] {
             std::string s;
             for (int i = 0; i < 3000; ++i) s += std::string(static_cast<size_t>(i), ' ') + "k:\n";
             return s;
         }(),
         {"bad.yaml:", "YAML syntax error"}},
        {"binary garbage", std::string("\x00\x01\xff\xfe\x7f{[\"\x80\x81", 11), {"bad.yaml"}},
        {"invalid utf-8 key", "tr\xff\xfeiner:\n  a: 1\n", {"bad.yaml:1", "unknown key"}},
        {"NUL inside",
         std::string("trainer:\n  experiment_name: a\0b\n", 32),
         {"bad.yaml:2:21: the file contains a NUL byte"}},
    };
    for (const auto& c : cases) {
        expect_error<ConfigError>([&] { config_from_yaml(c.yaml, "bad.yaml"); }, c.parts, c.name);
    }
}

TEST(MalformedConfig, BadOverrides) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"trainer.total_epochs", {"override 'trainer.total_epochs' must look like key.path=value"}},
        {"=3", {"must look like key.path=value"}},
        {"trainer..total_epochs=3", {"has an empty key segment"}},
        {"trainer.total_epochs=[1", {"override 'trainer.total_epochs=[1': value is not valid YAML"}},
        {"trainer.total_epochs=lots", {"command line (trainer.total_epochs=lots)", "must be an integer, got 'lots'"}},
        {"trainer.bogus=1", {"command line (trainer.bogus=1)", "unknown key 'trainer.bogus'"}},
        {"trainer.experiment_name.x=1", {"'experiment_name' is not a section"}},
        {"trainer.experiment_name.x.y=1", {"'experiment_name' is not a section"}},
        {"trainr.groups.0.ranks=2", {"command line (trainr.groups.0.ranks=2)", "unknown key 'trainr'"}},
        {"placement.groups.7.ranks=2", {"list 'placement.groups' has 1 items"}},
        {"placement.groups.99999999999999999999999.ranks=2", {"list 'placement.groups' has 1 items"}},
        {"placement.groups.99999999999999999999999=2", {"index out of range"}},
        {"placement.groups.18446744073709551616=2", {"index out of range"}},
    };
    for (const auto& [ov, parts] : cases) {
        expect_error<ConfigError>([&] { config_from_yaml(kSeedYaml, "seed.yaml", {ov}); }, parts, ov);
    }
}

TEST(MalformedConfig, MissingFile) {
    expect_error<ConfigError>([] { load_config("/no/such/dir/x.yaml"); },
                              {"/no/such/dir/x.yaml: cannot open config file"});
}

TEST(MalformedConfig, FuzzedFilesOnlyGiveConfigErrors) {
    const std::vector<std::string> seeds = {kSeedYaml, to_yaml(Config{})};
    auto counts =
        malformed::fuzz(seeds, 3000, 20261122, " \n:-[]{},&*!|>'\"#?%@`0123456789.eE+abcdefghijklmnopqrstuvwxyz_",
                        [](const std::string& text) { config_from_yaml(text, "fuzz.yaml"); }, {ErrorKind::kConfig});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 300) << "the mutations should break most configs";
    EXPECT_GT(counts.accepted, 30) << "some mutations (in comments, values) should still parse";
}

TEST(MalformedConfig, FuzzedOverridesOnlyGiveConfigErrors) {
    const std::vector<std::string> seeds = {"trainer.total_epochs=3", "placement.groups.0.ranks=2",
                                            "placement.groups=[{roles: [actor, rollout], ranks: auto}]",
                                            "actor.optim.lr=1e-6", "data.extra_keys=[a, b]"};
    auto counts = malformed::fuzz(seeds, 3000, 7, ".=0123456789[]{},: -_abcdefghijklmnopqrstuvwxyz\"'&*!|",
                                  [](const std::string& ov) { config_from_yaml(kSeedYaml, "seed.yaml", {ov}); },
                                  {ErrorKind::kConfig});
    EXPECT_EQ(counts.bad, 0);
    EXPECT_GT(counts.rejected, 300);
}

// The debugging knobs are read at start-up on every rank: a bad value must be a ConfigError
// (every rank refuses alike), never std::out_of_range from stoi.
TEST(MalformedDebugEnv, SimulatedNodes) {
    EXPECT_EQ(simulated_node_label("2", 3, 4), 1);
    EXPECT_EQ(simulated_node_label("0,0,1,1", 2, 4), 1);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"0", "ranks per node must be > 0"},
        {"99999999999999999999", "ranks per node is too large"},
        {"0,99999999999999999999,1,1", "expected a count or comma-separated node numbers"},
        {"0,-1,1,1", "expected a count or comma-separated node numbers"},
        {"0,1", "lists 2 ranks but the world has 4"},
        {"two", "expected a count or comma-separated node numbers"},
        {"", "lists 0 ranks but the world has 4"},
    };
    for (const auto& [spec, part] : cases) {
        expect_error<ConfigError>([&] { simulated_node_label(spec, 0, 4); }, {"RLPT_SIMULATE_NODES", part}, spec);
    }
}

TEST(MalformedDebugEnv, FaultSpecs) {
    auto ok = protocol::FaultPlan::parse("hang:2:ping:3");
    EXPECT_EQ(ok.kind, "hang");
    EXPECT_EQ(ok.world_rank, 2);
    EXPECT_EQ(ok.method, "ping");
    EXPECT_EQ(ok.step, 3);
    for (const std::string spec : {"throw", "throw:2", "explode:2:ping", "throw:x:ping", "throw:2:ping:x",
                                   "throw:99999999999999999999:ping", "throw:2:ping:3:4"}) {
        expect_error<ConfigError>([&] { protocol::FaultPlan::parse(spec); },
                                  {"RLPT_FAULT='" + spec + "'",
                                   "expected <throw|kill|hang|stop>:<world rank>:<method>[:<step>]"},
                                  spec);
    }
}

}  // namespace
}  // namespace rlpt
