// Shard-to-shard weight sync (rlpt/weights/weight_reshard.h) of the ~100M model between tensor-parallel
// layouts, against two peers measured in the same run on the same ranks:
//   raw p2p   - the same bytes per (sender, receiver) pair as one preallocated MPI_Isend/Irecv
//               each (what the reshard costs without planning, packing and buckets);
//   full bcast - MPI_Bcast of the whole model from the first sender to every receiver (what a
//               sync without resharding moves: every receiver gets the full model).
// World ranks [0, from) hold the actor block (tp = from), the rest `blocks` rollout blocks of tp
// `to`. The reshard is measured three ways: as the trainer runs it (the model's tensors in a
// shared weight arena, rlpt/comm/shared_arena.h, and single copy between same-host ranks: the
// copying end memcpys through its mapping of the peer's arena, src/weights/single_copy.h;
// "reshard_s"), with WeightSyncOptions::single_copy off (MPI messages and staging only;
// "reshard_mpi_s"), and with single copy from a copy of the same values in ordinary memory
// (process_vm_readv / writev; "reshard_cma_s"). Checks every received slice against the tp = 1
// model first, for each path.
// Beside each wall time: the CPU seconds the reshard and raw p2p take (copying plus polling in
// their waits), summed over the ranks ("*_cpu_s": with more ranks than cores, the copying's share
// of it, over the cores, bounds the wall time from below) and on the busiest rank
// ("*_cpu_busiest_s").
// One JSON line on rank 0.
// Usage: mpirun -np <from + blocks*to> rlpt_bench_reshard --from F --to T --blocks B [--iters N]
//        [--bucket-mb M (64, the default weight_sync.bucket_mb)]
//
// --colocated 1: the hybrid engine instead (weights::HeldReshard, every rank source and
// destination). Every rank holds the actor (tp F, trained by a ZeRO-3 TrainEngine over the ranks
// / F DP ranks) and a rollout copy of tp T with its storage released; one measurement is a whole
// generation window: fill the rollout copy from what the ranks hold of the actor (point to
// point, straight into the rollout's tensors), then free it. As the trainer runs it
// ("reshard_s"): the rollout tensors a rank holds whole are its held memory (aliased, nothing
// copied), the rest lands in the actor's gradient buffers (TrainEngine::lend_gradient_memory),
// zero_grad() after each window. Also without single copy ("reshard_mpi_s") and into a fresh
// block instead of the lent buffers ("reshard_fresh_s", what rlpt did before lending).
// Peers: a raw MPI_Allgather over the DP ranks of the actor bytes (each rank's share of its actor
// slice, into one preallocated buffer; plus for F > 1 an MPI_Allgather of the actor slice over
// the tp block) - what a gather-based fill moves; and raw p2p of exactly the bytes the reshard
// sent between each pair of ranks, one preallocated message per pair. The all-gathers into
// preallocated, warm buffers: taking turns with the trainer's window ("raw_allgather_s",
// "raw_p2p_s"; neither maps nor unmaps memory), on their own before everything
// ("*_alone_s"), and taking turns with the fresh-memory measurements ("raw_allgather_in_turns_s",
// a witness). Into output memory mapped for the call (weights::HostBlock: 2 MiB-aligned, huge-page
// advice) and unmapped after it: "raw_allgather_fresh_s"; "fresh_fill_s": memcpy of the rollout
// bytes from a warm buffer into such memory.
// Usage: mpirun -np N rlpt_bench_reshard --colocated 1 --from F --to T
//
// --zero3-dp D: a ZeRO-3 actor's weight sync to rollout ranks of their own. World ranks
// [0, F·D) hold the actor (tp F x dp D, ZeRO-3 TrainEngine), the next `blocks` blocks of T ranks
// the rollout. Two ways back to back: "gathered" (what send_weights did before: every actor rank
// holds the full parameters, hold_full_parameters, and the first block sends shard to shard,
// weights::WeightReshard) and "from shards" (weights::HeldReshard: every actor rank sends what it
// holds). Per way: the actor ranks' peak engine memory during the sync (TrainEngine::
// peak_memory_bytes after reset_peak_memory; from shards plus the exchange's staging) beside
// their persistent state, and the sync time; peer: raw p2p of the from-shards bytes per pair.
// Usage: mpirun -np F*D+B*T rlpt_bench_reshard --zero3-dp D --from F --to T --blocks B
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "bench_models.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/comm/shared_tensor.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/model/transformer.h"
#include "rlpt/weights/held_reshard.h"
#include "rlpt/weights/reshard_plan.h"

