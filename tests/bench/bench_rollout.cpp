// RL rollout benchmark (issue #12): GRPO-shaped generation, P prompts x n samples, with the
// continuous-batching engine (slots refilled as sequences finish, each prompt prefilled once
// for its n samples) against static batching (waves of max_num_seqs sequences decoded until
// their longest finishes, every sample prefilling its prompt: rlpt's generation before
// continuous batching), in the same run, same model, same seeds, same KV slots.
//
// Model: random weights (no download), Llama-style; default hidden 256, 4 layers, 4 heads
// (2 KV heads), SwiGLU 704, vocab 4096, fp32 (~5M parameters: small enough for a loaded
// 2-core machine, big enough that a decode step is real work).
//
// Response lengths: forced, honestly, by stop tokens. Weights drawn with HF's init scale
// (0.02) give near-uniform next-token distributions, so with `stop_ids` of the V token ids
// declared stop tokens a sample stops at each step with probability ~stop_ids / V: geometric
// lengths (most short) truncated at max_new_tokens (a tail at the max length). The measured
// distribution is printed. Sampling at temperature 1 with per-sample seeds (sample_seed).
//
// Checks: the two engines must produce the same tokens (else exit 1).
// Output: one JSON line per engine plus one summary line (scripts/bench_rollout.sh prints the
// table).
// Timing: wall time and this process's CPU time (the machine may be shared: with one thread
// the CPU time is the steadier figure); with --rounds > 1 the engines alternate and the best
// time of each counts.
// Usage: rlpt_bench_rollout [--prompts 64] [--n 8] [--max-new 192] [--prompt-len 192]
//          [--max-num-seqs 64] [--stop-ids 72] [--hidden 256] [--layers 4] [--vocab 4096]
//          [--threads 1] [--rounds 1]
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace rlpt;

using bench::cpu_seconds;

struct Run {
    const char* name;
    rollout::BatchLimits limits;
    double seconds = 0, cpu_seconds = 0;
    rollout::GenerationOutput out;
};

}  // namespace

