// Shared weight arenas (rlpt/comm/shared_arena.h): memfd_create + mmap, and the process-wide
// registry of live arenas that arena_of() reads.
#include "rlpt/comm/shared_arena.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "rlpt/core/log.h"

namespace rlpt::comm {
namespace {

struct Registry {
    std::mutex mu;
    std::map<uint64_t, ArenaRef> by_base;  // live arenas by address
};

Registry& registry() {
    static auto* r = new Registry();  // never destroyed: arenas may be freed during static destruction
    return *r;
}

uint64_t random_id() {
    static std::mutex mu;
    static std::mt19937_64 gen{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^
                               static_cast<uint64_t>(getpid())};
    std::lock_guard<std::mutex> lock(mu);
    uint64_t id = 0;
    while (id == 0) id = gen();
    return id;
}

void warn_once(const std::string& why) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
        RLPT_LOG_WARN("shared weight arenas: {}; weights stay in ordinary memory and same-host weight transfers use "
                      "process_vm_readv/writev",
                      why);
}

}  // namespace

bool shared_arenas_enabled() {
    const char* v = std::getenv("RLPT_SHARED_WEIGHTS");
    return v == nullptr || std::string(v) != "0";
}

std::shared_ptr<SharedArena> SharedArena::create(size_t bytes, const char* what) {
    if (!shared_arenas_enabled() || bytes == 0) return nullptr;
    const int fd = memfd_create(what, MFD_CLOEXEC);
    if (fd < 0) {
        warn_once(std::string("memfd_create: ") + std::strerror(errno));
        return nullptr;
    }
    struct stat st {};
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fstat(fd, &st) != 0) {
        warn_once(std::string("sizing a ") + std::to_string(bytes) + "-byte memory file: " + std::strerror(errno));
        close(fd);
        return nullptr;
    }
    // MAP_POPULATE touches the pages here, once (as torch::zeros would), not in the first step.
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        warn_once(std::string("mapping a ") + std::to_string(bytes) + "-byte memory file: " + std::strerror(errno));
        close(fd);
        return nullptr;
    }
    std::shared_ptr<SharedArena> a(new SharedArena());
    a->data_ = p;
    a->bytes_ = bytes;
    a->fd_ = fd;
    ArenaRef ref{random_id(), static_cast<uint64_t>(st.st_ino), fd, reinterpret_cast<uint64_t>(p), bytes};
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.by_base[ref.base] = ref;
    return a;
}

SharedArena::~SharedArena() {
    {
        auto& r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        r.by_base.erase(reinterpret_cast<uint64_t>(data_));
    }
    munmap(data_, bytes_);
    close(fd_);
}

ArenaRef arena_of(const void* address, size_t bytes) {
    const auto a = reinterpret_cast<uint64_t>(address);
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_base.upper_bound(a);
    if (it == r.by_base.begin()) return {};
    --it;
    const ArenaRef& ref = it->second;
    if (a < ref.base || a + bytes > ref.base + ref.bytes) return {};
    return ref;
}

}  // namespace rlpt::comm
