#include "rlpt/comm/buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "rlpt/core/error.h"

namespace rlpt::comm {

struct BufferPool::State {
    std::mutex mu;
    std::multimap<int64_t, void*> free_blocks;  // capacity -> block
    std::map<void*, int64_t> capacity;          // every live or cached block
    int64_t cached = 0;
    int64_t max_cached = 0;
    int64_t hits = 0;
    int64_t misses = 0;
    bool closed = false;  // the owning BufferPool is gone: free blocks as they come back

    void give_back(void* p) {
        std::lock_guard<std::mutex> lock(mu);
        auto it = capacity.find(p);
        if (it == capacity.end()) return;
        int64_t cap = it->second;
        if (closed || cached + cap > max_cached) {
            capacity.erase(it);
            std::free(p);
            return;
        }
        free_blocks.emplace(cap, p);
        cached += cap;
    }

    ~State() {
        for (auto& kv : free_blocks) std::free(kv.second);
    }
};

BufferPool::BufferPool(int64_t max_cached_bytes) : state_(std::make_shared<State>()) {
    state_->max_cached = max_cached_bytes;
}

BufferPool::~BufferPool() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    for (auto& kv : state_->free_blocks) {
        state_->capacity.erase(kv.second);
        std::free(kv.second);
    }
    state_->free_blocks.clear();
    state_->cached = 0;
}

torch::Tensor BufferPool::empty(torch::IntArrayRef shape, torch::ScalarType dtype) {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
    auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
    if (bytes < kMinPooledBytes) return torch::empty(shape, opts);

    void* block = nullptr;
    {
        std::lock_guard<std::mutex> lock(state_->mu);
        auto it = state_->free_blocks.lower_bound(bytes);
        if (it != state_->free_blocks.end() && it->first <= 2 * bytes) {
            block = it->second;
            state_->cached -= it->first;
            state_->free_blocks.erase(it);
            ++state_->hits;
        } else {
            ++state_->misses;
        }
    }
    if (block == nullptr) {
        int64_t cap = (bytes + 4095) / 4096 * 4096;
        block = std::aligned_alloc(64, static_cast<size_t>(cap));
        if (block == nullptr) throw ValueError(fmt::format("out of host memory allocating {} bytes", cap));
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->capacity[block] = cap;
    }
    std::shared_ptr<State> st = state_;
    return torch::from_blob(
        block, shape, [st](void* p) { st->give_back(p); }, opts);
}

int64_t BufferPool::cached_bytes() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->cached;
}
int64_t BufferPool::hits() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->hits;
}
int64_t BufferPool::misses() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->misses;
}

}  // namespace rlpt::comm
