#include "rlpt/rollout/sampler.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "rlpt/core/error.h"

namespace rlpt::rollout {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// Walks `n` candidates (ids given by `cand`, or 0..n-1 when cand is null) with weights p[id]
// and returns the first whose running sum exceeds u * total.
int64_t inverse_cdf(const float* p, const int32_t* cand, int64_t n, double u) {
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += p[cand ? cand[j] : j];
    const double target = u * total;
    double cum = 0;
    int64_t last_positive = -1;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t id = cand ? cand[j] : j;
        if (p[id] <= 0.0f) continue;
        cum += p[id];
        last_positive = id;
        if (cum > target) return id;
    }
    return last_positive;  // rounding left target unreached (or no positive weight: -1)
}

// Row sampler for the filtered paths; reuses its candidate buffer across rows.
class FilteredRow {
  public:
    explicit FilteredRow(int64_t vocab) : cand_(static_cast<size_t>(vocab)) {}

    int64_t choose(const float* z, const float* p, int64_t vocab, int64_t top_k, double top_p, double u) {
        std::iota(cand_.begin(), cand_.end(), 0);
        auto better = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
        int64_t n = vocab;
        if (top_k > 0 && top_k < vocab) {
            std::nth_element(cand_.begin(), cand_.begin() + top_k, cand_.end(), better);
            n = top_k;
            if (top_p >= 1.0) std::sort(cand_.begin(), cand_.begin() + n, better);
        }
        if (top_p < 1.0) n = nucleus(p, n, top_p, better);
        return inverse_cdf(p, cand_.data(), n, u);
    }

  private:
    // Sorts the best-ranked prefix of cand_[0, n) just far enough to find the smallest prefix
    // holding top_p of the candidates' mass; returns its length (>= 1).
    template <class Better>
    int64_t nucleus(const float* p, int64_t n, double top_p, Better better) {
        double mass = 0;
        for (int64_t j = 0; j < n; ++j) mass += p[cand_[static_cast<size_t>(j)]];
        const double threshold = top_p * mass;
        double cum = 0;
        int64_t sorted = 0;
        int64_t m = std::min<int64_t>(n, 32);
        for (;;) {
            // The top `sorted` entries are unchanged by a wider partial sort: the order is total.
            std::partial_sort(cand_.begin() + sorted, cand_.begin() + m, cand_.begin() + n, better);
            for (int64_t j = sorted; j < m; ++j) {
                cum += p[cand_[static_cast<size_t>(j)]];
                if (cum >= threshold) return j + 1;
            }
            if (m == n) return n;
            sorted = m;
            m = std::min(n, m * 4);
        }
    }

    std::vector<int32_t> cand_;
};

}  // namespace

uint64_t splitmix64_mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

double uniform_draw(uint64_t seed, int64_t counter) {
    RLPT_CHECK(counter >= 0, "uniform_draw: counter must be >= 0, got {}", counter);
    const uint64_t x = splitmix64_mix(seed + (static_cast<uint64_t>(counter) + 1) * kGolden);
    return static_cast<double>(x >> 11) * 0x1.0p-53;
}

uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t global_index) {
    RLPT_CHECK(step >= 0 && global_index >= 0, "sample_seed: step ({}) and global_index ({}) must be >= 0", step,
               global_index);
    uint64_t h = splitmix64_mix(run_seed + kGolden);
    h = splitmix64_mix(h ^ splitmix64_mix(static_cast<uint64_t>(step) + 2 * kGolden));
    return splitmix64_mix(h ^ splitmix64_mix(static_cast<uint64_t>(global_index) + 3 * kGolden));
}

TokenChoices choose_tokens(const torch::Tensor& logits_in, const SamplingParams& params,
                           const std::vector<double>& uniforms) {
    RLPT_CHECK(logits_in.defined() && logits_in.dim() == 2 && logits_in.size(1) > 0,
               "choose_tokens: logits must be [b, V] with V >= 1, got {}",
               logits_in.defined() ? logits_in.sizes() : torch::IntArrayRef{});
    const int64_t b = logits_in.size(0), vocab = logits_in.size(1);
    RLPT_CHECK(params.greedy || static_cast<int64_t>(uniforms.size()) == b,
               "choose_tokens: {} uniforms for {} rows", uniforms.size(), b);
    RLPT_CHECK(vocab <= std::numeric_limits<int32_t>::max(), "choose_tokens: vocabulary of {} is too large", vocab);
    auto z = logits_in.to(torch::kCPU, torch::kFloat32).contiguous();
    const double t = params.greedy && params.temperature <= 0 ? 1.0 : params.temperature;
    auto lp = torch::log_softmax(t == 1.0 ? z : z.div(t), 1).contiguous();
    const float* zp = z.data_ptr<float>();
    const float* lpp = lp.data_ptr<float>();

    TokenChoices out;
    out.tokens.resize(static_cast<size_t>(b));
    out.log_probs.resize(static_cast<size_t>(b));
    if (params.greedy) {
        for (int64_t i = 0; i < b; ++i) {
            const float* row = zp + i * vocab;
            out.tokens[static_cast<size_t>(i)] = std::max_element(row, row + vocab) - row;  // first max
        }
    } else {
        auto probs = lp.exp();
        const float* pp = probs.data_ptr<float>();
        const bool filter_k = params.top_k > 0 && params.top_k < vocab;
        const bool filter_p = params.top_p < 1.0;
        FilteredRow filtered(filter_k || filter_p ? vocab : 0);
        for (int64_t i = 0; i < b; ++i) {
            const double u = uniforms[static_cast<size_t>(i)];
            const float* p = pp + i * vocab;
            out.tokens[static_cast<size_t>(i)] =
                filter_k || filter_p ? filtered.choose(zp + i * vocab, p, vocab, filter_k ? params.top_k : -1,
                                                       params.top_p, u)
                                     : inverse_cdf(p, nullptr, vocab, u);
        }
    }
    for (int64_t i = 0; i < b; ++i) {
        const int64_t tok = out.tokens[static_cast<size_t>(i)];
        const float l = tok >= 0 ? lpp[i * vocab + tok] : std::nanf("");
        RLPT_CHECK(std::isfinite(l), "sampling: row {} has non-finite logits (chosen log-prob {}); the model output is "
                   "NaN/inf", i, l);
        out.log_probs[static_cast<size_t>(i)] = l;
    }
    return out;
}

}  // namespace rlpt::rollout
