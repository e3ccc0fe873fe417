#include "task_data.h"

#include <cmath>
#include <sstream>

#include "rlpt/agent/tool_agent.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"
#include "rlpt/data/arithmetic.h"
#include "rlpt/data/dataset.h"
#include "rlpt/data/length_filter.h"
#include "rlpt/reward/number.h"
#include "rlpt/reward/user_scorer_loader.h"
#include "rlpt/roles/generator_table.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace rlpt::app {
namespace {

std::vector<std::string> split_paths(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string p; std::getline(ss, p, ',');)
        if (!p.empty()) out.push_back(p);
    return out;
}

std::vector<data::Example> load_files(const std::string& files, const data::DatasetOptions& opts) {
    std::vector<data::Example> all;
    for (const auto& path : split_paths(files)) {
        auto part = data::load_dataset(path, opts);
        for (auto& e : part) {
            e.index = static_cast<int64_t>(all.size());
            all.push_back(std::move(e));
        }
    }
    return all;
}

// A scorer spec from a reward.scorer / reward.scorers value: a name, or a JSON spec. The
// command and user scorers take reward.command / reward.custom_library unless the spec says.
nlohmann::json scorer_spec(const Config& c, const std::string& value) {
    nlohmann::json spec = !value.empty() && value[0] == '{'
                              ? nlohmann::json::parse(value)
                              : nlohmann::json{{"type", value == "custom" ? "user" : value}};
    const std::string type = spec.value("type", "");
    if (type == "command") {
        if (!spec.contains("command")) spec["command"] = c.reward.command;
        if (!spec.contains("timeout_s")) spec["timeout_s"] = c.reward.command_timeout_s;
    }
    if (type == "user" && !spec.contains("path")) spec["path"] = c.reward.custom_library;
    // reward.format_score: the score of a wrong but well-formed answer, for the types that have one.
    if ((type == "gsm8k" || type == "number" || type == "arithmetic") && !spec.contains("format_score"))
        spec["format_score"] = c.reward.format_score;
    return spec;
}

}  // namespace

std::vector<int64_t> encode_prompt(const TaskData& t, const std::string& prompt) {
    if (t.chat == tokenizer::ChatFamily::kNone) return t.tok->encode(prompt, /*allow_special=*/false);
    std::string text = agent::render_prompt_with_tools(t.chat, {{"user", prompt}}, t.tools, t.chat_options);
    return t.tok->encode(text, /*allow_special=*/true);
}

std::vector<data::Example> load_examples(const Config& c, bool validation) {
    if (c.data.train_files.empty()) {
        data::ArithmeticOptions o;
        o.seed = static_cast<uint64_t>(c.data.builtin.seed);
        o.min_digits = static_cast<int>(c.data.builtin.min_digits);
        o.max_digits = static_cast<int>(c.data.builtin.max_digits);
        o.num_operands = static_cast<int>(c.data.builtin.num_operands);
        o.operations = c.data.builtin.ops;
        o.reversed_answer = c.data.builtin.reversed_answer;
        o.demo_carry_error_rate = c.data.builtin.demo_carry_error_rate;
        o.num_train = c.data.builtin.num_train;
        o.num_val = c.data.builtin.num_val;
        o.key_prefix = "data.builtin.";
        auto task = c.data.builtin.task == "arithmetic_tools"
                        ? data::make_arithmetic_tools_task(o, c.data.builtin.tool_demo_rate)
                        : data::make_arithmetic_task(o);
        return validation ? std::move(task.val) : std::move(task.train);
    }
    const std::string& files = validation ? c.data.val_files : c.data.train_files;
    if (files.empty()) return {};
    const bool sft = c.trainer.mode == "sft";
    data::DatasetOptions o;
    o.prompt_key = c.data.prompt_key;
    o.answer_key = c.data.answer_key;
    if (sft) {
        // SFT learns prompt -> response; validation scores against the answer, or the response.
        o.response_key = c.data.response_key;
        o.require_response = !validation;
        o.answer = validation ? data::AnswerNeed::kOrResponse : data::AnswerNeed::kOptional;
    }
    o.data_source_key = c.data.data_source_key;
    o.default_data_source = c.data.default_data_source;
    o.extra_keys = c.data.extra_keys;
    o.prompt_suffix = c.data.prompt_suffix;
    o.answer_extraction = data::parse_answer_extraction(c.data.answer_extract.empty() ? "none" : c.data.answer_extract);
    try {
        return load_files(files, o);
    } catch (const Error& e) {
        rethrow_with_context(validation ? "data.val_files" : "data.train_files", e);
    }
}

