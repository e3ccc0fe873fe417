// Transformer throughput on the CPU: prefill (batched forward), KV-cache decode steps and a
// training step (forward + backward of a log-prob loss), fp32 and bf16.
// Checks first that cached decode reproduces the full forward, then times warm-up + median of
// timed runs. Prints a table and one JSON line per measurement.
// Usage: rlpt_bench_model_forward [iters [hidden layers vocab]]   (default 3; 512 8 8192)
// Threads: LibTorch's intra-op pool (OMP_NUM_THREADS).

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/model/transformer.h"

namespace {

using rlpt::bench::median_ms;

void report(const char* phase, const char* dtype, int64_t b, int64_t t, int64_t tokens, double ms,
            const rlpt::model::ModelArgs& a) {
    std::printf("%-8s %-9s B=%-3lld T=%-4lld %10.1f ms %10.1f tok/s\n", phase, dtype, static_cast<long long>(b),
                static_cast<long long>(t), ms, tokens * 1000.0 / ms);
    std::printf("{\"bench\":\"model_forward\",\"git_sha\":\"%s\",\"phase\":\"%s\",\"dtype\":\"%s\",\"hidden\":%lld,"
                "\"layers\":%lld,\"vocab\":%lld,\"batch\":%lld,\"seq\":%lld,\"ms\":%.3f,\"tokens_per_s\":%.1f,"
                "\"threads\":%d}\n",
                RLPT_GIT_SHA, phase, dtype, static_cast<long long>(a.hidden_size),
                static_cast<long long>(a.num_hidden_layers), static_cast<long long>(a.vocab_size),
                static_cast<long long>(b), static_cast<long long>(t), ms, tokens * 1000.0 / ms,
                torch::get_num_threads());
}

}  // namespace

int main(int argc, char** argv) {
    using namespace rlpt::model;
    const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
    ModelArgs a = tiny_model_args(ModelFamily::kQwen2, argc > 4 ? std::atoll(argv[4]) : 8192);
    a.hidden_size = argc > 2 ? std::atoll(argv[2]) : 512;
    a.num_hidden_layers = argc > 3 ? std::atoll(argv[3]) : 8;
    a.num_attention_heads = a.hidden_size / 64;
    a.num_key_value_heads = std::max<int64_t>(1, a.num_attention_heads / 4);
    a.head_dim = 64;
    a.intermediate_size = a.hidden_size * 11 / 4;
    a.validate();
    const int64_t b = 8, t_prompt = 128, steps = 32;

    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        const char* dname = dtype == torch::kFloat32 ? "float32" : "bfloat16";
        auto m = make_random_causal_lm(a, 1, dtype);
        auto ids = torch::randint(0, a.vocab_size, {b, t_prompt + steps}, torch::kInt64);
        auto mask = torch::ones({b, t_prompt + steps}, torch::kInt64);
        mask.narrow(1, 0, 16).select(0, 0).zero_();  // one left-padded row
        auto pos = (mask.cumsum(1) - 1).clamp_min(0);
        {
            // Correctness first: decode logits == full-forward logits at the decoded positions.
            torch::NoGradGuard ng;
            auto full = m->forward_logits(ids, mask, pos);
            auto cache = m->make_cache(b, t_prompt + steps);
            m->forward_logits(ids.narrow(1, 0, t_prompt), mask.narrow(1, 0, t_prompt), pos.narrow(1, 0, t_prompt),
                              &cache);
            double worst = 0;
            for (int64_t s = 0; s < 4; ++s) {
                const int64_t t = t_prompt + s;
                auto step =
                    m->forward_logits(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), pos.narrow(1, t, 1), &cache);
                worst = std::max(worst, (step - full.narrow(1, t, 1)).abs().max().item<double>());
            }
            const double tol = dtype == torch::kFloat32 ? 1e-3 : 0.25;
            if (!(worst < tol)) {
                std::fprintf(stderr, "decode mismatch (%s): max |diff| %g\n", dname, worst);
                return 1;
            }
        }
        torch::NoGradGuard ng;
        auto pids = ids.narrow(1, 0, t_prompt), pmask = mask.narrow(1, 0, t_prompt), ppos = pos.narrow(1, 0, t_prompt);
        double ms = median_ms(iters, [&] { m->forward_hidden(pids, pmask, ppos); });
        report("prefill", dname, b, t_prompt, b * t_prompt, ms, a);

        auto cache = m->make_cache(b, t_prompt + steps);
        ms = median_ms(iters, [&] {
            cache.reset();
            m->forward_logits(pids, pmask, ppos, &cache);
            for (int64_t s = 0; s < steps; ++s) {
                const int64_t t = t_prompt + s;
                m->forward_logits(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), pos.narrow(1, t, 1), &cache);
            }
        });
        report("generate", dname, b, t_prompt + steps, b * steps, ms, a);

        if (dtype == torch::kFloat32) {
            torch::AutoGradMode grad(true);
            const int64_t tb = 4;
            auto tids = ids.narrow(0, 0, tb), tmask = mask.narrow(0, 0, tb), tpos = pos.narrow(0, 0, tb);
            ms = median_ms(iters, [&] {
                m->zero_grad();
                auto hidden = m->forward_hidden(tids, tmask, tpos);
                auto logp = torch::log_softmax(torch::linear(hidden, m->lm_head_weight()).to(torch::kFloat32), -1);
                auto loss = -logp.narrow(1, 0, logp.size(1) - 1)
                                 .gather(-1, tids.narrow(1, 1, tids.size(1) - 1).unsqueeze(-1))
                                 .mean();
                loss.backward();
            });
            report("train", dname, tb, t_prompt + steps, tb * (t_prompt + steps), ms, a);
        }
    }
    return 0;
}
