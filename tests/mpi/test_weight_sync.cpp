// Multi-rank tests of the weight sync (rlpt/weights/weight_sync.h) over MPI_COMM_WORLD (rank 0
// is the root, every other rank a receiver). Every rank builds the root's tensors from the
// same seed, so each can check its result locally; checksums are also all-gathered and
// compared with the root's. Each collective test has an error twin in WeightSyncError.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <random>

#include "rlpt/build_config.h"
#include "rlpt/comm/device.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/weights/weight_sync.h"
#include "weights/sync_skeleton.h"

namespace {

using rlpt::comm::Communicator;
using rlpt::weights::make_weight_sync;
using rlpt::weights::weights_checksum;
using rlpt::weights::WeightSync;
using rlpt::weights::WeightSyncOptions;

struct Spec {
    std::vector<int64_t> shape;
    torch::Dtype dtype;
};

// The root's weights for `seed`: the same on every rank.
std::vector<torch::Tensor> make_sources(const std::vector<Spec>& specs, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    std::vector<torch::Tensor> out;
    for (const auto& s : specs) {
        torch::Tensor t;
        if (s.dtype == torch::kBool) {
            t = torch::randint(0, 2, s.shape, gen, torch::kInt64).to(torch::kBool);
        } else if (c10::isIntegralType(s.dtype, false)) {
            t = torch::randint(-100000, 100000, s.shape, gen, torch::kInt64).to(s.dtype);
        } else {
            t = torch::randn(s.shape, gen, torch::kFloat64).to(s.dtype);
        }
        out.push_back(t);
    }
    return out;
}

// Receivers' destinations: right shapes and dtypes, filled with a sentinel.
std::vector<torch::Tensor> make_destinations(const std::vector<Spec>& specs, torch::Device device = torch::kCPU) {
    std::vector<torch::Tensor> out;
    for (const auto& s : specs) {
        out.push_back(torch::full(s.shape, 7, torch::dtype(s.dtype).device(device)));
    }
    return out;
}

std::vector<torch::Tensor> clone_all(const std::vector<torch::Tensor>& ts, torch::Device device = torch::kCPU) {
    std::vector<torch::Tensor> out;
    for (const auto& t : ts) out.push_back(t.to(device, /*non_blocking=*/false, /*copy=*/true));
    return out;
}

// Checks every tensor equals `expected` and that all ranks' checksums equal the root's.
void expect_synced(const Communicator& comm, const std::vector<torch::Tensor>& got,
                   const std::vector<torch::Tensor>& expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i].cpu().contiguous(), expected[i]))
            << "tensor " << i << " differs on rank " << comm.rank();
    }
    const uint64_t mine = weights_checksum(got);
    EXPECT_EQ(mine, weights_checksum(expected));
    auto all = comm.allgather_i64(static_cast<int64_t>(mine));
    for (size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;
}

// One sync of `specs` from the root (tensors on `device` on every rank); returns the tensors
// this rank ends with.
std::vector<torch::Tensor> sync_once(WeightSync& ws, const Communicator& comm, const std::vector<Spec>& specs,
                                     uint64_t seed, uint64_t root_version = 1, torch::Device device = torch::kCPU) {
    auto expected = make_sources(specs, seed);
    std::vector<torch::Tensor> tensors =
        comm.rank() == 0 ? clone_all(expected, device) : make_destinations(specs, device);
    uint64_t version = comm.rank() == 0 ? root_version : 0;
    ws.sync(tensors, version);
    EXPECT_EQ(version, root_version);
    expect_synced(comm, tensors, expected);
    return tensors;
}

WeightSyncOptions small_buckets(int64_t bucket_bytes, int64_t inplace_min_bytes) {
    WeightSyncOptions o;
    o.bucket_bytes = bucket_bytes;
    o.inplace_min_bytes = inplace_min_bytes;
    o.timeout_s = 60;
    return o;
}

constexpr int64_t kNever = int64_t(1) << 40;  // inplace_min_bytes that packs everything

}  // namespace

// ---- checksum (local) -------------------------------------------------------------------

TEST(WeightSync, ChecksumKnownValues) {
    // Reference values computed by hand (Python) from the definition in weight_sync.h.
    EXPECT_EQ(weights_checksum({}), 0xcbf29ce484222325ULL);
    auto u8 = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kInt64).to(torch::kUInt8); };
    EXPECT_EQ(weights_checksum({u8({1, 2, 3})}), 0xf5d06a87f8f19736ULL);
    EXPECT_EQ(weights_checksum({u8({1, 2, 3, 4, 5, 6, 7, 8, 9})}), 0x0a80c513c7cca842ULL);
    EXPECT_EQ(weights_checksum({u8({1, 2, 3, 4, 5, 6, 7, 8, 9}), u8({})}), 0xa577229c80c1e826ULL);
    EXPECT_EQ(weights_checksum({u8({1, 2, 3, 4, 5, 6, 7, 8, 9}), torch::Tensor()}), 0xa577229c80c1e826ULL);
}

