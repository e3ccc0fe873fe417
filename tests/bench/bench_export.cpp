// Peak host memory of the Hugging Face export of a ZeRO-3 actor (issue 11): the ~100M model
// trained by a ZeRO-3 TrainEngine over every rank (DP = world size), exported with
//   --mode gathered  the way rlpt did it before: hold_full_parameters() on every DP rank (the
//                    whole model gathered everywhere), DP rank 0 writes it;
//   --mode streamed  TrainEngine::gather_parameter: one tensor at a time, its slices sent to DP
//                    rank 0 only, written as it arrives (what the actor's export does now).
// Measured per rank: resident set before the export (after building the engine, sharded), and the
// peak resident set during the export (VmHWM after resetting it through /proc/self/clear_refs);
// glibc's mmap threshold is pinned (1 MiB) so freed tensors go back to the system. One JSON line
// on rank 0 with the maximum over ranks and rank 0's (the writer's) figures; the written file is
// checked against the other mode's by the script (scripts/bench_export.sh).
// Usage: mpirun -np N rlpt_bench_export --mode 0|1 (0 gathered, 1 streamed) --out DIR
#include <malloc.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "bench_models.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/transformer.h"

namespace {

using namespace rlpt;

// kB value of a /proc/self/status line ("VmRSS", "VmHWM").
int64_t status_kb(const std::string& key) {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
    RLPT_THROW(IoError, "no {} in /proc/self/status", key);
}

void reset_peak() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    RLPT_CHECK_KIND(IoError, out.good(), "cannot reset VmHWM through /proc/self/clear_refs");
}

void run(int64_t mode, const std::string& out_dir, const comm::Communicator& world) {
    auto model = model::make_random_causal_lm(bench::llama_100m(), 1, torch::kFloat32);
    engine::OptimOptions o;
    o.zero_stage = 3;
    engine::TrainEngine eng(model, world, o, 0);
    world.barrier();
    const double before_mb = static_cast<double>(status_kb("VmRSS")) / 1024;
    reset_peak();
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (mode == 0) {
        auto hold = eng.hold_full_parameters();
        if (world.rank() == 0) model::save_pretrained(*model, out_dir);
        world.barrier();  // every rank holds the gathered model until the file is written
    } else if (world.rank() == 0) {
        model::save_pretrained(*model, out_dir, model::kDefaultMaxShardBytes,
                               [&](size_t i) { return eng.gather_parameter(i, 0); });
    } else {
        for (size_t i = 0; i < eng.num_parameter_tensors(); ++i) eng.gather_parameter(i, 0);
    }
    world.barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double peak_mb = static_cast<double>(status_kb("VmHWM")) / 1024;
    double v[2] = {before_mb, peak_mb}, mx[2] = {0, 0};
    RLPT_MPI_CHECK(MPI_Reduce(v, mx, 2, MPI_DOUBLE, MPI_MAX, 0, world.get()));
    if (world.rank() == 0) {
        std::printf("{\"mode\": \"%s\", \"ranks\": %d, \"params_mb\": %.1f, \"rank0_before_mb\": %.1f, "
                    "\"rank0_peak_mb\": %.1f, \"max_before_mb\": %.1f, \"max_peak_mb\": %.1f, \"seconds\": %.3f}\n",
                    mode == 0 ? "gathered" : "streamed", world.size(),
                    static_cast<double>(eng.num_parameters()) * 4 / (1 << 20), before_mb, peak_mb, mx[0], mx[1],
                    seconds);
    }
}

}  // namespace

int main(int argc, char** argv) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    try {
        int64_t mode = 1;
        std::string out = "/tmp/rlpt_bench_export";
        for (int i = 1; i + 1 < argc; i += 2) {
            const std::string k = argv[i];
            if (k == "--mode") mode = std::stoll(argv[i + 1]);
            else if (k == "--out") out = argv[i + 1];
            else RLPT_THROW(ValueError, "bench_export: unknown option {}", k);
        }
        torch::set_num_threads(1);
        run(mode, out, rlpt::comm::Communicator::world());
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_export: %s\n", e.what());
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
