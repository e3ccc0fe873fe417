#include "rlpt/rollout/generator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rlpt/core/error.h"
#include "rlpt/rollout/response_rows.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout {
namespace {

using Prompts = std::vector<std::vector<int64_t>>;

// What one prompt produced.
struct RowResult {
    std::vector<int64_t> tokens;
    std::vector<float> log_probs;
    FinishReason finish = FinishReason::kLength;
    StopStringMatcher text;  // inactive without params.token_texts
};

// Per-token stop lookup: 0 = continue, 1 = eos, 2 = stop id.
std::vector<uint8_t> stop_table(const SamplingParams& params, int64_t vocab) {
    std::vector<uint8_t> table(static_cast<size_t>(vocab), 0);
    for (int64_t id : params.stop_token_ids) table[static_cast<size_t>(id)] = 2;
    if (params.eos_id >= 0) table[static_cast<size_t>(params.eos_id)] = 1;
    return table;
}

// Generates for the prompts rows[0..b) (indices into `prompts`), writing results[rows[i]].
// All rows share one KV cache; the prompts are left-padded to the micro-batch's longest.
void generate_micro_batch(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
                          const SamplingParams& params, const std::vector<uint8_t>& stop,
                          const std::vector<int64_t>& rows, std::vector<RowResult>& results) {
    const auto device = model.device();
    const int64_t b = static_cast<int64_t>(rows.size());
    const int64_t max_new = params.max_new_tokens;
    int64_t p_len = 0;
    for (int64_t r : rows) p_len = std::max<int64_t>(p_len, static_cast<int64_t>(prompts[static_cast<size_t>(r)].size()));

    // Prompt ids [b, P], mask over prompt + every generated position [b, P + N], the position of
    // each row's next token [b].
    auto ids = torch::full({b, p_len}, params.pad_id, torch::kInt64);
    auto mask = torch::zeros({b, p_len + max_new}, torch::kInt64);
    auto next_pos = torch::empty({b}, torch::kInt64);
    {
        auto* idp = ids.data_ptr<int64_t>();
        auto* mp = mask.data_ptr<int64_t>();
        auto* np = next_pos.data_ptr<int64_t>();
        for (int64_t i = 0; i < b; ++i) {
            const auto& pr = prompts[static_cast<size_t>(rows[static_cast<size_t>(i)])];
            const int64_t len = static_cast<int64_t>(pr.size()), off = p_len - len;
            std::copy(pr.begin(), pr.end(), idp + i * p_len + off);
            std::fill(mp + i * (p_len + max_new) + off, mp + (i + 1) * (p_len + max_new), int64_t{1});
            np[i] = len;
        }
    }
    auto prompt_mask = mask.narrow(1, 0, p_len);
    auto pos = (prompt_mask.cumsum(1) - 1).clamp_min(0);
    mask = mask.to(device);
    next_pos = next_pos.to(device);

    model::KVCache cache = model.make_cache(b, p_len + max_new - 1);  // the last token is never fed
    auto hidden = model.forward_hidden(ids.to(device), mask.narrow(1, 0, p_len), pos.to(device), &cache);
    hidden = hidden.select(1, p_len - 1);  // [b, H]: predicts each row's first response token

    std::vector<int64_t> live = rows;  // prompt index of each row of the decode batch
    std::vector<double> uniforms;
    std::vector<int64_t> keep, keep_tokens;
    for (int64_t step = 0; step < max_new; ++step) {
        // [b_live, V] fp32. Tensor-parallel: gathered over the block; every rank then draws the
        // same tokens from the same per-row streams.
        auto logits = model.gathered_logits(hidden);
        if (!params.greedy) {
            uniforms.resize(live.size());
            for (size_t i = 0; i < live.size(); ++i) uniforms[i] = uniform_draw(seeds[static_cast<size_t>(live[i])], step);
        }
        const TokenChoices chosen = choose_tokens(logits, params, uniforms);

        keep.clear();
        keep_tokens.clear();
        for (size_t i = 0; i < live.size(); ++i) {
            RowResult& res = results[static_cast<size_t>(live[i])];
            const int64_t tok = chosen.tokens[i];
            res.tokens.push_back(tok);
            res.log_probs.push_back(chosen.log_probs[i]);
            const uint8_t s = stop[static_cast<size_t>(tok)];
            const bool stop_string = res.text.push(tok);
            if (s != 0) {
                res.finish = s == 1 ? FinishReason::kEos : FinishReason::kStop;
            } else if (stop_string) {
                res.finish = FinishReason::kStop;
            } else if (step + 1 == max_new) {
                res.finish = FinishReason::kLength;
            } else {
                keep.push_back(static_cast<int64_t>(i));
                keep_tokens.push_back(tok);
            }
        }
        if (keep.empty()) break;
        if (keep.size() != live.size()) {
            // Finished rows leave the batch: cache, mask, positions and bookkeeping alike.
            auto keep_t = torch::tensor(keep, torch::kInt64).to(device);
            cache.keep_rows(keep_t);
            mask = mask.index_select(0, keep_t);
            next_pos = next_pos.index_select(0, keep_t);
            std::vector<int64_t> still;
            still.reserve(keep.size());
            for (int64_t i : keep) still.push_back(live[static_cast<size_t>(i)]);
            live.swap(still);
        }
        const int64_t n = static_cast<int64_t>(live.size());
        auto step_ids = torch::tensor(keep_tokens, torch::kInt64).view({n, 1}).to(device);
        hidden = model.forward_hidden(step_ids, mask.narrow(1, 0, cache.length() + 1), next_pos.view({n, 1}), &cache)
                     .select(1, 0);
        next_pos.add_(1);
    }
}

// Left-pads prompts to the call's longest, right-pads responses, builds the masks.
GenerationOutput assemble(const Prompts& prompts, std::vector<RowResult>& results, const SamplingParams& params) {
    std::vector<ResponseRow> rows(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
        rows[i].tokens = std::move(results[i].tokens);
        rows[i].log_probs = std::move(results[i].log_probs);
        rows[i].finish = results[i].finish;
        if (results[i].text.active()) rows[i].text = results[i].text.visible_text();
    }
    return assemble_rows(prompts, rows, params.pad_id, params.token_texts != nullptr);
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kEos: return "eos";
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
    }
    return "unknown";
}