TEST(WeightSync, ChecksumSeesBoundariesValuesAndLogicalOrder) {
    auto a = torch::arange(6, torch::kFloat32);
    EXPECT_NE(weights_checksum({a.slice(0, 0, 2), a.slice(0, 2, 6)}),
              weights_checksum({a.slice(0, 0, 3), a.slice(0, 3, 6)}));
    auto b = a.clone();
    b[5] = 5.5f;
    EXPECT_NE(weights_checksum({a}), weights_checksum({b}));
    auto m = torch::arange(12, torch::kFloat32).reshape({3, 4});
    EXPECT_EQ(weights_checksum({m.t()}), weights_checksum({m.t().contiguous()}));
    EXPECT_NE(weights_checksum({m.t()}), weights_checksum({m}));
}

// ---- successful syncs -------------------------------------------------------------------

TEST(WeightSync, MixedDtypesPackedAndInPlace) {
    auto world = Communicator::world();
    std::vector<Spec> specs = {{{4, 5}, torch::kFloat32}, {{7}, torch::kBFloat16}, {{4, 2}, torch::kInt64},
                               {{}, torch::kFloat64},     {{13}, torch::kUInt8},   {{2, 3, 4}, torch::kFloat16},
                               {{9}, torch::kBool},       {{40}, torch::kInt32}};
    // 256-byte buckets; tensors of >= 64 bytes go in place: f32 [4,5] (80 B), i64 [4,2]
    // (64 B), i32 [40] (160 B). The rest (14 + 8 + 13 + 48 + 9 = 92 B) share one bucket.
    auto ws = make_weight_sync("mpi", world, small_buckets(256, 64));
    EXPECT_EQ(ws->backend_name(), "mpi");
    sync_once(*ws, world, specs, 11);
    const auto& st = ws->last_stats();
    EXPECT_EQ(st.n_tensors, 8);
    EXPECT_EQ(st.total_bytes, 80 + 14 + 64 + 8 + 13 + 48 + 9 + 160);
    EXPECT_EQ(st.n_inplace_messages, 3);
    EXPECT_EQ(st.n_messages, 4);
    EXPECT_EQ(st.packed_bytes, 92);
}

TEST(WeightSync, TensorLargerThanBucketGoesInPieces) {
    auto world = Communicator::world();
    std::vector<Spec> specs = {{{10}, torch::kFloat32}, {{100, 100}, torch::kFloat32}, {{3}, torch::kFloat32}};
    for (int64_t inplace_min : {int64_t(1024), kNever}) {
        auto ws = make_weight_sync("mpi", world, small_buckets(4096, inplace_min));
        sync_once(*ws, world, specs, 12);
        const auto& st = ws->last_stats();
        if (inplace_min == kNever) {
            // 40 + 40000 + 12 bytes packed into ceil(40052 / 4096) = 10 buckets.
            EXPECT_EQ(st.n_messages, 10);
            EXPECT_EQ(st.n_inplace_messages, 0);
            EXPECT_EQ(st.packed_bytes, 40052);
        } else {
            // The big tensor in ceil(40000 / 4096) = 10 in-place pieces, plus one bucket.
            EXPECT_EQ(st.n_messages, 11);
            EXPECT_EQ(st.n_inplace_messages, 10);
            EXPECT_EQ(st.packed_bytes, 52);
        }
    }
}

TEST(WeightSync, ManySmallTensors) {
    auto world = Communicator::world();
    std::mt19937 rng(5);
    std::vector<Spec> specs;
    const torch::Dtype dtypes[] = {torch::kFloat32, torch::kBFloat16, torch::kInt64, torch::kUInt8};
    for (int i = 0; i < 600; ++i) {
        specs.push_back({{static_cast<int64_t>(rng() % 40 + 1)}, dtypes[rng() % 4]});
    }
    auto ws = make_weight_sync("mpi", world, small_buckets(1024, kNever));
    sync_once(*ws, world, specs, 13);
    EXPECT_EQ(ws->last_stats().n_tensors, 600);
    EXPECT_EQ(ws->last_stats().n_messages,
              (ws->last_stats().total_bytes + 1023) / 1024);  // buckets fill completely
}

TEST(WeightSync, ExactMultipleOfBucketHasNoTrailingMessage) {
    auto world = Communicator::world();
    std::vector<Spec> specs(8, Spec{{32}, torch::kFloat32});  // 8 x 128 bytes = 4 buckets
    auto ws = make_weight_sync("mpi", world, small_buckets(256, kNever));
    sync_once(*ws, world, specs, 14);
    EXPECT_EQ(ws->last_stats().n_messages, 4);
    EXPECT_EQ(ws->last_stats().packed_bytes, 1024);
}

