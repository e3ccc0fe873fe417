// Beam search (rollout/beam_search.h) against brute force on a tiny model: every prefix's
// next-token log-probs come from a full forward without a KV cache, and
//   * when the search is exhaustive (width >= V^(L-1), no EOS, length_penalty 0), its beams are
//     exactly the W most likely of all V^L sequences, enumerated;
//   * otherwise it matches a plain reference of the documented algorithm run on those exact
//     log-probs, for widths 2-4, with EOS and stop ids, three length penalties, prompts that
//     repeat (one search, beams handed out by rank) and micro-batches of one prompt.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/beam_search.h"

namespace rlpt::rollout {
namespace {

using Seq = std::vector<int64_t>;

constexpr int64_t kVocab = 5;

std::shared_ptr<model::CausalLM> tiny(uint64_t seed) {
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, kVocab);
    a.initializer_range = 0.3;
    return model::make_random_causal_lm(a, seed);
}

// Next-token log-probs after prompt ++ prefix, from a full forward (no cache), memoised.
class Oracle {
  public:
    Oracle(model::CausalLM& m, Seq prompt, double temperature) : m_(m), prompt_(std::move(prompt)), t_(temperature) {}
    const std::vector<double>& next(const Seq& prefix) {
        auto it = memo_.find(prefix);
        if (it != memo_.end()) return it->second;
        torch::NoGradGuard ng;
        Seq ids = prompt_;
        ids.insert(ids.end(), prefix.begin(), prefix.end());
        const int64_t n = static_cast<int64_t>(ids.size());
        auto x = torch::tensor(ids, torch::kInt64).view({1, n});
        auto logits = m_.forward_logits(x, torch::ones({1, n}, torch::kInt64), torch::arange(n).view({1, n}));
        auto lp = torch::log_softmax(logits[0][n - 1].to(torch::kFloat64) / t_, -1).contiguous();
        return memo_[prefix] = std::vector<double>(lp.data_ptr<double>(), lp.data_ptr<double>() + kVocab);
    }
    double log_prob(const Seq& seq) {
        double s = 0;
        for (size_t i = 0; i < seq.size(); ++i)
            s += next(Seq(seq.begin(), seq.begin() + static_cast<int64_t>(i)))[static_cast<size_t>(seq[i])];
        return s;
    }

  private:
    model::CausalLM& m_;
    Seq prompt_;
    double t_;
    std::map<Seq, std::vector<double>> memo_;
};

struct Hyp {
    Seq tokens;
    double cum;
    bool eos;
};

// The header's algorithm, written plainly over the oracle's exact log-probs.
std::vector<Hyp> reference(Oracle& o, int64_t width, int64_t max_new, const std::vector<int64_t>& finishing,
                           int64_t eos, double length_penalty) {
    std::vector<Hyp> live{{{}, 0.0, false}}, done;
    for (int64_t step = 0; step < max_new && !live.empty(); ++step) {
        std::vector<Hyp> next;
        for (const auto& b : live) {
            const auto& lp = o.next(b.tokens);
            Seq ids(kVocab);
            std::iota(ids.begin(), ids.end(), 0);
            std::stable_sort(ids.begin(), ids.end(), [&](int64_t x, int64_t y) { return lp[x] > lp[y]; });
            ids.resize(static_cast<size_t>(std::min<int64_t>(2 * width, kVocab)));
            for (int64_t t : ids) {
                Hyp h{b.tokens, b.cum + lp[static_cast<size_t>(t)], t == eos};
                h.tokens.push_back(t);
                const bool ends = std::find(finishing.begin(), finishing.end(), t) != finishing.end();
                (ends ? done : next).push_back(h);
            }
        }
        std::stable_sort(next.begin(), next.end(), [](const Hyp& x, const Hyp& y) { return x.cum > y.cum; });
        if (static_cast<int64_t>(next.size()) > width) next.resize(static_cast<size_t>(width));
        live = next;
    }
    done.insert(done.end(), live.begin(), live.end());
    auto score = [&](const Hyp& h) {
        return h.cum /
               std::pow(std::max<double>(1.0, static_cast<double>(h.tokens.size()) - (h.eos ? 1 : 0)), length_penalty);
    };
    std::stable_sort(done.begin(), done.end(), [&](const Hyp& x, const Hyp& y) { return score(x) > score(y); });
    if (static_cast<int64_t>(done.size()) > width) done.resize(static_cast<size_t>(width));
    return done;
}

Seq response(const GenerationOutput& o, int64_t i) {
    const int64_t len = o.response_mask[i].sum().item<int64_t>();
    auto r = o.responses[i].narrow(0, 0, len).contiguous();
    return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + len};
}

double cumulative(const GenerationOutput& o, int64_t i) {
    return o.rollout_log_probs[i].to(torch::kFloat64).sum().item<double>();
}

