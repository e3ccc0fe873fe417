#include "task_data.h"

#include <cmath>
#include <sstream>

#include "rlpt/core/error.h"
#include "rlpt/core/log.h"
#include "rlpt/data/arithmetic.h"
#include "rlpt/data/dataset.h"
#include "rlpt/data/length_filter.h"
#include "rlpt/reward/user_scorer_loader.h"
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

std::vector<int64_t> encode_prompt(const TaskData& t, const std::string& prompt) {
    if (t.chat == tokenizer::ChatFamily::kNone) return t.tok->encode(prompt, /*allow_special=*/false);
    std::string text = tokenizer::apply_chat_template(t.chat, {{"user", prompt}}, /*add_generation_prompt=*/true);
    return t.tok->encode(text, /*allow_special=*/true);
}

// Tokenises, then keeps prompts within max_prompt_length (or truncates, per data.truncation).
void prepare(TaskData& t, const Config& c, std::vector<data::Example>& examples,
             std::vector<std::vector<int64_t>>& ids, const char* split) {
    const int64_t max_len = c.data.max_prompt_length;
    if (c.data.filter_overlong_prompts && !examples.empty()) {
        auto res = data::filter_by_prompt_length(
            std::move(examples), [&](const std::string& p) { return static_cast<int64_t>(encode_prompt(t, p).size()); },
            max_len);
        if (!res.report.example_indices.empty()) RLPT_LOG_WARN("{} data: {}", split, res.report.summary());
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
}

// A scorer spec of `type` with reward.format_score for the types that have one.
nlohmann::json with_format_score(const std::string& type, double format_score) {
    nlohmann::json spec{{"type", type}};
    if (type == "gsm8k" || type == "number" || type == "arithmetic") spec["format_score"] = format_score;
    return spec;
}

}  // namespace

TaskData load_task(const Config& c) {
    TaskData t;
    t.chat = tokenizer::parse_chat_family(c.model.chat_template);
    const bool builtin = c.data.train_files.empty();
    if (!c.model.path.empty()) {
        t.tok = tokenizer::load_tokenizer(c.model.path);
    } else {
        RLPT_CHECK_KIND(ConfigError, builtin,
                        "a built-in model (model.path empty) only comes with the built-in task's character "
                        "tokenizer; set model.path to a Hugging Face model folder to train on data.train_files");
        t.tok = std::make_unique<tokenizer::CharTokenizer>(data::kArithmeticCharset);
    }
    if (builtin) {
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
        auto task = data::make_arithmetic_task(o);
        t.train = std::move(task.train);
        t.val = std::move(task.val);
    } else {
        data::DatasetOptions o;
        o.prompt_key = c.data.prompt_key;
        o.answer_key = c.data.answer_key;
        o.data_source_key = c.data.data_source_key;
        o.default_data_source = c.data.default_data_source;
        o.extra_keys = c.data.extra_keys;
        o.prompt_suffix = c.data.prompt_suffix;
        o.answer_extraction = data::parse_answer_extraction(c.data.answer_extract.empty() ? "none" : c.data.answer_extract);
        t.train = load_files(c.data.train_files, o);
        if (!c.data.val_files.empty()) t.val = load_files(c.data.val_files, o);
    }
    RLPT_CHECK_KIND(ConfigError, !t.train.empty(), "the training data is empty");
    prepare(t, c, t.train, t.train_ids, "train");
    prepare(t, c, t.val, t.val_ids, "validation");

    auto sp = t.tok->special_ids();
    t.eos_id = sp.eos;
    t.pad_id = sp.pad >= 0 ? sp.pad : (sp.eos >= 0 ? sp.eos : 0);
    if (t.eos_id >= 0) t.stop_ids.push_back(t.eos_id);
    for (const auto& s : tokenizer::chat_stop_tokens(t.chat)) {
        int64_t id = t.tok->token_to_id(s);
        if (id >= 0 && std::find(t.stop_ids.begin(), t.stop_ids.end(), id) == t.stop_ids.end()) t.stop_ids.push_back(id);
    }
    for (int64_t id : c.rollout.stop_token_ids) t.stop_ids.push_back(id);

    // Scorers: the built-ins by data_source, or one scorer for everything.
    t.scorers = reward::make_scorer_registry(nlohmann::json::object(), "reward");
    if (c.reward.format_score != 0.0) {  // the built-ins that give a wrong but well-formed answer a score
        t.scorers.set("openai/gsm8k", reward::make_scorer(with_format_score("gsm8k", c.reward.format_score), "reward"));
        t.scorers.set("rlpt/arithmetic",
                      reward::make_scorer(with_format_score("arithmetic", c.reward.format_score), "reward"));
    }
    if (c.reward.scorer == "custom") {
        RLPT_CHECK_KIND(ConfigError, !c.reward.custom_library.empty(),
                        "reward.scorer=custom needs reward.custom_library (a shared library, see "
                        "include/rlpt/reward/user_scorer.h)");
        t.scorers = reward::ScorerRegistry();  // one scorer for every data_source
        t.scorers.set_default(reward::UserScorer::load(c.reward.custom_library));
    } else if (c.reward.scorer != "auto") {
        t.scorers = reward::ScorerRegistry();
        t.scorers.set_default(reward::make_scorer(with_format_score(c.reward.scorer, c.reward.format_score),
                                                  "reward.scorer"));
    } else if (!c.reward.custom_library.empty()) {
        t.scorers.set_default(reward::UserScorer::load(c.reward.custom_library));
    }
    RLPT_LOG_INFO("data: {} training and {} validation prompts; tokenizer {} (vocab {}), eos {}, pad {}",
                  t.train.size(), t.val.size(), t.tok->kind(), t.tok->vocab_size(), t.eos_id, t.pad_id);
    return t;
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
    for (int64_t i = 0; i < B; ++i) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < R; ++j)
            if (m[i][j]) ids.push_back(r[i][j]);
        out.text.push_back(t.tok->decode(ids, /*skip_special_tokens=*/true));
        nlohmann::json ex = nlohmann::json::parse(extra[static_cast<size_t>(i)]);
        reward::ScoreRequest req;
        req.data_source = ds[static_cast<size_t>(i)];
        req.solution = out.text.back();
        req.ground_truth = gt[static_cast<size_t>(i)];
        req.extra_info = &ex;
        req.index = i;
        reward::ScoreResult s;
        try {
            s = t.scorers.score(req);
        } catch (const Error& e) {
            rethrow_with_context(fmt::format("scoring sample {} (data_source '{}')", i, ds[static_cast<size_t>(i)]), e);
        }
        out.score.push_back(s.score);
        out.acc.push_back(s.acc ? *s.acc : std::nan(""));
        for (const auto& [k, v] : s.extra) {
            auto& col = out.extra[k];
            col.resize(static_cast<size_t>(i), std::nan(""));
            col.push_back(v);
        }
    }
    for (auto& [k, col] : out.extra) col.resize(static_cast<size_t>(B), std::nan(""));
    return out;
}

torch::Tensor token_level_scores(const std::vector<double>& score, const torch::Tensor& response_mask) {
    const int64_t B = response_mask.size(0), R = response_mask.size(1);
    auto out = torch::zeros({B, R}, torch::kFloat32);
    auto lens = response_mask.sum(1).to(torch::kInt64);
    auto o = out.accessor<float, 2>();
    auto l = lens.accessor<int64_t, 1>();
    for (int64_t i = 0; i < B; ++i) {
        if (l[i] > 0) o[i][l[i] - 1] = static_cast<float>(score[static_cast<size_t>(i)]);
    }
    return out;
}

}  // namespace rlpt::app
