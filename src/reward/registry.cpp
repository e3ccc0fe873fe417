#include "rlpt/reward/registry.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <set>

#include "rlpt/core/error.h"
#include "rlpt/reward/command_scorer.h"
#include "rlpt/reward/format.h"
#include "rlpt/reward/gsm8k.h"
#include "rlpt/reward/math.h"
#include "rlpt/reward/math_dapo.h"
#include "rlpt/reward/number.h"
#include "rlpt/reward/user_scorer_loader.h"

namespace rlpt::reward {

namespace {

// Reads keys of one JSON object, remembering which were used, so leftovers can be
// reported as unknown.
class SpecReader {
  public:
    SpecReader(const nlohmann::json& spec, std::string where) : spec_(spec), where_(std::move(where)) {
        RLPT_CHECK_KIND(ConfigError, spec_.is_object(), "{}: expected an object, got {}", where_, spec_.dump());
    }

    const nlohmann::json* find(const std::string& key) {
        used_.insert(key);
        auto it = spec_.find(key);
        return it == spec_.end() ? nullptr : &*it;
    }

    std::string string(const std::string& key, const std::optional<std::string>& fallback) {
        const nlohmann::json* v = find(key);
        if (v == nullptr) {
            RLPT_CHECK_KIND(ConfigError, fallback.has_value(), "{}: missing required key '{}'", where_, key);
            return *fallback;
        }
        RLPT_CHECK_KIND(ConfigError, v->is_string(), "{}.{}: expected a string, got {}", where_, key, v->dump());
        return v->get<std::string>();
    }

    double number(const std::string& key, double fallback) {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        RLPT_CHECK_KIND(ConfigError, v->is_number(), "{}.{}: expected a number, got {}", where_, key, v->dump());
        return v->get<double>();
    }

    bool boolean(const std::string& key, bool fallback) {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        RLPT_CHECK_KIND(ConfigError, v->is_boolean(), "{}.{}: expected true or false, got {}", where_, key, v->dump());
        return v->get<bool>();
    }

    // Throws ConfigError naming the first key that was never read.
    void finish() const {
        for (auto it = spec_.begin(); it != spec_.end(); ++it) {
            RLPT_CHECK_KIND(ConfigError, used_.count(it.key()) != 0, "{}: unknown key '{}'", where_, it.key());
        }
    }

    const std::string& where() const { return where_; }

