// Training throughput of the TrainEngine on the CPU: forward + backward (SFT token NLL through
// the fp32 head) + engine.step() (bucketed all-reduce, clip, AdamW, ZeRO-1 all-gather).
//
// Two modes, one JSON line each on rank 0 (scripts/bench_train.sh turns them into a table):
//   --ceiling N   this machine's fp32 matmul rate: torch::mm of two N×N float32 matrices at
//                 --threads torch threads (1 by default), median of 5 after a warm-up, GFLOP/s
//                 = 2·N³ / time.
//   --model M     training steps of model M on this rank's rows of a fixed random batch. It
//                 checks first that training works (tiny: 30 steps must lower the loss on the
//                 batch; 100m: the first step is finite and the second loss is lower), then
//                 times `--iters` steps. Per step and phase the time is the maximum over ranks;
//                 the line reports the median over steps of each phase separately.
//
// Models (both built in code, random weights; no download):
//   tiny  the built-in policy with BuiltinModelConfig's defaults (what a config without
//         model.path trains: Llama-style, hidden 128, 2 layers) over the arithmetic tasks'
//         character vocabulary.
//   100m  a Llama-style model: hidden 768, 12 layers, 12 heads (MHA), SwiGLU 2048, vocab 32000,
//         tied embeddings (the head matmul is the embedding's only FLOPs, so 6·N·tokens counts
//         every parameter's matmul once), RMSNorm, RoPE.
//
// Memory (scripts/bench_zero.sh): the line also reports, maximum over ranks, the engine's tensor
// bytes held between steps (TrainEngine::memory_bytes) and at their peak during the timed steps
// (peak_memory_bytes: + a gathered layer and its gradient, the root unit), and the peak RSS
// (VmHWM) over the whole run and over the timed steps alone (VmHWM reset through
// /proc/self/clear_refs after the set-up; glibc is told to give freed blocks of 1 MiB and more
// back at once, so the figure follows the tensors). --shard-group N: hybrid shard groups of N
// DP ranks. --reference 1: also a frozen copy of the model (the reference policy), sharded
// ZeRO-3-style when --zero is 3 (a full copy otherwise), running one no-grad forward on the
// batch before each step; its bytes are reported apart. --dtype bfloat16: the model's parameters
// in bfloat16 (the engine keeps fp32 gradients, master weights and AdamW moments: 18 bytes per
// parameter unsharded, as model.dtype: bfloat16 trains).
//
// Attention (issue 32): --attention sdpa (the default: at::scaled_dot_product_attention where
// model::sdpa_attention_applies) or materialised (the fp32 scores and probabilities kept for the
// backward, the path before); step_peak_tensor_bytes is the peak of the host tensors the timed steps
// allocate (tests/counting_allocator.h), the training step's transient memory.
//
// Usage: mpirun -np <ranks> rlpt_bench_train --model tiny|100m [--batch B] [--seq T] [--iters N]
//                                            [--threads N] [--zero 0|1|2|3] [--prefetch 0|1]
//                                            [--shard-group N] [--reference 0|1]
//                                            [--dtype float32|bfloat16] [--attention sdpa|materialised]
//        mpirun -np 1 rlpt_bench_train --ceiling N [--threads N]
#include <ATen/CPUGeneratorImpl.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../counting_allocator.h"
#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"
#include "rlpt/data/arithmetic.h"
#include "rlpt/engine/policy_ops.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/transformer.h"
#include "rlpt/tokenizer/char_tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Args {
    std::string model;
    int64_t ceiling = 0;  // > 0: measure the matmul ceiling at this size instead of training
    int64_t batch = 0, seq = 0;
    int64_t iters = 3;
    int64_t threads = 1;
    int64_t zero = 0;
    int64_t prefetch = 1;            // ZeRO-3: start the next layer's all-gather early
    int64_t shard_group = 0;         // hybrid shard group size (0: all ranks)
    int64_t reference = 0;           // 1: also a frozen reference model
    std::string dtype = "float32";   // the model's parameters: float32 | bfloat16 (fp32 master weights)
    std::string attention = "sdpa";  // sdpa (Backbone::use_sdpa_attention, where it applies) | materialised
};

