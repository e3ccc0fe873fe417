// Mixture-of-experts benchmark (issue 34), rlpt's side; scripts/bench_moe.sh runs it beside its peer.
//   block:  one Qwen3-MoE sparse block (model/layers.h SparseMoe: router, top-k, grouped experts)
//           forward + backward of sum(output * fixed random) over [tokens, hidden] float32 rows.
//   decode: tokens/s of greedy-free decode steps (slots bound, one new token per row) of a small
//           Qwen3-MoE model against a dense Qwen3 of the same active parameters (intermediate =
//           top_k x moe_intermediate_size), both with rlpt's decode path.
// Prints a line per measurement and one JSON line each. Times: median of --iters after a warm-up.
// Usage: rlpt_bench_moe [--tokens 2048] [--hidden 512] [--experts 8] [--top-k 2] [--moe-inter 384]
//                       [--iters 5] [--decode-batch 16] [--decode-steps 32] [--no-decode]
// Threads: LibTorch's intra-op pool (OMP_NUM_THREADS).

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/layers.h"
#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/model/transformer.h"

namespace {

using namespace rlpt::model;

using rlpt::bench::median_ms;

int64_t arg(int argc, char** argv, const char* name, int64_t dflt) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
    return dflt;
}
bool flag(int argc, char** argv, const char* name) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return true;
    return false;
}

// Decode steps/s of `model`: `batch` rows prefilled with 16 tokens, then `steps` decode steps.
double decode_tokens_per_s(CausalLM& model, int64_t batch, int64_t steps, int iters) {
    torch::NoGradGuard ng;
    const int64_t prompt = 16;
    auto ids = torch::randint(1, model.args().vocab_size, {batch, prompt}, torch::kInt64);
    auto mask = torch::ones({batch, prompt}, torch::kInt64);
    auto pos = torch::arange(prompt, torch::kInt64).expand({batch, prompt}).contiguous();
    const double ms = median_ms(iters, [&] {
        auto cache = model.make_cache(batch, prompt + steps);
        auto h = model.forward_hidden(ids, mask, pos, &cache);
        auto next = ids.narrow(1, prompt - 1, 1).contiguous();
        auto m = torch::ones({batch, prompt + steps}, torch::kInt64);
        for (int64_t s = 0; s < steps; ++s) {
            auto p = torch::full({batch, 1}, prompt + s, torch::kInt64);
            h = model.forward_hidden(next, m.narrow(1, 0, prompt + s + 1), p, &cache);
            next = (next * 31 + 7).remainder(model.args().vocab_size);  // no sampling cost in the figure
        }
    });
    return static_cast<double>(batch * steps) * 1000.0 / ms;
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t tokens = arg(argc, argv, "--tokens", 2048), hidden = arg(argc, argv, "--hidden", 512);
    const int64_t experts = arg(argc, argv, "--experts", 8), top_k = arg(argc, argv, "--top-k", 2);
    const int64_t moe_inter = arg(argc, argv, "--moe-inter", 384);
    const int iters = static_cast<int>(arg(argc, argv, "--iters", 5));
    torch::manual_seed(0);

    ModelArgs a = tiny_model_args(ModelFamily::kQwen3Moe, 1024);
    a.hidden_size = hidden;
    a.num_attention_heads = hidden / 64;
    a.num_key_value_heads = std::max<int64_t>(1, a.num_attention_heads / 4);
    a.head_dim = 64;
    a.intermediate_size = top_k * moe_inter;
    a.num_experts = experts;
    a.num_experts_per_tok = top_k;
    a.moe_intermediate_size = moe_inter;
    a.norm_topk_prob = true;
    a.validate();

    // The block alone.
    const TpLayout layout = tp_layout(a, 1, 0);
    rlpt::model::detail::SparseMoe block(a, layout, nullptr, 0, torch::TensorOptions().dtype(torch::kFloat32));
    {
        torch::NoGradGuard ng;
        for (auto& p : block.parameters()) p.normal_(0.0, 0.02);
    }
    auto x = torch::randn({1, tokens, hidden}).requires_grad_(true);
    auto probe = torch::randn({1, tokens, hidden});
    const double ms = median_ms(iters, [&] {
        block.zero_grad();
        x.mutable_grad() = torch::Tensor();
        (block.forward(x, nullptr) * probe).sum().backward();
    });
    std::printf("moe block fwd+bwd  tokens %lld hidden %lld experts %lld top-%lld moe_inter %lld: %.1f ms\n",
                static_cast<long long>(tokens), static_cast<long long>(hidden), static_cast<long long>(experts),
                static_cast<long long>(top_k), static_cast<long long>(moe_inter), ms);
    std::printf("{\"bench\":\"moe\",\"case\":\"block_fwd_bwd\",\"engine\":\"rlpt\",\"git_sha\":\"%s\",\"tokens\":%lld,"
                "\"hidden\":%lld,\"experts\":%lld,\"top_k\":%lld,\"moe_inter\":%lld,\"ms\":%.3f,\"threads\":%d}\n",
                RLPT_GIT_SHA, static_cast<long long>(tokens), static_cast<long long>(hidden),
                static_cast<long long>(experts), static_cast<long long>(top_k), static_cast<long long>(moe_inter), ms,
                torch::get_num_threads());
    std::fflush(stdout);
    if (flag(argc, argv, "--no-decode")) return 0;

    // Decode: the MoE model against a dense model of the same active parameters.
    const int64_t batch = arg(argc, argv, "--decode-batch", 16), steps = arg(argc, argv, "--decode-steps", 32);
    ModelArgs dense = a;
    dense.family = ModelFamily::kQwen3;
    dense.num_experts = dense.num_experts_per_tok = dense.moe_intermediate_size = 0;
    dense.norm_topk_prob = false;
    dense.validate();
    for (const auto& [name, args] : {std::pair<const char*, ModelArgs>{"moe", a}, {"dense_same_active", dense}}) {
        auto model = make_random_causal_lm(args, 3);
        int64_t params = 0;
        for (const auto& p : model->parameters()) params += p.numel();
        const double tps = decode_tokens_per_s(*model, batch, steps, std::max(1, iters / 2));
        std::printf("decode %-18s batch %lld: %.1f tok/s (%.1fM parameters)\n", name, static_cast<long long>(batch),
                    tps, static_cast<double>(params) / 1e6);
        std::printf("{\"bench\":\"moe\",\"case\":\"decode\",\"model\":\"%s\",\"engine\":\"rlpt\",\"git_sha\":\"%s\","
                    "\"batch\":%lld,\"steps\":%lld,\"tokens_per_s\":%.1f,\"parameters\":%lld,\"threads\":%d}\n",
                    name, RLPT_GIT_SHA, static_cast<long long>(batch), static_cast<long long>(steps), tps,
                    static_cast<long long>(params), torch::get_num_threads());
        std::fflush(stdout);
    }
    return 0;
}
