#include "rlpt/rollout/generator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

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

// What ends a sequence.
struct StopRules {
    std::vector<uint8_t> table;  // stop_table
    int64_t max_new_tokens;
};

// THE per-row finish decision, called once after each token a sequence gets (its response so
// far in row.tokens, the newest last; the token's text goes to the stop-string matcher here):
// the reason it is finished, or nothing to go on. EOS / stop ids first, then stop strings.
std::optional<FinishReason> finish_reason(const StopRules& rules, RowResult& row) {
    const int64_t tok = row.tokens.back();
    const bool stop_string = row.text.push(tok);
    const uint8_t s = rules.table[static_cast<size_t>(tok)];
    if (s != 0) return s == 1 ? FinishReason::kEos : FinishReason::kStop;
    if (stop_string) return FinishReason::kStop;
    if (static_cast<int64_t>(row.tokens.size()) == rules.max_new_tokens) return FinishReason::kLength;
    return std::nullopt;
}

// The continuous-batching engine of one generate() call (see generator.h). Each slot of the KV
// cache holds one sequence; `active` lists the slots being decoded, `hidden` row i is the last
// hidden state of active[i] (it predicts that sequence's next token).
class Engine {
  public:
    Engine(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
           const SamplingParams& params, const BatchLimits& limits, std::vector<RowResult>& results)
        : model_(model),
          prompts_(prompts),
          seeds_(seeds),
          params_(params),
          limits_(limits),
          results_(results),
          rules_{stop_table(params, model.args().vocab_size), params.max_new_tokens} {
        group_prompts();
        size_cache();
    }

    void run() {
        std::vector<double> uniforms;
        std::vector<int64_t> next, tokens, positions;
        while (true) {
            if (queued_ < order_.size() && (limits_.continuous || active_.empty())) admit();
            if (active_.empty()) break;
            // [b, V] fp32 on the model's device. Tensor-parallel: gathered over the block; every
            // rank then draws the same tokens from the same per-row streams.
            auto logits = model_.gathered_logits(hidden_);
            if (!params_.greedy) {
                uniforms.resize(active_.size());
                for (size_t i = 0; i < active_.size(); ++i) {
                    const auto row = static_cast<size_t>(slot_row_[static_cast<size_t>(active_[i])]);
                    uniforms[i] = uniform_draw(seeds_[row], static_cast<int64_t>(results_[row].tokens.size()));
                }
            }
            // On a GPU the logits stay there: only the chosen ids and log-probs come back (the
            // stop checks below need nothing else; choose_tokens dispatches, sampler.h).
            const TokenChoices chosen = choose_tokens(logits, params_, uniforms);
            next.clear();
            tokens.clear();
            positions.clear();
            for (size_t i = 0; i < active_.size(); ++i) {
                const int64_t slot = active_[i];
                RowResult& res = results_[static_cast<size_t>(slot_row_[static_cast<size_t>(slot)])];
                res.tokens.push_back(chosen.tokens[i]);
                res.log_probs.push_back(chosen.log_probs[i]);
                if (auto done = finish_reason(rules_, res)) {
                    res.finish = *done;
                    free_slot(slot);
                } else {
                    next.push_back(slot);
                    tokens.push_back(chosen.tokens[i]);
                    positions.push_back(cache_->slot_length(slot));  // slots hold no padding
                }
            }
            active_.swap(next);
            if (active_.empty()) {
                hidden_ = torch::Tensor();
                continue;
            }
            // One decode step of the unfinished rows, each in its own slot at its own length.
            const auto device = model_.device();
            const int64_t n = static_cast<int64_t>(active_.size());
            cache_->bind_slots(active_);
            hidden_ = model_
                          .forward_hidden(torch::tensor(tokens, torch::kInt64).view({n, 1}).to(device), torch::Tensor(),
                                          torch::tensor(positions, torch::kInt64).view({n, 1}).to(device), &*cache_)
                          .select(1, 0);
        }
    }