std::unique_ptr<tokenizer::Tokenizer> make_tokenizer(const Config& c, const std::vector<data::Example>& train,
                                                     const std::vector<data::Example>& val) {
    if (!c.model.path.empty()) {
        try {
            return tokenizer::load_tokenizer(c.model.path);
        } catch (const Error& e) {
            rethrow_with_context("model.path", e);
        }
    }
    if (c.data.train_files.empty()) {
        if (c.data.builtin.task == "arithmetic_tools")
            return std::make_unique<tokenizer::CharTokenizer>(data::kArithmeticCharset, data::kToolCallWords);
        return std::make_unique<tokenizer::CharTokenizer>(data::kArithmeticCharset);
    }
    // The built-in model on the user's data: one token per character the data uses.
    std::vector<std::string_view> texts;
    for (const auto* split : {&train, &val}) {
        for (const auto& e : *split) {
            texts.push_back(e.prompt);
            texts.push_back(e.ground_truth);
            if (e.response) texts.push_back(*e.response);
        }
    }
    return std::make_unique<tokenizer::CharTokenizer>(tokenizer::charset_of(texts));
}

protocol::InitArgs role_init_args(const TaskData& t, int64_t total_steps) {
    protocol::InitArgs a{t.tok->vocab_size(), total_steps, "", ""};
    if (const auto* ct = dynamic_cast<const tokenizer::CharTokenizer*>(t.tok.get())) {
        a.tokenizer_charset = ct->charset();
        for (const auto& w : ct->words()) a.tokenizer_words += (a.tokenizer_words.empty() ? "" : "\n") + w;
    }
    return a;
}

int64_t prepare_prompts(const TaskData& t, const Config& c, std::vector<data::Example>& examples,
                        std::vector<std::vector<int64_t>>& ids, const char* split) {
    const int64_t max_len = c.data.max_prompt_length;
    int64_t filtered = 0;
    if (c.data.filter_overlong_prompts && !examples.empty()) {
        auto res = data::filter_by_prompt_length(
            std::move(examples), [&](const std::string& p) { return static_cast<int64_t>(encode_prompt(t, p).size()); },
            max_len);
        if (!res.report.example_indices.empty()) RLPT_LOG_WARN("{} data: {}", split, res.report.summary());
        filtered = static_cast<int64_t>(res.report.example_indices.size());
        examples = std::move(res.kept);
    }
    ids.clear();
    for (const auto& e : examples) {
        auto v = encode_prompt(t, e.prompt);
        if (static_cast<int64_t>(v.size()) > max_len) {
            if (c.data.truncation == "error") {
                throw ValueError(fmt::format("{} example {} has a {}-token prompt, over data.max_prompt_length={} (set "
                                             "data.filter_overlong_prompts=true or data.truncation=left|right)",
                                             split, e.index, v.size(), max_len));
            }
            if (c.data.truncation == "left") v.erase(v.begin(), v.end() - max_len);
            else v.resize(static_cast<size_t>(max_len));
        }
        ids.push_back(std::move(v));
    }
    return filtered;
}