  private:
    const nlohmann::json& spec_;
    std::string where_;
    std::set<std::string> used_;
};

// Runs `parse` and prefixes ConfigErrors thrown by scorer constructors with `where`.
template <typename F>
auto with_where(const std::string& where, F&& parse) -> decltype(parse()) {
    try {
        return parse();
    } catch (const ConfigError& e) {
        if (e.message().rfind(where, 0) == 0) throw;
        rethrow_with_context(where, e);
    }
}

}  // namespace

void ScorerRegistry::set(const std::string& data_source, std::shared_ptr<const Scorer> scorer) {
    RLPT_CHECK_KIND(ConfigError, !data_source.empty(), "scorer registry: empty data_source");
    RLPT_CHECK_KIND(ConfigError, scorer != nullptr, "scorer registry: null scorer for data_source '{}'", data_source);
    scorers_[data_source] = std::move(scorer);
}

void ScorerRegistry::set_prefix(const std::string& prefix, std::shared_ptr<const Scorer> scorer) {
    RLPT_CHECK_KIND(ConfigError, !prefix.empty(), "scorer registry: empty data_source prefix");
    RLPT_CHECK_KIND(ConfigError, scorer != nullptr, "scorer registry: null scorer for prefix '{}'", prefix);
    prefixes_[prefix] = std::move(scorer);
}

void ScorerRegistry::set_default(std::shared_ptr<const Scorer> scorer) { default_ = std::move(scorer); }

bool ScorerRegistry::contains(std::string_view data_source) const {
    return scorers_.find(data_source) != scorers_.end();
}

std::vector<std::string> ScorerRegistry::data_sources() const {
    std::vector<std::string> out;
    out.reserve(scorers_.size());
    for (const auto& kv : scorers_) out.push_back(kv.first);
    return out;
}

const Scorer& ScorerRegistry::get(std::string_view data_source) const {
    auto it = scorers_.find(data_source);
    if (it != scorers_.end()) return *it->second;
    const Scorer* by_prefix = nullptr;
    size_t longest = 0;
    for (const auto& [prefix, scorer] : prefixes_) {
        if (data_source.substr(0, prefix.size()) == prefix && prefix.size() > longest) {
            by_prefix = scorer.get();
            longest = prefix.size();
        }
    }
    if (by_prefix) return *by_prefix;
    if (default_) return *default_;
    RLPT_THROW(ConfigError,
               "no reward scorer for data_source '{}' (known data_sources: {}); set one with reward.scorers "
               "(e.g. reward.scorers: {{\"{}\": number}}) or one for every data_source with reward.scorer",
               data_source, scorers_.empty() ? std::string("none") : fmt::format("{}", fmt::join(data_sources(), ", ")),
               data_source);
}

ScoreResult ScorerRegistry::score(const ScoreRequest& request) const { return get(request.data_source).score(request); }

void add_builtin_scorers(ScorerRegistry& registry) {
    registry.set("openai/gsm8k", std::make_shared<Gsm8kScorer>());
    auto math = std::make_shared<MathScorer>();
    registry.set("lighteval/MATH", math);
    registry.set("DigitalLearningGmbH/MATH-lighteval", math);
    registry.set("HuggingFaceH4/MATH-500", math);
    registry.set("rlpt/arithmetic", std::make_shared<ArithmeticScorer>());
    registry.set("rlpt/arithmetic_tools", std::make_shared<NumberScorer>());  // the answer after the tool call
    auto dapo = std::make_shared<MathDapoScorer>();
    for (const char* ds : {"math_dapo", "math", "math_dapo_reasoning"}) registry.set(ds, dapo);
    registry.set_prefix("aime", dapo);
}

namespace {

// One builder per spec "type": reads its keys from `r` (SpecReader::finish reports leftovers).
using ScorerBuilder = std::shared_ptr<const Scorer> (*)(SpecReader& r);

std::shared_ptr<const Scorer> build_gsm8k(SpecReader& r) {
    const std::string method = r.string("method", std::string("strict"));
    const double format_score = r.number("format_score", 0.0);
    const double score = r.number("score", 1.0);
    return with_where(r.where() + ".method",
                      [&] { return std::make_shared<Gsm8kScorer>(parse_gsm8k_method(method), format_score, score); });
}
std::shared_ptr<const Scorer> build_math(SpecReader&) { return std::make_shared<MathScorer>(); }
std::shared_ptr<const Scorer> build_math_dapo(SpecReader&) { return std::make_shared<MathDapoScorer>(); }
std::shared_ptr<const Scorer> build_exact(SpecReader&) { return std::make_shared<ExactScorer>(); }
std::shared_ptr<const Scorer> build_command(SpecReader& r) {
    const std::string command = r.string("command", std::nullopt);
    const double timeout_s = r.number("timeout_s", 60.0);
    return with_where(r.where(), [&] { return std::make_shared<CommandScorer>(command, timeout_s); });
}
std::shared_ptr<const Scorer> build_number(SpecReader& r) {
    NumberScorerOptions o;
    const std::string extraction = r.string("extraction", std::string("last_number"));
    o.extraction = with_where(r.where() + ".extraction", [&] { return parse_number_extraction(extraction); });
    o.score = r.number("score", o.score);
    o.format_score = r.number("format_score", o.format_score);
    return std::make_shared<NumberScorer>(o);
}
std::shared_ptr<const Scorer> build_arithmetic(SpecReader& r) {
    ArithmeticScorerOptions o;
    const std::string format = r.string("answer_format", std::string("plain"));
    RLPT_CHECK_KIND(ConfigError, format == "plain" || format == "reversed",
                    "{}.answer_format: expected \"plain\" or \"reversed\", got \"{}\"", r.where(), format);
    o.reversed = format == "reversed";
    o.score = r.number("score", o.score);
    o.format_score = r.number("format_score", o.format_score);
    return std::make_shared<ArithmeticScorer>(o);
}
std::shared_ptr<const Scorer> build_format(SpecReader& r) {
    FormatScorerOptions o;
    o.pattern = r.string("pattern", std::nullopt);
    const std::string match = r.string("match", std::string("search"));
    o.match = with_where(r.where() + ".match", [&] { return parse_format_match(match); });
    o.score = r.number("score", o.score);
    o.mismatch_score = r.number("mismatch_score", o.mismatch_score);
    return with_where(r.where(), [&] { return std::make_shared<FormatScorer>(o); });
}
std::shared_ptr<const Scorer> build_user(SpecReader& r) {
    const std::string path = r.string("path", std::nullopt);
    r.finish();  // before loading: a misspelt key is reported, not a missing library
    try {
        return UserScorer::load(path);
    } catch (const Error& e) {
        rethrow_with_context(r.where(), e);
    }
}
std::shared_ptr<const Scorer> build_sum(SpecReader& r) {
    const nlohmann::json* parts = r.find("parts");
    RLPT_CHECK_KIND(ConfigError, parts != nullptr, "{}: missing required key 'parts'", r.where());
    RLPT_CHECK_KIND(ConfigError, parts->is_array() && !parts->empty(),
                    "{}.parts: expected a non-empty list of {{weight, scorer}}, got {}", r.where(), parts->dump());
    std::vector<WeightedScorer> weighted;
    for (std::size_t i = 0; i < parts->size(); ++i) {
        const std::string part_where = fmt::format("{}.parts[{}]", r.where(), i);
        SpecReader pr((*parts)[i], part_where);
        WeightedScorer w;
        w.weight = pr.number("weight", 1.0);
        const nlohmann::json* sub = pr.find("scorer");
        RLPT_CHECK_KIND(ConfigError, sub != nullptr, "{}: missing required key 'scorer'", part_where);
        w.scorer = make_scorer(*sub, part_where + ".scorer");
        pr.finish();
        weighted.push_back(std::move(w));
    }
    return std::make_shared<WeightedSumScorer>(std::move(weighted));
}

// The scorer types a spec (and reward.scorer / reward.scorers) can name: a new scorer is its
// file pair and one row here.
struct ScorerType {
    const char* name;
    ScorerBuilder build;
};
constexpr ScorerType kScorerTypes[] = {
    {"number", build_number}, {"exact", build_exact},         {"gsm8k", build_gsm8k},
    {"math", build_math},     {"math_dapo", build_math_dapo}, {"arithmetic", build_arithmetic},
    {"format", build_format}, {"command", build_command},     {"user", build_user},
    {"sum", build_sum},
};

}  // namespace

std::vector<std::string> scorer_type_names() {
    std::vector<std::string> names;
    for (const auto& t : kScorerTypes) names.emplace_back(t.name);
    return names;
}

std::shared_ptr<const Scorer> make_scorer(const nlohmann::json& spec, const std::string& where) {
    SpecReader r(spec, where);
    const std::string type = r.string("type", std::nullopt);
    for (const auto& t : kScorerTypes) {
        if (type != t.name) continue;
        auto scorer = t.build(r);
        r.finish();
        return scorer;
    }
    RLPT_THROW(ConfigError, "{}.type: unknown scorer type '{}' (known: {})", where, type,
               fmt::join(scorer_type_names(), ", "));
}

ScorerRegistry make_scorer_registry(const nlohmann::json& config, const std::string& where) {
    ScorerRegistry registry;
    if (config.is_null()) {
        add_builtin_scorers(registry);
        return registry;
    }
    SpecReader r(config, where);
    if (r.boolean("builtins", true)) add_builtin_scorers(registry);
    if (const nlohmann::json* scorers = r.find("scorers"); scorers != nullptr && !scorers->is_null()) {
        RLPT_CHECK_KIND(ConfigError, scorers->is_object(),
                        "{}.scorers: expected a map from data_source to scorer spec, got {}", where, scorers->dump());
        for (auto it = scorers->begin(); it != scorers->end(); ++it) {
            registry.set(it.key(), make_scorer(it.value(), where + ".scorers." + it.key()));
        }
    }
    if (const nlohmann::json* def = r.find("default"); def != nullptr && !def->is_null()) {
        registry.set_default(make_scorer(*def, where + ".default"));
    }
    r.finish();
    return registry;
}

std::vector<ScoreResult> score_batch(const ScorerRegistry& registry, std::vector<ScoreRequest> requests) {
    std::vector<ScoreResult> results(requests.size());
    // Scorers that score batches get all their requests at once, in order.
    std::map<const Scorer*, std::vector<std::size_t>> batched;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        ScoreRequest& req = requests[i];
        if (req.index < 0) req.index = static_cast<int64_t>(i);
        const std::string context = fmt::format("scoring sample {} (data_source '{}')", i, req.data_source);
        try {
            const Scorer& s = registry.get(req.data_source);
            if (s.scores_batches()) batched[&s].push_back(i);
            else results[i] = s.score(req);
        } catch (const Error& e) {
            rethrow_with_context(context, e);
        } catch (const std::exception& e) {
            RLPT_THROW(ValueError, "{}: {}", context, e.what());
        }
    }
    for (const auto& [s, idx] : batched) {
        std::vector<ScoreRequest> part;
        part.reserve(idx.size());
        for (std::size_t i : idx) part.push_back(requests[i]);
        const std::string context = fmt::format("scoring {} sample(s) with {} (data_source '{}', ...)", idx.size(),
                                                s->name(), requests[idx[0]].data_source);
        std::vector<ScoreResult> got;
        try {
            got = s->score_many(part);
        } catch (const Error& e) {
            rethrow_with_context(context, e);
        } catch (const std::exception& e) {
            RLPT_THROW(ValueError, "{}: {}", context, e.what());
        }
        RLPT_CHECK(got.size() == idx.size(), "{}: {} results", context, got.size());
        for (std::size_t k = 0; k < idx.size(); ++k) results[idx[k]] = std::move(got[k]);
    }
    return results;
}

std::vector<ScoreResult> score_batch(const ScorerRegistry& registry, const std::vector<std::string>& data_sources,
                                     const std::vector<std::string>& solutions,
                                     const std::vector<std::string>& ground_truths,
                                     const std::vector<nlohmann::json>* extra_infos) {
    const std::size_t n = data_sources.size();
    RLPT_CHECK(solutions.size() == n && ground_truths.size() == n &&
                   (extra_infos == nullptr || extra_infos->size() == n),
               "score_batch: column sizes differ: data_sources {}, solutions {}, ground_truths {}, extra_infos {}", n,
               solutions.size(), ground_truths.size(),
               extra_infos == nullptr ? std::string("none") : std::to_string(extra_infos->size()));
    std::vector<ScoreRequest> requests(n);
    for (std::size_t i = 0; i < n; ++i) {
        requests[i].data_source = data_sources[i];
        requests[i].solution = solutions[i];
        requests[i].ground_truth = ground_truths[i];
        requests[i].extra_info = extra_infos == nullptr ? nullptr : &(*extra_infos)[i];
        requests[i].index = static_cast<int64_t>(i);
    }
    return score_batch(registry, std::move(requests));
}

}  // namespace rlpt::reward
