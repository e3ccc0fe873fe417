// Shard-to-shard weight sync (comm/weight_reshard.h) of the ~100M model between tensor-parallel
// layouts, against two peers measured in the same run on the same ranks:
//   raw p2p   - the same bytes per (sender, receiver) pair as one preallocated MPI_Isend/Irecv
//               each (what the reshard costs without planning, packing and buckets);
//   full bcast - MPI_Bcast of the whole model from the first sender to every receiver (what a
//               sync without resharding moves: every receiver gets the full model).
// World ranks [0, from) hold the actor block (tp = from), the rest `blocks` rollout blocks of tp
// `to`. Checks every received slice against the tp = 1 model first. One JSON line on rank 0.
// Usage: mpirun -np <from + blocks*to> rlpt_bench_reshard --from F --to T --blocks B [--iters N]
//        [--bucket-mb M (64, the default weight_sync.bucket_mb)]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/model/reshard_plan.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"

namespace {

using namespace rlpt;
using Clock = std::chrono::steady_clock;

struct Args {
    int64_t from = 2, to = 1, blocks = 1, iters = 3, threads = 1, bucket_mb = 64;
};

Args parse(int argc, char** argv) {
    Args a;
    rlpt::bench::parse_int_options(argc, argv, "bench_reshard",
                                   {{"--from", &a.from}, {"--to", &a.to}, {"--blocks", &a.blocks}, {"--iters", &a.iters},
                                    {"--threads", &a.threads}, {"--bucket-mb", &a.bucket_mb}});
    return a;
}

// Slowest rank's median time of `iters` runs of `fn`, each started together after a barrier.
template <typename Fn>
double timed(const comm::Communicator& world, int64_t iters, Fn&& fn) {
    std::vector<double> ts;
    for (int64_t i = 0; i < iters; ++i) {
        world.barrier();
        const auto t0 = Clock::now();
        fn();
        ts.push_back(world.allreduce_max(std::chrono::duration<double>(Clock::now() - t0).count()));
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

void run(const Args& a, const comm::Communicator& world) {
    RLPT_CHECK(world.size() == a.from + a.blocks * a.to, "bench_reshard: needs {} ranks, got {}",
               a.from + a.blocks * a.to, world.size());
    const int me = world.rank();
    const bool sender = me < a.from;
    const int64_t tp = sender ? a.from : a.to;
    auto mp = world.split(sender ? 0 : 1 + static_cast<int>((me - a.from) / a.to), me);
    auto tpo = tp > 1 ? model::TensorParallel::over(mp, torch::kCPU) : nullptr;
    const auto args = bench::llama_100m();
    auto m = model::make_random_causal_lm(args, sender ? 11 : 99, torch::kFloat32, torch::kCPU, tpo);
    std::vector<std::string> names;
    const auto plan = model::reshard_plan(*m, m->tp_layout(), args, a.from, a.to, a.blocks, &names);
    std::vector<torch::Tensor> params;
    for (auto& p : m->named_parameters()) params.push_back(p.value());
    comm::WeightSyncOptions opts;
    opts.bucket_bytes = a.bucket_mb << 20;
    auto reshard = comm::make_weight_reshard("mpi", world, opts);
    uint64_t version = sender ? 1 : 0;
    reshard->sync(plan, names, params, version);  // warm-up and the correctness check
    if (!sender) {
        auto whole = model::make_random_causal_lm(args, 11);
        auto full = whole->named_parameters();
        for (const auto& item : m->named_parameters()) {
            const auto s = model::shard_spec(item.key(), m->tp_layout());
            auto expected = s.dim < 0 ? full[item.key()] : full[item.key()].narrow(s.dim, s.start, s.real());
            auto got = s.dim < 0 ? item.value() : item.value().narrow(s.dim, 0, s.real());
            RLPT_CHECK(torch::equal(got, expected), "bench_reshard: rank {} received a wrong '{}'", me, item.key());
        }
    }
    const double t_reshard = timed(world, a.iters, [&] { reshard->sync(plan, names, params, version); });
    const auto st = reshard->last_stats();

    // Raw p2p of the same bytes per pair, one message each.
    std::map<int, int64_t> peer_bytes;
    for (const auto& p : plan.pieces) {
        if (p.src != me && p.dst != me) continue;
        int64_t n = 4;
        auto shape = plan.full_shapes[static_cast<size_t>(p.tensor)];
        if (p.dim >= 0) shape[static_cast<size_t>(p.dim)] = p.length;
        for (auto d : shape) n *= d;
        peer_bytes[p.src == me ? p.dst : p.src] += n;
    }
    std::vector<torch::Tensor> raw_buffers;
    for (const auto& kv : peer_bytes) raw_buffers.push_back(torch::ones({kv.second}, torch::kUInt8));
    const double t_raw = timed(world, a.iters, [&] {
        std::vector<MPI_Request> reqs(peer_bytes.size(), MPI_REQUEST_NULL);
        size_t i = 0;
        for (const auto& kv : peer_bytes) {
            auto* data = raw_buffers[i].data_ptr();
            const int n = static_cast<int>(kv.second);
            if (sender) RLPT_MPI_CHECK(MPI_Isend(data, n, MPI_BYTE, kv.first, 9, world.get(), &reqs[i]));
            else RLPT_MPI_CHECK(MPI_Irecv(data, n, MPI_BYTE, kv.first, 9, world.get(), &reqs[i]));
            ++i;
        }
        comm::wait_all(reqs, comm::Deadline::never(), "raw p2p");
    });

    // The whole model from sender 0 to every receiver.
    int64_t full_bytes = 0;
    for (const auto& s : plan.full_shapes) {
        int64_t n = 4;
        for (auto d : s) n *= d;
        full_bytes += n;
    }
    auto bcast_comm = world.split(me == 0 || !sender ? 0 : 1, me);
    torch::Tensor full_buffer = me == 0 || !sender ? torch::ones({full_bytes}, torch::kUInt8) : torch::Tensor();
    const double t_bcast = timed(world, a.iters, [&] {
        if (full_buffer.defined()) bcast_comm.bcast(full_buffer.data_ptr(), full_bytes, 0);
    });

    const auto recv = world.allgather_i64(st.bytes_received), sent = world.allgather_i64(st.bytes_sent);
    if (me == 0) {
        std::printf(
            "{\"git_sha\": \"%s\", \"bucket_mb\": %lld, \"from\": %lld, \"to\": %lld, \"blocks\": %lld, \"ranks\": %d, \"plan_bytes\": %lld, "
            "\"full_model_bytes\": %lld, \"max_bytes_received\": %lld, \"max_bytes_sent\": %lld, \"reshard_s\": %.6f, "
            "\"raw_p2p_s\": %.6f, \"full_bcast_s\": %.6f}\n",
            RLPT_GIT_SHA, static_cast<long long>(a.bucket_mb), static_cast<long long>(a.from), static_cast<long long>(a.to),
            static_cast<long long>(a.blocks), world.size(), static_cast<long long>(st.plan_bytes),
            static_cast<long long>(full_bytes), static_cast<long long>(*std::max_element(recv.begin(), recv.end())),
            static_cast<long long>(*std::max_element(sent.begin(), sent.end())), t_reshard, t_raw, t_bcast);
    }
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
        std::fprintf(stderr, "bench_reshard: %s\n", e.what());
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
