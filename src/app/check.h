#pragma once
// `rlpt check CONFIG.yaml [key=value ...] [-n N]`: everything that can be checked before a
// launch, without MPI, reported all at once (each problem names its key path), in seconds:
//   * the config's ranges and cross-field rules (validate());
//   * every key that names a table entry names one of the table's (table_name_problems), and
//     the generator's row gets what it needs (generator_problems);
//   * every data file opens and every record has the keys the stage reads;
//   * the tokenizer (model.path's, or the built-in model's character vocabulary) encodes
//     the prompts (and SFT responses) of a sample of rows; the length filters leave data;
//     prompt + response fit the model's positions;
//   * every data_source the stage scores has a scorer, which scores one sample (a command
//     scorer is started);
//   * model.path's config.json loads and its vocabulary covers the tokenizer's;
//   * the placement works for N ranks, and the batch sizes split over it.
// The launch runs the same checks (without the placement: every rank checks it next) on
// rank 0 before anything else. Private to src/app.
#include <string>
#include <vector>

#include "rlpt/config/config.h"

namespace rlpt::app {

struct CheckReport {
    std::vector<std::string> problems;  // "<key path>: <what is wrong>", one per problem
    std::vector<std::string> notes;     // what was checked, for the report
};

// Keys that pick an entry of a table, checked against the table itself (no copy of its names):
// placement.groups.*.roles (the role registry), algorithm.adv_estimator (the estimator table),
// actor.policy_loss.loss_mode (the loss table), rollout.generator (the generator table),
// rollout.multi_turn.builtin_tools (the built-in tools), reward.scorer / reward.scorers.* names
// (the scorer types). One "<origin>: <key>: '<value>' is not one of: <names>" per problem; empty
// when all are known.
std::vector<std::string> table_name_problems(const Config& c);

// What rollout.generator's row of the generator table asks of the config: one that runs tools
// (roles::GeneratorEntry::runs_tools) needs rollout.multi_turn's tools or environment and a chat
// template with a tool format (not llama3). One "<origin>: <key>: <what>" per problem; empty for
// an unknown generator (table_name_problems reports it).
std::vector<std::string> generator_problems(const Config& c);

// The names (table_name_problems), data, tokenizer, reward and model checks, plus the placement for `world_size` ranks on
// one node when world_size > 0. Never throws for a bad config: every failure is a problem.
CheckReport check_config(const Config& c, int world_size);

// The RL batch-size rules for the given actor and critic data-parallel sizes and training
// set size (empty: fine); RlTrainer refuses the same.
std::vector<std::string> rl_batch_size_problems(const Config& c, int64_t actor_dp, int64_t critic_dp,
                                                int64_t train_rows);

// `rlpt check ...` (argv[0] is "check"); returns 0 when there is no problem, 2 otherwise.
int check_command(int argc, char** argv);

}  // namespace rlpt::app
