// Training throughput of the TrainEngine on the CPU: forward + backward (SFT token NLL through
// the fp32 chunk-free head) + step (bucketed all-reduce, clip, AdamW, ZeRO-1 all-gather).
// Checks first that training works (a tiny model overfits one batch; the big model's first
// step is finite and lowers the loss on that batch), then times warm-up + median of timed
// steps. Also measures this machine's fp32 matmul rate (torch::mm, N×N) at the same thread
// count, so the MFU-like fraction = 6 · params · tokens / time / matmul rate is comparable.
// Prints one JSON line per run (rank 0; times and RSS are maxima over ranks).
//
// Usage: mpirun -np <ranks> rlpt_bench_train [--model tiny|100m] [--batch B] [--seq T]
//        [--iters N] [--threads N] [--zero 0|1] [--mm N]
#include <ATen/CPUGeneratorImpl.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/transformer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
    std::string model = "tiny";
    int64_t batch = 0, seq = 0;
    int iters = 3;
    int threads = 1;
    int64_t zero = 0;
    int64_t mm = 2048;
};

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") a.model = v;
        else if (k == "--batch") a.batch = std::atoll(v.c_str());
        else if (k == "--seq") a.seq = std::atoll(v.c_str());
        else if (k == "--iters") a.iters = std::max(1, std::atoi(v.c_str()));
        else if (k == "--threads") a.threads = std::max(1, std::atoi(v.c_str()));
        else if (k == "--zero") a.zero = std::atoll(v.c_str());
        else if (k == "--mm") a.mm = std::atoll(v.c_str());
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            std::exit(2);
        }
    }
    return a;
}

rlpt::model::ModelArgs model_args(const std::string& name) {
    using namespace rlpt::model;
    if (name == "tiny") {  // the demo size
        auto a = tiny_model_args(ModelFamily::kQwen2, 20);
        a.hidden_size = 128;
        a.intermediate_size = 256;
        a.num_attention_heads = 4;
        a.num_key_value_heads = 2;
        a.head_dim = 32;
        a.validate();
        return a;
    }
    if (name == "100m") {  // Llama-style: MHA, untied head, no biases
        auto a = tiny_model_args(ModelFamily::kLlama, 32000);
        a.hidden_size = 768;
        a.num_hidden_layers = 12;
        a.num_attention_heads = 12;
        a.num_key_value_heads = 12;
        a.head_dim = 64;
        a.intermediate_size = 2048;
        a.max_position_embeddings = 2048;
        a.validate();
        return a;
    }
    std::fprintf(stderr, "unknown model %s (tiny, 100m)\n", name.c_str());
    std::exit(2);
}

double matmul_gflops(int64_t n) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    auto c = torch::mm(a, b);  // warm-up
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
        const auto t0 = Clock::now();
        c = torch::mm(a, b);
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return 2.0 * n * n * n / t[1] / 1e9;
}

const char* blas_core() {
    using Fn = char* (*)();
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return fn ? fn() : "not OpenBLAS";
}

double peak_rss_mib() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    using namespace rlpt;
    try {
        const Args args = parse(argc, argv);
        torch::set_num_threads(args.threads);
        auto world = comm::Communicator::world();
        const auto margs = model_args(args.model);
        const int64_t batch = args.batch > 0 ? args.batch : (args.model == "tiny" ? 16 : 4);
        const int64_t seq = args.seq > 0 ? args.seq : (args.model == "tiny" ? 32 : 256);

        const double gflops = matmul_gflops(args.mm);
        auto model = model::make_random_causal_lm(margs, 1);
        engine::OptimOptions o;
        o.lr = args.model == "tiny" ? 3e-3 : 1e-4;
        o.zero_stage = args.zero;
        engine::TrainEngine eng(model, world, o, 0);

        // Each rank trains on its own rows of a fixed batch (SFT loss on every position but 0).
        auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + world.rank());
        auto ids = torch::randint(1, margs.vocab_size, {batch, seq}, gen, torch::kInt64);
        auto mask = torch::ones({batch, seq}, torch::kInt64);
        auto pos = (mask.cumsum(1) - 1).clamp_min(0);
        auto loss_mask = mask.clone();
        loss_mask.select(1, 0).zero_();
        const int64_t global_tokens = world.allreduce_sum_i64(loss_mask.sum().item<int64_t>());
        const double tokens_per_step = static_cast<double>(world.allreduce_sum_i64(batch * seq));
        auto train_step = [&] {
            eng.zero_grad();
            auto nll = engine::sft_token_nll_sum(*model, ids, mask, pos, loss_mask);
            // Share of the global mean times dp_size (the engine averages over ranks).
            auto loss = nll * (static_cast<double>(world.size()) / static_cast<double>(global_tokens));
            loss.backward();
            auto r = eng.step();
            const double mean = world.allreduce_sum(loss.item<double>()) / world.size();
            return std::make_pair(mean, r);
        };

        // Correctness first.
        auto [first_loss, r0] = train_step();
        bool ok = !r0.skipped && std::isfinite(r0.grad_norm);
        double last_loss = first_loss;
        const int check_steps = args.model == "tiny" ? 30 : 1;
        for (int i = 0; i < check_steps && ok; ++i) {
            auto [l, r] = train_step();
            ok = !r.skipped && std::isfinite(l);
            last_loss = l;
        }
        ok = ok && last_loss < first_loss;
        if (!ok) {
            if (world.rank() == 0)
                std::fprintf(stderr, "correctness check failed: loss %.4f -> %.4f\n", first_loss, last_loss);
            comm::MpiRuntime::abort(1);
        }

        std::vector<double> times;
        for (int i = 0; i < args.iters; ++i) {
            world.barrier();
            const auto t0 = Clock::now();
            train_step();
            times.push_back(world.allreduce_max(std::chrono::duration<double>(Clock::now() - t0).count()));
        }
        std::sort(times.begin(), times.end());
        const double t = times[times.size() / 2];
        const double params = static_cast<double>(eng.num_parameters());
        const double tok_s = tokens_per_step / t;
        const double model_gflops = 6.0 * params * tokens_per_step / t / 1e9;
        const double rss = world.allreduce_max(peak_rss_mib());
        const double state_mib = world.allreduce_max(static_cast<double>(eng.optimizer_state_bytes())) / 1048576.0;
        const double gflops_all = world.allreduce_sum(gflops);  // the machine's rate over all ranks
        if (world.rank() == 0) {
            std::printf(
                "{\"bench\":\"train\",\"git_sha\":\"%s\",\"model\":\"%s\",\"params\":%.0f,\"ranks\":%d,"
                "\"threads\":%d,\"zero\":%lld,\"batch_per_rank\":%lld,\"seq\":%lld,\"step_s\":%.4f,"
                "\"tokens_per_s\":%.1f,\"model_gflops\":%.2f,\"matmul_gflops\":%.2f,\"mfu\":%.4f,"
                "\"peak_rss_mib\":%.1f,\"optimizer_state_mib_per_rank\":%.2f,\"blas\":\"%s\",\"loss_first\":%.4f,"
                "\"loss_checked\":%.4f}\n",
                RLPT_GIT_SHA, args.model.c_str(), params, world.size(), args.threads,
                static_cast<long long>(args.zero), static_cast<long long>(batch), static_cast<long long>(seq), t,
                tok_s, model_gflops, gflops_all, model_gflops / gflops_all, rss, state_mib, blas_core(), first_loss,
                last_loss);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train: %s\n", e.what());
        comm::MpiRuntime::abort(1);
    }
    return 0;
}