TEST(WeightSync, EmptyTensorsAndEmptyLists) {
    auto world = Communicator::world();
    auto ws = make_weight_sync("mpi", world, small_buckets(64, 16));
    sync_once(*ws, world,
              {{{0}, torch::kFloat32},
               {{5}, torch::kFloat32},
               {{3, 0}, torch::kInt64},
               {{20}, torch::kFloat32},
               {{0}, torch::kBFloat16}},
              15, 3);
    EXPECT_EQ(ws->last_stats().total_bytes, 100);
    sync_once(*ws, world, {{{0}, torch::kFloat32}, {{2, 0, 3}, torch::kFloat32}}, 16, 4);
    EXPECT_EQ(ws->last_stats().n_messages, 0);
    sync_once(*ws, world, {}, 17, 5);
    EXPECT_EQ(ws->last_stats().n_tensors, 0);
}

TEST(WeightSync, NonContiguousSourcesAndDestinations) {
    auto world = Communicator::world();
    const bool root = world.rank() == 0;
    auto base = make_sources({{{6, 8}, torch::kFloat32}, {{10, 4}, torch::kInt64}, {{300, 2}, torch::kFloat32}}, 18);
    // Root: a transpose, a strided slice and a transposed big tensor (in place by size).
    std::vector<torch::Tensor> expected = {base[0].t().contiguous(), base[1].slice(0, 0, 10, 2).contiguous(),
                                           base[2].t().contiguous()};
    std::vector<torch::Tensor> tensors;
    std::vector<torch::Tensor> storage;  // receivers: non-contiguous views into these
    if (root) {
        tensors = {base[0].t(), base[1].slice(0, 0, 10, 2), base[2].t()};
    } else {
        storage = {torch::zeros({6, 8}), torch::zeros({5, 4}, torch::kInt64), torch::zeros({300, 2})};
        tensors = {storage[0].t(), storage[1], storage[2].t()};
    }
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(tensors[i].sizes(), expected[i].sizes());
    auto ws = make_weight_sync("mpi", world, small_buckets(1024, 1024));
    uint64_t version = root ? 9 : 0;
    ws->sync(tensors, version);
    EXPECT_EQ(version, 9u);
    expect_synced(world, tensors, expected);
    if (!root) EXPECT_TRUE(torch::equal(storage[0], base[0]));  // written through the view
}

TEST(WeightSync, DestinationsWithRequiresGradAreFilled) {
    auto world = Communicator::world();
    auto expected = make_sources({{{4, 4}, torch::kFloat32}, {{64, 64}, torch::kFloat32}}, 19);
    std::vector<torch::Tensor> tensors;
    if (world.rank() == 0) {
        tensors = clone_all(expected);
    } else {  // leaf parameters, the second one non-contiguous (staged, copied with copy_)
        tensors = {torch::zeros({4, 4}).requires_grad_(), torch::zeros({64, 64}).t().requires_grad_()};
    }
    auto ws = make_weight_sync("mpi", world, small_buckets(4096, 1024));
    uint64_t version = 2;
    ws->sync(tensors, version);
    expect_synced(world, {tensors[0].detach(), tensors[1].detach()}, expected);
}

TEST(WeightSync, VersionPropagatesAndBuffersAreReused) {
    auto world = Communicator::world();
    std::vector<Spec> specs = {{{100}, torch::kFloat32}, {{3000}, torch::kFloat32}, {{50}, torch::kInt64}};
    auto ws = make_weight_sync("mpi", world, small_buckets(2048, kNever));
    for (uint64_t v = 1; v <= 4; ++v) {
        sync_once(*ws, world, specs, 100 + v, 10 * v);
        EXPECT_EQ(ws->last_stats().version, 10 * v);
        if (v == 1) {
            EXPECT_EQ(ws->last_stats().buffer_allocations, 2);  // n_buffers = 2
        } else {
            EXPECT_EQ(ws->last_stats().buffer_allocations, 0) << "sync " << v;
        }
    }
    // A different layout with the same bucket size reuses them too.
    sync_once(*ws, world, {{{10000}, torch::kFloat32}}, 200, 50);
    EXPECT_EQ(ws->last_stats().buffer_allocations, 0);
}

TEST(WeightSync, InPlaceOnlySyncAllocatesNoBuffer) {
    auto world = Communicator::world();
    auto ws = make_weight_sync("mpi", world, small_buckets(1024, 256));
    sync_once(*ws, world, {{{300}, torch::kFloat32}, {{64, 8}, torch::kInt64}}, 25, 1);
    EXPECT_EQ(ws->last_stats().buffer_allocations, 0);
    EXPECT_EQ(ws->last_stats().packed_bytes, 0);
    EXPECT_EQ(ws->last_stats().n_inplace_messages, 2 + 4);  // 1200 B in 2, 4096 B in 4 pieces
}

TEST(WeightSync, NamedSync) {
    auto world = Communicator::world();
    std::vector<Spec> specs = {{{8, 8}, torch::kFloat32}, {{8}, torch::kFloat32}};
    std::vector<std::string> names = {"layers.0.w", "layers.0.b"};
    auto expected = make_sources(specs, 21);
    auto tensors = world.rank() == 0 ? clone_all(expected) : make_destinations(specs);
    auto ws = make_weight_sync("mpi", world, small_buckets(128, 128));
    uint64_t version = world.rank() == 0 ? 6 : 0;
    ws->sync(names, tensors, version);
    EXPECT_EQ(version, 6u);
    expect_synced(world, tensors, expected);
}

