// The GPU map (rlpt/comm/device.h) decided from fake per-rank facts, the device-collectives
// setting, and the Batch's device crossing (Batch::to, the protocol's one boundary).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

#include "rlpt/batch/batch.h"
#include "rlpt/build_config.h"
#include "rlpt/comm/device.h"
#include "rlpt/core/error.h"

namespace rlpt::comm {
namespace {

constexpr auto kAuto = CollectivesRequest::kAuto;
constexpr auto kNccl = CollectivesRequest::kNccl;
constexpr auto kMpi = CollectivesRequest::kMpi;

// `gpus[r]` GPUs seen by rank r, every rank of a node seeing all of its node's GPUs (identities
// "n<node>-gpu<i>"); rank 0 a controller that hosts no role unless `rank0_roles`.
std::vector<RankGpuFacts> facts(const std::vector<int>& node, const std::vector<int>& gpus, bool rank0_roles = false) {
    std::vector<RankGpuFacts> out(node.size());
    for (size_t r = 0; r < node.size(); ++r) {
        out[r].node = node[r];
        out[r].node_name = "host" + std::to_string(node[r]);
        for (int i = 0; i < gpus[r]; ++i) out[r].gpu_ids.push_back(fmt::format("n{}-gpu{}", node[r], i));
        out[r].hosts_roles = r != 0 || rank0_roles;
    }
    return out;
}

// Per-task binding (srun --gpus-per-task=1, a CUDA_VISIBLE_DEVICES or a cgroup per rank): rank r
// sees only the GPU `uuid[r]`, as its cuda:0.
std::vector<RankGpuFacts> bound(const std::vector<int>& node, const std::vector<std::string>& uuid) {
    auto out = facts(node, std::vector<int>(node.size(), 0));
    for (size_t r = 0; r < node.size(); ++r) out[r].gpu_ids = {uuid[r]};
    return out;
}

std::string config_error(const std::vector<RankGpuFacts>& f, const std::string& device, bool built,
                         CollectivesRequest c) {
    try {
        plan_gpu_map(f, device, built, c, /*nccl_built=*/true);
    } catch (const ConfigError& e) {
        return e.message();
    }
    return "";
}

TEST(GpuMap, CpuWhenAskedOrWithoutCudaOrWithoutGpus) {
    const auto two = facts({0, 0, 0}, {2, 2, 2});
    EXPECT_FALSE(plan_gpu_map(two, "cpu", true, kNccl, true).cuda);
    EXPECT_FALSE(plan_gpu_map(two, "auto", false, kAuto, true).cuda);
    // auto never mixes: one role rank without a GPU keeps every rank on the CPU.
    const auto mixed = facts({0, 0, 1}, {2, 2, 0});
    const GpuMap m = plan_gpu_map(mixed, "auto", true, kAuto, true);
    EXPECT_FALSE(m.cuda);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, -1, -1}));
    // Collectives of a CPU job: the build's default, as before GPUs existed.
    EXPECT_EQ(m.collectives, DeviceCollectives::kNccl);
    EXPECT_EQ(plan_gpu_map(mixed, "auto", true, kAuto, false).collectives, DeviceCollectives::kMpi);
    EXPECT_EQ(plan_gpu_map(mixed, "auto", true, kMpi, true).collectives, DeviceCollectives::kMpi);
}

TEST(GpuMap, RoleRanksTakeTheirNodesGpusInOrderAndTheControllerNone) {
    // Two nodes with two GPUs each; rank 0 is the controller (no roles) on node 0.
    const auto f = facts({0, 0, 0, 1, 1}, {2, 2, 2, 2, 2});
    const GpuMap m = plan_gpu_map(f, "cuda", true, kAuto, true);
    EXPECT_TRUE(m.cuda);
    EXPECT_FALSE(m.shared);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, 0, 1, 0, 1}));
    EXPECT_EQ(m.gpu_of_rank, (std::vector<std::string>{"", "n0-gpu0", "n0-gpu1", "n1-gpu0", "n1-gpu1"}));
    EXPECT_EQ(m.collectives, DeviceCollectives::kNccl);
    EXPECT_EQ(m.collectives_why, "auto: a GPU per rank");
    // With the controller hosting roles it takes GPU 0 and node 0 is one GPU short: an explicit
    // nccl is refused, naming the node, its GPUs and the ranks.
    const auto busy = facts({0, 0, 0, 1, 1}, {2, 2, 2, 2, 2}, /*rank0_roles=*/true);
    const std::string why = config_error(busy, "auto", true, kNccl);
    EXPECT_NE(why.find("node 0 (host0) has 2 GPU(s) but 3 of its ranks use one (ranks 0,1,2)"), std::string::npos)
        << why;
    EXPECT_NE(why.find("trainer.device_collectives to auto or mpi"), std::string::npos) << why;
}

