// Freeing and allocating parameter storage again (rlpt/engine/param_memory.h).
#include "rlpt/engine/param_memory.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <sys/mman.h>

#include <cstdint>

#include "rlpt/core/error.h"

namespace rlpt::engine {

void free_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    if (s->nbytes() == 0) return;
    s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
}

void advise_huge_pages(void* data, size_t bytes) {
    if (data == nullptr || bytes < 2 * kHugePage) return;
    const auto begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
    const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
}

namespace {

// A device allocator allocates on the current device: make it the tensor's for the call (the
// current device need not be the one the tensor lives on, e.g. on a thread that never chose one).
at::DataPtr allocate_on_device_of(const torch::Tensor& t, c10::Allocator& allocator, size_t bytes) {
    if (t.is_cpu()) return allocator.allocate(bytes);
    const c10::DeviceGuard on_device(t.device());
    return allocator.allocate(bytes);
}

}  // namespace

void alloc_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    const size_t bytes = needed_storage_bytes(t);
    if (s->nbytes() >= bytes) return;
    RLPT_CHECK_KIND(InternalError, s->allocator() != nullptr, "alloc_storage: the tensor's storage has no allocator");
    at::DataPtr data = allocate_on_device_of(t, *s->allocator(), bytes);
    RLPT_CHECK_KIND(InternalError, data.device() == t.device(), "alloc_storage: memory for a tensor on {} came from {}",
                    t.device().str(), data.device().str());
    if (t.is_cpu()) advise_huge_pages(data.get(), bytes);
    s->set_data_ptr_noswap(std::move(data));
    s->set_nbytes(bytes);
}

}  // namespace rlpt::engine
