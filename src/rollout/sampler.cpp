#include "rlpt/rollout/sampler.h"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "rlpt/core/error.h"
#include "rlpt/kernels/logprob.h"
#include "rlpt/rollout/device_sampler.h"

namespace rlpt::rollout {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// Unsigned key ordered like the float (larger z -> larger key); -0 ranks like +0.
inline uint32_t rank_key(float z) {
    if (z == 0.0f) z = 0.0f;
    uint32_t bits = 0;
    std::memcpy(&bits, &z, sizeof bits);
    return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

// The worst-ranked kept token: token j is kept iff (key_j, -j) >= (key, -index), i.e. it ranks
// at or above the boundary under (z descending, index ascending).
struct Boundary {
    uint32_t key = 0;
    int32_t index = std::numeric_limits<int32_t>::max();  // default: keeps everything
};

// Filtering and drawing for one row; buffers are reused across the rows of a chunk.
class RowSampler {
  public:
    explicit RowSampler(int64_t vocab) : vocab_(vocab), keys_(static_cast<size_t>(vocab)) {
        list_.reserve(static_cast<size_t>(vocab));
        next_.reserve(static_cast<size_t>(vocab));
        kept_.reserve(static_cast<size_t>(vocab));
    }

    // z: raw logits, p: softmax(z / T); top_k <= 0: off. Returns the chosen token (-1 if no
    // kept token has p > 0).
    int64_t choose(const float* z, const float* p, int64_t top_k, double top_p, double u) {
        z_ = z;
        keys_ready_ = false;
        const std::vector<int32_t>* cand = nullptr;
        if (top_k > 0) {
            // top-k: the k best-ranked tokens (weight 1 each), listed in index order.
            const Selected sk = select(
                nullptr, [](int32_t) { return 1.0; }, [top_k](double) { return static_cast<double>(top_k); });
            kept_.clear();
            for (int32_t j = 0; j < static_cast<int32_t>(vocab_); ++j)
                if (is_kept(j, sk.boundary)) kept_.push_back(j);
            cand = &kept_;
        }
        Boundary bp;
        double total = 0;
        if (top_p < 1.0) {
            const Selected sp = select(
                cand, [p](int32_t j) { return static_cast<double>(p[j]); },
                [top_p](double mass) { return top_p * mass; });
            bp = sp.boundary;
            total = sp.kept_weight;
        } else {
            for (int32_t j : kept_) total += p[j];
        }
        // Inverse CDF over the kept tokens in index order. `total` was summed in another order;
        // if rounding leaves u * total unreached, the last kept token with p > 0 is taken.
        const double target = u * total;
        double cum = 0;
        int64_t last_positive = -1;
        const int64_t n = cand ? static_cast<int64_t>(cand->size()) : vocab_;
        for (int64_t i = 0; i < n; ++i) {
            const int32_t j = cand ? (*cand)[static_cast<size_t>(i)] : static_cast<int32_t>(i);
            if (p[j] <= 0.0f || !is_kept(j, bp)) continue;
            cum += p[j];
            last_positive = j;
            if (cum > target) return j;
        }
        return last_positive;
    }

  private:
    struct Selected {
        Boundary boundary;
        double kept_weight = 0;  // summed weight of the candidates at or above the boundary
    };

    bool is_kept(int32_t j, const Boundary& b) const {
        const uint32_t k = keys_[static_cast<size_t>(j)];
        return k > b.key || (k == b.key && j <= b.index);
    }

    // Radix select: the boundary of the smallest best-ranked prefix of the candidates (all tokens
    // when cand is null) whose summed weight reaches target_of(total candidate weight). Three
    // histogram passes over the key digits (11, 11, 10 bits), each over the tokens left in the
    // chosen bucket, then ties of equal key resolved by index; the first pass also computes the
    // keys and the total weight. When the target is never reached (rounding), everything is kept.
    template <class W, class T>
    Selected select(const std::vector<int32_t>* cand, W weight, T target_of) {
        constexpr int kShift[3] = {21, 10, 0};
        constexpr uint32_t kBins[3] = {2048, 2048, 1024};
        double mass = 0, target = 0;
        double above = 0;  // weight of candidates ranked above the current bucket
        for (int pass = 0; pass < 3; ++pass) {
            const int shift = kShift[pass];
            const uint32_t mask = kBins[pass] - 1;
            std::fill(hist_.begin(), hist_.begin() + kBins[pass], 0.0);
            if (pass > 0) {
                for (int32_t j : list_) hist_[(keys_[static_cast<size_t>(j)] >> shift) & mask] += weight(j);
            } else if (cand) {
                for (int32_t j : *cand) {
                    const double w = weight(j);
                    mass += w;
                    hist_[keys_[static_cast<size_t>(j)] >> shift] += w;
                }
            } else {
                const bool fill = !keys_ready_;
                for (int32_t j = 0; j < static_cast<int32_t>(vocab_); ++j) {
                    if (fill) keys_[static_cast<size_t>(j)] = rank_key(z_[j]);
                    const double w = weight(j);
                    mass += w;
                    hist_[keys_[static_cast<size_t>(j)] >> shift] += w;
                }
                keys_ready_ = true;
            }
            if (pass == 0) target = target_of(mass);
            int64_t chosen = -1;
            for (int64_t d = kBins[pass] - 1; d >= 0; --d) {
                const double w = hist_[static_cast<size_t>(d)];
                if (w > 0 && above + w >= target) {
                    chosen = d;
                    break;
                }
                above += w;
            }
            if (chosen < 0) return Selected{Boundary{}, mass};
            next_.clear();
            auto in_bucket = [&](int32_t j) {
                return ((keys_[static_cast<size_t>(j)] >> shift) & mask) == static_cast<uint32_t>(chosen);
            };
            if (pass > 0) {
                for (int32_t j : list_)
                    if (in_bucket(j)) next_.push_back(j);
            } else if (cand) {
                for (int32_t j : *cand)
                    if (in_bucket(j)) next_.push_back(j);
            } else {
                for (int32_t j = 0; j < static_cast<int32_t>(vocab_); ++j)
                    if (in_bucket(j)) next_.push_back(j);
            }
            list_.swap(next_);
        }
        // Every token left has the same key: ties rank by index.
        for (int32_t j : list_) {
            above += weight(j);
            if (above >= target) return Selected{Boundary{keys_[static_cast<size_t>(j)], j}, above};
        }
        return Selected{Boundary{}, mass};
    }

    int64_t vocab_;
    const float* z_ = nullptr;
    bool keys_ready_ = false;
    std::vector<uint32_t> keys_;
    std::vector<int32_t> list_, next_, kept_;
    std::array<double, 2048> hist_{};
};

constexpr int kLanes = 8;  // independent accumulators, so the compiler can use SIMD registers

// First index of the largest value (what std::max_element returns), one pass with per-lane
// maxima; NaN never wins. All -inf (or NaN): 0.
int64_t first_argmax(const float* x, int64_t n) {
    float m[kLanes];
    int64_t at[kLanes];
    for (int l = 0; l < kLanes; ++l) {
        m[l] = -std::numeric_limits<float>::infinity();
        at[l] = n;
    }
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (int l = 0; l < kLanes; ++l)
            if (x[j + l] > m[l]) {
                m[l] = x[j + l];
                at[l] = j + l;
            }
    for (; j < n; ++j)
        if (x[j] > m[j % kLanes]) {
            m[j % kLanes] = x[j];
            at[j % kLanes] = j;
        }
    float best = -std::numeric_limits<float>::infinity();
    int64_t best_at = n;
    for (int l = 0; l < kLanes; ++l)
        if (at[l] < n && (m[l] > best || (m[l] == best && at[l] < best_at))) {
            best = m[l];
            best_at = at[l];
        }
    return best_at < n ? best_at : 0;
}

// Σ x[0..n) in double, lane-wise then folded (a fixed order for a given n).
double sum_double(const float* x, int64_t n) {
    double acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
    double total = 0;
    for (; j < n; ++j) total += x[j];
    for (int l = 0; l < kLanes; ++l) total += acc[l];
    return total;
}

// Inverse CDF over all tokens in index order: the first token whose running sum exceeds
// u * total. Blocks of kBlock tokens whose sum keeps the running sum at or below the target are
// skipped whole; inside the crossing block the sum runs token by token.
int64_t draw_unfiltered(const float* p, int64_t vocab, double u) {
    constexpr int64_t kBlock = 256;
    const double target = u * sum_double(p, vocab);
    double cum = 0;
    int64_t last_positive = -1;
    for (int64_t start = 0; start < vocab; start += kBlock) {
        const int64_t len = std::min(kBlock, vocab - start);
        const double block = sum_double(p + start, len);
        if (cum + block <= target) {
            cum += block;
            for (int64_t j = start + len - 1; j >= start && last_positive < start; --j)
                if (p[j] > 0.0f) last_positive = j;
            continue;
        }
        double c = cum;
        for (int64_t j = start; j < start + len; ++j) {
            if (p[j] <= 0.0f) continue;
            c += p[j];
            last_positive = j;
            if (c > target) return j;
        }
        cum += block;  // rounding: the block's own sum crossed, the token-wise one did not
    }
    return last_positive;
}

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
    // GPU logits stay on the GPU: only the chosen ids and log-probs come back (device_sampler.h).
    if (logits_in.defined() && logits_in.is_cuda()) return choose_tokens_on_device(logits_in, params, uniforms);
    RLPT_CHECK(logits_in.defined() && logits_in.dim() == 2 && logits_in.size(1) > 0,
               "choose_tokens: logits must be [b, V] with V >= 1, got {}",
               logits_in.defined() ? logits_in.sizes() : torch::IntArrayRef{});
    const int64_t b = logits_in.size(0), vocab = logits_in.size(1);
    RLPT_CHECK(params.greedy || static_cast<int64_t>(uniforms.size()) == b, "choose_tokens: {} uniforms for {} rows",
               uniforms.size(), b);
    RLPT_CHECK(vocab < std::numeric_limits<int32_t>::max(), "choose_tokens: vocabulary of {} is too large", vocab);
    auto z = logits_in.to(torch::kCPU, torch::kFloat32).contiguous();
    const float* zp = z.data_ptr<float>();
    TokenChoices out;
    out.tokens.assign(static_cast<size_t>(b), -1);
    out.log_probs.assign(static_cast<size_t>(b), 0.0f);
    // Rows are independent; each is computed identically whatever thread runs it.
    const int64_t grain = std::max<int64_t>(1, 32768 / vocab);

    if (params.greedy) {
        // Argmax of the raw logits; the log-prob from the fused kernel the actor also uses.
        at::parallel_for(0, b, grain, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                out.tokens[static_cast<size_t>(i)] = first_argmax(zp + i * vocab, vocab);
        });
        const double t = params.temperature > 0 ? params.temperature : 1.0;
        auto lp = kernels::logprob_forward(z, torch::tensor(out.tokens, torch::kInt64), t, false).logp.contiguous();
        std::copy(lp.data_ptr<float>(), lp.data_ptr<float>() + b, out.log_probs.begin());
    } else {
        const double t = params.temperature;
        const auto probs = torch::softmax(t == 1.0 ? z : z.div(t), 1).contiguous();  // [b, V]
        const float* pp = probs.data_ptr<float>();
        const bool filter_k = params.top_k > 0 && params.top_k < vocab;
        const bool filter = filter_k || params.top_p < 1.0;
        at::parallel_for(0, b, grain, [&](int64_t begin, int64_t end) {
            std::unique_ptr<RowSampler> row_sampler;
            if (filter) row_sampler = std::make_unique<RowSampler>(vocab);
            for (int64_t i = begin; i < end; ++i) {
                const float* pi = pp + i * vocab;
                const double u = uniforms[static_cast<size_t>(i)];
                const int64_t tok =
                    filter ? row_sampler->choose(zp + i * vocab, pi, filter_k ? params.top_k : -1, params.top_p, u)
                           : draw_unfiltered(pi, vocab, u);
                out.tokens[static_cast<size_t>(i)] = tok;
                out.log_probs[static_cast<size_t>(i)] =
                    tok >= 0 ? static_cast<float>(std::log(static_cast<double>(pi[tok]))) : std::nanf("");
            }
        });
    }
    for (int64_t i = 0; i < b; ++i) {
        const float l = out.log_probs[static_cast<size_t>(i)];
        RLPT_CHECK(std::isfinite(l),
                   "sampling: row {} has non-finite logits (chosen log-prob {}); the model output is NaN/inf", i, l);
    }
    return out;
}

}  // namespace rlpt::rollout
