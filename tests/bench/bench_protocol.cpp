// Protocol benchmark (issue: foundation). Run through scripts/bench_protocol.sh, which
// launches it at several world sizes and prints one table. Each run checks correctness
// first, then times warm iterations, and prints JSON lines:
//   dispatch: controller round trip of an empty call to every worker vs a raw MPI round of
//             64-byte send + 64-byte reply to every worker;
//   transfer: scatter + gather of a Batch (dp_split in, concat out) vs raw MPI_Scatterv +
//             MPI_Gatherv of the same bytes into preallocated buffers;
//   idle:     CPU used by waiting ranks (workers while the controller sleeps, the
//             controller while a worker sleeps).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "rlpt/build_config.h"
#include "rlpt/comm/topology.h"
#include "rlpt/config/config.h"
#include "rlpt/protocol/runtime.h"

using namespace rlpt;
using namespace rlpt::protocol;

namespace {

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
double cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

enum class BenchMethod : uint16_t { kNoop, kEcho, kSleep, kIdleReport, kCount };

class BenchWorker : public RoleWorker {};
Batch noop(RoleWorker&, WorkerContext&, const Batch&) { return Batch(0); }
Batch echo(RoleWorker&, WorkerContext&, const Batch& in) { return in; }
Batch sleep_ms(RoleWorker&, WorkerContext&, const Batch& in) {
    std::this_thread::sleep_for(std::chrono::milliseconds(in.meta_int("ms")));
    return Batch(0);
}
// This process's CPU seconds and the wall clock, to measure what a waiting rank costs.
Batch idle_report(RoleWorker&, WorkerContext&, const Batch&) {
    Batch out(1);
    out.set("idle", torch::tensor({cpu_s(), now_s()}, torch::kFloat64).view({1, 2}));
    return out;
}
std::unique_ptr<RoleWorker> make(WorkerContext&) { return std::make_unique<BenchWorker>(); }

std::vector<RoleSpec> registry() {
    RoleSpec s;
    s.name = "actor";
    s.method_count = static_cast<uint16_t>(BenchMethod::kCount);
    s.factory = make;
    using protocol::method;
    s.methods = {
        method(BenchMethod::kNoop, "noop", noop),
        method(BenchMethod::kEcho, "echo", echo).split_over_dp().takes(protocol::tensors("x")).concat_outputs({}),
        method(BenchMethod::kSleep, "sleep", sleep_ms),
        method(BenchMethod::kIdleReport, "idle_report", idle_report).every_output({}),
    };
    return {s};
}

void json(const std::string& kind, int workers, const std::string& fields) {
    std::printf("{\"bench\":\"protocol\",\"kind\":\"%s\",\"workers\":%d,\"git\":\"%s\",%s}\n", kind.c_str(), workers,
                RLPT_GIT_SHA, fields.c_str());
    std::fflush(stdout);
}

// Raw MPI: 64 bytes to every worker, 64 bytes back from every worker.
double raw_round_us(MPI_Comm comm, int iters) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char buf[64] = {0};
    std::vector<char> in(64 * static_cast<size_t>(size));
    std::vector<MPI_Request> reqs(2 * static_cast<size_t>(size));
    double t0 = 0;
    for (int i = -50; i < iters; ++i) {
        if (i == 0) t0 = now_s();
        if (rank == 0) {
            int k = 0;
            for (int w = 1; w < size; ++w) MPI_Isend(buf, 64, MPI_BYTE, w, 7, comm, &reqs[k++]);
            for (int w = 1; w < size; ++w) MPI_Irecv(&in[64 * w], 64, MPI_BYTE, w, 8, comm, &reqs[k++]);
            MPI_Waitall(k, reqs.data(), MPI_STATUSES_IGNORE);
        } else {
            MPI_Recv(buf, 64, MPI_BYTE, 0, 7, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, 64, MPI_BYTE, 0, 8, comm);
        }
    }
    return (now_s() - t0) / iters * 1e6;
}

// Raw MPI_Scatterv + MPI_Gatherv of `bytes` split over the workers (rank 0 contributes 0).
double raw_scatter_gather_s(MPI_Comm comm, int64_t bytes, int iters) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int workers = size - 1;
    int64_t per = bytes / workers;
    std::vector<int> counts(static_cast<size_t>(size), static_cast<int>(per)), displs(static_cast<size_t>(size), 0);
    counts[0] = 0;
    for (int w = 1; w < size; ++w) displs[w] = static_cast<int>((w - 1) * per);
    std::vector<char> src(rank == 0 ? static_cast<size_t>(bytes) : 0, 1), dst(src.size(), 0);
    std::vector<char> mine(rank == 0 ? 0 : static_cast<size_t>(per), 0);
    double best = 1e30;
    for (int i = -1; i < iters; ++i) {
        MPI_Barrier(comm);
        double t0 = now_s();
        MPI_Scatterv(src.data(), counts.data(), displs.data(), MPI_BYTE, mine.data(), counts[rank], MPI_BYTE, 0, comm);
        MPI_Gatherv(mine.data(), counts[rank], MPI_BYTE, dst.data(), counts.data(), displs.data(), MPI_BYTE, 0, comm);
        double t = now_s() - t0;
        if (i >= 0) best = std::min(best, t);
    }
    return best;
}

}  // namespace