TEST(BeamSearch, ExhaustiveSearchIsTheTopOfEverySequence) {
    // V = 5, L = 2, W = 5 >= V^(L-1), no EOS, length_penalty 0: every one of the 25 sequences is
    // a candidate at the last step, so the beams are the 5 most likely sequences.
    auto m = tiny(3);
    const Seq prompt{1, 2, 3};
    Oracle o(*m, prompt, 1.0);
    std::vector<std::pair<double, Seq>> all;
    for (int64_t a = 0; a < kVocab; ++a)
        for (int64_t b = 0; b < kVocab; ++b) all.push_back({o.log_prob({a, b}), {a, b}});
    std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    SamplingParams p;
    p.max_new_tokens = 2;
    const int64_t w = kVocab;
    std::vector<Seq> prompts(static_cast<size_t>(w), prompt);
    std::vector<int64_t> ranks(static_cast<size_t>(w));
    std::iota(ranks.begin(), ranks.end(), 0);
    const auto out = beam_search(*m, prompts, p, BeamSearchParams{w, 0.0}, ranks);
    for (int64_t k = 0; k < w; ++k) {
        EXPECT_EQ(response(out, k), all[static_cast<size_t>(k)].second) << "beam " << k;
        EXPECT_NEAR(cumulative(out, k), all[static_cast<size_t>(k)].first, 1e-4) << "beam " << k;
        EXPECT_EQ(out.finish_reasons[static_cast<size_t>(k)], FinishReason::kLength);
    }
}

TEST(BeamSearch, MatchesTheReferenceOnExactLogProbs) {
    auto m = tiny(5);
    const std::vector<Seq> distinct{{1, 2, 3}, {4, 0}};
    for (int64_t w : {2, 3, 4}) {
        for (double lp_pen : {1.0, 0.0, 2.0}) {
            for (bool with_eos : {false, true}) {
                SamplingParams p;
                p.max_new_tokens = 4;
                p.temperature = 0.8;
                if (with_eos) {
                    p.eos_id = 1;
                    p.stop_token_ids = {4};
                }
                // Each prompt W times (ranks 0..W-1), interleaved, so rows share searches.
                std::vector<Seq> prompts;
                std::vector<int64_t> ranks;
                for (int64_t k = 0; k < w; ++k)
                    for (const auto& d : distinct) {
                        prompts.push_back(d);
                        ranks.push_back(k);
                    }
                for (int64_t mb : {w, int64_t{256}}) {  // one prompt per micro-batch, or all together
                    const auto out = beam_search(*m, prompts, p, BeamSearchParams{w, lp_pen}, ranks, mb);
                    for (size_t d = 0; d < distinct.size(); ++d) {
                        Oracle o(*m, distinct[d], p.temperature);
                        std::vector<int64_t> finishing = p.stop_token_ids;
                        if (p.eos_id >= 0) finishing.push_back(p.eos_id);
                        const auto ref = reference(o, w, p.max_new_tokens, finishing, p.eos_id, lp_pen);
                        ASSERT_EQ(static_cast<int64_t>(ref.size()), w);
                        for (int64_t k = 0; k < w; ++k) {
                            const int64_t row = k * static_cast<int64_t>(distinct.size()) + static_cast<int64_t>(d);
                            const auto& h = ref[static_cast<size_t>(k)];
                            const std::string where = "W=" + std::to_string(w) + " lp=" + std::to_string(lp_pen) +
                                                      " eos=" + std::to_string(with_eos) + " mb=" + std::to_string(mb) +
                                                      " prompt " + std::to_string(d) + " beam " + std::to_string(k);
                            EXPECT_EQ(response(out, row), h.tokens) << where;
                            EXPECT_NEAR(cumulative(out, row), h.cum, 1e-4) << where;
                            const auto reason = out.finish_reasons[static_cast<size_t>(row)];
                            const int64_t last = h.tokens.back();
                            EXPECT_EQ(reason, last == p.eos_id ? FinishReason::kEos
                                              : std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) !=
                                                      p.stop_token_ids.end()
                                                  ? FinishReason::kStop
                                                  : FinishReason::kLength)
                                << where;
                        }
                    }
                }
            }
        }
    }
}

TEST(BeamSearch, BadArgumentsAreRefused) {
    auto m = tiny(5);
    SamplingParams p;
    p.max_new_tokens = 2;
    EXPECT_THROW(beam_search(*m, {{1, 2}}, p, BeamSearchParams{0, 1.0}, {}), ValueError);
    EXPECT_THROW(beam_search(*m, {{1, 2}}, p, BeamSearchParams{2, std::nan("")}, {}), ValueError);
    EXPECT_THROW(beam_search(*m, {{1, 2}}, p, BeamSearchParams{2, 1.0}, {2}), ValueError) << "rank >= width";
    EXPECT_THROW(beam_search(*m, {{1, 2}}, p, BeamSearchParams{2, 1.0}, {0, 1}), ValueError) << "one rank per row";
    TokenTexts texts(kVocab, "a");
    p.stop = {"a"};
    p.token_texts = &texts;
    EXPECT_THROW(beam_search(*m, {{1, 2}}, p, BeamSearchParams{2, 1.0}, {}), ValueError) << "stop strings";
}

TEST(BeamSearch, ScoreIsLengthNormalised) {
    EXPECT_DOUBLE_EQ(beam_score(-6.0, 3, false, 1.0), -2.0);
    EXPECT_DOUBLE_EQ(beam_score(-6.0, 3, true, 1.0), -3.0);  // the final eos is not counted
    EXPECT_DOUBLE_EQ(beam_score(-6.0, 1, true, 1.0), -6.0);  // at least 1
    EXPECT_DOUBLE_EQ(beam_score(-6.0, 4, false, 0.0), -6.0);
    EXPECT_DOUBLE_EQ(beam_score(-8.0, 4, false, 2.0), -0.5);
}

}  // namespace
}  // namespace rlpt::rollout
