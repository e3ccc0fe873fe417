#include "rlpt/rollout/beam_search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "rlpt/core/error.h"
#include "rlpt/rollout/response_rows.h"

namespace rlpt::rollout {
namespace {

using Prompts = std::vector<std::vector<int64_t>>;

struct Beam {
    int64_t row = 0;  // its row of the KV cache
    std::vector<int64_t> tokens;
    std::vector<float> log_probs;
    double cum = 0;
};

struct Hypothesis {
    std::vector<int64_t> tokens;
    std::vector<float> log_probs;
    double cum = 0;
    FinishReason finish = FinishReason::kLength;
    double score = 0;
};

struct Proposal {
    double cum;
    size_t beam;
    int64_t token;
    float log_prob;
};

// Finish lookup per token id: 0 = go on, 1 = eos, 2 = stop id.
std::vector<uint8_t> finish_table(const SamplingParams& p, int64_t vocab) {
    std::vector<uint8_t> t(static_cast<size_t>(vocab), 0);
    for (int64_t id : p.stop_token_ids) t[static_cast<size_t>(id)] = 2;
    if (p.eos_id >= 0) t[static_cast<size_t>(p.eos_id)] = 1;
    return t;
}

Hypothesis finished(const Beam& b, FinishReason why) { return Hypothesis{b.tokens, b.log_probs, b.cum, why, 0.0}; }

// The k most likely ids of one row of log-probs, most likely first (ties: lower id first).
void top_ids(const float* lp, int64_t vocab, int64_t k, std::vector<int64_t>& ids) {
    ids.resize(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [lp](int64_t a, int64_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
    ids.resize(static_cast<size_t>(k));
}

// Searches the prompts distinct[groups[0..g)], writing every finished hypothesis of group j to
// hyps[groups[j]], best first.
void search_micro_batch(model::CausalLM& model, const Prompts& distinct, const std::vector<int64_t>& groups,
                        const SamplingParams& params, const BeamSearchParams& beam, const std::vector<uint8_t>& finish,
                        std::vector<std::vector<Hypothesis>>& hyps) {
    const auto device = model.device();
    const int64_t g_count = static_cast<int64_t>(groups.size()), max_new = params.max_new_tokens;
    const int64_t vocab = model.args().vocab_size, width = beam.beam_width;
    const int64_t k = std::min<int64_t>(2 * width, vocab);
    const double temperature = params.temperature > 0 ? params.temperature : 1.0;
    int64_t p_len = 0;
    for (int64_t g : groups)
        p_len = std::max<int64_t>(p_len, static_cast<int64_t>(distinct[static_cast<size_t>(g)].size()));

    // Left-padded prompts, the mask over prompt + every generated position, next positions.
    auto ids = torch::full({g_count, p_len}, params.pad_id, torch::kInt64);
    auto mask = torch::zeros({g_count, p_len + max_new}, torch::kInt64);
    auto next_pos = torch::empty({g_count}, torch::kInt64);
    for (int64_t i = 0; i < g_count; ++i) {
        const auto& pr = distinct[static_cast<size_t>(groups[static_cast<size_t>(i)])];
        const int64_t len = static_cast<int64_t>(pr.size());
        ids[i].narrow(0, p_len - len, len).copy_(torch::tensor(pr, torch::kInt64));
        mask[i].narrow(0, p_len - len, len + max_new).fill_(1);
        next_pos[i] = len;
    }
    auto pos = (mask.narrow(1, 0, p_len).cumsum(1) - 1).clamp_min(0);
    mask = mask.to(device);
    next_pos = next_pos.to(device);
    model::KVCache cache = model.make_cache(g_count, p_len + max_new - 1);
    auto hidden =
        model.forward_hidden(ids.to(device), mask.narrow(1, 0, p_len), pos.to(device), &cache).select(1, p_len - 1);

    std::vector<std::vector<Beam>> live(static_cast<size_t>(g_count));
    for (int64_t i = 0; i < g_count; ++i) live[static_cast<size_t>(i)].push_back(Beam{i, {}, {}, 0.0});
    std::vector<int64_t> top, parents, next_tokens;
    std::vector<Proposal> proposals;
    for (int64_t step = 0; step < max_new; ++step) {
        auto lp = torch::log_softmax(model.gathered_logits(hidden).to(torch::kFloat32) / temperature, -1)
                      .to(torch::kCPU)
                      .contiguous();
        const float* lpp = lp.data_ptr<float>();
        const bool last = step + 1 == max_new;
        parents.clear();
        next_tokens.clear();
        for (int64_t gi = 0; gi < g_count; ++gi) {
            auto& beams = live[static_cast<size_t>(gi)];
            auto& done = hyps[static_cast<size_t>(groups[static_cast<size_t>(gi)])];
            proposals.clear();
            for (size_t bi = 0; bi < beams.size(); ++bi) {
                const float* row = lpp + beams[bi].row * vocab;
                top_ids(row, vocab, k, top);
                for (int64_t tok : top) {
                    const Proposal pr{beams[bi].cum + static_cast<double>(row[tok]), bi, tok, row[tok]};
                    const uint8_t f = finish[static_cast<size_t>(tok)];
                    if (f == 0) {
                        proposals.push_back(pr);
                        continue;
                    }
                    Beam ended = beams[bi];
                    ended.tokens.push_back(tok);
                    ended.log_probs.push_back(pr.log_prob);
                    ended.cum = pr.cum;
                    done.push_back(finished(ended, f == 1 ? FinishReason::kEos : FinishReason::kStop));
                }
            }
            std::stable_sort(proposals.begin(), proposals.end(),
                             [](const Proposal& a, const Proposal& b) { return a.cum > b.cum; });
            std::vector<Beam> next;
            for (size_t j = 0; j < proposals.size() && static_cast<int64_t>(j) < width; ++j) {
                const Proposal& pr = proposals[j];
                Beam nb = beams[pr.beam];
                nb.tokens.push_back(pr.token);
                nb.log_probs.push_back(pr.log_prob);
                nb.cum = pr.cum;
                if (last) {
                    done.push_back(finished(nb, FinishReason::kLength));
                    continue;
                }
                parents.push_back(beams[pr.beam].row);
                next_tokens.push_back(pr.token);
                nb.row = static_cast<int64_t>(parents.size()) - 1;
                next.push_back(std::move(nb));
            }
            beams = std::move(next);
        }
        if (parents.empty()) break;
        // Every surviving beam continues from its parent's cache row (forks copy the row).
        auto parents_t = torch::tensor(parents, torch::kInt64).to(device);
        cache.fork_rows(parents_t);
        mask = mask.index_select(0, parents_t);
        next_pos = next_pos.index_select(0, parents_t);
        const int64_t n = static_cast<int64_t>(parents.size());
        auto step_ids = torch::tensor(next_tokens, torch::kInt64).view({n, 1}).to(device);
        hidden = model.forward_hidden(step_ids, mask.narrow(1, 0, cache.length() + 1), next_pos.view({n, 1}), &cache)
                     .select(1, 0);
        next_pos.add_(1);
    }
    for (int64_t g : groups) {
        auto& done = hyps[static_cast<size_t>(g)];
        for (auto& h : done)
            h.score = beam_score(h.cum, static_cast<int64_t>(h.tokens.size()), h.finish == FinishReason::kEos,
                                 beam.length_penalty);
        std::stable_sort(done.begin(), done.end(),
                         [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
        if (static_cast<int64_t>(done.size()) > width) done.resize(static_cast<size_t>(width));
    }
}

}  // namespace

void validate_beam_search_params(const BeamSearchParams& p) {
    RLPT_CHECK(p.beam_width >= 1, "beam_search: beam_width must be >= 1, got {}", p.beam_width);
    RLPT_CHECK(std::isfinite(p.length_penalty), "beam_search: length_penalty must be finite, got {}", p.length_penalty);
}

double beam_score(double cumulative_log_prob, int64_t n_tokens, bool ends_in_eos, double length_penalty) {
    const int64_t len = std::max<int64_t>(1, n_tokens - (ends_in_eos ? 1 : 0));
    return cumulative_log_prob / std::pow(static_cast<double>(len), length_penalty);
}

GenerationOutput beam_search(model::CausalLM& model, const Prompts& prompts, const SamplingParams& params,
                             const BeamSearchParams& beam, const std::vector<int64_t>& sample_rank,
                             int64_t micro_batch_size) {
    const int64_t vocab = model.args().vocab_size;
    validate_sampling_params(params, vocab);
    validate_beam_search_params(beam);
    RLPT_CHECK(params.stop.empty(), "beam_search: stop strings are not supported (vLLM's beam search has none "
                                    "either); end beams with eos or stop token ids and max_new_tokens");
    RLPT_CHECK(micro_batch_size >= 1, "beam_search: micro_batch_size must be >= 1, got {}", micro_batch_size);
    RLPT_CHECK(sample_rank.empty() || sample_rank.size() == prompts.size(),
               "beam_search: {} sample ranks for {} prompts (one per prompt, or none)", sample_rank.size(),
               prompts.size());
    for (size_t i = 0; i < sample_rank.size(); ++i)
        RLPT_CHECK(sample_rank[i] >= 0 && sample_rank[i] < beam.beam_width,
                   "beam_search: row {} asks for beam {}, outside [0, beam_width={})", i, sample_rank[i],
                   beam.beam_width);
    check_prompts(prompts, vocab);
    torch::NoGradGuard no_grad;

    // One search per distinct prompt; longest first so micro-batches pad little.
    std::map<std::vector<int64_t>, int64_t> group_of;
    Prompts distinct;
    std::vector<int64_t> row_group;
    for (const auto& p : prompts) {
        auto it = group_of.emplace(p, static_cast<int64_t>(distinct.size())).first;
        if (it->second == static_cast<int64_t>(distinct.size())) distinct.push_back(p);
        row_group.push_back(it->second);
    }
    std::vector<int64_t> order(distinct.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return distinct[static_cast<size_t>(a)].size() > distinct[static_cast<size_t>(b)].size();
    });
    const auto finish = finish_table(params, vocab);
    std::vector<std::vector<Hypothesis>> hyps(distinct.size());
    const int64_t per = std::max<int64_t>(1, micro_batch_size / beam.beam_width);
    for (size_t start = 0; start < order.size(); start += static_cast<size_t>(per)) {
        const size_t end = std::min(order.size(), start + static_cast<size_t>(per));
        search_micro_batch(model, distinct,
                           std::vector<int64_t>(order.begin() + static_cast<int64_t>(start),
                                                order.begin() + static_cast<int64_t>(end)),
                           params, beam, finish, hyps);
    }

    const std::vector<std::string> no_stop;
    std::vector<ResponseRow> rows(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto& h = hyps[static_cast<size_t>(row_group[i])];
        RLPT_ASSERT(!h.empty());
        const int64_t rank = sample_rank.empty() ? 0 : sample_rank[i];
        const Hypothesis& best = h[static_cast<size_t>(rank) % h.size()];
        rows[i].tokens = best.tokens;
        rows[i].log_probs = best.log_probs;
        rows[i].finish = best.finish;
        if (params.token_texts != nullptr) {
            StopStringMatcher text(&no_stop, params.token_texts, false);
            for (int64_t t : best.tokens) text.push(t);
            rows[i].text = text.visible_text();
        }
    }
    return assemble_rows(prompts, rows, params.pad_id, params.token_texts != nullptr);
}

}  // namespace rlpt::rollout
