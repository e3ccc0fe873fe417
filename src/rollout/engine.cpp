#include "rlpt/rollout/engine.h"

#include <algorithm>
#include <map>
#include <optional>

#include "rlpt/core/error.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout {
namespace {

// How long collect() may wait when nothing else can run: until a parked sequence is ready (tools
// and environments time out on their own, well before this).
constexpr double kBlockS = 3600.0;

// Per-token stop lookup: 0 = continue, 1 = eos, 2 = stop id.
std::vector<uint8_t> stop_table(const SamplingParams& params, int64_t vocab) {
    std::vector<uint8_t> table(static_cast<size_t>(vocab), 0);
    for (int64_t id : params.stop_token_ids) table[static_cast<size_t>(id)] = 2;
    if (params.eos_id >= 0) table[static_cast<size_t>(params.eos_id)] = 1;
    return table;
}

// THE per-row finish decision, called once after each token a turn gets (tok, the turn's n-th;
// its text goes to the stop-string matcher here): the reason the turn is finished, or nothing
// to go on. EOS / stop ids first, then stop strings, then the turn's length.
std::optional<FinishReason> finish_reason(const std::vector<uint8_t>& table, StopStringMatcher& text, int64_t tok,
                                          int64_t n, int64_t max_tokens) {
    const bool stop_string = text.push(tok);
    const uint8_t s = table[static_cast<size_t>(tok)];
    if (s != 0) return s == 1 ? FinishReason::kEos : FinishReason::kStop;
    if (stop_string) return FinishReason::kStop;
    if (n == max_tokens) return FinishReason::kLength;
    return std::nullopt;
}

// One run_engine call (engine.h). Each slot of the KV cache holds one sequence; `active` lists
// the slots being decoded, `hidden` row i is the last hidden state of active[i] (it predicts that
// sequence's next token).
class Engine {
  public:
    Engine(model::CausalLM& model, SequenceSource& source, const SamplingParams& params, const BatchLimits& limits)
        : model_(model),
          source_(source),
          params_(params),
          limits_(limits),
          lockstep_(model.tp() != nullptr),
          table_(stop_table(params, model.args().vocab_size)),
          queue_(source.sequences()) {
        // Sequences starting from the same tokens form a group (numbered in queue order).
        std::map<std::vector<int64_t>, int64_t> first;
        for (const auto& q : queue_)
            group_.push_back(first.emplace(q.tokens, static_cast<int64_t>(first.size())).first->second);
        group_hidden_.resize(first.size());
        size_cache(source.bounds());
    }

