// Shared weight arenas (rlpt/comm/shared_arena.h, rlpt/comm/shared_tensor.h): the registry that
// the single copy reads, tensors moved into an arena keeping their values and autograd state,
// another process's view through /proc/<pid>/fd (the path the single copy maps), the environment
// switch. The copies between ranks: tests/mpi/test_weight_reshard.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "rlpt/comm/shared_arena.h"
#include "rlpt/comm/shared_tensor.h"

namespace rlpt::comm {
namespace {

size_t bytes_of(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

TEST(SharedArena, RegistryKnowsLiveArenasOnly) {
    auto a = SharedArena::create(3 * 4096 + 5, "test-arena");
    ASSERT_NE(a, nullptr);
    auto* p = static_cast<char*>(a->data());
    const ArenaRef r = arena_of(p + 100, 200);
    EXPECT_NE(r.id, 0u);
    EXPECT_EQ(r.base, reinterpret_cast<uint64_t>(p));
    EXPECT_EQ(r.bytes, a->size());
    EXPECT_GE(r.fd, 0);
    EXPECT_EQ(arena_of(p + a->size() - 1, 2).id, 0u);  // runs past the end
    EXPECT_EQ(arena_of(p - 1, 1).id, 0u);
    auto b = SharedArena::create(4096, "test-arena-2");
    ASSERT_NE(b, nullptr);
    EXPECT_NE(arena_of(b->data(), 1).id, r.id);                                 // every arena its own id
    for (size_t i = 0; i < a->size(); ++i) ASSERT_EQ(p[i], 0) << "byte " << i;  // zero-filled
    a.reset();
    EXPECT_EQ(arena_of(p + 100, 200).id, 0u);  // freed: gone from the registry
    int x = 0;
    EXPECT_EQ(arena_of(&x, sizeof(x)).id, 0u);
}

// What a peer does (src/weights/single_copy.cpp): open /proc/<pid>/fd/<fd>, check the inode, map it;
// writes through the mapping are the arena's bytes.
TEST(SharedArena, AnotherOpenOfTheFileSeesTheSameBytes) {
    auto t = shared_zeros(1000, torch::kFloat32, "test-peer-view");
    const ArenaRef r = arena_of(t.data_ptr(), bytes_of(t));
    ASSERT_NE(r.id, 0u);
    const std::string path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(r.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    struct stat st {};
    ASSERT_EQ(fstat(fd, &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_ino), r.inode);
    EXPECT_GE(static_cast<uint64_t>(st.st_size), r.bytes);
    void* m = mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(m, MAP_FAILED);
    auto* f = static_cast<float*>(m) + (reinterpret_cast<uint64_t>(t.data_ptr()) - r.base) / 4;
    f[7] = 3.5f;
    EXPECT_EQ(t[7].item<float>(), 3.5f);
    t[8] = 2.0f;
    EXPECT_EQ(f[8], 2.0f);
    munmap(m, r.bytes);
}

TEST(SharedArena, ShareTensorsKeepsValuesGradsAndTiedWeights) {
    torch::nn::Linear a(5, 3), b(3, 4);
    auto before_a = a->weight.detach().clone(), before_b = b->bias.detach().clone();
    std::vector<torch::Tensor> ps{a->weight, a->bias, b->weight, b->bias, a->weight};  // a->weight twice (tied)
    ASSERT_TRUE(share_tensors(ps, "test-share"));
    EXPECT_EQ(ps.size(), 4u);  // each tensor once
    for (const auto& p : {a->weight, a->bias, b->weight, b->bias}) {
        EXPECT_NE(arena_of(p.data_ptr(), bytes_of(p)).id, 0u);
        EXPECT_EQ(reinterpret_cast<uint64_t>(p.data_ptr()) % 64, 0u);
        EXPECT_TRUE(p.requires_grad());
    }
    EXPECT_EQ(arena_of(a->weight.data_ptr(), 1).id, arena_of(b->bias.data_ptr(), 1).id);  // one arena
    EXPECT_TRUE(torch::equal(a->weight, before_a));
    EXPECT_TRUE(torch::equal(b->bias, before_b));
    // Training still works on them, in place.
    auto loss = b(a(torch::ones({2, 5}))).sum();
    loss.backward();
    EXPECT_TRUE(a->weight.grad().defined());
    {
        torch::NoGradGuard ng;
        a->weight.sub_(a->weight.grad());
    }
    EXPECT_NE(arena_of(a->weight.data_ptr(), bytes_of(a->weight)).id, 0u);
    EXPECT_TRUE(share_tensors(ps, "test-share-again"));  // already shared: nothing moves
    EXPECT_EQ(arena_of(a->weight.data_ptr(), 1).id, arena_of(b->bias.data_ptr(), 1).id);
}

TEST(SharedArena, OffByEnvironment) {
    setenv("RLPT_SHARED_WEIGHTS", "0", 1);
    EXPECT_FALSE(shared_arenas_enabled());
    EXPECT_EQ(SharedArena::create(4096, "test-off"), nullptr);
    auto t = shared_zeros(10, torch::kFloat32, "test-off");
    EXPECT_EQ(arena_of(t.data_ptr(), bytes_of(t)).id, 0u);
    EXPECT_TRUE(torch::equal(t, torch::zeros({10})));
    std::vector<torch::Tensor> ps{torch::ones({3})};
    EXPECT_FALSE(share_tensors(ps, "test-off"));
    unsetenv("RLPT_SHARED_WEIGHTS");
    EXPECT_TRUE(shared_arenas_enabled());
}

}  // namespace
}  // namespace rlpt::comm
