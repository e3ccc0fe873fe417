// The collectives layer of comm/ on CPU: the NCCL bootstrap's MPI rendezvous (rlpt/comm/
// bootstrap.h: readiness named on every rank, the root's id, the deadline with a peer that never
// comes) and the MPI-through-host-copies collectives (mpi-staged, which GPU ranks sharing a card
// use) against the plain MPI ones.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "rlpt/comm/bootstrap.h"
#include "rlpt/comm/collectives.h"
#include "rlpt/comm/device.h"
#include "rlpt/core/error.h"

using namespace rlpt;
using comm::BootstrapId;
using comm::Communicator;
using comm::Deadline;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An id maker that writes a recognisable pattern and counts its calls.
comm::MakeBootstrapId pattern_id(int& calls, int64_t& nodes_seen) {
    return [&calls, &nodes_seen](int64_t n_nodes, BootstrapId& id) {
        ++calls;
        nodes_seen = n_nodes;
        for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7 + 3);
        return std::string();
    };
}

// Runs `f`, expecting `E` whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const E& e) {
        for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong error type: " << e.what();
    }
}

}  // namespace

TEST(Bootstrap, EveryRankGetsTheRootsIdAndTheNodeCount) {
    auto comm = Communicator::world().dup();
    int calls = 0;
    int64_t nodes_seen = 0;
    const auto got = comm::bootstrap_rendezvous(comm, "a test group", "", pattern_id(calls, nodes_seen),
                                                Deadline::after_seconds(60));
    EXPECT_EQ(calls, comm.rank() == 0 ? 1 : 0);
    if (comm.rank() == 0) EXPECT_EQ(nodes_seen, 1);  // mpirun on one host
    EXPECT_EQ(got.n_nodes, 1);
    for (size_t i = 0; i < got.id.size(); ++i) ASSERT_EQ(got.id[i], static_cast<char>(i * 7 + 3)) << "byte " << i;
    // A second rendezvous on the same communicator matches its own messages.
    const auto again = comm::bootstrap_rendezvous(comm, "a test group", "", pattern_id(calls, nodes_seen),
                                                  Deadline::after_seconds(60));
    EXPECT_EQ(again.id, got.id);
}

TEST(Bootstrap, ARankThatIsNotReadyIsNamedOnEveryRank) {
    auto comm = Communicator::world().dup();
    const int last = comm.size() - 1;
    int calls = 0;
    int64_t nodes_seen = 0;
    const std::string why = comm.rank() == last ? "cudaSetDevice(7): invalid device ordinal" : "";
    expect_error<CommError>(
        [&] {
            comm::bootstrap_rendezvous(comm, "the group under test", why, pattern_id(calls, nodes_seen),
                                       Deadline::after_seconds(60));
        },
        {fmt::format("NCCL bootstrap of the group under test ({} ranks)", comm.size()),
         fmt::format("rank {} failed: cudaSetDevice(7): invalid device ordinal", last)});
    EXPECT_EQ(calls, 0) << "the root made an id although a rank was not ready";
}

TEST(Bootstrap, TheRootsIdFailureIsNamedOnEveryRank) {
    auto comm = Communicator::world().dup();
    expect_error<CommError>(
        [&] {
            comm::bootstrap_rendezvous(
                comm, "the group under test", "",
                [](int64_t, BootstrapId&) -> std::string { throw IoError("ncclGetUniqueId: no socket"); },
                Deadline::after_seconds(60));
        },
        {"rank 0 failed: ncclGetUniqueId: no socket"});
}

// Ranks 0 and 1 bootstrap; rank 2 never enters. Registered at 3 ranks only.
TEST(BootstrapTimeout, APeerThatNeverAnswersIsNamed) {
    auto comm = Communicator::world().dup();
    ASSERT_EQ(comm.size(), 3);
    if (comm.rank() < 2) {
        int calls = 0;
        int64_t nodes_seen = 0;
        const auto t0 = std::chrono::steady_clock::now();
        expect_error<TimeoutError>(
            [&] {
                comm::bootstrap_rendezvous(comm, "the group under test", "", pattern_id(calls, nodes_seen),
                                           Deadline::after_seconds(1.0));
            },
            {"NCCL bootstrap of the group under test (3 ranks): rank 2 did not enter it within 1.0 s"});
        const double s = seconds_since(t0);
        EXPECT_GE(s, 0.9);
        EXPECT_LT(s, 1.0 + comm::kVerdictGraceS + 2.0);
        EXPECT_EQ(calls, 0);
    }
    Communicator::world().barrier();
}

// The root never enters: the others give up at their deadline plus the grace, naming it.
TEST(BootstrapTimeout, ARootThatNeverAnswersIsNamed) {
    auto comm = Communicator::world().dup();
    if (comm.rank() != 0) {
        const auto t0 = std::chrono::steady_clock::now();
        expect_error<TimeoutError>(
            [&] { comm::bootstrap_rendezvous(comm, "the group under test", "", {}, Deadline::after_seconds(0.5)); },
            {"the root (rank 0) did not answer within 2.5 s"});
        const double s = seconds_since(t0);
        EXPECT_GE(s, 0.5 + comm::kVerdictGraceS - 0.1);
        EXPECT_LT(s, 0.5 + 2 * comm::kVerdictGraceS + 2.0);
    }
    Communicator::world().barrier();
}