  private:
    // Queue order: longest prompts first (prefills pad little), identical prompts together
    // (in the order of their first occurrence), then the caller's order.
    void group_prompts() {
        std::map<std::vector<int64_t>, int64_t> first;  // prompt -> group
        group_.resize(prompts_.size());
        for (size_t i = 0; i < prompts_.size(); ++i)
            group_[i] = first.emplace(prompts_[i], static_cast<int64_t>(first.size())).first->second;
        group_hidden_.resize(first.size());
        order_.resize(prompts_.size());
        std::iota(order_.begin(), order_.end(), 0);
        std::stable_sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) {
            const auto la = prompts_[static_cast<size_t>(a)].size(), lb = prompts_[static_cast<size_t>(b)].size();
            if (la != lb) return la > lb;
            return group_[static_cast<size_t>(a)] < group_[static_cast<size_t>(b)];
        });
    }

    // Slots of longest prompt + max_new_tokens - 1 positions (the last token is never fed), as
    // many as max_num_seqs, the prompts and the token budget allow. Allocated once.
    void size_cache() {
        int64_t longest = 0;
        for (const auto& p : prompts_) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
        const int64_t per_seq = longest + params_.max_new_tokens - 1;
        int64_t slots = std::min<int64_t>(limits_.max_num_seqs, static_cast<int64_t>(prompts_.size()));
        if (limits_.max_num_batched_tokens) {
            const int64_t budget = *limits_.max_num_batched_tokens;
            RLPT_CHECK(budget >= per_seq,
                       "rollout.max_num_batched_tokens = {} cannot hold one sequence: the longest prompt ({} "
                       "tokens) "
                       "+ max_new_tokens ({}) - 1 = {} KV positions",
                       budget, longest, params_.max_new_tokens, per_seq);
            slots = std::min(slots, budget / per_seq);
        }
        slot_row_.assign(static_cast<size_t>(slots), -1);
        slot_group_.assign(static_cast<size_t>(slots), -1);
        for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
        cache_.emplace(model_.make_cache(slots, per_seq));
    }

    void free_slot(int64_t slot) {
        cache_->set_slot_length(slot, 0);
        slot_row_[static_cast<size_t>(slot)] = -1;
        slot_group_[static_cast<size_t>(slot)] = -1;
        free_.push_back(slot);
    }

    // A live slot already holding this group's prompt, or -1.
    int64_t prefix_source(int64_t group) const {
        if (!limits_.share_prefixes) return -1;
        for (size_t s = 0; s < slot_group_.size(); ++s)
            if (slot_group_[s] == group && slot_row_[s] >= 0) return static_cast<int64_t>(s);
        return -1;
    }

    // Fills free slots from the queue: prompts no live slot holds are prefilled together
    // (right-padded, straight into their slots), the rest copy a live slot's prompt positions.
    // Appends the new slots to active_ and their hidden states to hidden_.
    void admit() {
        std::vector<int64_t> fresh, copied;  // slots
        while (!free_.empty() && queued_ < order_.size()) {
            const int64_t row = order_[queued_++], slot = free_.back();
            free_.pop_back();
            const int64_t group = group_[static_cast<size_t>(row)];
            const bool shared = prefix_source(group) >= 0;
            slot_row_[static_cast<size_t>(slot)] = row;
            slot_group_[static_cast<size_t>(slot)] = group;
            (shared ? copied : fresh).push_back(slot);
        }
        torch::Tensor fresh_hidden;
        if (!fresh.empty()) fresh_hidden = prefill(fresh);
        for (int64_t slot : copied) {
            const int64_t group = slot_group_[static_cast<size_t>(slot)];
            const auto len =
                static_cast<int64_t>(prompts_[static_cast<size_t>(slot_row_[static_cast<size_t>(slot)])].size());
            int64_t src = -1;  // a slot holding the prompt other than this one
            for (size_t s = 0; s < slot_group_.size() && src < 0; ++s)
                if (slot_group_[s] == group && static_cast<int64_t>(s) != slot &&
                    cache_->slot_length(static_cast<int64_t>(s)) >= len)
                    src = static_cast<int64_t>(s);
            RLPT_CHECK_KIND(InternalError, src >= 0, "generate: no slot holds the prompt of slot {}", slot);
            cache_->copy_slot(slot, src, len);
        }
        std::vector<torch::Tensor> h;
        if (hidden_.defined()) h.push_back(hidden_);
        if (fresh_hidden.defined()) h.push_back(fresh_hidden);
        for (int64_t slot : copied)
            h.push_back(group_hidden_[static_cast<size_t>(slot_group_[static_cast<size_t>(slot)])]);
        hidden_ = torch::cat(h, 0);
        active_.insert(active_.end(), fresh.begin(), fresh.end());
        active_.insert(active_.end(), copied.begin(), copied.end());
    }

    // One forward over the prompts of `slots` (empty slots), right-padded: each prompt's K/V
    // land at [0, length) of its slot. Returns the last-position hidden states [slots, H] (and
    // keeps each group's for the samples that will copy the prompt).
    torch::Tensor prefill(const std::vector<int64_t>& slots) {
        const int64_t b = static_cast<int64_t>(slots.size());
        int64_t p_len = 0;
        for (int64_t s : slots)
            p_len =
                std::max<int64_t>(p_len, static_cast<int64_t>(
                                             prompts_[static_cast<size_t>(slot_row_[static_cast<size_t>(s)])].size()));
        auto ids = torch::full({b, p_len}, params_.pad_id, torch::kInt64);
        auto mask = torch::zeros({b, p_len}, torch::kInt64);
        auto* idp = ids.data_ptr<int64_t>();
        auto* mp = mask.data_ptr<int64_t>();
        std::vector<int64_t> last(static_cast<size_t>(b));
        for (int64_t i = 0; i < b; ++i) {
            const auto& pr =
                prompts_[static_cast<size_t>(slot_row_[static_cast<size_t>(slots[static_cast<size_t>(i)])])];
            std::copy(pr.begin(), pr.end(), idp + i * p_len);
            std::fill(mp + i * p_len, mp + i * p_len + static_cast<int64_t>(pr.size()), int64_t{1});
            last[static_cast<size_t>(i)] = static_cast<int64_t>(pr.size()) - 1;
        }
        const auto device = model_.device();
        auto pos = torch::arange(p_len, torch::kInt64).expand({b, p_len}).contiguous();
        cache_->bind_slots(slots);
        auto h = model_.forward_hidden(ids.to(device), mask.to(device), pos.to(device), &*cache_);
        auto last_t = torch::tensor(last, torch::kInt64).to(device);
        h = h.index({torch::arange(b, torch::TensorOptions().dtype(torch::kInt64).device(device)), last_t});  // [b, H]
        for (int64_t i = 0; i < b; ++i) {
            const int64_t slot = slots[static_cast<size_t>(i)];
            cache_->set_slot_length(slot, last[static_cast<size_t>(i)] + 1);  // drop the right padding
            group_hidden_[static_cast<size_t>(slot_group_[static_cast<size_t>(slot)])] = h.narrow(0, i, 1);
        }
        return h;
    }

    model::CausalLM& model_;
    const Prompts& prompts_;
    const std::vector<uint64_t>& seeds_;
    const SamplingParams& params_;
    const BatchLimits& limits_;
    std::vector<RowResult>& results_;
    StopRules rules_;
    std::optional<model::KVCache> cache_;                // the slots, set by size_cache
    std::vector<int64_t> group_;                         // group (distinct prompt) of each prompt
    std::vector<torch::Tensor> group_hidden_;            // per group: hidden state after its prompt [1, H]
    std::vector<int64_t> order_;                         // queue (prompt indices)
    size_t queued_ = 0;                                  // order_[0, queued_) admitted
    std::vector<int64_t> slot_row_, slot_group_, free_;  // per slot: prompt (-1 free), group; free slots
    std::vector<int64_t> active_;
    torch::Tensor hidden_;  // [active_.size(), H]
};

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

