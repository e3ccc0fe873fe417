#pragma once
// Whether a GPU test can run here: rlpt's CUDA kernels are built and LibTorch sees at least `n`
// CUDA devices. Otherwise false with `why` saying which is missing (the test then GTEST_SKIPs).
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "rlpt/kernels/logprob.h"

namespace rlpt::testing {

inline bool gpus_usable(int64_t n, std::string* why) {
    if (!kernels::logprob_cuda_built()) {
        *why = "rlpt was built without CUDA kernels (RLPT_HAVE_CUDA=0)";
        return false;
    }
    const int64_t visible = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
    if (visible < n) {
        *why = fmt::format("{} CUDA device(s) visible to LibTorch, the test needs {}", visible, n);
        return false;
    }
    return true;
}

inline bool gpu_usable(std::string* why) { return gpus_usable(1, why); }

}  // namespace rlpt::testing