int64_t parse_int(const std::string& key, const std::string& v, int64_t min) {
    size_t used = 0;
    int64_t x = 0;
    try {
        x = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    RLPT_CHECK(used == v.size() && !v.empty() && x >= min, "bench_train: {} wants an integer >= {}, got '{}'", key, min,
               v);
    return x;
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; i += 2) {
        const std::string k = argv[i];
        RLPT_CHECK(i + 1 < argc, "bench_train: option {} needs a value", k);
        const std::string v = argv[i + 1];
        if (k == "--model") a.model = v;
        else if (k == "--ceiling") a.ceiling = parse_int(k, v, 64);
        else if (k == "--batch") a.batch = parse_int(k, v, 1);
        else if (k == "--seq") a.seq = parse_int(k, v, 2);
        else if (k == "--iters") a.iters = parse_int(k, v, 1);
        else if (k == "--threads") a.threads = parse_int(k, v, 1);
        else if (k == "--zero") a.zero = parse_int(k, v, 0);
        else if (k == "--prefetch") a.prefetch = parse_int(k, v, 0);
        else if (k == "--shard-group") a.shard_group = parse_int(k, v, 0);
        else if (k == "--reference") a.reference = parse_int(k, v, 0);
        else if (k == "--dtype") a.dtype = v;
        else if (k == "--attention") a.attention = v;
        else
            RLPT_THROW(ValueError,
                       "bench_train: unknown option {} (--model, --ceiling, --batch, --seq, --iters, "
                       "--threads, --zero, --prefetch, --shard-group, --reference, --dtype, --attention)",
                       k);
    }
    RLPT_CHECK((a.ceiling > 0) != !a.model.empty(), "bench_train: give exactly one of --model and --ceiling");
    RLPT_CHECK(a.dtype == "float32" || a.dtype == "bfloat16", "bench_train: --dtype float32 or bfloat16, got '{}'",
               a.dtype);
    RLPT_CHECK(a.attention == "sdpa" || a.attention == "materialised",
               "bench_train: --attention sdpa or materialised, got '{}'", a.attention);
    return a;
}

rlpt::model::ModelArgs model_args(const std::string& name) {
    using namespace rlpt::model;
    if (name == "tiny") {  // as roles' build_policy maps model.builtin
        const rlpt::BuiltinModelConfig b;
        const rlpt::tokenizer::CharTokenizer tok(rlpt::data::kArithmeticCharset);
        return builtin_model_args(b, tok.vocab_size());
    }
    if (name == "100m") return rlpt::bench::llama_100m();
    RLPT_THROW(ValueError, "bench_train: unknown model '{}' (tiny, 100m)", name);
}

double matmul_gflops(int64_t n) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    auto c = torch::mm(a, b);  // warm-up: pages, BLAS buffers
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = Clock::now();
        c = torch::mm(a, b);
        t.push_back(seconds_since(t0));
    }
    std::sort(t.begin(), t.end());
    return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / t[t.size() / 2] / 1e9;
}

const char* blas_core() {
    using Fn = char* (*)();
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    return fn ? fn() : "not OpenBLAS";
}

const char* coretype_env() {
    const char* v = std::getenv("OPENBLAS_CORETYPE");
    return v ? v : "unset";
}

double peak_rss_mib() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// VmHWM of this process in MiB (0 when /proc is not there).
double vm_hwm_mib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
    return 0;
}

