// CUDA kernels of the fused log-prob / entropy (variant 1: one 256-thread block per row, each
// thread an online softmax over a strided slice, warp-shuffle + shared-memory merge of the
// (max, Σe, Σe·d) triples; fp32 accumulation). CPU reference: logprob_ref.cpp.
// No torch here: the glue in logprob.cpp passes raw device pointers.

#include <cuda_runtime.h>

#include <cstdint>

#include "rlpt/core/cuda_check.h"
#include "logprob_cuda.h"

namespace rlpt::kernels::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kMinLogRatio = -100.0f;  // exp() of less is 0 to fp32 precision anyway

// Online-softmax state relative to its max m: s = Σ exp(z − m), t = Σ exp(z − m)·(z − m).
// bad counts NaN / +inf inputs so they poison the row explicitly.
struct Acc {
    float m;
    float s;
    float t;
    int bad;
};

__device__ __forceinline__ float load_logit(const float* p) { return *p; }
__device__ __forceinline__ float load_logit(const uint16_t* p) { return __uint_as_float(uint32_t(*p) << 16); }
__device__ __forceinline__ void store_grad(float* p, float g) { *p = g; }
__device__ __forceinline__ void store_grad(uint16_t* p, float g) {
    const uint32_t u = __float_as_uint(g);
    *p = isnan(g) ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ void acc_add(Acc& a, float z) {
    if (isnan(z) || (isinf(z) && z > 0.0f)) {
        a.bad = 1;
        return;
    }
    if (z == -INFINITY) return;
    if (z > a.m) {
        if (a.s > 0.0f) {
            const float d = a.m - z;
            const float c = expf(d);
            a.t = c * (a.t + d * a.s);
            a.s = c * a.s;
        }
        a.m = z;
    }
    const float d = fmaxf(z - a.m, kMinLogRatio);
    const float e = expf(d);
    a.s += e;
    a.t += e * d;
}

__device__ __forceinline__ Acc acc_merge(Acc a, const Acc& b) {
    a.bad |= b.bad;
    if (b.s == 0.0f) return a;
    if (a.s == 0.0f) {
        a.m = b.m, a.s = b.s, a.t = b.t;
        return a;
    }
    const float m = fmaxf(a.m, b.m);
    const float da = a.m - m, db = b.m - m;
    const float ca = expf(da), cb = expf(db);
    a.t = ca * (a.t + da * a.s) + cb * (b.t + db * b.s);
    a.s = ca * a.s + cb * b.s;
    a.m = m;
    return a;
}

__device__ __forceinline__ Acc warp_merge(Acc a) {
    for (int off = 16; off > 0; off >>= 1) {
        Acc o;
        o.m = __shfl_xor_sync(0xffffffffu, a.m, off);
        o.s = __shfl_xor_sync(0xffffffffu, a.s, off);
        o.t = __shfl_xor_sync(0xffffffffu, a.t, off);
        o.bad = __shfl_xor_sync(0xffffffffu, a.bad, off);
        a = acc_merge(a, o);
    }
    return a;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ labels, int64_t v, float inv_t,
                   float* __restrict__ logp, float* __restrict__ entropy, float* __restrict__ lse) {
    __shared__ Acc warp_acc[kWarps];
    const int64_t row = blockIdx.x;
    const T* x = logits + row * v;
    Acc a{-INFINITY, 0.0f, 0.0f, 0};
    for (int64_t j = threadIdx.x; j < v; j += kThreads) acc_add(a, load_logit(x + j) * inv_t);
    a = warp_merge(a);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_acc[warp] = a;
    __syncthreads();
    if (warp != 0) return;
    a = lane < kWarps ? warp_acc[lane] : Acc{-INFINITY, 0.0f, 0.0f, 0};
    a = warp_merge(a);
    if (lane != 0) return;
    const float nan = __int_as_float(0x7fc00000);
    const bool valid = !a.bad && a.s > 0.0f;
    const float log_s = valid ? logf(a.s) : nan;
    const float row_h = valid ? log_s - a.t / a.s : nan;
    const int64_t y = labels[row];
    lse[row] = a.m + log_s;
    // (z_y − max) − log s stays exact for large |z| where z_y − lse would round.
    logp[row] = (y >= 0 && y < v) ? (load_logit(x + y) * inv_t - a.m) - log_s : nan;
    if (entropy != nullptr) entropy[row] = row_h;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ labels, const float* __restrict__ lse,
                    const float* __restrict__ entropy, const float* __restrict__ grad_logp,
                    const float* __restrict__ grad_entropy, int64_t v, float inv_t, T* __restrict__ grad_logits) {
    const int64_t row = blockIdx.x;
    const T* x = logits + row * v;
    T* out = grad_logits + row * v;
    const float gl = grad_logp != nullptr ? grad_logp[row] : 0.0f;
    const float gh = grad_entropy != nullptr ? grad_entropy[row] : 0.0f;
    const float h = grad_entropy != nullptr ? entropy[row] : 0.0f;
    const float row_lse = lse[row];
    const int64_t y = labels[row];
    // g = p·(a + b·log p) + gl·1[j = y], already divided by T
    const float a = -(gl + gh * h) * inv_t;
    const float b = -gh * inv_t;
    const bool zero = gl == 0.0f && gh == 0.0f;  // masked token: exactly zero
    const bool poisoned = !isfinite(row_lse) || !isfinite(h);
    for (int64_t j = threadIdx.x; j < v; j += kThreads) {
        float g = 0.0f;
        if (poisoned && !zero) {
            g = __int_as_float(0x7fc00000);
        } else if (!zero) {
            const float d = fmaxf(load_logit(x + j) * inv_t - row_lse, kMinLogRatio);
            g = expf(d) * (a + b * d);
            if (j == y) g += gl * inv_t;
        }
        store_grad(out + j, g);
    }
}

// The launch goes to the current device, which the caller made `device` (logprob.cpp holds a
// c10::cuda::CUDAGuard: it restores the caller's device afterwards without creating a context on
// a device that had none, which a cudaSetDevice back to the previous device here would do for a
// thread that never chose one). A mismatch would run the kernel against another GPU's pointers.
void check_current_device(int device) {
    int current = -1;
    RLPT_CUDA_CHECK(cudaGetDevice(&current));
    RLPT_CHECK_KIND(InternalError, current == device,
                    "logprob (CUDA): a launch for cuda:{} while cuda:{} is the current device", device, current);
}

void check_rows(int64_t n) {
    RLPT_CHECK(n <= int64_t(0x7fffffff), "logprob (CUDA): {} rows exceed the grid limit of 2^31-1", n);
}

template <typename T>
void launch_forward(int device, const T* logits, const int64_t* labels, int64_t n, int64_t v, float inv_t, float* logp,
                    float* entropy, float* lse) {
    if (n == 0) return;
    check_rows(n);
    check_current_device(device);
    forward_kernel<T><<<unsigned(n), kThreads>>>(logits, labels, v, inv_t, logp, entropy, lse);
    RLPT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_backward(int device, const T* logits, const int64_t* labels, const float* lse, const float* entropy,
                     const float* grad_logp, const float* grad_entropy, int64_t n, int64_t v, float inv_t,
                     T* grad_logits) {
    if (n == 0) return;
    check_rows(n);
    check_current_device(device);
    backward_kernel<T>
        <<<unsigned(n), kThreads>>>(logits, labels, lse, entropy, grad_logp, grad_entropy, v, inv_t, grad_logits);
    RLPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void logprob_forward_cuda(int device, const float* logits, const int64_t* labels, int64_t n, int64_t v,
                          float inv_temperature, float* logp, float* entropy, float* lse) {
    launch_forward(device, logits, labels, n, v, inv_temperature, logp, entropy, lse);
}

void logprob_forward_cuda(int device, const uint16_t* logits_bf16, const int64_t* labels, int64_t n, int64_t v,
                          float inv_temperature, float* logp, float* entropy, float* lse) {
    launch_forward(device, logits_bf16, labels, n, v, inv_temperature, logp, entropy, lse);
}

void logprob_backward_cuda(int device, const float* logits, const int64_t* labels, const float* lse,
                           const float* entropy, const float* grad_logp, const float* grad_entropy, int64_t n,
                           int64_t v, float inv_temperature, float* grad_logits) {
    launch_backward(device, logits, labels, lse, entropy, grad_logp, grad_entropy, n, v, inv_temperature, grad_logits);
}

void logprob_backward_cuda(int device, const uint16_t* logits_bf16, const int64_t* labels, const float* lse,
                           const float* entropy, const float* grad_logp, const float* grad_entropy, int64_t n,
                           int64_t v, float inv_temperature, uint16_t* grad_logits_bf16) {
    launch_backward(device, logits_bf16, labels, lse, entropy, grad_logp, grad_entropy, n, v, inv_temperature,
                    grad_logits_bf16);
}

}  // namespace rlpt::kernels::detail
