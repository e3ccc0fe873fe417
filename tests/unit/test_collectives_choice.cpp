// Which collectives carry tensors (rlpt/comm/collectives.h) and which backend moves weights on GPUs
// (rlpt/weights/weight_sync.h), as pure decisions: every combination of build, device-collectives
// setting and device, without a GPU.
#include <gtest/gtest.h>

#include "rlpt/build_config.h"
#include "rlpt/comm/collectives.h"
#include "rlpt/weights/weight_sync.h"
#include "rlpt/core/error.h"

using namespace rlpt;
using comm::CollectivesKind;
using comm::DeviceCollectives;

TEST(CollectivesChoice, FollowsGroupSizeDeviceAndSetting) {
    const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
    for (bool nccl : {false, true}) {
        EXPECT_EQ(comm::choose_collectives(1, cpu, nccl), CollectivesKind::kSelf);
        EXPECT_EQ(comm::choose_collectives(1, cuda, nccl), CollectivesKind::kSelf);
        EXPECT_EQ(comm::choose_collectives(2, cpu, nccl), CollectivesKind::kMpi);
    }
    EXPECT_EQ(comm::choose_collectives(2, cuda, true), CollectivesKind::kNccl);
    EXPECT_EQ(comm::choose_collectives(4, cuda, false), CollectivesKind::kStagedMpi);
    EXPECT_THROW(comm::choose_collectives(2, torch::Device(torch::kMeta), true), ValueError);
    EXPECT_STREQ(comm::collectives_kind_name(CollectivesKind::kStagedMpi), "mpi-staged");
}

TEST(CollectivesChoice, NcclCollectivesNeedABuildWithNccl) {
    if (RLPT_HAVE_NCCL) GTEST_SKIP() << "this build has NCCL (a GPU would be needed to build the communicator)";
    try {
        comm::make_collectives(CollectivesKind::kNccl, nullptr, torch::Device(torch::kCUDA, 0), "a group",
                               comm::Deadline::never());
        ADD_FAILURE() << "NCCL collectives without NCCL";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("a group"), std::string::npos) << e.what();
    }
}

TEST(WeightBackend, NcclConflictsWithMpiDeviceCollectives) {
    try {
        weights::check_weight_backend("nccl", true, DeviceCollectives::kMpi, "weight_sync");
        ADD_FAILURE() << "'nccl' accepted with device collectives over MPI";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("weight_sync backend 'nccl' conflicts with device collectives 'mpi'"), std::string::npos)
            << what;
        EXPECT_NE(what.find("trainer.device_collectives"), std::string::npos) << what;
    }
    try {
        weights::check_weight_backend("nccl", false, DeviceCollectives::kMpi, "weight_sync");
        ADD_FAILURE() << "'nccl' accepted without NCCL";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("built without NCCL"), std::string::npos) << e.what();
    }
    EXPECT_THROW(weights::check_weight_backend("gloo", true, DeviceCollectives::kNccl, "weight_sync"), ConfigError);
    EXPECT_NO_THROW(weights::check_weight_backend("nccl", true, DeviceCollectives::kNccl, "weight_sync"));
    for (auto c : {DeviceCollectives::kNccl, DeviceCollectives::kMpi}) {
        for (bool built : {false, true}) {
            EXPECT_NO_THROW(weights::check_weight_backend("auto", built, c, "weight_sync"));
            EXPECT_NO_THROW(weights::check_weight_backend("mpi", built, c, "weight_sync"));
        }
    }
}

TEST(WeightBackend, AutoUsesNcclOnlyWhenDeviceCollectivesDo) {
    EXPECT_TRUE(weights::weights_over_nccl("auto", true, DeviceCollectives::kNccl, true));
    EXPECT_FALSE(weights::weights_over_nccl("auto", true, DeviceCollectives::kMpi, true));
    EXPECT_FALSE(weights::weights_over_nccl("auto", false, DeviceCollectives::kNccl, true));
    EXPECT_FALSE(weights::weights_over_nccl("auto", true, DeviceCollectives::kNccl, false));
    EXPECT_FALSE(weights::weights_over_nccl("mpi", true, DeviceCollectives::kNccl, true));
    EXPECT_TRUE(weights::weights_over_nccl("nccl", true, DeviceCollectives::kNccl, false));
}
