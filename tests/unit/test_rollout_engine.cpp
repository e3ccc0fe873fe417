// The rollout engine (rollout/engine.h) with sequence sources (rollout/sequence_source.h) that park
// and resume: a resumed turn is what a full prefill of the sequence would give (the turn-by-turn
// schedule over rollout::generate), at any slot count; the call order of the contract; waits only
// when nothing can run; waves; and the errors a source that breaks its contract gets.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/engine.h"
#include "rlpt/rollout/generator.h"
#include "unit/test_model_helpers.h"
#include "unit/turn_by_turn.h"

namespace rlpt::rollout {
namespace {

using model::testing::expect_error;
using Prompts = std::vector<std::vector<int64_t>>;

constexpr int64_t kVocab = 24;

std::shared_ptr<model::CausalLM> tiny_model() {
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, kVocab);
    a.initializer_range = 0.25;  // clear margins between tokens
    return model::make_random_causal_lm(a, 11, torch::kFloat32);
}

// Sequences of `turns` turns of at most turn_tokens tokens each. Every turn but the last parks
// the sequence; its continuation appends (id + turn) % 3 tokens (none for some) and is ready
// after `not_ready` polls that may not wait (collect(0)). Records every call and checks the
// contract's call order as it goes.
class TurnsSource final : public SequenceSource {
  public:
    TurnsSource(Prompts prompts, int64_t turns, int64_t turn_tokens, int64_t not_ready = 0, int64_t max_num_seqs = 1)
        : prompts_(std::move(prompts)),
          turns_(turns),
          turn_tokens_(turn_tokens),
          not_ready_(not_ready),
          slots_(max_num_seqs),
          state_(prompts_.size()) {}

    std::vector<QueuedSequence> sequences() override {
        EXPECT_EQ(log.size(), 0u);
        log.push_back("sequences");
        std::vector<QueuedSequence> q;
        for (size_t i = 0; i < prompts_.size(); ++i) q.push_back(QueuedSequence{i, prompts_[i]});
        return q;
    }
    SequenceBounds bounds() const override {
        int64_t longest = 0;
        for (const auto& p : prompts_) longest = std::max<int64_t>(longest, std::ssize(p));
        return SequenceBounds{longest, turns_ * (turn_tokens_ + 2)};
    }
    TurnSpec start_turn(size_t id) override {
        State& s = state_[id];
        EXPECT_FALSE(s.decoding || s.parked || s.finished) << id;
        if (s.turns.empty()) ++admitted_;
        s.decoding = true;
        log.push_back(fmt::format("start {} {}", id, s.turns.size()));
        return TurnSpec{sample_seed(7, std::ssize(s.turns), static_cast<int64_t>(id)), turn_tokens_};
    }
    bool end_turn(size_t id, const Turn& turn) override {
        State& s = state_[id];
        EXPECT_TRUE(s.decoding) << id;
        EXPECT_LE(std::ssize(turn.tokens), turn_tokens_);
        EXPECT_EQ(turn.tokens.size(), turn.log_probs.size());
        s.decoding = false;
        s.turns.emplace_back(turn.tokens.begin(), turn.tokens.end());
        s.log_probs.emplace_back(turn.log_probs.begin(), turn.log_probs.end());
        log.push_back(fmt::format("end {}", id));
        s.parked = std::ssize(s.turns) < turns_;
        s.finished = !s.parked;
        if (s.parked) s.polls_left = not_ready_;
        return s.parked;
    }
    std::vector<Continuation> collect(double timeout_s) override {
        int64_t parked = 0, decoding = 0;
        for (const auto& s : state_) {
            parked += s.parked ? 1 : 0;
            decoding += s.decoding ? 1 : 0;
        }
        EXPECT_GT(parked, 0);
        // A wait only when nothing can run: nothing decodes and no free slot can take a waiting sequence.
        if (timeout_s > 0) {
            EXPECT_EQ(decoding, 0);
            if (!waves)
                EXPECT_TRUE(admitted_ == std::ssize(prompts_) || parked == slots_) << admitted_ << " " << parked;
            ++waits;
        }
        std::vector<Continuation> out;
        for (size_t id = 0; id < state_.size(); ++id) {
            State& s = state_[id];
            if (!s.parked || (timeout_s == 0 && s.polls_left-- > 0)) continue;
            s.parked = false;
            const auto n = static_cast<int64_t>((id + s.turns.size()) % 3);
            std::vector<int64_t> add;
            for (int64_t k = 0; k < n; ++k) add.push_back(3 + (static_cast<int64_t>(id) * 5 + k) % (kVocab - 3));
            s.appended.push_back(add);
            out.push_back(Continuation{id, false, add});
        }
        return out;
    }