// Resets VmHWM to the current RSS (Linux: "5" into /proc/self/clear_refs) after giving free
// heap pages back. False when the kernel refuses.
bool reset_hwm() {
    malloc_trim(0);
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    f.flush();
    return static_cast<bool>(f);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Per-step phase times, seconds, each already the maximum over ranks.
struct StepTimes {
    double total = 0, fwd_bwd = 0, allreduce = 0, optimizer = 0, allgather = 0;
};

void run_ceiling(const Args& args) {
    const double g = matmul_gflops(args.ceiling);
    std::printf("{\"bench\":\"matmul_ceiling\",\"git_sha\":\"%s\",\"n\":%lld,\"threads\":%lld,\"gflops\":%.2f,"
                "\"blas\":\"%s\",\"openblas_coretype\":\"%s\"}\n",
                RLPT_GIT_SHA, static_cast<long long>(args.ceiling), static_cast<long long>(args.threads), g,
                blas_core(), coretype_env());
}

void run_training(const Args& args, const rlpt::comm::Communicator& world) {
    using namespace rlpt;
    const auto margs = model_args(args.model);
    const bool tiny = args.model == "tiny";
    const int64_t batch = args.batch > 0 ? args.batch : (tiny ? 16 : 4);
    const int64_t seq = args.seq > 0 ? args.seq : (tiny ? 128 : 256);
    RLPT_CHECK(seq <= margs.max_position_embeddings, "bench_train: --seq {} exceeds the model's {} positions", seq,
               margs.max_position_embeddings);

    const torch::Dtype dtype = args.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    auto model = model::make_random_causal_lm(margs, 1, dtype);
    model->backbone().use_sdpa_attention(args.attention == "sdpa");
    engine::OptimOptions o;
    o.lr = tiny ? 3e-3 : 1e-4;
    o.zero_stage = args.zero;
    o.zero3_prefetch = args.prefetch != 0;
    o.shard_group_size = args.shard_group;
    engine::TrainEngine eng(model, world, o, 0);
    std::shared_ptr<model::CausalLM> ref_model;
    std::unique_ptr<engine::TrainEngine> ref;
    if (args.reference != 0) {
        ref_model = model::make_random_causal_lm(margs, 1, dtype);
        for (auto& p : ref_model->parameters()) p.set_requires_grad(false);
        engine::OptimOptions ro;
        ro.zero_stage = args.zero == 3 ? 3 : 0;
        ro.frozen = true;
        ro.shard_group_size = args.shard_group;
        ref = std::make_unique<engine::TrainEngine>(ref_model, world, ro, 0);
    }

    // Each rank trains on its own rows of a fixed batch (SFT loss on every position but 0).
    auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + world.rank());
    auto ids = torch::randint(1, margs.vocab_size, {batch, seq}, gen, torch::kInt64);
    auto mask = torch::ones({batch, seq}, torch::kInt64);
    auto pos = (mask.cumsum(1) - 1).clamp_min(0);
    auto loss_mask = mask.clone();
    loss_mask.select(1, 0).zero_();
    const int64_t global_loss_tokens = world.allreduce_sum_i64(loss_mask.sum().item<int64_t>());
    const int64_t tokens_per_step = world.allreduce_sum_i64(batch * seq);

    // One step: the timed part is zero_grad + forward + backward + engine.step().
    double loss_local = 0;
    auto train_step = [&]() -> std::pair<StepTimes, engine::StepResult> {
        StepTimes t;
        if (ref) {  // the reference's forward (GRPO's KL term), not timed
            torch::NoGradGuard no_grad;
            (void)engine::sft_token_nll_sum(*ref_model, ids, mask, pos, loss_mask);
            ref->release_parameters();
        }
        const auto t0 = Clock::now();
        eng.zero_grad();
        auto nll = engine::sft_token_nll_sum(*model, ids, mask, pos, loss_mask);
        // This rank's share of the global token mean, times dp_size (the engine averages).
        auto loss = nll * (static_cast<double>(world.size()) / static_cast<double>(global_loss_tokens));
        loss.backward();
        t.fwd_bwd = seconds_since(t0);
        const auto r = eng.step();
        t.total = seconds_since(t0);
        t.allreduce = r.allreduce_s;
        t.optimizer = r.optimizer_s;
        t.allgather = r.allgather_s;
        loss_local = loss.item<double>();
        return {t, r};
    };
    auto global_loss = [&] { return world.allreduce_sum(loss_local) / world.size(); };

    // Correctness first.
    auto [t_first, r_first] = train_step();
    const double first_loss = global_loss();
    bool ok = !r_first.skipped && std::isfinite(r_first.grad_norm) && std::isfinite(first_loss);
    double checked_loss = first_loss;
    for (int i = 0; i < (tiny ? 30 : 1) && ok; ++i) {
        auto [t, r] = train_step();
        checked_loss = global_loss();
        ok = !r.skipped && std::isfinite(checked_loss);
    }
    RLPT_CHECK(ok && checked_loss < first_loss, "bench_train: correctness check failed: loss {} -> {}", first_loss,
               checked_loss);

    const double rss_setup = world.allreduce_max(vm_hwm_mib());
    const bool hwm_reset = reset_hwm();
    eng.reset_peak_memory();
    if (ref) ref->reset_peak_memory();
    // The peak bytes of the host tensors the timed steps allocate (activations, attention's,
    // transients; the model and the engine's buffers exist before): tests/counting_allocator.h.
    rlpt::testing::CountingCpuAllocator::Scope counting;
    std::vector<double> total, fwd_bwd, allreduce, optimizer, allgather;
    for (int64_t i = 0; i < args.iters; ++i) {
        world.barrier();
        auto [t, r] = train_step();
        RLPT_CHECK(!r.skipped, "bench_train: timed step {} was skipped (non-finite gradient norm)", i);
        total.push_back(world.allreduce_max(t.total));
        fwd_bwd.push_back(world.allreduce_max(t.fwd_bwd));
        allreduce.push_back(world.allreduce_max(t.allreduce));
        optimizer.push_back(world.allreduce_max(t.optimizer));
        allgather.push_back(world.allreduce_max(t.allgather));
    }
    const double step_s = median(total);
    const double params = static_cast<double>(eng.num_parameters());
    const double tok_s = static_cast<double>(tokens_per_step) / step_s;
    const double rss = world.allreduce_max(peak_rss_mib());
    const double state_mib = world.allreduce_max(static_cast<double>(eng.optimizer_state_bytes())) / 1048576.0;
    // Training state held between steps (tensor bytes, padding included), maximum over ranks.
    const auto mem = eng.memory_bytes();
    const double mem_params = world.allreduce_max(static_cast<double>(mem.params));
    const double mem_grads = world.allreduce_max(static_cast<double>(mem.grads));
    const double mem_optimizer = world.allreduce_max(static_cast<double>(mem.optimizer));
    const double peak_bytes = world.allreduce_max(static_cast<double>(eng.peak_memory_bytes()));
    const double rss_steps = world.allreduce_max(hwm_reset ? vm_hwm_mib() : -1.0);
    const double ref_bytes = ref ? world.allreduce_max(static_cast<double>(ref->memory_bytes().total())) : 0.0;
    const double ref_peak = ref ? world.allreduce_max(static_cast<double>(ref->peak_memory_bytes())) : 0.0;
    const double step_peak = world.allreduce_max(static_cast<double>(counting.peak_extra()));
    if (world.rank() != 0) return;
    std::printf(
        "{\"bench\":\"train\",\"git_sha\":\"%s\",\"model\":\"%s\",\"params\":%.0f,\"ranks\":%d,"
        "\"threads\":%lld,\"zero\":%lld,\"batch_per_rank\":%lld,\"seq\":%lld,\"tokens_per_step\":%lld,"
        "\"iters\":%lld,\"step_s\":%.5f,\"fwd_bwd_s\":%.5f,\"allreduce_s\":%.5f,\"optimizer_s\":%.5f,"
        "\"allgather_s\":%.5f,\"tokens_per_s\":%.2f,\"gflops_6n\":%.3f,\"peak_rss_mib\":%.1f,"
        "\"optimizer_state_mib_per_rank\":%.2f,\"blas\":\"%s\",\"openblas_coretype\":\"%s\","
        "\"loss_first\":%.4f,\"loss_checked\":%.4f,\"prefetch\":%lld,\"state_bytes_params\":%.0f,"
        "\"state_bytes_grads\":%.0f,\"state_bytes_optimizer\":%.0f,\"peak_bytes\":%.0f,\"peak_rss_setup_mib\":%.1f,"
        "\"peak_rss_steps_mib\":%.1f,\"shard_group\":%d,\"reference\":%lld,\"ref_bytes\":%.0f,"
        "\"ref_peak_bytes\":%.0f,\"dtype\":\"%s\",\"attention\":\"%s\",\"step_peak_tensor_bytes\":%.0f}\n",
        RLPT_GIT_SHA, args.model.c_str(), params, world.size(), static_cast<long long>(args.threads),
        static_cast<long long>(args.zero), static_cast<long long>(batch), static_cast<long long>(seq),
        static_cast<long long>(tokens_per_step), static_cast<long long>(args.iters), step_s, median(fwd_bwd),
        median(allreduce), median(optimizer), median(allgather), tok_s, 6.0 * params * tok_s / 1e9, rss, state_mib,
        blas_core(), coretype_env(), first_loss, checked_loss, static_cast<long long>(args.prefetch), mem_params,
        mem_grads, mem_optimizer, peak_bytes, rss_setup, rss_steps, eng.shard_group_size(),
        static_cast<long long>(args.reference), ref_bytes, ref_peak, args.dtype.c_str(), args.attention.c_str(),
        step_peak);
}

}  // namespace

int main(int argc, char** argv) {
    // Freed blocks of 1 MiB and more go back to the kernel at once (RSS follows the tensors).
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    try {
        const Args args = parse(argc, argv);
        torch::set_num_threads(static_cast<int>(args.threads));
        auto world = rlpt::comm::Communicator::world();
        if (args.ceiling > 0) {
            RLPT_CHECK(world.size() == 1, "bench_train: --ceiling runs on one rank, got {}", world.size());
            run_ceiling(args);
        } else {
            run_training(args, world);
        }
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train: %s\n", e.what());
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
