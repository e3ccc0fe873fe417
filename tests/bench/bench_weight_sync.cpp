// Weight-sync benchmark: one rank (the root) broadcasts a transformer's fp32 parameters
// (default: 12 layers, width 768, vocabulary 32000, tied embeddings: ~110M parameters,
// ~441 MB, 148 tensors) to every other rank, through make_weight_sync("mpi") at several
// bucket sizes, against a raw MPI_Bcast of the same bytes from one preallocated buffer in
// the same run. Correctness first (checksums of every receiver against the root), then
// warm-up and timed iterations; each iteration's time is the maximum over ranks.
//
//   mpirun -np 3 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
//       rlpt_bench_weight_sync [--layers 12] [--width 768] [--vocab 32000] [--iters 5]
//       [--buckets 4,16,64,256] [--json]
//
// Prints a table (GB/s = payload bytes / time; busbw = algbw for a broadcast) and, with
// --json, one JSON line per configuration.
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/weights/weight_sync.h"
#include "rlpt/core/error.h"

namespace {

using rlpt::comm::Communicator;

struct Args {
    int layers = 12;
    int64_t width = 768;
    int64_t vocab = 32000;
    int64_t max_pos = 1024;
    int iters = 5;
    int warmup = 1;
    std::vector<int64_t> buckets_mib = {4, 16, 64, 256};
    bool json = false;
};

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        auto next = [&]() -> std::string {
            RLPT_CHECK_KIND(ConfigError, i + 1 < argc, "{} needs a value", k);
            return argv[++i];
        };
        if (k == "--layers") {
            a.layers = std::stoi(next());
        } else if (k == "--width") {
            a.width = std::stoll(next());
        } else if (k == "--vocab") {
            a.vocab = std::stoll(next());
        } else if (k == "--iters") {
            a.iters = std::stoi(next());
        } else if (k == "--warmup") {
            a.warmup = std::stoi(next());
        } else if (k == "--json") {
            a.json = true;
        } else if (k == "--buckets") {
            a.buckets_mib.clear();
            std::string v = next();
            for (size_t p = 0; p < v.size();) {
                size_t q = v.find(',', p);
                if (q == std::string::npos) q = v.size();
                a.buckets_mib.push_back(std::stoll(v.substr(p, q - p)));
                p = q + 1;
            }
        } else {
            RLPT_THROW(ConfigError, "unknown argument '{}'", k);
        }
    }
    RLPT_CHECK_KIND(ConfigError, a.iters >= 1 && a.layers >= 1, "bad --iters/--layers");
    return a;
}

// GPT-style parameter list (shapes as in nn.Linear: [out, in]).
std::vector<std::vector<int64_t>> model_shapes(const Args& a) {
    const int64_t d = a.width;
    std::vector<std::vector<int64_t>> s = {{a.vocab, d}, {a.max_pos, d}};
    for (int l = 0; l < a.layers; ++l) {
        std::vector<std::vector<int64_t>> layer = {{d},        {d},      // ln_1
                                                   {3 * d, d}, {3 * d},  // attn.c_attn
                                                   {d, d},     {d},      // attn.c_proj
                                                   {d},        {d},      // ln_2
                                                   {4 * d, d}, {4 * d},  // mlp.c_fc
                                                   {d, 4 * d}, {d}};     // mlp.c_proj
        s.insert(s.end(), layer.begin(), layer.end());
    }
    s.push_back({d});
    s.push_back({d});  // ln_f
    return s;
}

struct Row {
    std::string name;
    int64_t bucket_bytes = 0;
    std::vector<double> times;
    int64_t messages = 0;
    int64_t inplace = 0;
};

}  // namespace