    struct State {
        std::vector<std::vector<int64_t>> turns, appended;
        std::vector<std::vector<float>> log_probs;
        bool decoding = false, parked = false, finished = false;
        int64_t polls_left = 0;
    };
    const State& state(size_t id) const { return state_[id]; }
    std::vector<std::string> log;
    int64_t waits = 0;
    bool waves = false;  // BatchLimits::continuous = false: a free slot may stay empty while others are parked

  private:
    Prompts prompts_;
    int64_t turns_, turn_tokens_, not_ready_, slots_, admitted_ = 0;
    std::vector<State> state_;
};

Prompts prompts() { return {{3, 4, 5}, {6, 7, 8, 9, 10}, {3, 4, 5}, {11}, {12, 13}, {3, 4, 5}}; }

SamplingParams params() {
    SamplingParams p;
    p.temperature = 0.9;
    p.top_k = 12;
    p.eos_id = 4;
    return p;
}

void expect_same_turns(const TurnsSource& a, const TurnsSource& b, size_t n) {
    for (size_t id = 0; id < n; ++id) {
        SCOPED_TRACE(::testing::Message() << "sequence " << id);
        ASSERT_EQ(a.state(id).turns, b.state(id).turns);
        EXPECT_EQ(a.state(id).appended, b.state(id).appended);
        for (size_t t = 0; t < a.state(id).turns.size(); ++t)
            for (size_t k = 0; k < a.state(id).log_probs[t].size(); ++k)
                EXPECT_NEAR(a.state(id).log_probs[t][k], b.state(id).log_probs[t][k], 2e-5) << t << " " << k;
    }
}

TEST(RolloutEngine, ResumedTurnsMatchAFullPrefillAtAnySlotCount) {
    auto m = tiny_model();
    const auto ps = prompts();
    TurnsSource ref(ps, 4, 6);
    testing::run_turn_by_turn(
        ref,
        [&](const Prompts& pr, const std::vector<uint64_t>& sd, const SamplingParams& sp) {
            return generate(*m, pr, sd, sp, BatchLimits(64));
        },
        params());
    int64_t appended = 0, empty = 0;
    for (size_t id = 0; id < ps.size(); ++id) {
        EXPECT_EQ(ref.state(id).turns.size(), 4u);
        for (const auto& a : ref.state(id).appended) (a.empty() ? empty : appended) += 1;
    }
    EXPECT_GT(appended, 0);
    EXPECT_GT(empty, 0);
    for (int64_t slots : {1, 2, 3, 64}) {
        SCOPED_TRACE(::testing::Message() << "max_num_seqs " << slots);
        TurnsSource src(ps, 4, 6, /*not_ready=*/0, slots);
        run_engine(*m, src, params(), BatchLimits(slots));
        expect_same_turns(ref, src, ps.size());
        EXPECT_EQ(src.log.front(), "sequences");
    }
    // Without prefix sharing, and greedy, the same again.
    BatchLimits no_share(3);
    no_share.share_prefixes = false;
    TurnsSource a(ps, 4, 6, 0, 3), b(ps, 4, 6, 0, 3);
    run_engine(*m, a, params(), BatchLimits(3));
    run_engine(*m, b, params(), no_share);
    expect_same_turns(a, b, ps.size());
}

// Continuations that are not ready yet (polled with timeout 0) leave the other slots decoding;
// collect waits (timeout > 0) only when nothing can run (the source checks it on every call).
TEST(RolloutEngine, WaitsOnlyWhenNothingCanRun) {
    auto m = tiny_model();
    const auto ps = prompts();
    TurnsSource ref(ps, 3, 5, 0, 64);
    run_engine(*m, ref, params(), BatchLimits(64));
    for (int64_t slots : {1, 2, 64}) {
        SCOPED_TRACE(::testing::Message() << "max_num_seqs " << slots);
        TurnsSource slow(ps, 3, 5, /*not_ready=*/3, slots);
        run_engine(*m, slow, params(), BatchLimits(slots));
        expect_same_turns(ref, slow, ps.size());
        if (slots == 1) EXPECT_GT(slow.waits, 0);
    }
}

// continuous = false: new sequences are admitted only when every slot is free (parked ones hold
// theirs).
TEST(RolloutEngine, WavesAdmitOnlyIntoAnEmptyCache) {
    auto m = tiny_model();
    const auto ps = prompts();
    BatchLimits waves(2);
    waves.continuous = false;
    TurnsSource src(ps, 2, 4, 0, 2);
    src.waves = true;
    run_engine(*m, src, params(), waves);
    // Sequence 2's first turn starts after sequences 0 and 1 ended their last.
    auto at = [&](const std::string& e) { return std::find(src.log.begin(), src.log.end(), e) - src.log.begin(); };
    auto last_end = [&](size_t id) {
        const std::string e = fmt::format("end {}", id);
        return std::find(src.log.rbegin(), src.log.rend(), e).base() - src.log.begin() - 1;
    };
    EXPECT_GT(at("start 2 0"), std::max(last_end(0), last_end(1)));
    EXPECT_GT(at("start 4 0"), std::max(last_end(2), last_end(3)));
    TurnsSource ref(ps, 2, 4, 0, 2);
    run_engine(*m, ref, params(), BatchLimits(2));
    expect_same_turns(ref, src, ps.size());
}

// A source that parks without resuming, asks for more than a slot holds, or resumes a sequence
// that is not parked gets an InternalError; a token budget below one slot a ValueError.
TEST(RolloutEngine, ABrokenContractIsAnInternalError) {
    auto m = tiny_model();
    struct Source : SequenceSource {
        int64_t mode = 0;
        std::vector<QueuedSequence> sequences() override { return {{0, {3, 4}}, {1, {5}}}; }
        SequenceBounds bounds() const override { return {2, 4}; }
        TurnSpec start_turn(size_t) override { return {1, mode == 1 ? 9 : 2}; }
        bool end_turn(size_t, const Turn&) override { return mode != 0; }
    };
    Source parks;
    parks.mode = 2;
    expect_error<InternalError>([&] { run_engine(*m, parks, params(), BatchLimits(2)); }, {"cannot resume"});
    Source greedy_budget;
    greedy_budget.mode = 1;
    expect_error<InternalError>([&] { run_engine(*m, greedy_budget, params(), BatchLimits(2)); },
                                {"turn of 9 tokens", "SequenceSource::bounds"});
    struct WrongId : Source {
        std::vector<Continuation> collect(double) override { return {{7, false, {}}}; }
    };
    WrongId wrong;
    wrong.mode = 2;
    expect_error<InternalError>([&] { run_engine(*m, wrong, params(), BatchLimits(2)); },
                                {"sequence 7", "without a parked slot"});
    Source fine;
    BatchLimits small(2);
    small.max_num_batched_tokens = 4;
    expect_error<ValueError>([&] { run_engine(*m, fine, params(), small); },
                             {"rollout.max_num_batched_tokens = 4", "longest prompt (2 tokens)", "5 KV positions"});
}

}  // namespace
}  // namespace rlpt::rollout