TEST(WeightSync, RandomLayoutsAndBucketSizes) {
    auto world = Communicator::world();
    std::mt19937 rng(77);  // same stream on every rank
    const torch::Dtype dtypes[] = {torch::kFloat32, torch::kBFloat16, torch::kInt64,
                                   torch::kUInt8,   torch::kFloat64,  torch::kInt16};
    for (int round = 0; round < 12; ++round) {
        std::vector<Spec> specs;
        const int n = static_cast<int>(rng() % 30);
        for (int i = 0; i < n; ++i) {
            const int64_t len = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 3000);
            specs.push_back({{len}, dtypes[rng() % 6]});
        }
        const int64_t bucket = 64 + static_cast<int64_t>(rng() % 8000);
        const int64_t inplace_min = rng() % 3 == 0 ? kNever : static_cast<int64_t>(rng() % 9000);
        auto o = small_buckets(bucket, inplace_min);
        o.n_buffers = 1 + static_cast<int>(rng() % 3);
        auto ws = make_weight_sync("mpi", world, o);
        SCOPED_TRACE(
            fmt::format("round {} bucket {} inplace_min {} n_buffers {}", round, bucket, inplace_min, o.n_buffers));
        sync_once(*ws, world, specs, 300 + round, round + 1);
    }
}

TEST(WeightSync, SubCommunicatorRootIsItsRankZero) {
    auto world = Communicator::world();
    // World rank 0 stays out; world rank 1 is the root of the others.
    auto sub = world.split(world.rank() == 0 ? -1 : 1, world.rank());
    if (world.rank() == 0) {
        EXPECT_FALSE(sub.valid());
        EXPECT_THROW(make_weight_sync("mpi", sub), rlpt::ConfigError);
        return;
    }
    auto ws = make_weight_sync("mpi", sub, small_buckets(512, 256));
    sync_once(*ws, sub, {{{33, 3}, torch::kFloat32}, {{17}, torch::kBFloat16}}, 22, 42);
}

TEST(WeightSync, AutoResolvesToMpiForCpuTensors) {
    auto world = Communicator::world();
    auto ws = make_weight_sync("auto", world, small_buckets(1024, 512));
    EXPECT_EQ(ws->backend_name(), "auto");
    sync_once(*ws, world, {{{300}, torch::kFloat32}, {{5}, torch::kInt64}}, 23, 8);
    EXPECT_EQ(ws->backend_name(), "mpi");
    EXPECT_EQ(ws->last_stats().version, 8u);
    sync_once(*ws, world, {{{300}, torch::kFloat32}, {{5}, torch::kInt64}}, 24, 9);
}

// ---- the sync skeleton, driving a recording transport ---------------------------------

namespace {

using rlpt::weights::detail::make_plan;
using rlpt::weights::detail::Message;
using rlpt::weights::detail::Payload;
using rlpt::weights::detail::SyncPlan;
using rlpt::weights::detail::SyncSkeleton;
using rlpt::weights::detail::SyncTransport;

// A transport that writes down every step the skeleton asks of it and moves the bytes with a
// blocking broadcast. Host tensors; "direct" only for float32 ones, so an int64 tensor's in-place
// messages must go through a slot. Two slots, taken in turn.
class RecordingTransport final : public SyncTransport {
  public:
    RecordingTransport(Communicator comm, std::vector<std::string>& log) : SyncTransport(std::move(comm)), log_(log) {}

    std::string refusal;    // what refuse() answers
    int fail_at_post = -1;  // post() of this message throws (before moving anything)

    const char* name() const override { return "recording"; }
    std::string refuse(const std::vector<torch::Tensor>&) override {
        log_.push_back("refuse");
        return refusal;
    }
    void prepare(const rlpt::comm::Deadline&) override { log_.push_back("prepare"); }
    bool direct(const torch::Tensor& t) const override { return t.scalar_type() == torch::kFloat32; }
    void begin(const Payload& payload) override {
        p_ = &payload;
        log_.push_back(fmt::format("begin {}", payload.plan.messages.size()));
    }
    int take_slot() override {
        log_.push_back("take_slot");
        return static_cast<int>(taken_++ % 2);
    }
    char* slot_buffer(int slot, int64_t bytes) override {
        log_.push_back(fmt::format("slot_buffer {} {}", slot, bytes));
        auto& b = buffers_[static_cast<size_t>(slot)];
        if (static_cast<int64_t>(b.size()) < bytes) {
            b.resize(static_cast<size_t>(bytes));
            ++p_->stats.buffer_allocations;
        }
        return b.data();
    }
    void pack(const Message& msg, char* buffer) override {
        log_.push_back("pack");
        for (const auto& piece : msg.pieces)
            std::memcpy(buffer + piece.message_offset, bytes_of(piece.tensor) + piece.tensor_offset,
                        static_cast<size_t>(piece.bytes));
    }
    void post(int message, char* data, int slot) override {
        const Message& msg = p_->plan.messages[static_cast<size_t>(message)];
        const auto& first = msg.pieces.front();
        const bool in_tensor = data == bytes_of(first.tensor) + first.tensor_offset;
        log_.push_back(fmt::format("post {} slot {}{}", message, slot, in_tensor ? " in place" : ""));
        if (message == fail_at_post) throw rlpt::CommError("injected failure", __FILE__, __LINE__);
        comm().bcast(data, msg.bytes, 0, p_->deadline);
        if (p_->root || slot < 0) return;
        for (const auto& piece : msg.pieces)
            std::memcpy(bytes_of(piece.tensor) + piece.tensor_offset, data + piece.message_offset,
                        static_cast<size_t>(piece.bytes));
    }
    void finish() override { log_.push_back("finish"); }
    void abort() noexcept override { log_.push_back("abort"); }
    void leak_buffers() noexcept override { log_.push_back("leak_buffers"); }

