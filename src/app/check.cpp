#include "check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "rlpt/agent/builtin_tools.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/app/job.h"
#include "rlpt/app/registry.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/comm/placement.h"
#include "rlpt/core/error.h"
#include "rlpt/model/model_config.h"
#include "rlpt/roles/generator_table.h"
#include "task_data.h"

namespace rlpt::app {
namespace {

constexpr size_t kSampleRows = 512;  // rows per split whose prompts/responses are tokenised

std::string text_of(const std::exception& e) {
    if (const auto* err = dynamic_cast<const Error*>(&e)) return err->message();
    return e.what();
}

// Runs f; a throw becomes a problem ("<key>: <message>", or the message when it names its key).
template <typename F>
bool attempt(CheckReport& r, const std::string& key, F&& f) {
    try {
        f();
        return true;
    } catch (const std::exception& e) {
        std::string m = text_of(e);
        // Validation lists several problems, one per line.
        std::istringstream lines(m);
        for (std::string line; std::getline(lines, line);)
            if (!line.empty()) r.problems.push_back(key.empty() || line.rfind(key, 0) == 0 ? line : key + ": " + line);
        return false;
    }
}

// Up to kSampleRows row indices spread evenly over n rows.
std::vector<size_t> sample_rows(size_t n) {
    std::vector<size_t> idx;
    const size_t step = n <= kSampleRows ? 1 : (n + kSampleRows - 1) / kSampleRows;
    for (size_t i = 0; i < n; i += step) idx.push_back(i);
    return idx;
}

std::string describe_sources(const std::vector<data::Example>& rows) {
    std::map<std::string, int64_t> n;
    for (const auto& e : rows) ++n[e.data_source];
    std::string s;
    for (const auto& [ds, k] : n) s += fmt::format("{}{} ({})", s.empty() ? "" : ", ", ds, k);
    return s.empty() ? "none" : s;
}

// Tokenises a sample of one split: prompts (and SFT responses), against the length limits.
void check_tokens(CheckReport& r, const Config& c, const TaskData& t, const std::vector<data::Example>& rows,
                  bool validation, int64_t max_positions, const std::string& positions_key) {
    const bool sft = c.trainer.mode == "sft";
    const char* key = validation ? "data.val_files" : "data.train_files";
    const auto idx = sample_rows(rows.size());
    int64_t failed = 0, over = 0, longest_prompt = 0, longest_sft = 0;
    std::string first_error;
    for (size_t i : idx) {
        const auto& e = rows[i];
        try {
            const auto p = static_cast<int64_t>(encode_prompt(t, e.prompt).size());
            longest_prompt = std::max(longest_prompt, p);
            over += p > c.data.max_prompt_length;
            if (sft && !validation && e.response) {
                const auto n = static_cast<int64_t>(t.tok->encode(*e.response, false).size());
                longest_sft = std::max(longest_sft, std::min(p, c.data.max_prompt_length) + n + 1);
            }
        } catch (const std::exception& ex) {
            if (failed++ == 0)
                first_error = fmt::format("row {} (data_source '{}'): {}", e.index, e.data_source, text_of(ex));
        }
    }
    const std::string tok_key = c.model.path.empty() ? "the built-in character vocabulary" : "model.path's tokenizer";
    if (failed > 0) {
        r.problems.push_back(fmt::format("{}: {} of {} sampled rows cannot be tokenised by {}; first: {}", key, failed,
                                         idx.size(), tok_key, first_error));
    }
    const auto checked = static_cast<int64_t>(idx.size()) - failed;
    if (checked > 0 && over > 0) {
        if (!c.data.filter_overlong_prompts && c.data.truncation == "error") {
            r.problems.push_back(fmt::format(
                "data.max_prompt_length: {} of {} sampled {} prompts are longer than {} tokens (longest {}) and "
                "data.truncation=error; raise it, or set data.filter_overlong_prompts=true or data.truncation=left",
                over, checked, validation ? "validation" : "training", c.data.max_prompt_length, longest_prompt));
        } else if (c.data.filter_overlong_prompts && over == checked) {
            r.problems.push_back(fmt::format(
                "data.max_prompt_length: every sampled {} prompt is longer than {} tokens and would be filtered out "
                "(longest {})",
                validation ? "validation" : "training", c.data.max_prompt_length, longest_prompt));
        } else {
            r.notes.push_back(fmt::format("{}: {} of {} sampled prompts are over data.max_prompt_length={} ({})", key,
                                          over, checked, c.data.max_prompt_length,
                                          c.data.filter_overlong_prompts ? "filtered out" : "truncated"));
        }
    }
    if (longest_sft > max_positions) {
        r.problems.push_back(fmt::format("{}: the longest sampled SFT example needs {} positions (prompt + response + "
                                         "eos) but the model has {}",
                                         positions_key, longest_sft, max_positions));
    }
    if (checked > 0) {
        r.notes.push_back(fmt::format("{}: {} sampled rows tokenised, longest prompt {} tokens{}", key, checked,
                                      longest_prompt,
                                      longest_sft > 0 ? fmt::format(", longest SFT example {}", longest_sft) : ""));
    }
}

// Every data_source the stage scores has a scorer, and each scores one of its rows (with the
// row's own answer as the response; a command scorer starts).
void check_rewards(CheckReport& r, const Config& c, TaskData& t) {
    const bool sft = c.trainer.mode == "sft";
    if (!attempt(r, "", [&] { t.scorers = scorers_from_config(c); })) return;
    std::map<std::string, const data::Example*> first;
    for (const auto* split : {&t.train, &t.val}) {
        if (sft && split == &t.train) continue;  // SFT scores validation rows only
        for (const auto& e : *split) first.emplace(e.data_source, &e);
    }
    auto unscored = unscored_data_sources(t.scorers, t.val);
    if (!sft) {
        for (const auto& [ds, n] : unscored_data_sources(t.scorers, t.train)) unscored[ds] += n;
    }
    for (const auto& [ds, n] : unscored) {
        if (sft) r.notes.push_back(fmt::format("reward: sft validation scores data_source '{}' by exact match", ds));
        else r.problems.push_back(unscored_message(ds, n));
    }
    for (const auto& [ds, e] : first) {
        if (unscored.count(ds)) continue;
        attempt(r, "", [&] {
            std::vector<nlohmann::json> extra{e->extra.is_null() ? nlohmann::json::object() : e->extra};
            auto res = reward::score_batch(t.scorers, {ds}, {e->ground_truth}, {e->ground_truth}, &extra);
            r.notes.push_back(fmt::format("reward: data_source '{}' -> {} (its answer as a response scores {})", ds,
                                          t.scorers.get(ds).name(), res[0].score));
        });
    }
}

// "<origin>: <key>: '<value>' is not one of: <names>" unless `value` is one of `names`.
void require_one_of(std::vector<std::string>& out, const Config& c, const std::string& key, const std::string& value,
                    const std::vector<std::string>& names) {
    if (std::find(names.begin(), names.end(), value) != names.end()) return;
    out.push_back(fmt::format("{}: {}: '{}' is not one of: {}", origin_of(c, key), key, value, fmt::join(names, ", ")));
}

std::vector<std::string> generator_names() {
    std::vector<std::string> names;
    for (const auto& g : roles::generator_table()) names.emplace_back(g.name);
    return names;
}

}  // namespace

std::vector<std::string> table_name_problems(const Config& c) {
    std::vector<std::string> out;
    const std::vector<std::string> roles = role_names();
    for (size_t g = 0; g < c.placement.groups.size(); ++g) {
        for (const auto& r : c.placement.groups[g].roles)
            require_one_of(out, c, fmt::format("placement.groups.{}.roles", g), r, roles);
    }
    require_one_of(out, c, "algorithm.adv_estimator", c.algorithm.adv_estimator, algo::advantage_estimator_names());
    require_one_of(out, c, "actor.policy_loss.loss_mode", c.actor.loss_mode, algo::policy_loss_names());
    require_one_of(out, c, "rollout.generator", c.rollout.generator, generator_names());
    for (const auto& t : c.rollout.multi_turn.builtin_tools)
        require_one_of(out, c, "rollout.multi_turn.builtin_tools", t, agent::builtin_tool_names());
    // reward.scorer / reward.scorers: a name is a spec type (a JSON spec is read by make_scorer,
    // which names its unknown type itself); auto and custom are reward.scorer's own words.
    auto scorers = reward::scorer_type_names();
    if (c.reward.scorer != "auto" && c.reward.scorer != "custom") {
        auto with_own = scorers;
        with_own.insert(with_own.begin(), {"auto", "custom"});
        require_one_of(out, c, "reward.scorer", c.reward.scorer, with_own);
    }
    for (const auto& [ds, spec] : c.reward.scorers) {
        if (spec.empty() || spec[0] != '{') require_one_of(out, c, "reward.scorers." + ds, spec, scorers);
    }
    return out;
}

std::vector<std::string> generator_problems(const Config& c) {
    std::vector<std::string> out;
    const auto& table = roles::generator_table();
    auto row = std::find_if(table.begin(), table.end(),
                            [&](const roles::GeneratorEntry& g) { return c.rollout.generator == g.name; });
    if (row == table.end() || !row->runs_tools) return out;
    auto problem = [&](const std::string& key, const std::string& what) {
        out.push_back(fmt::format("{}: {}: {}", origin_of(c, key), key, what));
    };
    const auto& mt = c.rollout.multi_turn;
    if (mt.mcp_servers.empty() && mt.builtin_tools.empty() && mt.env_command.empty()) {
        problem("rollout.generator",
                fmt::format("{} needs tools or an environment: set rollout.multi_turn.mcp_servers, "
                            ".builtin_tools or .env_command",
                            row->name));
    }
    if (c.model.chat_template == "llama3") {
        problem("model.chat_template",
                fmt::format("{} supports the qwen2, qwen3 and none templates (llama3's tool format is "
                            "not implemented)",
                            row->name));
    }
    return out;
}

std::vector<std::string> rl_batch_size_problems(const Config& c, int64_t actor_dp, int64_t critic_dp,
                                                int64_t train_rows) {
    std::vector<std::string> out;
    const int64_t tb = c.data.train_batch_size, mb = c.actor.ppo_mini_batch_size, n = c.rollout.n;
    if (tb <= 0 || mb <= 0 || n <= 0) return out;  // validate() reports these
    if (tb % mb != 0)
        out.push_back(
            fmt::format("data.train_batch_size={} must be a multiple of actor.ppo_mini_batch_size={}", tb, mb));
    if ((mb * n) % actor_dp != 0)
        out.push_back(
            fmt::format("actor.ppo_mini_batch_size x rollout.n = {} samples must split evenly over the {} actor ranks",
                        mb * n, actor_dp));
    // The critic's mini-batches count when the run plan has a critic. An unknown estimator has
    // no plan: table_name_problems reports it, and its critic rule waits for a known name.
    bool critic = false;
    try {
        critic = plan_run(c).has("critic");
    } catch (const ConfigError&) {
    }
    if (critic) {
        const int64_t cmb = c.critic.ppo_mini_batch_size.value_or(mb);
        if (cmb > 0 && (tb % cmb != 0 || (cmb * n) % critic_dp != 0))
            out.push_back(fmt::format("critic mini-batches: data.train_batch_size={} must be a multiple of {} and {} x "
                                      "rollout.n must split over the {} critic ranks",
                                      tb, cmb, cmb, critic_dp));
    }
    if (tb > train_rows)
        out.push_back(
            fmt::format("data.train_batch_size={} is larger than the training set ({} prompts)", tb, train_rows));
    return out;
}

CheckReport check_config(const Config& c, int world_size) {
    CheckReport r;
    const bool sft = c.trainer.mode == "sft";
    TaskData t;
    // Names first: the run plan (the placement below) reads the estimator's table row.
    const auto name_problems = table_name_problems(c);
    r.problems.insert(r.problems.end(), name_problems.begin(), name_problems.end());
    const auto generator = generator_problems(c);
    r.problems.insert(r.problems.end(), generator.begin(), generator.end());
    const bool names_ok = name_problems.empty();
    attempt(r, "model.chat_template", [&] { t.chat = tokenizer::parse_chat_family(c.model.chat_template); });
    t.chat_options.enable_thinking = c.model.apply_chat_template_kwargs.enable_thinking;
    const bool train_ok = attempt(r, "", [&] { t.train = load_examples(c, false); });
    const bool val_ok = attempt(r, "", [&] { t.val = load_examples(c, true); });
    if (train_ok && t.train.empty()) r.problems.push_back("data.train_files: the training data is empty");
    if (train_ok)
        r.notes.push_back(
            fmt::format("data: {} training rows, data_sources {}", t.train.size(), describe_sources(t.train)));
    if (val_ok)
        r.notes.push_back(fmt::format("data: {} validation rows{}", t.val.size(),
                                      t.val.empty() ? "" : ", data_sources " + describe_sources(t.val)));

    // The model: positions and vocabulary.
    int64_t max_positions = c.model.builtin.max_position, model_vocab = -1;
    std::string positions_key = "model.builtin.max_position";
    bool model_ok = true;
    if (!c.model.path.empty()) {
        positions_key = "model.path (config.json max_position_embeddings)";
        model_ok = attempt(r, "model.path", [&] {
            auto a = model::load_model_args(c.model.path);
            max_positions = a.max_position_embeddings;
            model_vocab = a.vocab_size;
            r.notes.push_back(fmt::format("model: {} ({}, hidden {}, {} layers, vocabulary {}, {} positions)",
                                          c.model.path, a.architecture(), a.hidden_size, a.num_hidden_layers,
                                          a.vocab_size, a.max_position_embeddings));
        });
    }
    const bool tok_ok =
        (train_ok || !c.model.path.empty()) && attempt(r, "", [&] { t.tok = make_tokenizer(c, t.train, t.val); });
    if (tok_ok) {
        r.notes.push_back(fmt::format("tokenizer: {} (vocabulary {}){}", t.tok->kind(), t.tok->vocab_size(),
                                      c.model.path.empty() ? ", built-in model" : ""));
        if (model_vocab > 0 && t.tok->vocab_size() > model_vocab)
            r.problems.push_back(
                fmt::format("model.path: the tokenizer has {} tokens but config.json's vocab_size is {}",
                            t.tok->vocab_size(), model_vocab));
        check_tokens(r, c, t, t.train, false, max_positions, positions_key);
        check_tokens(r, c, t, t.val, true, max_positions, positions_key);
    }
    if (model_ok && (!sft || !t.val.empty()) && c.data.max_prompt_length + c.data.max_response_length > max_positions) {
        r.problems.push_back(fmt::format("data.max_response_length: data.max_prompt_length + data.max_response_length "
                                         "= {} tokens exceeds the model's {} positions ({})",
                                         c.data.max_prompt_length + c.data.max_response_length, max_positions,
                                         positions_key));
    }
    check_rewards(r, c, t);

    // Placement on one node of `world_size` ranks, and the batch sizes over it.
    int64_t actor_dp = 1, critic_dp = 1;
    if (world_size > 0 && names_ok) {
        attempt(r, "placement", [&] {
            const RunPlan plan = plan_run(c);
            auto p =
                comm::compute_placement(c.placement, world_size, std::vector<int>(static_cast<size_t>(world_size), 0),
                                        role_names(), plan.roles, plan.why,
                                        static_cast<int>(c.rollout.tensor_model_parallel_size));
            check_zero_shard_groups(c, p);
            actor_dp = p.at("actor").dp_size();
            if (p.find("critic")) critic_dp = p.at("critic").dp_size();
            r.notes.push_back(p.describe());
        });
    }
    if (train_ok && !sft) {
        for (auto& p : rl_batch_size_problems(c, actor_dp, critic_dp, static_cast<int64_t>(t.train.size())))
            r.problems.push_back(std::move(p));
    }
    if (train_ok && sft && c.sft.batch_size > static_cast<int64_t>(t.train.size()))
        r.problems.push_back(fmt::format("sft.batch_size={} is larger than the training set ({} examples)",
                                         c.sft.batch_size, t.train.size()));
    return r;
}

int check_command(int argc, char** argv) {
    const char* usage =
        "usage: rlpt check CONFIG.yaml [key=value ...] [-n N]\n"
        "  Checks a config and everything it points at without MPI, and reports every problem at once:\n"
        "  config values, data files and their keys, tokenisation and length limits of a sample of rows,\n"
        "  a scorer for every data_source, the model's config.json and tokenizer, and (with -n) the\n"
        "  placement and batch sizes for N ranks. Exit code 0: no problem, 2: problems (listed).\n";
    std::string path;
    std::vector<std::string> overrides;
    int world_size = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(usage, stdout);
            return kExitOk;
        }
        if ((a == "-n" || a == "--ranks" || a == "-np") && i + 1 < argc) {
            try {
                world_size = std::stoi(argv[++i]);
            } catch (const std::exception&) {
                world_size = -1;
            }
            if (world_size <= 0) {
                std::fprintf(stderr, "rlpt check: -n needs a positive rank count, got '%s'\n", argv[i]);
                return kExitConfig;
            }
        } else if (a.find('=') != std::string::npos && !path.empty()) {
            overrides.push_back(a);
        } else if (path.empty() && a[0] != '-') {
            path = a;
        } else {
            std::fprintf(stderr, "rlpt check: unexpected argument '%s'\n%s", a.c_str(), usage);
            return kExitConfig;
        }
    }
    if (path.empty()) {
        std::fputs(usage, stderr);
        return kExitConfig;
    }
    CheckReport r;
    Config c;
    if (!attempt(r, "", [&] { c = load_config_unchecked(path, overrides); })) {
        std::printf("rlpt check %s: the config cannot be read (data, model and rewards not checked yet):\n",
                    path.c_str());
        for (const auto& p : r.problems) std::printf("  PROBLEM %s\n", p.c_str());
        std::printf("%zu problem(s) found\n", r.problems.size());
        return kExitConfig;
    }
    attempt(r, "", [&] { validate(c); });
    CheckReport more = check_config(c, world_size);
    r.problems.insert(r.problems.end(), more.problems.begin(), more.problems.end());
    std::printf("rlpt check %s (trainer.mode %s%s)\n", path.c_str(), c.trainer.mode.c_str(),
                world_size > 0 ? fmt::format(", {} ranks", world_size).c_str() : ", placement not checked: add -n N");
    for (const auto& n : more.notes) std::printf("  ok      %s\n", n.c_str());
    for (const auto& p : r.problems) std::printf("  PROBLEM %s\n", p.c_str());
    std::printf("%s\n", r.problems.empty() ? "no problems found"
                                           : fmt::format("{} problem(s) found", r.problems.size()).c_str());
    return r.problems.empty() ? kExitOk : kExitConfig;
}

}  // namespace rlpt::app