TEST(GpuMap, SharedGpusUseMpiUnderAutoAreRefusedOverNcclAndRoundRobin) {
    const auto f = facts({0, 0, 0, 0}, {1, 1, 1, 1});  // a one-GPU node, three role ranks
    // auto (the default): the ranks share the GPU and their collectives go over MPI, said once.
    const GpuMap a = plan_gpu_map(f, "auto", true, kAuto, true);
    EXPECT_TRUE(a.cuda);
    EXPECT_TRUE(a.shared);
    EXPECT_EQ(a.device_of_rank, (std::vector<int>{-1, 0, 0, 0}));
    EXPECT_EQ(a.collectives, DeviceCollectives::kMpi);
    EXPECT_NE(a.collectives_why.find("auto: ranks 1,2,3 share a GPU"), std::string::npos) << a.collectives_why;
    EXPECT_NE(a.describe().find("rank 3 -> cuda:0 (n0-gpu0); device collectives over mpi (auto: ranks 1,2,3"),
              std::string::npos)
        << a.describe();
    // An explicit nccl keeps the refusal; mpi shares.
    EXPECT_NE(config_error(f, "cuda", true, kNccl).find("ranks 1,2,3"), std::string::npos);
    const GpuMap m = plan_gpu_map(f, "cuda", true, kMpi, true);
    EXPECT_TRUE(m.shared);
    EXPECT_EQ(m.collectives, DeviceCollectives::kMpi);
    EXPECT_TRUE(m.collectives_why.empty());
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, 0, 0, 0}));
    const auto two = facts({0, 0, 0, 0}, {2, 2, 2, 2});
    const GpuMap rr = plan_gpu_map(two, "cuda", true, kAuto, true);
    EXPECT_EQ(rr.device_of_rank, (std::vector<int>{-1, 0, 1, 0}));
    EXPECT_NE(rr.collectives_why.find("ranks 1,3 share a GPU"), std::string::npos) << rr.collectives_why;
    // Only the ranks on a shared GPU are named; a build without NCCL says why it uses MPI.
    EXPECT_EQ(plan_gpu_map(facts({0, 0, 0}, {2, 2, 2}), "cuda", true, kAuto, false).collectives_why,
              "auto: this rlpt was built without NCCL");
}

TEST(GpuMap, PerTaskBindingIsOneGpuPerRankByUuid) {
    // srun --gpus-per-task=1 on two nodes of 4 GPUs: every rank sees one GPU, as cuda:0. Those
    // are 8 different GPUs: nothing is shared, NCCL is fine (counting devices would say 1 GPU).
    std::vector<int> node;
    std::vector<std::string> uuid;
    for (int r = 0; r < 8; ++r) {
        node.push_back(r / 4);
        uuid.push_back(fmt::format("GPU-{:08x}-aaaa-bbbb-cccc-0000000000{:02}", 0x1000 * (r / 4) + r, r));
    }
    auto f = bound(node, uuid);
    f[0].hosts_roles = true;
    const GpuMap m = plan_gpu_map(f, "auto", true, kNccl, true);
    EXPECT_TRUE(m.cuda);
    EXPECT_FALSE(m.shared);
    EXPECT_EQ(m.device_of_rank, std::vector<int>(8, 0));
    EXPECT_EQ(m.gpu_of_rank, uuid);
    EXPECT_EQ(m.collectives, DeviceCollectives::kNccl);
    // Two tasks bound to the same GPU (--gpus-per-task with overlapping --gpu-bind masks, or a
    // copy-pasted CUDA_VISIBLE_DEVICES): found by UUID, though each sees it as its cuda:0.
    uuid[3] = uuid[2];
    f = bound(node, uuid);
    f[0].hosts_roles = true;
    const std::string why = config_error(f, "auto", true, kNccl);
    EXPECT_NE(why.find("node 0 (host0) has 3 GPU(s) but 4 of its ranks use one"), std::string::npos) << why;
    const GpuMap a = plan_gpu_map(f, "auto", true, kAuto, true);
    EXPECT_EQ(a.collectives, DeviceCollectives::kMpi);
    EXPECT_NE(a.collectives_why.find("ranks 2,3 share a GPU"), std::string::npos) << a.collectives_why;
}

