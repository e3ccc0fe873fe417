// Tensor parallelism on the CPU (issue 10): the ~100M Llama-style model of bench_train on 2 ranks,
// as one tp = 2 block or as 2 tp = 1 data-parallel copies, with the same global work.
//
// One JSON line on rank 0 per run (scripts/bench_tp.sh turns two runs into a table):
//   param_bytes_per_rank   parameter bytes held by rank 0 (all / the matrices of the layers)
//   train                  zero_grad + forward + backward (SFT token NLL) + TrainEngine::step on
//                          a global batch of --batch rows x --seq tokens (split over dp ranks;
//                          whole on the tp block); tokens/s = global tokens / step time (max over
//                          ranks, median over --iters timed steps after a checked first step)
//   decode                 rollout::generate, greedy, --prompts prompts of 16 tokens, --new
//                          tokens each (split over dp ranks), tokens/s = generated tokens / time
//   block all-reduce       seconds inside TensorParallel's collectives during the timed steps,
//                          per layer and step (training) / per layer and token (decode)
//
// Usage: mpirun -np 2 rlpt_bench_tp --tp 1|2 [--batch 4] [--seq 128] [--iters 2] [--prompts 4]
//                                  [--new 32] [--threads 1]
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Args {
    int64_t tp = 1, batch = 4, seq = 128, iters = 2, prompts = 4, new_tokens = 32, threads = 1;
};

Args parse(int argc, char** argv) {
    Args a;
    rlpt::bench::parse_int_options(argc, argv, "bench_tp",
                                   {{"--tp", &a.tp},
                                    {"--batch", &a.batch},
                                    {"--seq", &a.seq},
                                    {"--iters", &a.iters},
                                    {"--prompts", &a.prompts},
                                    {"--new", &a.new_tokens},
                                    {"--threads", &a.threads}});
    return a;
}