reward::ScorerRegistry scorers_from_config(const Config& c) {
    auto reg = reward::make_scorer_registry(nlohmann::json::object(), "reward");
    if (c.reward.format_score != 0.0) {  // the built-ins that give a wrong but well-formed answer a score
        reg.set("openai/gsm8k", reward::make_scorer(scorer_spec(c, "gsm8k"), "reward"));
        reg.set("rlpt/arithmetic", reward::make_scorer(scorer_spec(c, "arithmetic"), "reward"));
    }
    if (c.reward.scorer == "custom") {
        RLPT_CHECK_KIND(ConfigError, !c.reward.custom_library.empty(),
                        "reward.scorer=custom needs reward.custom_library (a shared library, see "
                        "include/rlpt/reward/user_scorer.h)");
    }
    if (c.reward.scorer != "auto") {
        auto s = reward::make_scorer(scorer_spec(c, c.reward.scorer), "reward.scorer");
        reg.set_default(s);
        for (const auto& ds : reg.data_sources()) reg.set(ds, s);
    } else if (!c.reward.custom_library.empty()) {
        reg.set_default(reward::UserScorer::load(c.reward.custom_library));
    }
    for (const auto& [ds, value] : c.reward.scorers) {
        reg.set(ds, reward::make_scorer(scorer_spec(c, value), "reward.scorers." + ds));
    }
    return reg;
}

std::map<std::string, int64_t> unscored_data_sources(const reward::ScorerRegistry& scorers,
                                                     const std::vector<data::Example>& examples) {
    std::map<std::string, int64_t> out;
    for (const auto& e : examples) {
        if (!scorers.contains(e.data_source) && scorers.default_scorer() == nullptr) ++out[e.data_source];
    }
    return out;
}

TaskData load_task(const Config& c) {
    TaskData t;
    t.chat = tokenizer::parse_chat_family(c.model.chat_template);
    t.chat_options.enable_thinking = c.model.apply_chat_template_kwargs.enable_thinking;
    const bool sft = c.trainer.mode == "sft";
    t.train = load_examples(c, false);
    t.val = load_examples(c, true);
    RLPT_CHECK_KIND(ConfigError, !t.train.empty(), "the training data is empty");
    t.tok = make_tokenizer(c, t.train, t.val);
    if (c.model.path.empty() && !c.data.train_files.empty()) {
        RLPT_LOG_INFO("built-in model on data.train_files: a character vocabulary of the {} characters the data uses",
                      t.tok->vocab_size() - tokenizer::CharTokenizer::kFirstCharId);
    }
    if (c.trainer.mode == "rl" && roles::find_generator(c.rollout.generator).runs_tools) {
        try {
            t.tools = agent::list_tool_schemas(c.rollout.multi_turn);
        } catch (const Error& e) {
            rethrow_with_context("rollout.multi_turn.mcp_servers", e);
        }
        RLPT_LOG_INFO("{}: {} tools for the prompts", c.rollout.generator, t.tools.size());
    }
    prepare_prompts(t, c, t.train, t.train_ids, "train");
    prepare_prompts(t, c, t.val, t.val_ids, "validation");

    auto sp = t.tok->special_ids();
    t.eos_id = sp.eos;
    t.pad_id = sp.pad >= 0 ? sp.pad : (sp.eos >= 0 ? sp.eos : 0);
    if (t.eos_id >= 0) t.stop_ids.push_back(t.eos_id);
    for (const auto& s : tokenizer::chat_stop_tokens(t.chat)) {
        int64_t id = t.tok->token_to_id(s);
        if (id >= 0 && std::find(t.stop_ids.begin(), t.stop_ids.end(), id) == t.stop_ids.end())
            t.stop_ids.push_back(id);
    }
    for (int64_t id : c.rollout.stop_token_ids) t.stop_ids.push_back(id);

    t.scorers = scorers_from_config(c);
    // Every data_source the run scores needs a scorer; SFT validation falls back to an exact
    // comparison with the answer (or the response) for the ones without.
    auto unscored = unscored_data_sources(t.scorers, t.val);
    if (!sft) {
        for (const auto& [ds, n] : unscored_data_sources(t.scorers, t.train)) unscored[ds] += n;
    }
    for (const auto& [ds, n] : unscored) {
        RLPT_CHECK_KIND(ConfigError, sft, "{}", unscored_message(ds, n));
        RLPT_LOG_INFO("sft validation: data_source '{}' has no scorer in reward.scorers; scoring it by exact match",
                      ds);
        t.scorers.set(ds, std::make_shared<reward::ExactScorer>());
    }
    RLPT_LOG_INFO("data: {} training and {} validation prompts; tokenizer {} (vocab {}), eos {}, pad {}",
                  t.train.size(), t.val.size(), t.tok->kind(), t.tok->vocab_size(), t.eos_id, t.pad_id);
    return t;
}