// ---- mpi-staged against mpi, on CPU tensors ----

namespace {

torch::Tensor rank_values(int64_t n, int rank) {
    return torch::arange(n, torch::kFloat32) * 0.25 + static_cast<float>(rank * 1000);
}

}  // namespace

TEST(StagedCollectives, MatchTheMpiOnesAndCopyBackOnFinish) {
    auto world = Communicator::world();
    const int n = world.size(), me = world.rank();
    const torch::Device cpu(torch::kCPU);
    auto mpi = comm::make_collectives(comm::CollectivesKind::kMpi, &world, cpu, "mpi", Deadline::never());
    auto staged = comm::make_collectives(comm::CollectivesKind::kStagedMpi, &world, cpu, "staged", Deadline::never());
    EXPECT_STREQ(staged->name(), "mpi-staged");

    // All-reduce: the tensor keeps its values until finish (the sum lands in a host copy).
    const int64_t len = 3 * comm::kShardAlign + 5;
    auto a = rank_values(len, me), b = rank_values(len, me);
    mpi->start_allreduce_sum(a);
    mpi->finish_allreduces("test all-reduce");
    staged->start_allreduce_sum(b);
    EXPECT_TRUE(torch::equal(b, rank_values(len, me))) << "staged all-reduce wrote the tensor before finish";
    staged->finish_allreduces("test all-reduce");
    EXPECT_TRUE(torch::equal(a, b));
    EXPECT_FLOAT_EQ(b[1].item<float>(), 0.25f * n + 1000.0f * n * (n - 1) / 2);

    // Shard all-gather, started and finished.
    const int64_t shard = 2 * comm::kShardAlign;
    auto ga = torch::zeros({shard * n}), gb = torch::zeros({shard * n});
    ga.narrow(0, me * shard, shard).copy_(rank_values(shard, me));
    gb.copy_(ga);
    mpi->allgather_shards(ga, shard);
    staged->start_allgather_shards(gb, shard);
    staged->finish_allgathers("test all-gather");
    EXPECT_TRUE(torch::equal(ga, gb));
    EXPECT_FLOAT_EQ(gb[(n - 1) * shard].item<float>(), 1000.0f * (n - 1));

    // Reduce-scatter and broadcast.
    auto full = rank_values(shard * n, me);
    auto oa = torch::full({shard}, -1.0f), ob = torch::full({shard}, -1.0f);
    mpi->reduce_scatter_sum(full, oa);
    staged->reduce_scatter_sum(full, ob);
    EXPECT_TRUE(torch::equal(oa, ob));
    auto ba = rank_values(17, me), bb = rank_values(17, me);
    mpi->broadcast(ba, n - 1);
    staged->broadcast(bb, n - 1);
    EXPECT_TRUE(torch::equal(ba, bb));
    EXPECT_TRUE(torch::equal(bb, rank_values(17, n - 1)));

    // Uneven contiguous slices (rank r sends r + 1 rows); rows no slice covers stay as they were.
    std::vector<int64_t> starts, counts;
    int64_t row = 1;
    for (int r = 0; r < n; ++r) {
        starts.push_back(row);
        counts.push_back(r + 1);
        row += r + 1;
    }
    auto local = torch::full({n, 3}, static_cast<float>(me));
    auto sa = torch::full({row + 1, 3}, -7.0f), sb = torch::full({row + 1, 3}, -7.0f);
    ASSERT_TRUE(mpi->allgather_slices(local, sa, 0, starts, counts));
    ASSERT_TRUE(staged->allgather_slices(local, sb, 0, starts, counts));
    EXPECT_TRUE(torch::equal(sa, sb));
    EXPECT_EQ(sb[0][0].item<float>(), -7.0f);
    EXPECT_EQ(sb[row][2].item<float>(), -7.0f);
    EXPECT_EQ(sb[starts.back()][0].item<float>(), static_cast<float>(n - 1));
}

// Which collectives a group gets does not depend on the device-collectives setting on CPU: the
// engine and tensor parallelism keep plain MPI (and no communication at all on one rank).
TEST(StagedCollectives, CpuGroupsUseMpiWhateverTheDeviceSetting) {
    auto world = Communicator::world();
    const auto before = comm::device_collectives();
    for (auto setting : {comm::DeviceCollectives::kNccl, comm::DeviceCollectives::kMpi}) {
        comm::set_device_collectives(setting);
        EXPECT_STREQ(comm::make_collectives(&world, torch::kCPU, "world")->name(), world.size() > 1 ? "mpi" : "self");
        EXPECT_STREQ(comm::make_collectives(nullptr, torch::kCPU, "none")->name(), "self");
    }
    comm::set_device_collectives(before);
}
