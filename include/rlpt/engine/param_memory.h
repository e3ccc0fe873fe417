#pragma once
// Parameter memory the training engine manages and hands to the weight movement above it
// (rlpt/weights/held_reshard.h): storages freed and allocated again (ZeRO-3's gathered units, a
// colocated rollout's copy between generation windows), what a rank holds of each parameter, and
// the memory it lends while its gradient buffers are idle. Implemented in src/engine/param_memory.cpp.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rlpt::engine {

// Storage of `t` freed (metadata, shape and views kept; data pointer null) / allocated again if
// freed (values undefined). How FSDP frees a gathered parameter while autograd holds views; the
// training engine's ZeRO-3 buffers and the hybrid engine's rollout copy use the same two calls.
// The memory comes from the storage's allocator on `t`'s device, whichever device is current
// (InternalError if it came from another).
void free_storage(const torch::Tensor& t);
void alloc_storage(const torch::Tensor& t);
// Bytes `t`'s storage must have: up to its last element (what alloc_storage allocates).
inline size_t needed_storage_bytes(const torch::Tensor& t) {
    return static_cast<size_t>(t.storage_offset() + t.numel()) * t.element_size();
}

// Fresh memory is slow to fill on a CPU host: the first write to every 4 KiB page faults (about
// 1.7 GB/s on the dev VM against ~10 GB/s into warm memory). Large host buffers re-allocated
// at every generation window or ZeRO-3 unit ask for transparent huge pages instead (one fault
// per 2 MiB; honoured when /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or
// "always", ignored otherwise). advise_huge_pages advises the whole 2 MiB pages inside
// [data, data + bytes) (nothing under two of them); advice only, never fails.
constexpr size_t kHugePage = size_t(2) << 20;
void advise_huge_pages(void* data, size_t bytes);

// Memory a destination may be placed in instead of fresh memory (TrainEngine::
// lend_gradient_memory: the actor's gradient buffers, unused while the rollout generates):
// 1-D uint8 tensors, and an owner every storage placed in them keeps alive until it is freed.
struct ScratchMemory {
    std::vector<torch::Tensor> spans;
    std::shared_ptr<void> owner;
};

// What one rank holds of one parameter of the source model: elements [begin, end) of its local
// tensor (this rank's slice in the source tp layout, of local shape `shape`) flattened
// row-major, as a 1-D tensor `data` of end - begin elements (TrainEngine::held_parameters).
struct HeldSlice {
    std::string name;
    int64_t begin = 0, end = 0;
    torch::Tensor data;
    std::vector<int64_t> shape;
};

}  // namespace rlpt::engine