std::string unscored_message(const std::string& data_source, int64_t rows) {
    return fmt::format("reward.scorers: data_source '{}' ({} rows) has no scorer; set one, e.g. reward.scorers: "
                       "{{\"{}\": number}} (scorers: number, exact, gsm8k, math, command, ...; README \"Rewards\"), "
                       "or reward.scorer: <name> for every data_source",
                       data_source, rows, data_source);
}

Batch make_prompt_batch(const TaskData& t, const std::vector<const data::Example*>& examples,
                        const std::vector<const std::vector<int64_t>*>& prompt_ids, int64_t n,
                        int64_t first_sample_index) {
    const int64_t B = static_cast<int64_t>(examples.size()) * n;
    int64_t P = 1;
    for (const auto* ids : prompt_ids) P = std::max<int64_t>(P, static_cast<int64_t>(ids->size()));
    auto ids = torch::full({B, P}, t.pad_id, torch::kInt64);
    auto mask = torch::zeros({B, P}, torch::kInt64);
    auto pid = ids.accessor<int64_t, 2>();
    auto pm = mask.accessor<int64_t, 2>();
    std::vector<std::string> uid, ds, gt, extra;
    std::vector<int64_t> index;
    for (size_t e = 0; e < examples.size(); ++e) {
        const auto& p = *prompt_ids[e];
        const int64_t off = P - static_cast<int64_t>(p.size());
        std::string extra_json = examples[e]->extra.is_null() ? "{}" : examples[e]->extra.dump();
        for (int64_t k = 0; k < n; ++k) {
            int64_t row = static_cast<int64_t>(e) * n + k;
            for (size_t j = 0; j < p.size(); ++j) {
                pid[row][off + static_cast<int64_t>(j)] = p[j];
                pm[row][off + static_cast<int64_t>(j)] = 1;
            }
            uid.push_back(std::to_string(examples[e]->index));
            ds.push_back(examples[e]->data_source);
            gt.push_back(examples[e]->ground_truth);
            extra.push_back(extra_json);
            index.push_back(first_sample_index + row);
        }
    }
    Batch b(B);
    b.set("prompt_ids", ids);
    b.set("prompt_mask", mask);
    b.set_strings("uid", std::move(uid));
    b.set_strings("data_source", std::move(ds));
    b.set_strings("ground_truth", std::move(gt));
    b.set_strings("extra", std::move(extra));
    b.set_ints("sample_index", std::move(index));
    return b;
}

