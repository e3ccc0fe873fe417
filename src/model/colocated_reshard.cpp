// Colocated resharding (rlpt/model/reshard_plan.h): the rollout-layout parameters filled from
// the actor's layout one parameter at a time, and the storage management around it.
#include <c10/core/StorageImpl.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>

#include "model/weights_io.h"
#include "rlpt/core/error.h"
#include "rlpt/model/reshard_plan.h"

namespace rlpt::model {

void free_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    if (s->nbytes() == 0) return;
    s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    s->set_nbytes(0);
}

namespace {

// Fresh memory is slow to fill on a CPU host: the first write to every 4 KiB page faults (about
// 1.7 GB/s on the dev VM against ~10 GB/s into warm memory). Large host buffers re-allocated
// at every generation window or ZeRO-3 unit ask for transparent huge pages instead (one fault
// per 2 MiB; honoured when /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or
// "always", ignored otherwise).
constexpr size_t kHugePage = size_t(2) << 20;

void advise_huge_pages(void* data, size_t bytes) {
    if (data == nullptr || bytes < 2 * kHugePage) return;
    const auto begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
    const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
}

}  // namespace

void alloc_storage(const torch::Tensor& t) {
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    const size_t bytes = static_cast<size_t>(t.storage_offset() + t.numel()) * t.element_size();
    if (s->nbytes() >= bytes) return;
    RLPT_CHECK_KIND(InternalError, s->allocator() != nullptr, "alloc_storage: the tensor's storage has no allocator");
    at::DataPtr data = s->allocator()->allocate(bytes);
    if (t.is_cpu()) advise_huge_pages(data.get(), bytes);
    s->set_data_ptr_noswap(std::move(data));
    s->set_nbytes(bytes);
}

ColocatedReshardStats reshard_colocated(const ParameterWalk& walk, const ModelArgs& args, const TensorParallel* src_tp,
                                        torch::nn::Module& dst, const TpLayout& dst_layout) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    ColocatedReshardStats stats;
    auto params = dst.named_parameters(/*recurse=*/true);
    for (const auto& p : params) {
        alloc_storage(p.value());
        stats.dst_bytes += p.value().numel() * p.value().element_size();
    }
    size_t next = 0;
    walk([&](const std::string& name, const torch::Tensor& local) {
        RLPT_CHECK_KIND(InternalError, next < params.size() && params[next].key() == name,
                        "colocated reshard: source parameter '{}' is not the destination's parameter {} ('{}')", name,
                        next, next < params.size() ? params[next].key() : std::string("none"));
        torch::Tensor& out = params[next++].value();
        const ShardSpec spec = shard_spec(name, dst_layout);
        stats.copied_bytes += (spec.dim < 0 ? out.numel() : out.numel() / spec.length * spec.real()) * out.element_size();
        const ShardSpec src_spec = src_tp != nullptr && src_tp->size() > 1
                                       ? shard_spec(name, tp_layout(args, src_tp->size(), src_tp->rank()))
                                       : ShardSpec{};
        if (src_spec.dim < 0) {  // the source holds the whole tensor
            detail::copy_slice(out, local, spec);
            return;
        }
        int64_t full_bytes = out.element_size();
        for (int64_t d : full_shape(src_spec, local.sizes().vec())) full_bytes *= d;
        stats.tp_gathered_bytes += full_bytes;
        if (spec.dim < 0) {  // the rollout keeps the whole tensor: gather straight into it
            gather_full_parameter_into(name, local, args, *src_tp, out);
            return;
        }
        torch::Tensor full = gather_full_parameter(name, local, args, *src_tp);
        stats.max_full_bytes = std::max(stats.max_full_bytes, full_bytes);
        detail::copy_slice(out, full, spec);
    });
    RLPT_CHECK_KIND(InternalError, next == params.size(),
                    "colocated reshard: the source has {} parameters, the destination {}", next, params.size());
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return stats;
}

void release_parameter_storage(torch::nn::Module& m) {
    for (const auto& p : m.parameters(/*recurse=*/true)) free_storage(p);
}

int64_t allocated_parameter_bytes(const torch::nn::Module& m) {
    int64_t bytes = 0;
    for (const auto& p : m.parameters(/*recurse=*/true)) bytes += static_cast<int64_t>(p.storage().nbytes());
    return bytes;
}

}  // namespace rlpt::model