void validate_batch_limits(const BatchLimits& l) {
    RLPT_CHECK(l.max_num_seqs >= 1, "rollout.max_num_seqs must be >= 1, got {}", l.max_num_seqs);
    RLPT_CHECK(!l.max_num_batched_tokens || *l.max_num_batched_tokens >= 1,
               "rollout.max_num_batched_tokens must be >= 1 (or unset), got {}", l.max_num_batched_tokens.value_or(0));
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
    RLPT_CHECK(p.eos_id >= -1 && p.eos_id < vocab_size,
               "sampling: eos_id {} is outside the vocabulary [0, {}) (-1: none)", p.eos_id, vocab_size);
    for (int64_t id : p.stop_token_ids)
        RLPT_CHECK(id >= 0 && id < vocab_size, "sampling: stop token id {} is outside the vocabulary [0, {})", id,
                   vocab_size);
}

GenerationOutput generate(model::CausalLM& model, const Prompts& prompts, const std::vector<uint64_t>& seeds,
                          const SamplingParams& params, const BatchLimits& limits) {
    const int64_t vocab = model.args().vocab_size;
    validate_sampling_params(params, vocab);
    RLPT_CHECK(seeds.size() == prompts.size(), "generate: {} seeds for {} prompts (one seed per prompt)", seeds.size(),
               prompts.size());
    validate_batch_limits(limits);
    check_prompts(prompts, vocab);
    torch::NoGradGuard no_grad;
    std::vector<RowResult> results(prompts.size());
    if (params.token_texts != nullptr)
        for (auto& r : results)
            r.text = StopStringMatcher(&params.stop, params.token_texts, params.include_stop_str_in_output);
    if (!prompts.empty()) Engine(model, prompts, seeds, params, limits, results).run();
    return assemble(prompts, results, params);
}

}  // namespace rlpt::rollout