int main(int argc, char** argv) {
    int64_t prompts_n = 64, n = 8, max_new = 192, prompt_len = 192, slots = 64, stop_ids = 72, hidden = 256, layers = 4,
            vocab = 4096, threads = 1, rounds = 1;
    try {
        bench::parse_int_options(argc, argv, "rlpt_bench_rollout",
                                 {{"--prompts", &prompts_n},
                                  {"--n", &n},
                                  {"--max-new", &max_new},
                                  {"--prompt-len", &prompt_len},
                                  {"--max-num-seqs", &slots},
                                  {"--stop-ids", &stop_ids},
                                  {"--hidden", &hidden},
                                  {"--layers", &layers},
                                  {"--vocab", &vocab},
                                  {"--threads", &threads},
                                  {"--rounds", &rounds}});
        torch::set_num_threads(static_cast<int>(threads));
        const auto a = bench::small_llama(vocab, hidden, layers, prompt_len + max_new + 8);
        auto m = model::make_random_causal_lm(a, 5);
        int64_t params = 0;
        for (const auto& p : m->parameters()) params += p.numel();

        // Prompts of prompt_len/2 .. prompt_len tokens (ids past the stop ids; the default 96-192
        // is a GSM8K question in a chat template), each repeated n times consecutively, as the
        // rollout role receives a GRPO batch.
        std::vector<std::vector<int64_t>> prompts;
        std::vector<uint64_t> seeds;
        auto gen = torch::make_generator<at::CPUGeneratorImpl>(7);
        for (int64_t i = 0; i < prompts_n; ++i) {
            const int64_t len = prompt_len / 2 + (i * 37) % (prompt_len / 2 + 1);
            auto ids = torch::randint(stop_ids + 1, vocab, {len}, gen, torch::kInt64);
            std::vector<int64_t> p(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
            for (int64_t j = 0; j < n; ++j) {
                prompts.push_back(p);
                seeds.push_back(rollout::sample_seed(3, 0, static_cast<int64_t>(seeds.size())));
            }
        }
        rollout::SamplingParams sp;
        sp.temperature = 1.0;
        sp.max_new_tokens = max_new;
        for (int64_t id = 1; id <= stop_ids; ++id) sp.stop_token_ids.push_back(id);

        std::vector<Run> runs;
        auto add = [&](const char* name, bool continuous, bool share) {
            rollout::BatchLimits l(slots);
            l.continuous = continuous;
            l.share_prefixes = share;
            runs.push_back(Run{name, l});
        };
        add("static", false, false);
        add("continuous", true, false);
        add("continuous+shared", true, true);
        // Warm-up (allocator, thread pool), then the engines in turn, `rounds` times.
        rollout::generate(*m, {prompts.begin(), prompts.begin() + 4}, {seeds.begin(), seeds.begin() + 4}, sp, 4);
        for (int64_t rep = 0; rep < rounds; ++rep) {
            for (auto& r : runs) {
                std::fprintf(stderr, "bench_rollout: %s, round %lld\n", r.name, static_cast<long long>(rep + 1));
                const auto t0 = Clock::now();
                const double c0 = cpu_seconds();
                auto out = rollout::generate(*m, prompts, seeds, sp, r.limits);
                const double s = std::chrono::duration<double>(Clock::now() - t0).count(), c = cpu_seconds() - c0;
                if (rep == 0 || s < r.seconds) r.seconds = s;
                if (rep == 0 || c < r.cpu_seconds) r.cpu_seconds = c;
                r.out = std::move(out);
            }
        }
        // Same samples from every engine, up to floating-point ties: a row may part ways where
        // two engines' logits differ in the last bits (other batch shapes round differently) and
        // a draw lands on a boundary; up to there its log-probs must agree closely.
        int64_t differing = 0;
        double worst = 0;  // largest log-prob difference before a row's first differing token
        for (const auto& r : runs) {
            const auto& a = runs[0].out;
            const auto& b = r.out;
            for (int64_t i = 0; i < a.responses.size(0); ++i) {
                const int64_t la = a.response_mask[i].sum().item<int64_t>(),
                              lb = b.response_mask[i].sum().item<int64_t>();
                const int64_t common = std::min(la, lb);
                auto ne = (a.responses[i].narrow(0, 0, common) != b.responses[i].narrow(0, 0, common)).nonzero();
                const int64_t first = ne.numel() > 0 ? ne[0][0].item<int64_t>() : common;
                if (first < common || la != lb) ++differing;
                if (first > 0)
                    worst = std::max(worst, (a.rollout_log_probs[i].narrow(0, 0, first) -
                                             b.rollout_log_probs[i].narrow(0, 0, first))
                                                .abs()
                                                .max()
                                                .item<double>());
            }
        }
        const bool same = worst < 1e-3;
        auto lens = runs[0].out.response_mask.sum(1).to(torch::kFloat64);
        const int64_t tokens = lens.sum().item<int64_t>();
        auto sorted = std::get<0>(lens.sort());
        const int64_t b = sorted.size(0);
        auto q = [&](double f) { return sorted[std::min<int64_t>(b - 1, static_cast<int64_t>(f * b))].item<double>(); };
        const double at_max = (lens == static_cast<double>(max_new)).sum().item<double>() / static_cast<double>(b);
        for (const auto& r : runs)
            std::printf("{\"kind\": \"engine\", \"engine\": \"%s\", \"seconds\": %.3f, \"cpu_seconds\": %.3f, "
                        "\"tokens\": %lld, \"tokens_per_s\": %.1f, \"tokens_per_cpu_s\": %.1f, \"vs_static\": %.3f, "
                        "\"vs_static_cpu\": %.3f}\n",
                        r.name, r.seconds, r.cpu_seconds, static_cast<long long>(tokens),
                        static_cast<double>(tokens) / r.seconds, static_cast<double>(tokens) / r.cpu_seconds,
                        runs[0].seconds / r.seconds, runs[0].cpu_seconds / r.cpu_seconds);
        std::printf("{\"kind\": \"setup\", \"params\": %lld, \"hidden\": %lld, \"layers\": %lld, \"vocab\": %lld, "
                    "\"prompts\": %lld, \"n\": %lld, \"prompt_len_min\": %lld, \"prompt_len_max\": %lld, "
                    "\"max_new\": %lld, \"max_num_seqs\": %lld, \"stop_ids\": %lld, \"threads\": %lld, "
                    "\"len_mean\": %.1f, \"len_p10\": %.0f, \"len_median\": %.0f, \"len_p90\": %.0f, "
                    "\"at_max\": %.3f, \"differing_rows\": %lld, \"logprob_diff\": %.2e, \"identical\": %s, "
                    "\"git_sha\": \"%s\"}\n",
                    static_cast<long long>(params), static_cast<long long>(hidden), static_cast<long long>(layers),
                    static_cast<long long>(vocab), static_cast<long long>(prompts_n), static_cast<long long>(n),
                    static_cast<long long>(prompt_len / 2), static_cast<long long>(prompt_len),
                    static_cast<long long>(max_new), static_cast<long long>(slots), static_cast<long long>(stop_ids),
                    static_cast<long long>(threads), lens.mean().item<double>(), q(0.1), q(0.5), q(0.9), at_max,
                    static_cast<long long>(differing), worst, same ? "true" : "false", RLPT_GIT_SHA);
        if (!same) {
            std::fprintf(stderr, "bench_rollout: the engines' log-probs differ by %g before the samples part\n", worst);
            return 1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rlpt_bench_rollout: %s\n", e.what());
        return 2;
    }
}
