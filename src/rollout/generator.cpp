#include "rlpt/rollout/generator.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>

#include "rlpt/core/error.h"
#include "rlpt/rollout/engine.h"
#include "rlpt/rollout/response_rows.h"
#include "rlpt/rollout/sampler.h"
#include "rlpt/rollout/sequence_source.h"

namespace rlpt::rollout {
namespace {

using Prompts = std::vector<std::vector<int64_t>>;

// The sampler as a sequence source (sequence_source.h): one turn per prompt, never parked.
class PromptSource final : public SequenceSource {
  public:
    PromptSource(const Prompts& prompts, const std::vector<uint64_t>& seeds, const SamplingParams& params)
        : prompts_(prompts), seeds_(seeds), params_(params), rows_(prompts.size()) {}

    // Longest prompts first (prefills pad little), identical prompts together (in the order of
    // their first occurrence), then the caller's order.
    std::vector<QueuedSequence> sequences() override {
        std::map<std::vector<int64_t>, int64_t> first;  // prompt -> group
        std::vector<int64_t> group(prompts_.size());
        for (size_t i = 0; i < prompts_.size(); ++i)
            group[i] = first.emplace(prompts_[i], static_cast<int64_t>(first.size())).first->second;
        std::vector<size_t> order(prompts_.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            const auto la = prompts_[a].size(), lb = prompts_[b].size();
            if (la != lb) return la > lb;
            return group[a] < group[b];
        });
        std::vector<QueuedSequence> queue;
        for (size_t i : order) queue.push_back(QueuedSequence{i, prompts_[i]});
        return queue;
    }

    SequenceBounds bounds() const override {
        int64_t longest = 0;
        for (const auto& p : prompts_) longest = std::max<int64_t>(longest, std::ssize(p));
        return SequenceBounds{longest, params_.max_new_tokens};
    }

    TurnSpec start_turn(size_t id) override { return TurnSpec{seeds_[id], params_.max_new_tokens}; }

    bool end_turn(size_t id, const Turn& turn) override {
        rows_[id] = ResponseRow{{turn.tokens.begin(), turn.tokens.end()},
                                {turn.log_probs.begin(), turn.log_probs.end()},
                                {},
                                turn.finish,
                                turn.text,
                                turn.routes};
        return false;
    }

    // Left-pads prompts to the call's longest, right-pads responses, builds the masks.
    GenerationOutput output() const {
        return assemble_rows(prompts_, rows_, params_.pad_id, params_.token_texts != nullptr);
    }

  private:
    const Prompts& prompts_;
    const std::vector<uint64_t>& seeds_;
    const SamplingParams& params_;
    std::vector<ResponseRow> rows_;  // by prompt
};

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
    PromptSource source(prompts, seeds, params);
    if (!prompts.empty()) run_engine(model, source, params, limits);
    return source.output();
}

}  // namespace rlpt::rollout