TEST(GpuMap, CgroupLimitedAndOverlappingViewsTakeTheLeastTakenGpu) {
    // Rank 1 sees both GPUs, rank 2 only the second (a cgroup or CUDA_VISIBLE_DEVICES=1): rank 1
    // takes its cuda:0, rank 2 its cuda:0, which is the other GPU.
    auto f = facts({0, 0, 0}, {0, 0, 0});
    f[1].gpu_ids = {"GPU-a", "GPU-b"};
    f[2].gpu_ids = {"GPU-b"};
    GpuMap m = plan_gpu_map(f, "cuda", true, kNccl, true);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, 0, 0}));
    EXPECT_EQ(m.gpu_of_rank, (std::vector<std::string>{"", "GPU-a", "GPU-b"}));
    EXPECT_FALSE(m.shared);
    // The reverse order: rank 1 sees [b, a] (CUDA_VISIBLE_DEVICES=1,0), rank 2 [a]; rank 1 takes b.
    f[1].gpu_ids = {"GPU-b", "GPU-a"};
    f[2].gpu_ids = {"GPU-a"};
    m = plan_gpu_map(f, "cuda", true, kNccl, true);
    EXPECT_EQ(m.gpu_of_rank, (std::vector<std::string>{"", "GPU-b", "GPU-a"}));
    EXPECT_FALSE(m.shared);
}

TEST(GpuMap, CudaRequestedWhereItCannotBeIsAConfigErrorNamingTheRanks) {
    const auto f = facts({0, 0, 1, 1}, {1, 1, 0, 0});
    const std::string why = config_error(f, "cuda", true, kNccl);
    EXPECT_NE(why.find("rank(s) 2,3 see no CUDA device"), std::string::npos) << why;
    const std::string unbuilt = config_error(facts({0, 0}, {1, 1}), "cuda", false, kNccl);
    EXPECT_NE(unbuilt.find("built without CUDA kernels"), std::string::npos) << unbuilt;
    EXPECT_NE(config_error(f, "tpu", true, kNccl).find("model.device"), std::string::npos);
}

TEST(GpuMap, FakeDeviceListIsWhatTheProcessSees) {
    ::setenv("RLPT_FAKE_GPUS", "GPU-one,GPU-two", 1);
    EXPECT_EQ(visible_gpu_ids(3), (std::vector<std::string>{"GPU-one", "GPU-two"}));
    if (!RLPT_HAVE_CUDA) EXPECT_EQ(visible_cuda_devices(), 0);  // a fake GPU can run nothing
    ::setenv("RLPT_FAKE_GPUS", "", 1);
    EXPECT_TRUE(visible_gpu_ids(3).empty());
    ::unsetenv("RLPT_FAKE_GPUS");
    if (!RLPT_HAVE_CUDA) EXPECT_TRUE(visible_gpu_ids(3).empty());
}

TEST(DeviceCollectives, SettingAndEnvironment) {
    ::unsetenv("RLPT_DEVICE_COLLECTIVES");
    EXPECT_EQ(parse_device_collectives("mpi"), kMpi);
    EXPECT_EQ(parse_device_collectives("auto"), kAuto);
    if (!RLPT_HAVE_NCCL) EXPECT_THROW(parse_device_collectives("nccl"), ConfigError);
    ::setenv("RLPT_DEVICE_COLLECTIVES", "mpi", 1);
    EXPECT_EQ(parse_device_collectives("auto"), kMpi);
    EXPECT_EQ(parse_device_collectives("mpi"), kMpi);
    ::setenv("RLPT_DEVICE_COLLECTIVES", "bogus", 1);
    EXPECT_THROW(parse_device_collectives("auto"), ConfigError);
    ::unsetenv("RLPT_DEVICE_COLLECTIVES");
    EXPECT_THROW(parse_device_collectives("gloo"), ConfigError);
}

}  // namespace
}  // namespace rlpt::comm

namespace rlpt {
namespace {

TEST(BatchDevice, ToMovesEveryColumnAndSharesWhatIsAlreadyThere) {
    Batch b(2);
    b.set("ids", torch::arange(6).view({2, 3}));
    b.set("mask", torch::ones({2, 3}));
    b.set_strings("uid", {"a", "b"});
    b.set_meta("temperature", 0.7);
    b.add_metric("x", 1.0);
    const Batch same = b.to(torch::kCPU);
    EXPECT_EQ(same.at("ids").data_ptr(), b.at("ids").data_ptr());  // no copy on the same device
    // The meta device stands in for a GPU here: every column moves, nothing else changes.
    const Batch moved = b.to(torch::kMeta);
    ASSERT_EQ(moved.devices().size(), 1u);
    EXPECT_TRUE(moved.devices()[0].is_meta());
    EXPECT_EQ(moved.at("ids").sizes(), b.at("ids").sizes());
    EXPECT_EQ(moved.strings("uid"), b.strings("uid"));
    EXPECT_DOUBLE_EQ(moved.meta_double("temperature"), 0.7);
    EXPECT_EQ(moved.metrics().count("x"), 1u);
    EXPECT_TRUE(b.devices()[0].is_cpu());  // the original is untouched
    EXPECT_TRUE(Batch(3).devices()[0].is_cpu());
}

}  // namespace
}  // namespace rlpt
