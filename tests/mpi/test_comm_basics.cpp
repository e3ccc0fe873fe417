#include <gtest/gtest.h>

#include "rlpt/comm/mpi.h"

using rlpt::comm::Communicator;

TEST(CommBasics, AllgatherAndAllreduce) {
    auto world = Communicator::world();
    auto v = world.allgather_i64(world.rank() * 10);
    ASSERT_EQ(static_cast<int>(v.size()), world.size());
    for (int r = 0; r < world.size(); ++r) EXPECT_EQ(v[r], r * 10);
    EXPECT_EQ(world.allreduce_sum_i64(1), world.size());
    EXPECT_DOUBLE_EQ(world.allreduce_max(world.rank()), world.size() - 1);
    auto s = world.allgather_strings(std::string(static_cast<size_t>(world.rank()), 'x') + '\0' + "z");
    for (int r = 0; r < world.size(); ++r) EXPECT_EQ(s[r].size(), static_cast<size_t>(r + 2));
}

TEST(CommBasics, SplitAndBcast) {
    auto world = Communicator::world();
    auto half = world.split(world.rank() % 2, world.rank());
    EXPECT_EQ(half.size(), (world.size() + 1 - world.rank() % 2) / 2);
    std::string msg = half.rank() == 0 ? std::string("hello\0world", 11) : std::string();
    half.bcast_string(msg, 0);
    EXPECT_EQ(msg, std::string("hello\0world", 11));
}
