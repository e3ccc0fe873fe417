#pragma once
// Choosing a scorer per data_source (verl's default_compute_score dispatch), building
// scorers from configuration, and scoring a batch. Torch-free.
//
// Built-in data_sources (add_builtin_scorers):
//   openai/gsm8k                                              -> gsm8k (strict, 0, 1)
//   lighteval/MATH, DigitalLearningGmbH/MATH-lighteval,
//   HuggingFaceH4/MATH-500                                    -> math
//   rlpt/arithmetic                                           -> arithmetic
//   rlpt/arithmetic_tools                                     -> number (last_number: the
//                                       answer after the call; the tool's text is not scored)
//   math_dapo, math, math_dapo_reasoning, and every data_source starting with "aime"
//                                                             -> math_dapo (rlpt/reward/math_dapo.h)
// verl's other sources (numina_*, code sandboxes, ...) are not built in; they are unknown
// data_sources unless configured.

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

class ScorerRegistry {
  public:
    // Maps `data_source` (exact string) to `scorer`, replacing any earlier entry.
    // Throws ConfigError on an empty data_source or a null scorer.
    void set(const std::string& data_source, std::shared_ptr<const Scorer> scorer);
    // Scorer for every data_source starting with `prefix` that has no exact entry (verl's
    // startswith("aime")); the longest matching prefix wins.
    void set_prefix(const std::string& prefix, std::shared_ptr<const Scorer> scorer);
    // Scorer for data_sources without an entry; nullptr (the default) means "unknown is an error".
    void set_default(std::shared_ptr<const Scorer> scorer);

    bool contains(std::string_view data_source) const;
    std::vector<std::string> data_sources() const;  // sorted
    const Scorer* default_scorer() const { return default_.get(); }

    // The scorer for `data_source`: its entry, else its longest prefix entry, else the default.
    // Throws ConfigError naming the data_source and every known one when there is none.
    const Scorer& get(std::string_view data_source) const;

    // get(request.data_source).score(request).
    ScoreResult score(const ScoreRequest& request) const;

  private:
    std::map<std::string, std::shared_ptr<const Scorer>, std::less<>> scorers_;
    std::map<std::string, std::shared_ptr<const Scorer>, std::less<>> prefixes_;
    std::shared_ptr<const Scorer> default_;
};

// Adds the built-in data_sources listed above (replacing existing entries for them).
void add_builtin_scorers(ScorerRegistry& registry);

// Builds one scorer from a JSON spec. `where` names the spec in error messages (a config
// key path like "reward.scorers.my/data"). Unknown keys, wrong types and bad values throw
// ConfigError naming `where` and the key. Specs (all keys but "type" optional):
//   {"type": "gsm8k", "method": "strict"|"flexible", "format_score": 0.0, "score": 1.0}
//   {"type": "math"}
//   {"type": "math_dapo"}
//   {"type": "exact"}                                  (reward/number.h)
//   {"type": "command", "command": "<shell command>" (required), "timeout_s": 60.0}
//                                                      (reward/command_scorer.h)
//   {"type": "number", "extraction": "last_number"|"whole", "score": 1.0, "format_score": 0.0}
//   {"type": "arithmetic", "answer_format": "plain"|"reversed", "score": 1.0, "format_score": 0.0}
//   {"type": "format", "pattern": "<ICU regex>" (required), "match": "search"|"full",
//    "score": 1.0, "mismatch_score": 0.0}
//   {"type": "user", "path": "/path/libscorer.so" (required)}
//   {"type": "sum", "parts": [{"weight": 1.0, "scorer": {<spec>}}, ...] (required)}
// The types are the rows of kScorerTypes in src/reward/registry.cpp (scorer_type_names()).
std::shared_ptr<const Scorer> make_scorer(const nlohmann::json& spec, const std::string& where);
// Every spec "type" make_scorer knows, in table order (reward.scorer / reward.scorers values).
std::vector<std::string> scorer_type_names();

// A registry from configuration:
//   {"builtins": true, "scorers": {"<data_source>": {<spec>}, ...}, "default": {<spec>}}
// All keys optional; "builtins" (default true) adds add_builtin_scorers first, "scorers"
// entries then add or replace, "default" (absent or null: none) sets the default scorer.
ScorerRegistry make_scorer_registry(const nlohmann::json& config, const std::string& where);

// Scores every request in order. A request whose index is -1 gets its position. Any
// exception is rethrown with its kind kept and the context
// "scoring sample <i> (data_source '<ds>')" prepended.
std::vector<ScoreResult> score_batch(const ScorerRegistry& registry, std::vector<ScoreRequest> requests);

// Same, from parallel columns (e.g. a batch's non-tensor fields). `extra_infos` may be
// nullptr (no extra info) or hold one JSON per sample. Throws ValueError when sizes differ.
std::vector<ScoreResult> score_batch(const ScorerRegistry& registry, const std::vector<std::string>& data_sources,
                                     const std::vector<std::string>& solutions,
                                     const std::vector<std::string>& ground_truths,
                                     const std::vector<nlohmann::json>* extra_infos = nullptr);

}  // namespace rlpt::reward
