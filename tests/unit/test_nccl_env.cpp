// NCCL bootstrap interface policy (rlpt/comm/nccl_env.h): the pure decision, the socket
// probe against loopback and against an address that is not this host's, and the
// environment side effects.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "rlpt/comm/nccl_env.h"
#include "rlpt/core/error.h"

using rlpt::comm::decide_nccl_ifname;
using rlpt::comm::NcclIfnameAction;
using rlpt::comm::SelfRoute;

TEST(NcclEnv, UserSettingIsHonouredWhateverTheProbe) {
    for (SelfRoute p : {SelfRoute::kNotProbed, SelfRoute::kRoutable, SelfRoute::kNotRoutable, SelfRoute::kUnresolved}) {
        for (int nodes : {1, 4}) {
            EXPECT_EQ(decide_nccl_ifname(std::string("ib0"), p, nodes), NcclIfnameAction::kHonourUser);
        }
    }
}

TEST(NcclEnv, RoutableHostLeavesNcclAlone) {
    EXPECT_EQ(decide_nccl_ifname(std::nullopt, SelfRoute::kRoutable, 1), NcclIfnameAction::kLeaveDefault);
    EXPECT_EQ(decide_nccl_ifname(std::nullopt, SelfRoute::kRoutable, 8), NcclIfnameAction::kLeaveDefault);
    // An empty value counts as unset.
    EXPECT_EQ(decide_nccl_ifname(std::string(), SelfRoute::kRoutable, 2), NcclIfnameAction::kLeaveDefault);
}

TEST(NcclEnv, UnroutableSingleNodePinsLoopbackMultiNodeNever) {
    for (SelfRoute p : {SelfRoute::kNotRoutable, SelfRoute::kUnresolved}) {
        EXPECT_EQ(decide_nccl_ifname(std::nullopt, p, 1), NcclIfnameAction::kPinLoopback);
        EXPECT_EQ(decide_nccl_ifname(std::string(), p, 1), NcclIfnameAction::kPinLoopback);
        EXPECT_EQ(decide_nccl_ifname(std::nullopt, p, 2), NcclIfnameAction::kWarnMultiNode);
        EXPECT_EQ(decide_nccl_ifname(std::nullopt, p, 64), NcclIfnameAction::kWarnMultiNode);
    }
}

TEST(NcclEnv, DecisionRejectsBadInput) {
    EXPECT_THROW(decide_nccl_ifname(std::nullopt, SelfRoute::kRoutable, 0), rlpt::ValueError);
    // Unset variable but no probe: a caller bug.
    EXPECT_THROW(decide_nccl_ifname(std::nullopt, SelfRoute::kNotProbed, 1), rlpt::ValueError);
}

TEST(NcclEnv, LoopbackRoutesToSelf) {
    auto p = rlpt::comm::probe_address_routes_to_self("127.0.0.1", 300);
    EXPECT_EQ(p.result, SelfRoute::kRoutable) << p.detail;
    EXPECT_NE(p.detail.find("127.0.0.1"), std::string::npos);
}

TEST(NcclEnv, ForeignAddressFailsFast) {
    // 192.0.2.1 (TEST-NET-1) is not assigned to this host: bind fails at once.
    const auto t0 = std::chrono::steady_clock::now();
    auto p = rlpt::comm::probe_address_routes_to_self("192.0.2.1", 300);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(p.result, SelfRoute::kNotRoutable) << p.detail;
    EXPECT_NE(p.detail.find("does not route back"), std::string::npos) << p.detail;
    EXPECT_LT(s, 1.0);
}

TEST(NcclEnv, NonAddressIsUnresolved) {
    auto p = rlpt::comm::probe_address_routes_to_self("not-an-address", 300);
    EXPECT_EQ(p.result, SelfRoute::kUnresolved);
    EXPECT_NE(p.detail.find("not an IP address"), std::string::npos) << p.detail;
}

TEST(NcclEnv, HostnameProbeFinishesQuickly) {
    // Whatever this host's setup, the probe answers within a few timeouts.
    const auto t0 = std::chrono::steady_clock::now();
    auto p = rlpt::comm::probe_hostname_routes_to_self(300);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(p.result, SelfRoute::kNotProbed);
    EXPECT_FALSE(p.detail.empty());
    EXPECT_LT(s, 5.0);
}

namespace {
// Restores NCCL_SOCKET_IFNAME after a test.
class ScopedIfname {
  public:
    ScopedIfname() {
        if (const char* v = std::getenv("NCCL_SOCKET_IFNAME")) saved_ = v;
    }
    ~ScopedIfname() {
        if (saved_) {
            setenv("NCCL_SOCKET_IFNAME", saved_->c_str(), 1);
        } else {
            unsetenv("NCCL_SOCKET_IFNAME");
        }
    }

  private:
    std::optional<std::string> saved_;
};
}  // namespace

TEST(NcclEnv, ApplyKeepsAUserValue) {
    ScopedIfname guard;
    setenv("NCCL_SOCKET_IFNAME", "eth7", 1);
    EXPECT_EQ(rlpt::comm::apply_nccl_ifname_policy(1), NcclIfnameAction::kHonourUser);
    EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "eth7");
}

TEST(NcclEnv, ApplyFollowsTheProbe) {
    ScopedIfname guard;
    unsetenv("NCCL_SOCKET_IFNAME");
    const auto probe = rlpt::comm::probe_hostname_routes_to_self(300);
    const auto action = rlpt::comm::apply_nccl_ifname_policy(1);
    EXPECT_EQ(action, decide_nccl_ifname(std::nullopt, probe.result, 1));
    const char* v = std::getenv("NCCL_SOCKET_IFNAME");
    if (action == NcclIfnameAction::kPinLoopback) {
        ASSERT_NE(v, nullptr);
        EXPECT_STREQ(v, "lo");
    } else {
        EXPECT_EQ(v, nullptr);
    }
    // Multi-node never pins loopback.
    unsetenv("NCCL_SOCKET_IFNAME");
    rlpt::comm::apply_nccl_ifname_policy(3);
    EXPECT_EQ(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);
}