namespace {

using namespace rlpt;
using Clock = std::chrono::steady_clock;

struct Args {
    int64_t from = 2, to = 1, blocks = 1, iters = 3, threads = 1, bucket_mb = 64, colocated = 0, zero3_dp = 0;
};

Args parse(int argc, char** argv) {
    Args a;
    rlpt::bench::parse_int_options(argc, argv, "bench_reshard",
                                   {{"--from", &a.from},
                                    {"--to", &a.to},
                                    {"--blocks", &a.blocks},
                                    {"--iters", &a.iters},
                                    {"--threads", &a.threads},
                                    {"--bucket-mb", &a.bucket_mb},
                                    {"--colocated", &a.colocated},
                                    {"--zero3-dp", &a.zero3_dp}});
    return a;
}

// This process's CPU time (every thread), seconds.
double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One function's medians over the iterations: the slowest rank's wall time, the CPU time of all
// ranks together (what a host with fewer cores than ranks has to fit into its cores) and of the
// busiest rank; polling in waits counts in both.
struct Timing {
    double wall = 0.0, cpu_all = 0.0, cpu_busiest = 0.0;
};

// Per function, medians of `iters` runs, each started together after a barrier. The functions
// take turns (one run of each per iteration), so a change of the machine's load during the
// measurement falls on all of them alike.
std::vector<Timing> timed_cpu(const comm::Communicator& world, int64_t iters,
                              const std::vector<std::function<void()>>& fns) {
    std::vector<std::vector<double>> wall(fns.size()), all(fns.size()), busiest(fns.size());
    for (int64_t i = 0; i < iters; ++i) {
        for (size_t f = 0; f < fns.size(); ++f) {
            world.barrier();
            const double c0 = process_cpu_seconds();
            const auto t0 = Clock::now();
            fns[f]();
            const double w = std::chrono::duration<double>(Clock::now() - t0).count(), c = process_cpu_seconds() - c0;
            wall[f].push_back(world.allreduce_max(w));
            busiest[f].push_back(world.allreduce_max(c));
            all[f].push_back(world.allreduce_sum(c));
        }
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::vector<Timing> out;
    for (size_t f = 0; f < fns.size(); ++f) out.push_back({median(wall[f]), median(all[f]), median(busiest[f])});
    return out;
}

// The slowest rank's median wall time per function (timed_cpu).
std::vector<double> timed(const comm::Communicator& world, int64_t iters,
                          const std::vector<std::function<void()>>& fns) {
    std::vector<double> out;
    for (const Timing& t : timed_cpu(world, iters, fns)) out.push_back(t.wall);
    return out;
}

double timed(const comm::Communicator& world, int64_t iters, const std::function<void()>& fn) {
    return timed(world, iters, std::vector<std::function<void()>>{fn})[0];
}

// Every parameter of `m` must be its slice of the seed-11 tp = 1 model.
void check_slices(model::CausalLM& m, const model::ModelArgs& args, int me) {
    auto whole = model::make_random_causal_lm(args, 11);
    auto full = whole->named_parameters();
    for (const auto& item : m.named_parameters()) {
        const auto s = model::shard_spec(item.key(), m.tp_layout());
        auto expected = s.dim < 0 ? full[item.key()] : full[item.key()].narrow(s.dim, s.start, s.real());
        auto got = s.dim < 0 ? item.value() : item.value().narrow(s.dim, 0, s.real());
        RLPT_CHECK(torch::equal(got, expected), "bench_reshard: rank {} holds a wrong '{}'", me, item.key());
    }
}

// Bytes of the whole model (fp32) from a plan's full shapes.
int64_t full_model_bytes(const weights::ReshardPlan& plan) {
    int64_t bytes = 0;
    for (const auto& s : plan.full_shapes) {
        int64_t n = 4;
        for (auto d : s) n *= d;
        bytes += n;
    }
    return bytes;
}

// Raw p2p of exactly a region exchange's last bytes per pair, one warm preallocated message each
// way (for timed()).
std::function<void()> raw_p2p_like(const comm::Communicator& world, const weights::RegionExchangeStats& xs) {
    auto out_bufs = std::make_shared<std::vector<torch::Tensor>>(),
         in_bufs = std::make_shared<std::vector<torch::Tensor>>();
    for (int r = 0; r < world.size(); ++r) {
        out_bufs->push_back(torch::ones({xs.sent_to[static_cast<size_t>(r)]}, torch::kUInt8));
        in_bufs->push_back(torch::ones({xs.received_from[static_cast<size_t>(r)]}, torch::kUInt8));
    }
    return [&world, out_bufs, in_bufs] {
        std::vector<MPI_Request> reqs;
        for (int r = 0; r < world.size(); ++r) {
            const auto i = static_cast<size_t>(r);
            if ((*in_bufs)[i].numel() > 0)
                comm::irecv_bytes((*in_bufs)[i].data_ptr(), (*in_bufs)[i].numel(), r, 9, world.get(), reqs);
            if ((*out_bufs)[i].numel() > 0)
                comm::isend_bytes((*out_bufs)[i].data_ptr(), (*out_bufs)[i].numel(), r, 9, world.get(), reqs);
        }
        comm::wait_all(reqs, comm::Deadline::never(), "raw p2p");
    };
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
    const auto plan = weights::reshard_plan(*m, m->tp_layout(), args, a.from, a.to, a.blocks, &names);
    std::vector<torch::Tensor> params;
    for (auto& p : m->named_parameters()) params.push_back(p.value());
    // The same values in ordinary memory (the CMA measurement), then the model's own tensors
    // moved into a shared arena, as the actor's and a separate rollout's are in the trainer.
    std::vector<torch::Tensor> plain_params;
    for (auto& p : params) plain_params.push_back(p.detach().clone());
    {
        auto shared = params;
        RLPT_CHECK(comm::share_tensors(shared, "bench-params"),
                   "bench_reshard: no shared arena (RLPT_SHARED_WEIGHTS=0?)");
    }
    weights::WeightSyncOptions opts;
    opts.bucket_bytes = a.bucket_mb << 20;
    // The reshard with single copy on (tensors in arenas: mapped), off (MPI only) and on with the
    // tensors in ordinary memory (CMA); each warmed up and checked (receivers zeroed first).
    uint64_t version = sender ? 1 : 0;
    std::vector<std::unique_ptr<weights::WeightReshard>> reshards;
    for (int variant = 0; variant < 3; ++variant) {
        opts.single_copy = variant != 1;
        reshards.push_back(weights::make_weight_reshard("mpi", world, opts));
        auto& ps = variant == 2 ? plain_params : params;
        if (!sender) {
            torch::NoGradGuard ng;
            for (auto& p : ps) p.zero_();
        }
        reshards.back()->sync(plan, names, ps, version);
        if (!sender && variant == 2) {
            for (size_t i = 0; i < params.size(); ++i)
                RLPT_CHECK(torch::equal(params[i], plain_params[i]),
                           "bench_reshard: the CMA sync differs at parameter {}", i);
        } else if (!sender) {
            check_slices(*m, args, me);
        }
    }

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
    auto raw = [&] {
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
    };

    // The whole model from sender 0 to every receiver.
    const int64_t full_bytes = full_model_bytes(plan);
    auto bcast_comm = world.split(me == 0 || !sender ? 0 : 1, me);
    torch::Tensor full_buffer = me == 0 || !sender ? torch::ones({full_bytes}, torch::kUInt8) : torch::Tensor();
    auto bcast = [&] {
        if (full_buffer.defined()) bcast_comm.bcast(full_buffer.data_ptr(), full_bytes, 0);
    };
    const auto t = timed_cpu(world, a.iters,
                             {[&] { reshards[0]->sync(plan, names, params, version); },
                              [&] { reshards[1]->sync(plan, names, params, version); }, raw, bcast,
                              [&] { reshards[2]->sync(plan, names, plain_params, version); }});
    const double t_reshard = t[0].wall, t_reshard_mpi = t[1].wall, t_raw = t[2].wall, t_bcast = t[3].wall,
                 t_cma = t[4].wall;
    const auto st = reshards[0]->last_stats(), st_mpi = reshards[1]->last_stats(), st_cma = reshards[2]->last_stats();
    const int64_t mapped_messages = world.allreduce_sum_i64(st.n_mapped_messages);
    const int64_t cma_mapped = world.allreduce_sum_i64(st_cma.n_mapped_messages);
    RLPT_CHECK(cma_mapped == 0, "bench_reshard: {} messages of the CMA variant went through a mapping", cma_mapped);

    const auto recv = world.allgather_i64(st.bytes_received), sent = world.allgather_i64(st.bytes_sent);
    const auto copied = world.allgather_i64(st.packed_bytes + st.unpacked_bytes);
    const auto messages = world.allgather_i64(st.n_messages);
    // The phases of the last timed sync, slowest rank each.
    const double plan_s = world.allreduce_max(st.plan_seconds), wait_s = world.allreduce_max(st.wait_seconds),
                 copy_s = world.allreduce_max(st.pack_seconds + st.unpack_seconds),
                 agree_s = world.allreduce_max(st.agree_seconds);
    const int64_t reused = -world.allreduce_max_i64(st.reused_transfers ? -1 : 0);  // 1: every rank reused the list
    const int64_t single_copy_messages = world.allreduce_max_i64(st.n_single_copy_messages);
    const double sync_s = world.allreduce_max(st.seconds), sync_min_s = -world.allreduce_max(-st.seconds);
    const int64_t mpi_copied = world.allreduce_max_i64(st_mpi.packed_bytes + st_mpi.unpacked_bytes);
    auto most = [](const std::vector<int64_t>& v) {
        return static_cast<long long>(*std::max_element(v.begin(), v.end()));
    };
    if (me == 0) {
        std::printf(
            "{\"git_sha\": \"%s\", \"bucket_mb\": %lld, \"from\": %lld, \"to\": %lld, \"blocks\": %lld, \"ranks\": %d, "
            "\"plan_bytes\": %lld, "
            "\"full_model_bytes\": %lld, \"max_bytes_received\": %lld, \"max_bytes_sent\": %lld, \"reshard_s\": %.6f, "
            "\"raw_p2p_s\": %.6f, \"full_bcast_s\": %.6f, \"max_bytes_copied\": %lld, \"max_messages\": %lld, "
            "\"plan_s\": %.6f, \"copy_s\": %.6f, \"wait_s\": %.6f, \"reshard_mpi_s\": %.6f, "
            "\"max_single_copy_messages\": %lld, \"mpi_max_bytes_copied\": %lld, \"sync_s\": %.6f, "
            "\"sync_min_s\": %.6f, \"agree_s\": %.6f, \"reused\": %lld, \"reshard_cpu_s\": %.6f, "
            "\"reshard_cpu_busiest_s\": %.6f, \"raw_p2p_cpu_s\": %.6f, \"raw_p2p_cpu_busiest_s\": %.6f, "
            "\"reshard_cma_s\": %.6f, \"reshard_cma_cpu_s\": %.6f, \"reshard_cma_cpu_busiest_s\": %.6f, "
            "\"mapped_messages\": %lld}\n",
            RLPT_GIT_SHA, static_cast<long long>(a.bucket_mb), static_cast<long long>(a.from),
            static_cast<long long>(a.to), static_cast<long long>(a.blocks), world.size(),
            static_cast<long long>(st.plan_bytes), static_cast<long long>(full_bytes), most(recv), most(sent),
            t_reshard, t_raw, t_bcast, most(copied), most(messages), plan_s, copy_s, wait_s, t_reshard_mpi,
            static_cast<long long>(single_copy_messages), static_cast<long long>(mpi_copied), sync_s, sync_min_s,
            agree_s, static_cast<long long>(reused), t[0].cpu_all, t[0].cpu_busiest, t[2].cpu_all, t[2].cpu_busiest,
            t_cma, t[4].cpu_all, t[4].cpu_busiest, static_cast<long long>(mapped_messages));
    }
}

void run_colocated(const Args& a, const comm::Communicator& world) {
    const int n = world.size(), me = world.rank();
    RLPT_CHECK(n % a.from == 0 && n % a.to == 0,
               "bench_reshard --colocated: {} ranks do not split into tp {} and tp {}", n, a.from, a.to);
    auto actor_mp = world.split(me / static_cast<int>(a.from), me);
    auto actor_dp = world.split(me % static_cast<int>(a.from), me);
    auto rollout_mp = world.split(me / static_cast<int>(a.to), me);
    auto actor_tp = a.from > 1 ? model::TensorParallel::over(actor_mp, torch::kCPU) : nullptr;
    auto rollout_tp = a.to > 1 ? model::TensorParallel::over(rollout_mp, torch::kCPU) : nullptr;
    const auto args = bench::llama_100m();
    auto actor = model::make_random_causal_lm(args, 11, torch::kFloat32, torch::kCPU, actor_tp);
    int64_t actor_bytes = 0;
    for (const auto& p : actor->parameters()) actor_bytes += p.numel() * 4;
    engine::OptimOptions opts;
    opts.zero_stage = 3;
    engine::TensorParallelInfo tpi;
    if (a.from > 1) {
        tpi.block = &actor_mp;
        tpi.not_counted = model::uncounted_parameters(*actor, actor->tp_layout());
    }
    engine::TrainEngine engine(actor, actor_dp, opts, 5, tpi);
    const int64_t shard_bytes = engine.memory_bytes().params;
    auto rollout = std::make_shared<model::CausalLM>(args, torch::kFloat32, torch::kCPU, rollout_tp);
    weights::release_parameter_storage(*rollout);
    weights::WeightSyncOptions xopts;
    xopts.bucket_bytes = a.bucket_mb << 20;
    const auto& src_layout = actor->tp_layout();
    // The window with single copy on and off (one exchange and one HeldReshard each, its transfer
    // list computed at the warm-up and reused); each warmed up and checked.
    std::vector<std::unique_ptr<weights::RegionExchange>> exchanges;
    std::vector<std::unique_ptr<weights::HeldReshard>> resharders;
    // Stats per way: 0 single copy and 1 MPI-only, both as the trainer runs them (the rollout copy
    // in the actor's gradient buffers, TrainEngine::lend_gradient_memory); 2 and 3 the same into a
    // fresh block (what rlpt did before lending).
    std::vector<weights::HeldReshardStats> window_stats(4);
    auto window = [&](size_t k, bool lend) {
        const weights::HeldSource src{engine.held_parameters(), src_layout.tp, src_layout.rank};
        window_stats[k + (lend ? 0 : 2)] =
            resharders[k]->run(&src, rollout.get(), rollout->tp_layout(),
                               lend ? engine.lend_gradient_memory() : engine::ScratchMemory{});
        weights::release_parameter_storage(*rollout);
    };
    // What the trainer does before the next backward; the lease must be gone by then.
    auto zero_grad = [&] { engine.zero_grad(); };
    for (bool single_copy : {true, false}) {
        xopts.single_copy = single_copy;
        exchanges.push_back(weights::make_region_exchange("mpi", world, xopts));
        resharders.push_back(std::make_unique<weights::HeldReshard>(args, *exchanges.back()));
        window(resharders.size() - 1, false);
        for (bool lend : {false, true}) {
            const weights::HeldSource src{engine.held_parameters(), src_layout.tp, src_layout.rank};
            resharders.back()->run(&src, rollout.get(), rollout->tp_layout(),
                                   lend ? engine.lend_gradient_memory() : engine::ScratchMemory{});
            check_slices(*rollout, args, me);
            weights::release_parameter_storage(*rollout);
            engine.zero_grad();
        }
    }
    const auto xs = exchanges[0]->last_stats();  // the warm-up's bytes per pair
    // The same bytes through raw all-gathers into preallocated buffers.
    const int64_t dp = actor_dp.size(), share = (actor_bytes + dp - 1) / dp;
    auto send = torch::ones({share}, torch::kUInt8), gathered = torch::empty({share * dp}, torch::kUInt8);
    auto tp_send = torch::ones({actor_bytes}, torch::kUInt8);
    auto tp_gathered = a.from > 1 ? torch::empty({actor_bytes * a.from}, torch::kUInt8) : torch::Tensor();
    auto raw = [&] {
        RLPT_MPI_CHECK(MPI_Allgather(send.data_ptr(), static_cast<int>(share), MPI_BYTE, gathered.data_ptr(),
                                     static_cast<int>(share), MPI_BYTE, actor_dp.get()));
        if (a.from > 1)
            RLPT_MPI_CHECK(MPI_Allgather(tp_send.data_ptr(), static_cast<int>(actor_bytes), MPI_BYTE,
                                         tp_gathered.data_ptr(), static_cast<int>(actor_bytes), MPI_BYTE,
                                         actor_mp.get()));
    };
    // The same all-gathers, each into output memory of its own for this call (a DP all-gather of
    // one rank is no gather at all: the tp all-gather then starts from the slice itself).
    auto raw_fresh = [&] {
        if (dp > 1) {
            weights::HostBlock out(static_cast<size_t>(share * dp));
            RLPT_MPI_CHECK(MPI_Allgather(send.data_ptr(), static_cast<int>(share), MPI_BYTE, out.data(),
                                         static_cast<int>(share), MPI_BYTE, actor_dp.get()));
        }
        if (a.from > 1) {
            weights::HostBlock out(static_cast<size_t>(actor_bytes * a.from));
            RLPT_MPI_CHECK(MPI_Allgather(tp_send.data_ptr(), static_cast<int>(actor_bytes), MPI_BYTE, out.data(),
                                         static_cast<int>(actor_bytes), MPI_BYTE, actor_mp.get()));
        }
    };
    // The rollout's bytes from a warm buffer into fresh memory: the window's floor on this host.
    const int64_t rollout_bytes = world.allreduce_max_i64(window_stats[2].dst_bytes);
    auto warm_rollout = torch::ones({rollout_bytes}, torch::kUInt8);
    auto fresh_fill = [&] {
        weights::HostBlock out(static_cast<size_t>(rollout_bytes));
        std::memcpy(out.data(), warm_rollout.data_ptr(), static_cast<size_t>(rollout_bytes));
    };
    // Exactly the reshard's bytes per pair, one warm preallocated message each way.
    const auto p2p = raw_p2p_like(world, xs);
    // The warm peers first, on their own ("*_alone_s"). Then the window as the trainer runs it
    // (its copy in the actor's lent gradient buffers and its own held memory, nothing mapped or
    // unmapped) taking turns with the same warm peers, each window followed by the zero_grad()
    // of the next training step (timed on its own: the gradient buffers are zeroed at every step
    // whether or not they were lent). Last, the windows and peers that map fresh memory, taking
    // turns, with the warm all-gather again as a witness: right after something unmaps a
    // rollout-sized block the same warm all-gather measured 3-4x slower on the dev VM
    // (scripts/bench_reshard.sh), so these are kept apart from the headline group.
    const auto t_alone = timed(world, a.iters, {raw, p2p});
    const auto t_lent = timed(world, a.iters, {[&] { window(0, true); }, zero_grad, raw, p2p});
    const auto t =
        timed(world, a.iters,
              {[&] { window(1, true); }, zero_grad, [&] { window(0, false); }, zero_grad, raw_fresh, fresh_fill, raw});
    const double t_reshard = t_lent[0], t_zero_lent = t_lent[1], t_raw = t_lent[2], t_p2p = t_lent[3],
                 t_reshard_mpi = t[0], t_reshard_fresh = t[2], t_zero_fresh = t[3], t_raw_fresh = t[4],
                 t_fresh_fill = t[5], t_raw_turns = t[6], t_raw_alone = t_alone[0], t_p2p_alone = t_alone[1];
    const auto& st = window_stats[0];
    const auto& st_mpi = window_stats[1];
    const int64_t min_scratch = world.allreduce_min_i64(st.scratch_bytes);
    const int64_t min_aliased = world.allreduce_min_i64(st.aliased_bytes);
    // Bytes of the lent window's copy in fresh memory (neither aliased nor in the lent buffers).
    const int64_t max_fresh = world.allreduce_max_i64(st.dst_bytes - st.aliased_bytes - st.scratch_bytes);
    const double wait_s = world.allreduce_max(st.wait_seconds), copy_s = world.allreduce_max(st.copy_seconds);
    const int64_t max_recv = world.allreduce_max_i64(st.received_bytes);
    const int64_t max_staging = world.allreduce_max_i64(st.staging_bytes);
    const int64_t max_messages = world.allreduce_max_i64(st.n_messages);
    const int64_t single_copy_messages = world.allreduce_max_i64(exchanges[0]->last_stats().n_single_copy_messages);
    const int64_t mapped_messages = world.allreduce_sum_i64(exchanges[0]->last_stats().n_mapped_messages);
    const int64_t mpi_max_staging = world.allreduce_max_i64(st_mpi.staging_bytes);
    if (me == 0) {
        std::printf(
            "{\"git_sha\": \"%s\", \"colocated\": 1, \"from\": %lld, \"to\": %lld, \"ranks\": %d, \"dp\": %lld, "
            "\"actor_slice_bytes\": %lld, \"zero3_shard_bytes\": %lld, \"peak_param_bytes\": %lld, "
            "\"rollout_bytes\": %lld, \"max_bytes_received\": %lld, \"max_messages\": %lld, \"reshard_s\": %.6f, "
            "\"raw_allgather_s\": %.6f, \"raw_p2p_s\": %.6f, \"wait_s\": %.6f, \"copy_s\": %.6f, "
            "\"reshard_mpi_s\": %.6f, \"max_single_copy_messages\": %lld, \"mpi_peak_param_bytes\": %lld, "
            "\"raw_allgather_fresh_s\": %.6f, \"fresh_fill_s\": %.6f, \"raw_allgather_in_turns_s\": %.6f, "
            "\"mapped_messages\": %lld, \"reshard_fresh_s\": %.6f, \"zero_grad_after_lent_s\": %.6f, "
            "\"zero_grad_after_fresh_s\": %.6f, \"min_scratch_bytes\": %lld, \"min_aliased_bytes\": %lld, "
            "\"max_fresh_bytes\": %lld, \"raw_allgather_alone_s\": %.6f, \"raw_p2p_alone_s\": %.6f}\n",
            RLPT_GIT_SHA, static_cast<long long>(a.from), static_cast<long long>(a.to), n, static_cast<long long>(dp),
            static_cast<long long>(actor_bytes), static_cast<long long>(shard_bytes),
            static_cast<long long>(shard_bytes + max_staging), static_cast<long long>(st.dst_bytes),
            static_cast<long long>(max_recv), static_cast<long long>(max_messages), t_reshard, t_raw, t_p2p, wait_s,
            copy_s, t_reshard_mpi, static_cast<long long>(single_copy_messages),
            static_cast<long long>(shard_bytes + mpi_max_staging), t_raw_fresh, t_fresh_fill, t_raw_turns,
            static_cast<long long>(mapped_messages), t_reshard_fresh, t_zero_lent, t_zero_fresh,
            static_cast<long long>(min_scratch), static_cast<long long>(min_aliased), static_cast<long long>(max_fresh),
            t_raw_alone, t_p2p_alone);
    }
}

void run_zero3_sync(const Args& a, const comm::Communicator& world) {
    const int me = world.rank(), n_actor = static_cast<int>(a.from * a.zero3_dp);
    RLPT_CHECK(world.size() == n_actor + a.blocks * a.to, "bench_reshard --zero3-dp: needs {} ranks, got {}",
               n_actor + a.blocks * a.to, world.size());
    const bool actor_rank = me < n_actor;
    const int tp = static_cast<int>(actor_rank ? a.from : a.to), rr = actor_rank ? me : me - n_actor;
    auto role = world.split(actor_rank ? 0 : 1, me);
    auto mp = role.split(rr / tp, rr % tp);
    auto dp = role.split(rr % tp, rr / tp);
    auto tpo = tp > 1 ? model::TensorParallel::over(mp, torch::kCPU) : nullptr;
    const auto args = bench::llama_100m();
    auto m = model::make_random_causal_lm(args, actor_rank ? 11 : 99, torch::kFloat32, torch::kCPU, tpo);
    std::unique_ptr<engine::TrainEngine> engine;
    if (actor_rank) {
        engine::OptimOptions opts;
        opts.zero_stage = 3;
        engine::TensorParallelInfo tpi;
        if (tp > 1) {
            tpi.block = &mp;
            tpi.not_counted = model::uncounted_parameters(*m, m->tp_layout());
        }
        engine = std::make_unique<engine::TrainEngine>(m, dp, opts, 5, tpi);
    }
    weights::WeightSyncOptions opts;
    opts.bucket_bytes = a.bucket_mb << 20;
    const int64_t persistent = engine ? engine->memory_bytes().total() : 0;

    // Before: every actor rank gathers, the first block sends shard to shard.
    const bool in_block = me < a.from || !actor_rank;
    auto block_comm = world.split(in_block ? 0 : 1, me);
    std::vector<std::string> names;
    const auto plan = weights::reshard_plan(*m, m->tp_layout(), args, a.from, a.to, a.blocks, &names);
    auto reshard = in_block ? weights::make_weight_reshard("mpi", block_comm, opts) : nullptr;
    std::vector<torch::Tensor> params;
    for (auto& p : m->named_parameters()) params.push_back(p.value());
    uint64_t version = actor_rank ? 1 : 0;
    int64_t gathered_peak = 0;
    const auto gathered_sync = [&] {
        if (engine) engine->reset_peak_memory();
        const auto hold = engine ? engine->hold_full_parameters() : nullptr;
        if (reshard) reshard->sync(plan, names, params, version);
        if (engine) gathered_peak = std::max(gathered_peak, engine->peak_memory_bytes());
    };
    gathered_sync();  // warm-up
    const double t_gathered = timed(world, a.iters, gathered_sync);

    // After: every actor rank sends from its shards.
    auto exchange = weights::make_region_exchange("mpi", world, opts);
    weights::HeldReshard resharder(args, *exchange);
    int64_t shards_peak = 0;
    weights::HeldReshardStats st;
    const auto shards_sync = [&] {
        if (engine) engine->reset_peak_memory();
        if (engine) {
            const weights::HeldSource src{engine->held_parameters(), m->tp_layout().tp, m->tp_layout().rank};
            st = resharder.run(&src, nullptr, {});
            shards_peak = std::max(shards_peak, engine->peak_memory_bytes() + st.staging_bytes);
        } else {
            st = resharder.run(nullptr, m.get(), m->tp_layout());
        }
    };
    if (!actor_rank) {  // the check needs values other than the actor's first
        torch::NoGradGuard ng;
        for (auto& p : m->parameters()) p.zero_();
    }
    shards_sync();  // warm-up and the correctness check
    if (!actor_rank) check_slices(*m, args, me);
    const double t_shards = timed(world, a.iters, shards_sync);
    const double t_p2p = timed(world, a.iters, raw_p2p_like(world, exchange->last_stats()));
    const int64_t full_bytes = full_model_bytes(plan);
    const int64_t max_persistent = world.allreduce_max_i64(persistent);
    const int64_t max_gathered = world.allreduce_max_i64(gathered_peak),
                  max_shards = world.allreduce_max_i64(shards_peak);
    const int64_t max_sent = world.allreduce_max_i64(st.sent_bytes),
                  min_sent = world.allreduce_min_i64(actor_rank ? st.sent_bytes : INT64_MAX);
    if (me == 0) {
        std::printf(
            "{\"git_sha\": \"%s\", \"zero3_dp\": %lld, \"from\": %lld, \"to\": %lld, \"blocks\": %lld, \"ranks\": %d, "
            "\"bucket_mb\": %lld, \"full_model_bytes\": %lld, \"actor_persistent_bytes\": %lld, "
            "\"gathered_peak_bytes\": %lld, "
            "\"shards_peak_bytes\": %lld, \"max_actor_sent_bytes\": %lld, \"min_actor_sent_bytes\": %lld, "
            "\"gathered_s\": %.6f, \"shards_s\": %.6f, \"raw_p2p_s\": %.6f}\n",
            RLPT_GIT_SHA, static_cast<long long>(a.zero3_dp), static_cast<long long>(a.from),
            static_cast<long long>(a.to), static_cast<long long>(a.blocks), world.size(),
            static_cast<long long>(a.bucket_mb), static_cast<long long>(full_bytes),
            static_cast<long long>(max_persistent), static_cast<long long>(max_gathered),
            static_cast<long long>(max_shards), static_cast<long long>(max_sent), static_cast<long long>(min_sent),
            t_gathered, t_shards, t_p2p);
    }
}

}  // namespace

int main(int argc, char** argv) {
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    try {
        const Args args = parse(argc, argv);
        torch::set_num_threads(static_cast<int>(args.threads));
        if (args.zero3_dp > 0) {
            run_zero3_sync(args, rlpt::comm::Communicator::world());
        } else if (args.colocated != 0) {
            run_colocated(args, rlpt::comm::Communicator::world());
        } else {
            run(args, rlpt::comm::Communicator::world());
        }
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_reshard: %s\n", e.what());
        rlpt::comm::MpiRuntime::abort(1);
    }
    return 0;
}