template <>
struct rlpt::protocol::RoleOf<BenchMethod> {
    static constexpr const char* kName = "actor";
};

int main(int argc, char** argv) {
    comm::MpiRuntime mpi(&argc, &argv);
    torch::set_num_threads(1);
    auto world = comm::Communicator::world();
    const int workers = world.size() - 1;
    bool transfer = argc > 1 && std::string(argv[1]) == "transfer";
    int64_t mib_list[] = {64, 256};

    // Raw baselines first, on a dup of world (the runtime's communicators come later).
    auto raw = world.dup();
    double raw_us = raw_round_us(raw.get(), 2000);
    std::vector<double> raw_sg;
    if (transfer)
        for (int64_t mib : mib_list) raw_sg.push_back(raw_scatter_gather_s(raw.get(), mib << 20, 5));

    Config config = config_from_yaml("", "bench", {"placement.groups=[{roles: [actor], ranks: auto}]"});
    auto placement =
        comm::compute_placement(config.placement, world.size(), comm::detect_node_labels(world, ""), {"actor"}, {});
    comm::Topology topo = comm::Topology::build(world, std::move(placement));
    auto reg = registry();
    const ProtocolSettings settings{config.trainer.call_timeout_s, config.trainer.stall_warn_s};
    WorkerHost host(reg, settings, topo);
    if (!topo.is_controller()) {
        host.serve();
        return 0;
    }
    Controller ctl(reg, settings, topo, nullptr);
    Batch none(0);
    // Dispatch round trip.
    const int iters = std::getenv("BENCH_DISPATCH_ITERS") ? std::atoi(std::getenv("BENCH_DISPATCH_ITERS")) : 2000;
    for (int i = 0; i < 200; ++i) ctl.call(BenchMethod::kNoop, none);
    double t0 = now_s();
    double sub_s = 0;
    for (int i = 0; i < iters; ++i) {
        double a = now_s();
        auto p = ctl.submit(BenchMethod::kNoop, none);
        sub_s += now_s() - a;
        ctl.wait(p);
    }
    double call_us = (now_s() - t0) / iters * 1e6;
    if (std::getenv("BENCH_VERBOSE")) std::fprintf(stderr, "submit %.2f us per call\n", sub_s / iters * 1e6);
    json("dispatch", workers,
         fmt::format("\"raw_round_us\":{:.2f},\"call_us\":{:.2f},\"ratio\":{:.2f}", raw_us, call_us, call_us / raw_us));

    if (transfer) {
        for (size_t k = 0; k < 2; ++k) {
            int64_t bytes = mib_list[k] << 20;
            int64_t rows = bytes / 4096;  // rows of 1024 floats
            rows -= rows % workers;
            Batch b(rows);
            b.set("x", torch::arange(rows * 1024, torch::kFloat32).view({rows, 1024}));
            // Correctness first.
            Batch back = ctl.call(BenchMethod::kEcho, b);
            if (!torch::equal(back.at("x"), b.at("x"))) {
                std::fprintf(stderr, "bench_protocol: echo returned different data\n");
                comm::MpiRuntime::abort(1);
            }
            double best = 1e30;
            for (int i = 0; i < 5; ++i) {
                double s = now_s();
                Batch out = ctl.call(BenchMethod::kEcho, b);
                best = std::min(best, now_s() - s);
            }
            double gbs_raw = 2.0 * bytes / raw_sg[k] / 1e9, gbs = 2.0 * bytes / best / 1e9;
            json("transfer", workers,
                 fmt::format("\"mib\":{},\"raw_s\":{:.4f},\"batch_s\":{:.4f},\"raw_GBps\":{:.2f},\"batch_GBps\":{:.2f},"
                             "\"ratio\":{:.2f}",
                             mib_list[k], raw_sg[k], best, gbs_raw, gbs, gbs / gbs_raw));
        }
    }

    // Idle CPU: workers wait while the controller sleeps; the controller waits on a sleeper.
    auto before = ctl.call_all(BenchMethod::kIdleReport, none);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    auto after = ctl.call_all(BenchMethod::kIdleReport, none);
    double worker_cpu = 0, worker_wall = 0;
    for (size_t i = 0; i < after.size(); ++i) {
        auto a = after[i].at("idle"), b0 = before[i].at("idle");
        worker_cpu += a[0][0].item<double>() - b0[0][0].item<double>();
        worker_wall += a[0][1].item<double>() - b0[0][1].item<double>();
    }
    Batch sl(0);
    sl.set_meta("ms", int64_t(2000));
    double c0 = cpu_s(), w0 = now_s();
    ctl.call(BenchMethod::kSleep, sl);
    double ctl_cpu = cpu_s() - c0, ctl_wall = now_s() - w0;
    json("idle", workers,
         fmt::format("\"worker_idle_cpu_pct\":{:.2f},\"controller_wait_cpu_pct\":{:.2f}",
                     100.0 * worker_cpu / std::max(worker_wall, 1e-9), 100.0 * ctl_cpu / ctl_wall));
    ctl.shutdown();
    return 0;
}
