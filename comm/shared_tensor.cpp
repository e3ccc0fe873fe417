// Arena-backed tensors (rlpt/comm/shared_tensor.h).
#include "rlpt/comm/shared_tensor.h"

#include <unordered_set>

#include "rlpt/comm/shared_arena.h"

namespace rlpt::comm {
namespace {

constexpr int64_t kAlign = 64;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// A tensor of `sizes` over `data` (inside `arena`) that keeps the arena alive.
torch::Tensor view_of(const std::shared_ptr<SharedArena>& arena, void* data, torch::IntArrayRef sizes,
                      torch::ScalarType dtype) {
    return torch::from_blob(
        data, sizes, [arena](void*) {}, torch::TensorOptions().dtype(dtype).device(torch::kCPU));
}

}  // namespace

torch::Tensor shared_zeros(int64_t numel, torch::ScalarType dtype, const char* what) {
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
    auto arena = bytes > 0 ? SharedArena::create(static_cast<size_t>(bytes), what) : nullptr;
    if (!arena) return torch::zeros({numel}, torch::TensorOptions().dtype(dtype));
    return view_of(arena, arena->data(), {numel}, dtype);  // the memory file starts zero-filled
}

bool share_tensors(std::vector<torch::Tensor>& tensors, const char* what) {
    if (!shared_arenas_enabled() || tensors.empty()) return false;
    {  // each tensor once (tied weights)
        std::unordered_set<const void*> seen;
        std::vector<torch::Tensor> once;
        for (const auto& t : tensors)
            if (!t.defined() || seen.insert(t.unsafeGetTensorImpl()).second) once.push_back(t);
        tensors.swap(once);
    }
    int64_t total = 0;
    bool all_shared = true;
    for (const auto& t : tensors) {
        if (!t.defined() || !t.device().is_cpu()) return false;
        const auto bytes = static_cast<size_t>(t.numel()) * t.element_size();
        all_shared = all_shared && (bytes == 0 || arena_of(t.data_ptr(), bytes).id != 0);
        total += round_up(static_cast<int64_t>(bytes), kAlign);
    }
    if (all_shared) return true;
    auto arena = total > 0 ? SharedArena::create(static_cast<size_t>(total), what) : nullptr;
    if (!arena) return false;
    torch::NoGradGuard no_grad;
    char* at = static_cast<char*>(arena->data());
    for (auto& t : tensors) {
        auto view = view_of(arena, at, t.sizes(), t.scalar_type());
        view.copy_(t.detach());
        t.set_data(view);
        at += round_up(static_cast<int64_t>(t.numel() * t.element_size()), kAlign);
    }
    return true;
}

}  // namespace rlpt::comm