void validate_sampling_params(const SamplingParams& p, int64_t vocab_size) {
    if (p.greedy) {
        RLPT_CHECK(std::isfinite(p.temperature) && p.temperature >= 0,
                   "sampling: temperature must be finite and >= 0 with greedy, got {}", p.temperature);
    } else {
        RLPT_CHECK(std::isfinite(p.temperature) && p.temperature > 0,
                   "sampling: temperature must be finite and > 0 (use greedy for argmax), got {}", p.temperature);
    }
    RLPT_CHECK(p.top_p > 0 && p.top_p <= 1, "sampling: top_p must be in (0, 1], got {}", p.top_p);
    RLPT_CHECK(p.top_k >= -1, "sampling: top_k must be >= 1, or -1 (or 0) for off, got {}", p.top_k);
    RLPT_CHECK(p.max_new_tokens >= 1, "sampling: max_new_tokens must be >= 1, got {}", p.max_new_tokens);
    validate_stop_strings(p.stop, "sampling: stop");
    RLPT_CHECK(p.stop.empty() || p.token_texts != nullptr,
               "sampling: stop strings need the tokenizer's token texts (SamplingParams::token_texts)");
    if (vocab_size <= 0) return;
    RLPT_CHECK(p.pad_id >= 0 && p.pad_id < vocab_size, "sampling: pad_id {} is outside the vocabulary [0, {})",
               p.pad_id, vocab_size);
    RLPT_CHECK(p.eos_id >= -1 && p.eos_id < vocab_size, "sampling: eos_id {} is outside the vocabulary [0, {}) (-1: none)",
               p.eos_id, vocab_size);
    for (int64_t id : p.stop_token_ids)
        RLPT_CHECK(id >= 0 && id < vocab_size, "sampling: stop token id {} is outside the vocabulary [0, {})", id,
                   vocab_size);
}

GenerationOutput generate(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
                          const SamplingParams& params, int64_t micro_batch_size) {
    const int64_t vocab = model.args().vocab_size;
    validate_sampling_params(params, vocab);
    RLPT_CHECK(seeds.size() == prompts.size(), "generate: {} seeds for {} prompts (one seed per prompt)", seeds.size(),
               prompts.size());
    RLPT_CHECK(micro_batch_size >= 1, "generate: micro_batch_size must be >= 1, got {}", micro_batch_size);
    check_prompts(prompts, vocab);
    torch::NoGradGuard no_grad;
    const auto stop = stop_table(params, vocab);
    std::vector<RowResult> results(prompts.size());
    if (params.token_texts != nullptr)
        for (auto& r : results) r.text = StopStringMatcher(&params.stop, params.token_texts, params.include_stop_str_in_output);

    // Longest prompts first, so micro-batches hold similar lengths and pad little.
    std::vector<int64_t> order(prompts.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return prompts[static_cast<size_t>(a)].size() > prompts[static_cast<size_t>(b)].size();
    });
    const int64_t n = static_cast<int64_t>(order.size());
    for (int64_t start = 0; start < n; start += micro_batch_size) {
        const int64_t end = std::min(n, start + micro_batch_size);
        std::vector<int64_t> rows(order.begin() + start, order.begin() + end);
        generate_micro_batch(model, prompts, seeds, params, stop, rows, results);
    }
    return assemble(prompts, results, params);
}

}  // namespace rlpt::rollout