  private:
    char* bytes_of(int tensor) const { return static_cast<char*>(p_->tensors[static_cast<size_t>(tensor)].data_ptr()); }

    std::vector<std::string>& log_;
    const Payload* p_ = nullptr;
    std::vector<char> buffers_[2];
    int64_t taken_ = 0;
};

// The steps the skeleton must take for `specs` (contiguous host tensors) with `o`: the plan
// walked in order, in place only where the message allows it and the tensor is direct, packing
// on the root only; and the statistics that follow.
std::vector<std::string> expected_steps(const std::vector<Spec>& specs, const WeightSyncOptions& o, bool root,
                                        rlpt::weights::WeightSyncStats* stats) {
    std::vector<int64_t> nbytes;
    std::vector<bool> direct;
    for (const auto& s : specs) {
        nbytes.push_back(torch::empty(s.shape, s.dtype).nbytes());
        direct.push_back(s.dtype == torch::kFloat32);
    }
    const SyncPlan plan = make_plan(nbytes, o.bucket_bytes, o.inplace_min_bytes);
    const int64_t buffer_bytes = rlpt::weights::detail::pack_buffer_bytes(plan, direct);
    std::vector<std::string> steps = {"refuse", "prepare", fmt::format("begin {}", plan.messages.size())};
    int taken = 0;
    for (size_t m = 0; m < plan.messages.size(); ++m) {
        const Message& msg = plan.messages[m];
        ++stats->n_messages;
        if (msg.inplace && direct[static_cast<size_t>(msg.pieces.front().tensor)]) {
            steps.push_back(fmt::format("post {} slot -1 in place", m));
            ++stats->n_inplace_messages;
            continue;
        }
        const int slot = taken++ % 2;
        steps.push_back("take_slot");
        steps.push_back(fmt::format("slot_buffer {} {}", slot, buffer_bytes));
        if (root) steps.push_back("pack");
        steps.push_back(fmt::format("post {} slot {}", m, slot));
        stats->packed_bytes += msg.bytes;
    }
    steps.push_back("finish");
    return steps;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

const std::vector<Spec> kSkeletonSpecs = {
    {{40, 10}, torch::kFloat32},  // 1600 B: in place, in pieces of one bucket
    {{7}, torch::kFloat32},       // packed
    {{300}, torch::kInt64},       // 2400 B: in-place messages, but not direct: through a slot
    {{5, 3}, torch::kBFloat16},   // packed
};

WeightSyncOptions skeleton_options() { return small_buckets(1024, 512); }

}  // namespace

TEST(WeightSyncSkeleton, WalksThePlanInOrderAndVersionsAdvance) {
    auto world = Communicator::world();
    std::vector<std::string> log;
    auto owned = std::make_unique<RecordingTransport>(world.dup(), log);
    SyncSkeleton ws(std::move(owned), skeleton_options());
    EXPECT_EQ(ws.backend_name(), "recording");
    const bool root = world.rank() == 0;
    for (uint64_t v = 1; v <= 3; ++v) {
        log.clear();
        auto expected = make_sources(kSkeletonSpecs, 40 + v);
        auto tensors = root ? clone_all(expected) : make_destinations(kSkeletonSpecs);
        uint64_t version = root ? 10 * v : 0;
        ws.sync(tensors, version);
        EXPECT_EQ(version, 10 * v) << "the receivers take the root's version";
        expect_synced(world, tensors, expected);
        rlpt::weights::WeightSyncStats want;
        EXPECT_EQ(joined(log), joined(expected_steps(kSkeletonSpecs, skeleton_options(), root, &want)))
            << "sync " << v << " on rank " << world.rank();
        const auto& got = ws.last_stats();
        EXPECT_EQ(got.version, 10 * v);
        EXPECT_EQ(got.n_tensors, static_cast<int64_t>(kSkeletonSpecs.size()));
        EXPECT_EQ(got.total_bytes, 1600 + 28 + 2400 + 30);
        EXPECT_EQ(got.n_messages, want.n_messages);
        EXPECT_EQ(got.n_inplace_messages, want.n_inplace_messages);
        EXPECT_EQ(got.packed_bytes, want.packed_bytes);
        EXPECT_EQ(got.buffer_allocations, v == 1 ? 2 : 0) << "two slots, allocated once";
    }
}

TEST(WeightSyncSkeleton, ARefusalIsCollectiveAndClean) {
    auto world = Communicator::world();
    if (world.size() < 2) GTEST_SKIP();
    std::vector<std::string> log;
    auto owned = std::make_unique<RecordingTransport>(world.dup(), log);
    RecordingTransport& transport = *owned;
    SyncSkeleton ws(std::move(owned), skeleton_options());
    const int last = world.size() - 1;
    if (world.rank() == last) transport.refusal = "this transport cannot take these tensors";
    auto tensors = world.rank() == 0 ? make_sources(kSkeletonSpecs, 1) : make_destinations(kSkeletonSpecs);
    uint64_t version = world.rank() == 0 ? 3 : 0;
    try {
        ws.sync(tensors, version);
        ADD_FAILURE() << "a refused sync went through on rank " << world.rank();
    } catch (const rlpt::CommError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(fmt::format("rank(s) {} disagree", last)), std::string::npos) << what;
        if (world.rank() == last) EXPECT_NE(what.find(transport.refusal), std::string::npos) << what;
    }
    EXPECT_EQ(joined(log), "refuse\n") << "nothing past the agreement";
    EXPECT_EQ(version, world.rank() == 0 ? 3u : 0u);
    transport.refusal.clear();
    log.clear();
    sync_once(ws, world, kSkeletonSpecs, 2, 4);  // still usable
    EXPECT_EQ(log.back(), "finish");
}

