#pragma once
// Torch tensors whose storage is a shared weight arena (rlpt/comm/shared_arena.h), so that the
// weight transfer between ranks of one host copies them with memcpy through a mapping. Each
// tensor holds a reference to its arena; the arena is freed with the last tensor.

#include <torch/torch.h>

#include <vector>

namespace rlpt::comm {

// A zero-filled 1-D CPU tensor of `numel` elements of `dtype` in an arena of its own;
// torch::zeros when arenas are off or cannot be made. `what` names the arena (messages, /proc).
torch::Tensor shared_zeros(int64_t numel, torch::ScalarType dtype, const char* what);

// Moves the data of `tensors` (CPU, each made contiguous) into one arena, 64-byte aligned, and
// points each tensor at its copy (Tensor::set_data: a module's parameters stay its parameters,
// autograd state kept). Does nothing when a tensor is not on the CPU, when every tensor already
// lies in an arena, or when arenas are off. Call before anything caches the tensors' addresses.
// Returns whether the tensors now live in an arena. `tensors` is left with each tensor once (tied
// weights are one tensor under two names).
bool share_tensors(std::vector<torch::Tensor>& tensors, const char* what);

}  // namespace rlpt::comm
