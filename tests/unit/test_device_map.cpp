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

// `gpus[r]` GPUs seen by rank r; rank 0 a controller that hosts no role unless `rank0_roles`.
std::vector<RankGpuFacts> facts(const std::vector<int>& node, const std::vector<int>& gpus, bool rank0_roles = false) {
    std::vector<RankGpuFacts> out(node.size());
    for (size_t r = 0; r < node.size(); ++r) {
        out[r].node = node[r];
        out[r].node_name = "host" + std::to_string(node[r]);
        out[r].visible_gpus = gpus[r];
        out[r].hosts_roles = r != 0 || rank0_roles;
    }
    return out;
}

std::string config_error(const std::vector<RankGpuFacts>& f, const std::string& device, bool built,
                         DeviceCollectives c) {
    try {
        plan_gpu_map(f, device, built, c);
    } catch (const ConfigError& e) {
        return e.message();
    }
    return "";
}

TEST(GpuMap, CpuWhenAskedOrWithoutCudaOrWithoutGpus) {
    const auto two = facts({0, 0, 0}, {2, 2, 2});
    EXPECT_FALSE(plan_gpu_map(two, "cpu", true, DeviceCollectives::kNccl).cuda);
    EXPECT_FALSE(plan_gpu_map(two, "auto", false, DeviceCollectives::kNccl).cuda);
    // auto never mixes: one role rank without a GPU keeps every rank on the CPU.
    const auto mixed = facts({0, 0, 1}, {2, 2, 0});
    const GpuMap m = plan_gpu_map(mixed, "auto", true, DeviceCollectives::kNccl);
    EXPECT_FALSE(m.cuda);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, -1, -1}));
}

TEST(GpuMap, RoleRanksTakeTheirNodesGpusInOrderAndTheControllerNone) {
    // Two nodes with two GPUs each; rank 0 is the controller (no roles) on node 0.
    const auto f = facts({0, 0, 0, 1, 1}, {2, 2, 2, 2, 2});
    const GpuMap m = plan_gpu_map(f, "cuda", true, DeviceCollectives::kNccl);
    EXPECT_TRUE(m.cuda);
    EXPECT_FALSE(m.shared);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, 0, 1, 0, 1}));
    // With the controller hosting roles it takes GPU 0 and node 0 is one GPU short.
    const auto busy = facts({0, 0, 0, 1, 1}, {2, 2, 2, 2, 2}, /*rank0_roles=*/true);
    const std::string why = config_error(busy, "auto", true, DeviceCollectives::kNccl);
    EXPECT_NE(why.find("node 0 (host0) has 2 GPU(s) but 3 of its ranks use one (ranks 0,1,2)"), std::string::npos)
        << why;
    EXPECT_NE(why.find("trainer.device_collectives=mpi"), std::string::npos) << why;
}

TEST(GpuMap, SharingIsRefusedOverNcclAndRoundRobinOverMpi) {
    const auto f = facts({0, 0, 0, 0}, {1, 1, 1, 1});  // a one-GPU node, three role ranks
    EXPECT_NE(config_error(f, "cuda", true, DeviceCollectives::kNccl).find("ranks 1,2,3"), std::string::npos);
    const GpuMap m = plan_gpu_map(f, "cuda", true, DeviceCollectives::kMpi);
    EXPECT_TRUE(m.shared);
    EXPECT_EQ(m.device_of_rank, (std::vector<int>{-1, 0, 0, 0}));
    const auto two = facts({0, 0, 0, 0}, {2, 2, 2, 2});
    EXPECT_EQ(plan_gpu_map(two, "cuda", true, DeviceCollectives::kMpi).device_of_rank,
              (std::vector<int>{-1, 0, 1, 0}));
}

TEST(GpuMap, CudaRequestedWhereItCannotBeIsAConfigErrorNamingTheRanks) {
    const auto f = facts({0, 0, 1, 1}, {1, 1, 0, 0});
    const std::string why = config_error(f, "cuda", true, DeviceCollectives::kNccl);
    EXPECT_NE(why.find("rank(s) 2,3 see no CUDA device"), std::string::npos) << why;
    const std::string unbuilt = config_error(facts({0, 0}, {1, 1}), "cuda", false, DeviceCollectives::kNccl);
    EXPECT_NE(unbuilt.find("built without CUDA kernels"), std::string::npos) << unbuilt;
    EXPECT_NE(config_error(f, "tpu", true, DeviceCollectives::kNccl).find("model.device"), std::string::npos);
}

TEST(DeviceCollectives, SettingAndEnvironment) {
    ::unsetenv("RLPT_DEVICE_COLLECTIVES");
    EXPECT_EQ(resolve_device_collectives("mpi"), DeviceCollectives::kMpi);
    EXPECT_EQ(resolve_device_collectives("auto"), RLPT_HAVE_NCCL ? DeviceCollectives::kNccl : DeviceCollectives::kMpi);
    if (!RLPT_HAVE_NCCL) EXPECT_THROW(resolve_device_collectives("nccl"), ConfigError);
    ::setenv("RLPT_DEVICE_COLLECTIVES", "mpi", 1);
    EXPECT_EQ(resolve_device_collectives("auto"), DeviceCollectives::kMpi);
    EXPECT_EQ(resolve_device_collectives("mpi"), DeviceCollectives::kMpi);
    ::setenv("RLPT_DEVICE_COLLECTIVES", "bogus", 1);
    EXPECT_THROW(resolve_device_collectives("auto"), ConfigError);
    ::unsetenv("RLPT_DEVICE_COLLECTIVES");
    EXPECT_THROW(resolve_device_collectives("gloo"), ConfigError);
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