TEST(WeightSyncSkeleton, AFailedStepAbortsAndLeavesTheSyncUnusable) {
    auto world = Communicator::world();
    std::vector<std::string> log;
    {
        auto owned = std::make_unique<RecordingTransport>(world.dup(), log);
        owned->fail_at_post = 1;  // every rank: message 0 moved, message 1 throws before moving
        SyncSkeleton ws(std::move(owned), skeleton_options());
        auto tensors = world.rank() == 0 ? make_sources(kSkeletonSpecs, 1) : make_destinations(kSkeletonSpecs);
        uint64_t version = world.rank() == 0 ? 8 : 0;
        EXPECT_THROW(ws.sync(tensors, version), rlpt::CommError);
        EXPECT_EQ(version, world.rank() == 0 ? 8u : 0u) << "no version before the last byte";
        ASSERT_FALSE(log.empty());
        EXPECT_EQ(log.back(), "abort");
        log.clear();
        try {
            ws.sync(tensors, version);
            ADD_FAILURE() << "a broken weight sync accepted another sync";
        } catch (const rlpt::CommError& e) {
            EXPECT_NE(std::string(e.what()).find("weight sync (recording) is unusable after an earlier failure"),
                      std::string::npos)
                << e.what();
        }
        EXPECT_TRUE(log.empty()) << "a broken sync asks nothing of its transport: " << joined(log);
    }
    EXPECT_EQ(joined(log), "leak_buffers\n") << "a broken sync keeps its buffers when destroyed";
}

// ---- NCCL: compiled and linked here, run only where every rank has a GPU ---------------

namespace {
// Collective: this rank's own GPU (its index among the ranks on its node), or -1 on every rank
// unless this build has NCCL and every rank has a GPU of its own (NCCL cannot connect two ranks
// on one GPU). The GPU is made current, as app/job.cpp does at start-up.
int nccl_device(const Communicator& comm) {
    const int local = comm.split_shared().rank();
    const int gpus = RLPT_HAVE_NCCL && torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    if (comm.allreduce_min_i64(local < gpus ? 1 : 0) != 1) return -1;
    rlpt::comm::bind_rank_device(local);
    return local;
}
bool nccl_runnable(const Communicator& comm) { return nccl_device(comm) >= 0; }
}  // namespace

TEST(WeightSyncNccl, SyncsCudaTensorsAndMatchesTheRoot) {
    auto world = Communicator::world();
    if (!nccl_runnable(world)) {
        GTEST_SKIP() << "needs a build with NCCL and a CUDA device of its own (with a CUDA LibTorch) for "
                        "every rank; this machine has fewer";
    }
    const torch::Device dev = rlpt::protocol::handler_device();
    std::vector<Spec> specs = {{{4, 5}, torch::kFloat32},
                               {{7}, torch::kBFloat16},
                               {{100, 100}, torch::kFloat32},
                               {{0}, torch::kInt64},
                               {{40}, torch::kInt64}};
    auto ws = make_weight_sync("nccl", world, small_buckets(4096, 1024));
    EXPECT_EQ(ws->backend_name(), "nccl");
    for (uint64_t v = 1; v <= 3; ++v) sync_once(*ws, world, specs, 400 + v, v, dev);
    // Receivers on the CPU go through host staging; the root stays on the GPU.
    auto expected = make_sources(specs, 404);
    auto tensors = world.rank() == 0 ? clone_all(expected, dev) : make_destinations(specs);
    uint64_t version = world.rank() == 0 ? 4 : 0;
    ws->sync(tensors, version);
    expect_synced(world, tensors, expected);
}

