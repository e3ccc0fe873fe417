#pragma once
// A cache of large host buffers handed out as torch tensors (torch::from_blob with a deleter
// that gives the memory back). Receiving into freshly allocated memory costs a page fault per
// 4 KiB (~1.7 GB/s on the dev VM against ~10 GB/s into warm memory), so the batch transport
// (rlpt/protocol/batch_transport.h) receives into pooled buffers.
//
// Blocks of >= kMinPooledBytes are pooled; smaller requests use torch::empty. A freed block
// is kept while the pool holds at most `max_cached_bytes`; a request reuses the smallest
// cached block that fits and is at most 2x too large. Thread-safe. Tensors may outlive the
// pool object handle: each holds a shared reference to the pool state.

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace rlpt::comm {

class BufferPool {
  public:
    static constexpr int64_t kMinPooledBytes = 64 * 1024;

    explicit BufferPool(int64_t max_cached_bytes = int64_t(4) << 30);
    ~BufferPool();
    BufferPool(const BufferPool&) = delete;
    BufferPool& operator=(const BufferPool&) = delete;

    // An uninitialised CPU tensor (C-contiguous) of the given shape and dtype.
    torch::Tensor empty(torch::IntArrayRef shape, torch::ScalarType dtype);

    int64_t cached_bytes() const;
    int64_t hits() const;
    int64_t misses() const;

    struct State;

  private:
    std::shared_ptr<State> state_;
};

}  // namespace rlpt::comm
