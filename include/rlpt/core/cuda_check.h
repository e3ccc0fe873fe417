#pragma once
// RLPT_CUDA_CHECK(call): throws CudaError carrying cudaGetErrorName/String and the call text when
// a CUDA runtime call does not return cudaSuccess. The one CUDA check of rlpt (kernels, comm,
// engine); include it only from sources compiled in CUDA builds (it includes cuda_runtime_api.h).
// NCCL results: RLPT_NCCL_CHECK in rlpt/comm/nccl_check.h.

#include <cuda_runtime_api.h>

#include "rlpt/core/error.h"

#define RLPT_CUDA_CHECK(call)                                                                            \
    do {                                                                                                 \
        const cudaError_t rlpt_cuda_err_ = (call);                                                       \
        if (rlpt_cuda_err_ != cudaSuccess) {                                                             \
            throw ::rlpt::CudaError(::fmt::format("CUDA error {}: {}", cudaGetErrorName(rlpt_cuda_err_), \
                                                  cudaGetErrorString(rlpt_cuda_err_)),                   \
                                    __FILE__, __LINE__, #call);                                          \
        }                                                                                                \
    } while (0)