TEST(WeightSyncNccl, AutoPicksNcclForCudaTensors) {
    auto world = Communicator::world();
    if (!nccl_runnable(world)) GTEST_SKIP() << "needs NCCL and a GPU of its own for every rank";
    auto ws = make_weight_sync("auto", world, small_buckets(1024, 512));
    sync_once(*ws, world, {{{300}, torch::kFloat32}}, 405, 1, rlpt::protocol::handler_device());
    EXPECT_EQ(ws->backend_name(), "nccl");
}

TEST(WeightSyncNccl, LayoutMismatchIsCleanOnEveryRank) {
    auto world = Communicator::world();
    if (!nccl_runnable(world)) GTEST_SKIP() << "needs NCCL and a GPU of its own for every rank";
    const torch::Device dev = rlpt::protocol::handler_device();
    std::vector<Spec> good = {{{16, 4}, torch::kFloat32}};
    std::vector<Spec> mine = good;
    if (world.rank() == world.size() - 1) mine[0].shape = {4, 16};
    auto ws = make_weight_sync("nccl", world);
    auto tensors = world.rank() == 0 ? clone_all(make_sources(mine, 1), dev) : make_destinations(mine, dev);
    uint64_t version = 1;
    EXPECT_THROW(ws->sync(tensors, version), rlpt::CommError);
    sync_once(*ws, world, good, 2, 2, dev);
}

// ---- error twins: every rank must get a clean error, never a hang ----------------------

namespace {
enum class Names { kNone, kAll, kAllButBadRank, kShortOnBadRank };

// Runs a sync where `tweak` changes the bad rank's tensor specs (and `names` its names);
// expects CommError on every rank naming the bad rank, plus `bad_rank_text` on the bad rank.
// Then a correct sync on the same object must still work: the failure was clean.
void expect_clean_mismatch(int bad_rank, const std::function<void(std::vector<Spec>&)>& tweak,
                           const std::string& bad_rank_text, Names names_mode = Names::kNone) {
    auto world = Communicator::world();
    bad_rank = std::min(bad_rank, world.size() - 1);
    const bool bad = world.rank() == bad_rank;
    std::vector<Spec> good = {{{16, 4}, torch::kFloat32}, {{8}, torch::kBFloat16}, {{3}, torch::kInt64}};
    std::vector<Spec> mine = good;
    if (bad) tweak(mine);
    auto ws = make_weight_sync("mpi", world, small_buckets(128, 200));
    auto tensors = world.rank() == 0 ? make_sources(mine, 1) : make_destinations(mine);
    std::vector<std::string> names = {"a", "b", "c"};
    bool use_names = names_mode != Names::kNone;
    if (bad && names_mode == Names::kAllButBadRank) use_names = false;
    if (bad && names_mode == Names::kShortOnBadRank) names.pop_back();
    uint64_t version = world.rank() == 0 ? 5 : 77;
    try {
        if (use_names) {
            ws->sync(names, tensors, version);
        } else {
            ws->sync(tensors, version);
        }
        ADD_FAILURE() << "no error on rank " << world.rank();
    } catch (const rlpt::CommError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(fmt::format("rank(s) {} disagree", bad_rank)), std::string::npos) << what;
        if (bad) EXPECT_NE(what.find(bad_rank_text), std::string::npos) << what;
    }
    EXPECT_EQ(version, world.rank() == 0 ? 5u : 77u);  // untouched on failure
    sync_once(*ws, world, good, 2, 6);                 // still usable
}
}  // namespace

TEST(WeightSyncError, ShapeMismatchOnLastRank) {
    expect_clean_mismatch(
        3,
        [](std::vector<Spec>& s) {
            s[0].shape = {4, 16};
        },
        "first difference at tensor 0: root has '0 - Float [16, 4]', this rank has '0 - Float [4, "
        "16]'");
}

TEST(WeightSyncError, DtypeMismatchOnOneReceiver) {
    expect_clean_mismatch(
        1, [](std::vector<Spec>& s) { s[1].dtype = torch::kFloat16; },
        "root has '1 - BFloat16 [8]', this rank has '1 - Half [8]'");
}

TEST(WeightSyncError, TensorCountMismatch) {
    expect_clean_mismatch(
        2, [](std::vector<Spec>& s) { s.pop_back(); }, "the root sends 3 tensors, this rank has 2");
}