ScoredResponses score_responses(const TaskData& t, const Batch& b) {
    const auto resp = b.at("responses").contiguous();
    const auto mask = b.at("response_mask").contiguous();
    const int64_t B = b.size(), R = resp.size(1);
    const auto& ds = b.strings("data_source");
    const auto& gt = b.strings("ground_truth");
    const auto& extra = b.strings("extra");
    ScoredResponses out;
    auto r = resp.accessor<int64_t, 2>();
    auto m = mask.accessor<int64_t, 2>();
    std::vector<nlohmann::json> extras;
    extras.reserve(static_cast<size_t>(B));
    // The rollout's own text when it has one (stop strings: cut where the string was found).
    const std::vector<std::string>* texts = b.has_strings("response_text") ? &b.strings("response_text") : nullptr;
    for (int64_t i = 0; i < B; ++i) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < R; ++j)
            if (m[i][j]) ids.push_back(r[i][j]);
        out.text.push_back(texts ? (*texts)[static_cast<size_t>(i)] : t.tok->decode(ids, /*skip_special_tokens=*/true));
        extras.push_back(nlohmann::json::parse(extra[static_cast<size_t>(i)]));
    }
    // One call for the whole batch: a command scorer gets all its rows in one round trip.
    for (const auto& s : reward::score_batch(t.scorers, ds, out.text, gt, &extras)) {
        const size_t i = out.score.size();
        out.score.push_back(s.score);
        out.acc.push_back(s.acc ? *s.acc : std::nan(""));
        for (const auto& [k, v] : s.extra) {
            auto& col = out.extra[k];
            col.resize(i, std::nan(""));
            col.push_back(v);
        }
    }
    for (auto& [k, col] : out.extra) col.resize(static_cast<size_t>(B), std::nan(""));
    return out;
}

torch::Tensor token_level_scores(const std::vector<double>& score, const torch::Tensor& response_mask) {
    const int64_t B = response_mask.size(0), R = response_mask.size(1);
    auto out = torch::zeros({B, R}, torch::kFloat32);
    const auto mask = response_mask.to(torch::kInt64).contiguous();
    auto o = out.accessor<float, 2>();
    auto m = mask.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
        // The last token the policy produced (appended tokens of a multi-stage rollout have mask 0).
        for (int64_t j = R - 1; j >= 0; --j) {
            if (m[i][j] == 0) continue;
            o[i][j] = static_cast<float>(score[static_cast<size_t>(i)]);
            break;
        }
    }
    return out;
}

void ValidationTally::add(const Batch& generated, const ScoredResponses& scored) {
    const auto& ds = generated.strings("data_source");
    for (size_t i = 0; i < ds.size(); ++i) {
        score_[ds[i]].push_back(scored.score[i]);
        // Without an accuracy from the scorer, a positive score counts as correct.
        acc_[ds[i]].push_back(std::isnan(scored.acc[i]) ? scored.score[i] > 0 : scored.acc[i]);
    }
    if (generated.has("tool_call_counts")) {
        const auto calls = generated.at("tool_call_counts").to(torch::kFloat64).contiguous();
        for (int64_t i = 0; i < calls.size(0); ++i) tool_calls_.push_back(calls[i].item<double>());
    }
}

std::map<std::string, double> ValidationTally::metrics(int64_t n) const {
    std::map<std::string, double> m;
    for (const auto& [ds, v] : score_) {
        const auto& a = acc_.at(ds);
        double s = 0, acc = 0, best = 0;
        for (size_t i = 0; i < v.size(); ++i) {
            s += v[i];
            acc += a[i];
        }
        for (size_t g = 0; g < v.size(); g += static_cast<size_t>(n)) {
            double mx = -1e30;
            for (size_t k = g; k < std::min(v.size(), g + static_cast<size_t>(n)); ++k) mx = std::max(mx, a[k]);
            best += mx;
        }
        m[fmt::format("val-core/{}/reward/mean@{}", ds, n)] = s / static_cast<double>(v.size());
        m[fmt::format("val-core/{}/acc/mean@{}", ds, n)] = acc / static_cast<double>(v.size());
        if (n > 1) m[fmt::format("val-aux/{}/acc/best@{}/mean", ds, n)] = best / (static_cast<double>(v.size()) / n);
    }
    if (!tool_calls_.empty()) {
        double with = 0, sum = 0;
        for (double c : tool_calls_) {
            with += c > 0 ? 1 : 0;
            sum += c;
        }
        m["val-aux/tool_call_rate"] = with / static_cast<double>(tool_calls_.size());
        m["val-aux/tool_call_counts/mean"] = sum / static_cast<double>(tool_calls_.size());
    }
    return m;
}

}  // namespace rlpt::app