void run(const Args& a, const rlpt::comm::Communicator& world) {
    using namespace rlpt;
    RLPT_CHECK(world.size() % a.tp == 0, "bench_tp: {} ranks do not form blocks of tp {}", world.size(), a.tp);
    const int64_t dp_size = world.size() / a.tp;
    auto mp = world.split(world.rank() / static_cast<int>(a.tp), world.rank() % static_cast<int>(a.tp));
    auto dp = world.split(world.rank() % static_cast<int>(a.tp), world.rank() / static_cast<int>(a.tp));
    const int64_t dp_rank = dp.rank();
    auto tp = a.tp > 1 ? model::TensorParallel::over(mp, torch::kCPU) : nullptr;
    const auto margs = bench::llama_100m();
    auto m = model::make_random_causal_lm(margs, 1, torch::kFloat32, torch::kCPU, tp);

    int64_t bytes = 0, matrix_bytes = 0;
    for (const auto& p : m->named_parameters()) {
        bytes += p.value().numel() * 4;
        if (p.key().find(".layers.") != std::string::npos && p.value().dim() == 2)
            matrix_bytes += p.value().numel() * 4;
    }

    engine::TensorParallelInfo info;
    if (tp) {
        info.block = &mp;
        info.not_counted = model::uncounted_parameters(*m, m->tp_layout());
    }
    engine::OptimOptions o;
    o.lr = 1e-4;
    engine::TrainEngine eng(m, dp, o, 0, info);

    RLPT_CHECK(a.batch % dp_size == 0, "bench_tp: --batch {} does not split over {} dp ranks", a.batch, dp_size);
    const int64_t rows = a.batch / dp_size;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    auto all_ids = torch::randint(1, margs.vocab_size, {a.batch, a.seq}, gen, torch::kInt64);
    auto ids = all_ids.narrow(0, dp_rank * rows, rows).contiguous();
    auto mask = torch::ones_like(ids);
    auto pos = (mask.cumsum(1) - 1).clamp_min(0);
    auto loss_mask = mask.clone();
    loss_mask.select(1, 0).zero_();
    const double global_tokens = static_cast<double>(a.batch * (a.seq - 1));
    double loss_value = 0;
    auto step = [&] {
        eng.zero_grad();
        auto loss =
            engine::sft_token_nll_sum(*m, ids, mask, pos, loss_mask) * (static_cast<double>(dp_size) / global_tokens);
        loss.backward();
        loss_value = loss.item<double>();
        return eng.step();
    };
    // Correctness first: a finite first step, a lower loss on the second.
    auto r0 = step();
    const double first = world.allreduce_sum(loss_value) / static_cast<double>(world.size());
    step();
    const double second = world.allreduce_sum(loss_value) / static_cast<double>(world.size());
    RLPT_CHECK(!r0.skipped && std::isfinite(first) && second < first, "bench_tp: loss {} -> {}", first, second);

    std::vector<double> times;
    const double coll0 = tp ? tp->seconds_in_collectives() : 0;
    for (int64_t i = 0; i < a.iters; ++i) {
        world.barrier();
        const auto t0 = Clock::now();
        step();
        times.push_back(world.allreduce_max(seconds_since(t0)));
    }
    const double train_coll = world.allreduce_max((tp ? tp->seconds_in_collectives() : 0) - coll0);
    const double step_s = median(times);

    // Decode: greedy generation of --new tokens for this dp rank's prompts.
    std::vector<std::vector<int64_t>> prompts;
    std::vector<uint64_t> seeds;
    RLPT_CHECK(a.prompts % dp_size == 0, "bench_tp: --prompts {} does not split over {} dp ranks", a.prompts, dp_size);
    for (int64_t i = 0; i < a.prompts / dp_size; ++i) {
        prompts.push_back(std::vector<int64_t>(16, 100 + i + dp_rank * 1000));
        seeds.push_back(static_cast<uint64_t>(i));
    }
    rollout::SamplingParams sp;
    sp.greedy = true;
    sp.max_new_tokens = a.new_tokens;
    rollout::generate(*m, prompts, seeds, sp);  // warm-up
    world.barrier();
    const double dcoll0 = tp ? tp->seconds_in_collectives() : 0;
    const auto t0 = Clock::now();
    auto g = rollout::generate(*m, prompts, seeds, sp);
    const double decode_s = world.allreduce_max(seconds_since(t0));
    const double decode_coll = world.allreduce_max((tp ? tp->seconds_in_collectives() : 0) - dcoll0);
    const int64_t generated = world.allreduce_sum_i64(g.response_mask.sum().item<int64_t>()) / a.tp;

    if (world.rank() != 0) return;
    const double layers = static_cast<double>(margs.num_hidden_layers);
    std::printf("{\"bench\":\"tp\",\"git_sha\":\"%s\",\"tp\":%lld,\"dp\":%lld,\"ranks\":%d,\"threads\":%lld,"
                "\"param_bytes_per_rank\":%lld,\"layer_matrix_bytes_per_rank\":%lld,\"batch\":%lld,\"seq\":%lld,"
                "\"iters\":%lld,\"step_s\":%.4f,\"train_tokens_per_s\":%.1f,\"train_allreduce_ms_per_layer_step\":%.3f,"
                "\"decode_prompts\":%lld,\"decode_new\":%lld,\"decode_s\":%.4f,\"decode_tokens_per_s\":%.2f,"
                "\"decode_allreduce_ms_per_layer_token\":%.4f,\"loss_first\":%.4f,\"loss_second\":%.4f}\n",
                RLPT_GIT_SHA, static_cast<long long>(a.tp), static_cast<long long>(dp_size), world.size(),
                static_cast<long long>(a.threads), static_cast<long long>(bytes), static_cast<long long>(matrix_bytes),
                static_cast<long long>(a.batch), static_cast<long long>(a.seq), static_cast<long long>(a.iters), step_s,
                global_tokens / step_s, 1e3 * train_coll / (layers * static_cast<double>(a.iters)),
                static_cast<long long>(a.prompts), static_cast<long long>(a.new_tokens), decode_s,
                static_cast<double>(generated) / decode_s,
                1e3 * decode_coll / (layers * static_cast<double>(a.new_tokens)), first, second);
}

}  // namespace

int main(int argc, char** argv) {
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    try {
        const Args args = parse(argc, argv);
        torch::set_num_threads(static_cast<int>(args.threads));
        run(args, rlpt::comm::Communicator::world());
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tp: %s\n", e.what());
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