int main(int argc, char** argv) {
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    try {
        torch::set_num_threads(1);
        const Args a = parse(argc, argv);
        auto world = Communicator::world();
        rlpt::set_process_identity({world.rank(), "bench"});
        RLPT_CHECK_KIND(ConfigError, world.size() >= 2, "run with at least 2 ranks");
        const bool root = world.rank() == 0;

        std::vector<torch::Tensor> tensors;
        int64_t total_bytes = 0;
        {
            auto gen = at::detail::createCPUGenerator(1234);
            for (const auto& shape : model_shapes(a)) {
                tensors.push_back(root ? torch::randn(shape, gen) : torch::zeros(shape));
                total_bytes += tensors.back().numel() * 4;
            }
        }
        const uint64_t root_sum = root ? rlpt::weights::weights_checksum(tensors) : 0;

        // Variants, all timed round-robin inside each iteration so that load from other
        // processes on a shared machine hits every variant alike.
        std::vector<Row> rows;
        std::vector<std::unique_ptr<rlpt::weights::WeightSync>> syncs;  // null for the raw row
        rows.push_back(Row{"raw MPI_Bcast", 0, {}, 0, 0});
        syncs.push_back(nullptr);
        for (bool packed_only : {false, true}) {
            for (int64_t mib : a.buckets_mib) {
                rlpt::weights::WeightSyncOptions o;
                o.bucket_bytes = mib << 20;
                if (packed_only) o.inplace_min_bytes = int64_t(1) << 40;
                rows.push_back(
                    Row{packed_only ? "sync, all packed" : "sync, in place >= 1 MiB", o.bucket_bytes, {}, 0, 0});
                syncs.push_back(rlpt::weights::make_weight_sync("mpi", world, o));
            }
        }
        std::vector<char> raw(static_cast<size_t>(total_bytes), 1);  // preallocated, warm
        uint64_t version = 0;
        auto run = [&](size_t v) {
            if (!syncs[v]) {
                for (int64_t off = 0; off < total_bytes; off += rlpt::comm::kMaxMessageBytes) {
                    const int n = static_cast<int>(std::min(rlpt::comm::kMaxMessageBytes, total_bytes - off));
                    RLPT_MPI_CHECK(MPI_Bcast(raw.data() + off, n, MPI_BYTE, 0, world.get()));
                }
                return;
            }
            version = root ? version + 1 : 0;
            syncs[v]->sync(tensors, version);
        };
        // Correctness first: every sync variant into zeroed receivers, checksums compared.
        uint64_t want = root_sum;
        world.bcast(&want, sizeof(want), 0);
        for (size_t v = 1; v < rows.size(); ++v) {
            if (!root) {
                for (auto& t : tensors) t.zero_();
            }
            run(v);
            const uint64_t sum = rlpt::weights::weights_checksum(tensors);
            const int64_t bad = world.allreduce_sum_i64(sum != want ? 1 : 0);
            RLPT_CHECK_KIND(InternalError, bad == 0, "{}: {} rank(s) hold different weights", rows[v].name, bad);
            rows[v].messages = syncs[v]->last_stats().n_messages;
            rows[v].inplace = syncs[v]->last_stats().n_inplace_messages;
        }
        for (int it = 0; it < a.warmup + a.iters; ++it) {
            for (size_t v = 0; v < rows.size(); ++v) {
                world.barrier();
                const double t0 = MPI_Wtime();
                run(v);
                const double dt = world.allreduce_max(MPI_Wtime() - t0);
                if (it >= a.warmup) rows[v].times.push_back(dt);
            }
        }
        for (auto& r : rows) std::sort(r.times.begin(), r.times.end());

        if (root) {
            const double raw_med = rows[0].times[rows[0].times.size() / 2];
            const double raw_best = rows[0].times.front();
            std::printf("weight sync: %d receiver(s), %zu tensors, %.1f MB (%.1fM fp32 params), "
                        "%d iters (time = max over ranks; variants interleaved)\n",
                        world.size() - 1, tensors.size(), total_bytes / 1e6, total_bytes / 4 / 1e6, a.iters);
            std::printf("%-26s %8s %5s %7s %9s %9s %7s %8s %8s\n", "variant", "bucket", "msgs", "inplace", "median ms",
                        "best ms", "GB/s", "med/raw", "best/raw");
            for (const Row& r : rows) {
                const double med = r.times[r.times.size() / 2];
                const double best = r.times.front();
                const double gbs = total_bytes / med / 1e9;
                std::string bucket = r.bucket_bytes ? std::to_string(r.bucket_bytes >> 20) + " MiB" : "-";
                std::printf("%-26s %8s %5lld %7lld %9.1f %9.1f %7.2f %8.2f %8.2f\n", r.name.c_str(), bucket.c_str(),
                            static_cast<long long>(r.messages), static_cast<long long>(r.inplace), med * 1e3,
                            best * 1e3, gbs, raw_med / med, raw_best / best);
                if (a.json) {
                    std::printf("{\"bench\":\"weight_sync\",\"git\":\"%s\",\"variant\":\"%s\","
                                "\"bucket_bytes\":%lld,\"world_size\":%d,\"bytes\":%lld,"
                                "\"time_s\":%.6f,\"best_time_s\":%.6f,\"algbw_gbs\":%.3f,"
                                "\"busbw_gbs\":%.3f,\"ratio_vs_raw\":%.3f,\"device\":\"cpu\"}\n",
                                RLPT_GIT_SHA, r.name.c_str(), static_cast<long long>(r.bucket_bytes), world.size(),
                                static_cast<long long>(total_bytes), med, best, gbs, gbs, raw_med / med);
                }
            }
            std::fflush(stdout);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_weight_sync: %s\n", e.what());
        mpi.mark_failed();
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