TEST(WeightSyncError, SameBytesDifferentShapeOnRoot) {
    // The root differs; every receiver then disagrees with it.
    auto world = Communicator::world();
    if (world.size() < 2) GTEST_SKIP();
    std::vector<Spec> spec = {{{4, 6}, torch::kFloat32}};
    if (world.rank() == 0) spec[0].shape = {6, 4};
    auto ws = make_weight_sync("mpi", world);
    auto tensors = world.rank() == 0 ? make_sources(spec, 3) : make_destinations(spec);
    uint64_t version = 1;
    EXPECT_THROW(ws->sync(tensors, version), rlpt::CommError);
}

TEST(WeightSyncError, NameMismatch) {
    auto world = Communicator::world();
    std::vector<Spec> specs = {{{4}, torch::kFloat32}, {{4}, torch::kFloat32}};
    std::vector<std::string> names = {"w", "b"};
    const int bad = world.size() - 1;
    if (world.rank() == bad) names = {"b", "w"};
    auto ws = make_weight_sync("mpi", world);
    auto tensors = world.rank() == 0 ? make_sources(specs, 3) : make_destinations(specs);
    uint64_t version = 1;
    try {
        ws->sync(names, tensors, version);
        ADD_FAILURE() << "no error";
    } catch (const rlpt::CommError& e) {
        if (world.rank() == bad && bad != 0) {
            EXPECT_NE(std::string(e.what()).find("root has '0 w Float [4]', this rank has '0 b "
                                                 "Float [4]'"),
                      std::string::npos)
                << e.what();
        }
    }
}

TEST(WeightSyncError, NamesOnSomeRanksOnly) {
    expect_clean_mismatch(
        1, [](std::vector<Spec>&) {}, "the root passed parameter names, this rank did not", Names::kAllButBadRank);
}

TEST(WeightSyncError, NamesCountMismatch) {
    expect_clean_mismatch(
        1, [](std::vector<Spec>&) {}, "2 names given for 3 tensors", Names::kShortOnBadRank);
}

TEST(WeightSyncError, UndefinedTensorOnAReceiverOrTheRoot) {
    auto world = Communicator::world();
    for (int bad : {world.size() - 1, 0}) {
        std::vector<Spec> specs = {{{4}, torch::kFloat32}, {{5}, torch::kFloat32}};
        auto tensors = world.rank() == 0 ? make_sources(specs, 3) : make_destinations(specs);
        if (world.rank() == bad) tensors[1] = torch::Tensor();
        auto ws = make_weight_sync("mpi", world);
        uint64_t version = 1;
        try {
            ws->sync(tensors, version);
            ADD_FAILURE() << "no error";
        } catch (const rlpt::CommError& e) {
            if (world.rank() == bad) {
                EXPECT_NE(std::string(e.what()).find("tensor 1 ('-') is undefined"), std::string::npos) << e.what();
            }
        }
    }
}

TEST(WeightSyncError, FactoryRejectsBadBackendsAndOptions) {
    auto world = Communicator::world();
    EXPECT_THROW(make_weight_sync("gloo", world), rlpt::ConfigError);
    // No GPU on this machine: "nccl" must say why it cannot run (no NCCL build, or no GPU).
    try {
        make_weight_sync("nccl", world);
        ADD_FAILURE() << "nccl accepted without a GPU";
    } catch (const rlpt::ConfigError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(what.find("built without NCCL") != std::string::npos ||
                    what.find("needs a CUDA device on every rank") != std::string::npos)
            << what;
    }
    WeightSyncOptions o;
    o.bucket_bytes = 0;
    EXPECT_THROW(make_weight_sync("mpi", world, o), rlpt::ConfigError);
    o = WeightSyncOptions();
    o.bucket_bytes = (int64_t(1) << 30) + 1;
    EXPECT_THROW(make_weight_sync("mpi", world, o), rlpt::ConfigError);
    o = WeightSyncOptions();
    o.n_buffers = 0;
    EXPECT_THROW(make_weight_sync("mpi", world, o), rlpt::ConfigError);
    o = WeightSyncOptions();
    o.inplace_min_bytes = -1;
    EXPECT_THROW(make_weight_sync("mpi", world, o), rlpt::ConfigError);
}

// Kept last in the file: it leaves a header broadcast pending on the receivers' (freed)
// communicator, which is exactly the state a timed-out job is in before it aborts.
TEST(WeightSyncError, ZTimeoutWhenTheRootNeverComes) {
    auto world = Communicator::world();
    auto o = small_buckets(1024, 1024);
    o.timeout_s = 0.5;
    auto ws = make_weight_sync("mpi", world, o);
    if (world.rank() != 0) {
        std::vector<torch::Tensor> tensors = {torch::zeros({4})};
        uint64_t version = 0;
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_THROW(ws->sync(tensors, version), rlpt::TimeoutError);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_GE(s, 0.45);
        EXPECT_LT(s, 5.0);
        try {
            ws->sync(tensors, version);
            ADD_FAILURE() << "a broken weight sync accepted another sync";
        } catch (const rlpt::CommError& e) {
            EXPECT_NE(std::string(e.what()).find("unusable after an earlier failure"), std::string::npos) << e.what();
        }
    }
    world.barrier();
}