    void run() {
        std::vector<double> uniforms;
        std::vector<int64_t> next, tokens, positions;
        while (true) {
            if (next_ < queue_.size() && (limits_.continuous || free_.size() == slot_.size())) admit();
            // Continuations that are ready: prefilled into their slots. Blocks only when nothing
            // else can run (or in lockstep, see engine.h).
            if (parked_ > 0) {
                if (lockstep_) {
                    while (parked_ > 0) resume(source_.collect(kBlockS));
                } else {
                    resume(source_.collect(active_.empty() && !can_admit() ? kBlockS : 0.0));
                }
            }
            if (active_.empty()) {
                if (next_ >= queue_.size() && parked_ == 0) break;
                continue;
            }
            // [b, V] fp32 on the model's device. Tensor-parallel: gathered over the block; every
            // rank then draws the same tokens from the same per-row streams.
            auto logits = model_.gathered_logits(hidden_);
            if (!params_.greedy) {
                uniforms.resize(active_.size());
                for (size_t k = 0; k < active_.size(); ++k) {
                    const Slot& sl = slot_[static_cast<size_t>(active_[k])];
                    uniforms[k] = uniform_draw(sl.spec.seed, static_cast<int64_t>(sl.tokens.size()));
                }
            }
            // On a GPU the logits stay there: only the chosen ids and log-probs come back (the
            // stop checks below need nothing else; choose_tokens dispatches, sampler.h).
            const TokenChoices chosen = choose_tokens(logits, params_, uniforms);
            next.clear();
            tokens.clear();
            positions.clear();
            for (size_t k = 0; k < active_.size(); ++k) {
                const int64_t slot = active_[k];
                Slot& sl = slot_[static_cast<size_t>(slot)];
                sl.tokens.push_back(chosen.tokens[k]);
                sl.log_probs.push_back(chosen.log_probs[k]);
                if (auto done = finish_reason(table_, sl.text, chosen.tokens[k], static_cast<int64_t>(sl.tokens.size()),
                                              sl.spec.max_tokens)) {
                    Turn turn{sl.tokens, sl.log_probs, *done, sl.text.visible_text()};
                    if (cache_->routes_enabled()) turn.routes = cache_->routes(slot, cache_->slot_length(slot));
                    if (source_.end_turn(sl.id, turn)) {
                        sl.pending = chosen.tokens[k];  // parked: the slot keeps its KV
                        ++parked_;
                    } else {
                        free_slot(slot);
                    }
                } else {
                    next.push_back(slot);
                    tokens.push_back(chosen.tokens[k]);
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
            const auto n = static_cast<int64_t>(active_.size());
            cache_->bind_slots(active_);
            hidden_ = model_
                          .forward_hidden(torch::tensor(tokens, torch::kInt64).view({n, 1}).to(device), torch::Tensor(),
                                          torch::tensor(positions, torch::kInt64).view({n, 1}).to(device), &*cache_)
                          .select(1, 0);
        }
    }

  private:
    struct Slot {
        bool used = false;
        size_t id = 0;                // the source's sequence
        size_t queued = 0;            // its entry in queue_
        TurnSpec spec;                // this turn's
        std::vector<int64_t> tokens;  // this turn's tokens
        std::vector<float> log_probs;
        StopStringMatcher text;
        int64_t pending = -1;  // parked: the turn's last token, not yet fed
    };

    // Slots of longest prompt + response budget - 1 positions (the last token is never fed), as
    // many as max_num_seqs, the sequences and the token budget allow. Allocated once.
    void size_cache(const SequenceBounds& b) {
        const int64_t per_seq = b.longest_prompt + b.response_budget - 1;
        per_seq_ = per_seq;
        int64_t slots = std::min<int64_t>(limits_.max_num_seqs, std::max<int64_t>(1, std::ssize(queue_)));
        if (limits_.max_num_batched_tokens) {
            const int64_t budget = *limits_.max_num_batched_tokens;
            RLPT_CHECK(budget >= per_seq,
                       "rollout.max_num_batched_tokens = {} cannot hold one sequence: the longest prompt ({} tokens) "
                       "+ the response budget ({}) - 1 = {} KV positions",
                       budget, b.longest_prompt, b.response_budget, per_seq);
            slots = std::min(slots, budget / per_seq);
        }
        slot_.assign(static_cast<size_t>(slots), Slot{});
        for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
        if (!queue_.empty()) cache_.emplace(model_.make_cache(slots, per_seq));
        const auto& a = model_.args();
        if (cache_ && params_.record_routes && a.num_moe_layers() > 0)
            cache_->enable_routes(a.num_moe_layers(), a.num_experts_per_tok);
    }

    bool can_admit() const {
        return next_ < queue_.size() && !free_.empty() && (limits_.continuous || free_.size() == slot_.size());
    }

    // Asks the source for the slot's next turn; `fed` positions will be in the slot before it.
    void start_turn(Slot& sl, int64_t fed) {
        sl.spec = source_.start_turn(sl.id);
        RLPT_CHECK_KIND(InternalError, sl.spec.max_tokens >= 1 && fed + sl.spec.max_tokens - 1 <= per_seq_,
                        "rollout engine: sequence {} asks for a turn of {} tokens after {} positions; its slot holds "
                        "{} (SequenceSource::bounds)",
                        sl.id, sl.spec.max_tokens, fed, per_seq_);
        sl.tokens.clear();
        sl.log_probs.clear();
        sl.pending = -1;
        sl.text = params_.token_texts != nullptr
                      ? StopStringMatcher(&params_.stop, params_.token_texts, params_.include_stop_str_in_output)
                      : StopStringMatcher();
    }

    void free_slot(int64_t slot) {
        cache_->set_slot_length(slot, 0);
        slot_[static_cast<size_t>(slot)] = Slot{};
        free_.push_back(slot);
    }

    int64_t group_of(const Slot& sl) const { return group_[sl.queued]; }

    void add_active(const std::vector<int64_t>& slots, const torch::Tensor& h) {
        if (slots.empty()) return;
        hidden_ = hidden_.defined() ? torch::cat({hidden_, h}, 0) : h;
        active_.insert(active_.end(), slots.begin(), slots.end());
    }

    // Fills free slots from the queue: sequences whose first tokens a used slot of the same
    // group holds copy them, the others are prefilled together (right-padded).
    void admit() {
        std::vector<int64_t> fresh, copied;  // slots
        while (!free_.empty() && next_ < queue_.size()) {
            const int64_t slot = free_.back();
            free_.pop_back();
            Slot& sl = slot_[static_cast<size_t>(slot)];
            sl.used = true;
            sl.queued = next_++;
            sl.id = queue_[sl.queued].id;
            start_turn(sl, std::ssize(queue_[sl.queued].tokens));
            bool shared = false;
            if (limits_.share_prefixes)
                for (const auto& o : slot_) shared = shared || (&o != &sl && o.used && group_of(o) == group_of(sl));
            (shared ? copied : fresh).push_back(slot);
        }
        if (!fresh.empty()) {
            std::vector<std::vector<int64_t>> seqs;
            for (int64_t s : fresh) seqs.push_back(queue_[slot_[static_cast<size_t>(s)].queued].tokens);
            auto h = prefill(fresh, seqs);
            for (size_t k = 0; k < fresh.size(); ++k)
                group_hidden_[static_cast<size_t>(group_of(slot_[static_cast<size_t>(fresh[k])]))] =
                    h.narrow(0, static_cast<int64_t>(k), 1);
            add_active(fresh, h);
        }
        std::vector<torch::Tensor> hs;
        for (int64_t slot : copied) {
            const Slot& sl = slot_[static_cast<size_t>(slot)];
            const auto len = std::ssize(queue_[sl.queued].tokens);
            int64_t src = -1;  // a slot holding the tokens other than this one
            for (size_t o = 0; o < slot_.size() && src < 0; ++o)
                if (static_cast<int64_t>(o) != slot && slot_[o].used && group_of(slot_[o]) == group_of(sl) &&
                    cache_->slot_length(static_cast<int64_t>(o)) >= len)
                    src = static_cast<int64_t>(o);
            RLPT_CHECK_KIND(InternalError, src >= 0, "rollout engine: no slot holds the first tokens of slot {}", slot);
            cache_->copy_slot(slot, src, len);
            hs.push_back(group_hidden_[static_cast<size_t>(group_of(sl))]);
        }
        if (!copied.empty()) add_active(copied, torch::cat(hs, 0));
    }

    // Feeds seqs[b] after what slot slots[b] holds (one forward, right-padded): first tokens
    // into empty slots, or a parked turn's last token and its continuation. Returns the hidden
    // state after each sequence's last token [b, H].
    torch::Tensor prefill(const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& seqs) {
        const auto b = static_cast<int64_t>(slots.size());
        int64_t T = 0;
        bool empty_slots = true;
        std::vector<int64_t> lens;
        for (size_t k = 0; k < slots.size(); ++k) {
            T = std::max<int64_t>(T, std::ssize(seqs[k]));
            lens.push_back(std::ssize(seqs[k]));
            empty_slots = empty_slots && cache_->slot_length(slots[k]) == 0;
        }
        auto ids = torch::full({b, T}, params_.pad_id, torch::kInt64);
        auto mask = torch::zeros({b, T}, torch::kInt64);
        auto pos = torch::zeros({b, T}, torch::kInt64);
        for (int64_t k = 0; k < b; ++k) {
            const auto& sq = seqs[static_cast<size_t>(k)];
            const int64_t start = cache_->slot_length(slots[static_cast<size_t>(k)]);
            std::copy(sq.begin(), sq.end(), ids.data_ptr<int64_t>() + k * T);
            std::fill(mask.data_ptr<int64_t>() + k * T, mask.data_ptr<int64_t>() + k * T + lens[static_cast<size_t>(k)],
                      1);
            auto* p = pos.data_ptr<int64_t>() + k * T;
            for (int64_t t = 0; t < T; ++t) p[t] = start + t;
        }
        const auto device = model_.device();
        // Empty slots: a plain prefill (each sequence's K/V at [0, length) of its slot); else an extend.
        if (empty_slots) cache_->bind_slots(slots);
        else cache_->bind_slots(slots, lens);
        auto h = model_.forward_hidden(ids.to(device), mask.to(device), pos.to(device), &*cache_);
        auto last = torch::tensor(lens, torch::kInt64).to(device) - 1;
        h = h.index({torch::arange(b, torch::TensorOptions().dtype(torch::kInt64).device(device)), last});
        if (empty_slots)  // drop the right padding
            for (int64_t k = 0; k < b; ++k)
                cache_->set_slot_length(slots[static_cast<size_t>(k)], lens[static_cast<size_t>(k)]);
        return h;
    }

    // Parked sequences whose continuation is ready: finished ones free their slot, the others get
    // the turn's last token and their tokens prefilled after what the slot holds, and decode their
    // next turn.
    void resume(const std::vector<Continuation>& ready) {
        std::vector<int64_t> slots;
        std::vector<std::vector<int64_t>> seqs;
        for (const auto& c : ready) {
            int64_t slot = -1;
            for (size_t o = 0; o < slot_.size() && slot < 0; ++o)
                if (slot_[o].used && slot_[o].id == c.id && slot_[o].pending >= 0) slot = static_cast<int64_t>(o);
            RLPT_CHECK_KIND(InternalError, slot >= 0, "rollout engine: sequence {} came back without a parked slot",
                            c.id);
            --parked_;
            if (c.finished) {
                free_slot(slot);
                continue;
            }
            Slot& sl = slot_[static_cast<size_t>(slot)];
            std::vector<int64_t> chunk{sl.pending};
            chunk.insert(chunk.end(), c.tokens.begin(), c.tokens.end());
            start_turn(sl, cache_->slot_length(slot) + std::ssize(chunk));
            slots.push_back(slot);
            seqs.push_back(std::move(chunk));
        }
        if (!slots.empty()) add_active(slots, prefill(slots, seqs));
    }

    model::CausalLM& model_;
    SequenceSource& source_;
    const SamplingParams& params_;
    const BatchLimits& limits_;
    const bool lockstep_;
    const std::vector<uint8_t> table_;         // stop_table
    const std::vector<QueuedSequence> queue_;  // in admission order
    std::vector<int64_t> group_;               // per queue entry: its group (same first tokens)
    std::vector<torch::Tensor> group_hidden_;  // per group: hidden state after its first tokens [1, H]
    size_t next_ = 0;                          // queue_[0, next_) admitted
    int64_t per_seq_ = 0;                      // KV positions per slot
    std::optional<model::KVCache> cache_;      // the slots, set by size_cache
    std::vector<Slot> slot_;
    std::vector<int64_t> free_, active_;
    int64_t parked_ = 0;
    torch::Tensor hidden_;  // [active_.size(), H]
};

}  // namespace

void run_engine(model::CausalLM& model, SequenceSource& source, const SamplingParams& params,
                const BatchLimits& limits) {
    torch::NoGradGuard no_grad;
    Engine(model, source, params, limits).run();
}

}  // namespace rlpt::rollout
