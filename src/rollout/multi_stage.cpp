#include "rlpt/rollout/multi_stage.h"

#include <algorithm>
#include <map>
#include <set>

#include "rlpt/core/error.h"
#include "rlpt/rollout/response_rows.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout {
namespace {

using Prompts = std::vector<std::vector<int64_t>>;

struct RowState {
    ResponseRow row;
    bool ended = false;
    size_t last_stage = 0;        // the last stage the row ran
    size_t last_stage_begin = 0;  // where that stage's tokens start in row.tokens
};

// Stage s of a sample seeded `seed` draws from its own stream; stage 0 from the sample's.
uint64_t stage_seed(uint64_t seed, size_t stage) {
    return stage == 0 ? seed : splitmix64_mix(seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(stage) + 7));
}

// Row j's response tokens and log-probs of a stage's output.
void take_response(const GenerationOutput& out, int64_t j, std::vector<int64_t>& tokens, std::vector<float>& lps) {
    const int64_t len = out.response_mask[j].sum().item<int64_t>();
    auto t = out.responses[j].narrow(0, 0, len).contiguous();
    auto l = out.rollout_log_probs[j].narrow(0, 0, len).contiguous();
    tokens.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
    lps.assign(l.data_ptr<float>(), l.data_ptr<float>() + len);
}

// Runs one stage over the rows `active` (indices into `state`); returns, per active row, the
// index of the output row holding its result. Rows of a shared sampler stage with identical
// prefixes run once (the first's group seed); beam_search shares identical prefixes itself.
std::vector<int64_t> run_stage(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
                               const SamplingParams& base, const MultiStageArgs& args, size_t s,
                               const std::vector<size_t>& active, const std::vector<RowState>& state,
                               const BatchLimits& limits, GenerationOutput& out) {
    const StageSpec& st = args.stages[s];
    SamplingParams sp = base;
    sp.max_new_tokens = st.max_tokens;
    sp.stop = st.stop;
    const bool share = st.share_across_samples && st.generator == "sampler";
    Prompts stage_prompts;
    std::vector<uint64_t> stage_seeds;
    std::vector<int64_t> ranks, out_row;
    std::map<std::vector<int64_t>, int64_t> first_of;
    for (size_t i : active) {
        std::vector<int64_t> prefix = prompts[i];
        prefix.insert(prefix.end(), state[i].row.tokens.begin(), state[i].row.tokens.end());
        if (share) {
            auto it = first_of.find(prefix);
            if (it != first_of.end()) {
                out_row.push_back(it->second);
                continue;
            }
            first_of.emplace(prefix, static_cast<int64_t>(stage_prompts.size()));
        }
        out_row.push_back(static_cast<int64_t>(stage_prompts.size()));
        const uint64_t seed = share && !args.group_seeds.empty() ? args.group_seeds[i] : seeds[i];
        stage_seeds.push_back(stage_seed(seed, s));
        ranks.push_back(args.sample_rank.empty() ? 0 : args.sample_rank[i]);
        stage_prompts.push_back(std::move(prefix));
    }
    out = st.generator == "beam_search"
              ? beam_search(model, stage_prompts, sp, args.beam_search, ranks, limits.max_num_seqs)
              : generate(model, stage_prompts, stage_seeds, sp, limits);
    return out_row;
}

}  // namespace

void validate_stages(const std::vector<StageSpec>& stages) {
    RLPT_CHECK(!stages.empty(), "multi_stage: rollout.stages is empty (at least one stage is needed)");
    for (size_t s = 0; s < stages.size(); ++s) {
        const auto& st = stages[s];
        RLPT_CHECK(st.generator == "sampler" || st.generator == "beam_search",
                   "multi_stage: rollout.stages[{}].generator '{}' is not one of: sampler, beam_search", s,
                   st.generator);
        RLPT_CHECK(st.max_tokens >= 1, "multi_stage: rollout.stages[{}].max_tokens must be >= 1, got {}", s,
                   st.max_tokens);
        RLPT_CHECK(st.stop.empty() || st.generator == "sampler",
                   "multi_stage: rollout.stages[{}].stop: stop strings are not supported on a beam_search stage", s);
        validate_stop_strings(st.stop, "multi_stage: rollout.stages[].stop");
    }
}

GenerationOutput run_stages(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
                            const SamplingParams& params, const MultiStageArgs& args, const BatchLimits& limits) {
    validate_stages(args.stages);
    RLPT_CHECK(params.token_texts != nullptr,
               "multi_stage: needs the tokenizer's token texts (SamplingParams::token_texts)");
    RLPT_CHECK(seeds.size() == prompts.size(), "multi_stage: {} seeds for {} prompts", seeds.size(), prompts.size());
    RLPT_CHECK(args.sample_rank.empty() || args.sample_rank.size() == prompts.size(),
               "multi_stage: {} sample ranks for {} prompts", args.sample_rank.size(), prompts.size());
    RLPT_CHECK(args.group_seeds.empty() || args.group_seeds.size() == prompts.size(),
               "multi_stage: {} group seeds for {} prompts", args.group_seeds.size(), prompts.size());
    int64_t total = 0;
    for (const auto& st : args.stages) total += st.max_tokens + static_cast<int64_t>(st.append_ids.size());
    RLPT_CHECK(total <= params.max_new_tokens,
               "multi_stage: the stages' max_tokens plus appended tokens add up to {}, over the response limit {}",
               total, params.max_new_tokens);
    const std::set<int64_t> stop_ids(params.stop_token_ids.begin(), params.stop_token_ids.end());

    std::vector<RowState> state(prompts.size());
    std::vector<int64_t> tokens;
    std::vector<float> lps;
    for (size_t s = 0; s < args.stages.size(); ++s) {
        std::vector<size_t> active;
        for (size_t i = 0; i < state.size(); ++i)
            if (!state[i].ended) active.push_back(i);
        if (active.empty()) break;
        GenerationOutput out;
        const auto out_row = run_stage(model, prompts, seeds, params, args, s, active, state, limits, out);
        for (size_t a = 0; a < active.size(); ++a) {
            RowState& rs = state[active[a]];
            const int64_t j = out_row[a];
            take_response(out, j, tokens, lps);
            rs.last_stage = s;
            rs.last_stage_begin = rs.row.tokens.size();
            rs.row.tokens.insert(rs.row.tokens.end(), tokens.begin(), tokens.end());
            rs.row.log_probs.insert(rs.row.log_probs.end(), lps.begin(), lps.end());
            rs.row.trained.insert(rs.row.trained.end(), tokens.size(), 1);
            rs.row.finish = out.finish_reasons[static_cast<size_t>(j)];
            // eos or a stop token id: the model ended the response; a stop string or the
            // stage's limit hands over to the next stage.
            const int64_t last = tokens.empty() ? -1 : tokens.back();
            rs.ended =
                rs.row.finish == FinishReason::kEos || (rs.row.finish == FinishReason::kStop && stop_ids.count(last));
            if (rs.ended) continue;
            const auto& app = args.stages[s].append_ids;
            rs.row.tokens.insert(rs.row.tokens.end(), app.begin(), app.end());
            rs.row.log_probs.insert(rs.row.log_probs.end(), app.size(), 0.0f);
            rs.row.trained.insert(rs.row.trained.end(), app.size(), 0);
        }
    }
    // Texts: everything before the last stage the row ran, then that stage's text cut at its
    // stop string (and any text appended after it).
    std::vector<ResponseRow> rows;
    rows.reserve(state.size());
    for (auto& rs : state) {
        const std::vector<std::string> none;
        StopStringMatcher before(&none, params.token_texts, false);
        for (size_t t = 0; t < rs.last_stage_begin; ++t) before.push(rs.row.tokens[t]);
        const auto& stage_stop = args.stages[rs.last_stage].stop;
        StopStringMatcher last(&stage_stop, params.token_texts, params.include_stop_str_in_output);
        for (size_t t = rs.last_stage_begin; t < rs.row.tokens.size(); ++t) last.push(rs.row.tokens[t]);
        std::string raw = before.raw_text();
        if (last.stopped()) {
            raw += last.raw_text().substr(0, last.visible_bytes());
        } else {
            raw += last.raw_text();
        }
        rs.row.text = utf8_text(raw);
        rows.push_back(std::move(rs.row));
    }
    return assemble_rows(prompts, rows, params.pad_id, /*with_texts=*/true);
}

}  // namespace rlpt::rollout
