#pragma once
// SIMD helpers shared by the CPU decode kernels (small_matmul.cpp, decode_attention.cpp):
// GCC vector types of L float lanes (16: AVX-512, 8: AVX2, 4: baseline SIMD of any target),
// float32 / bfloat16 loads, a fixed-order lane sum, and the run-time instruction-set choice.
// Functions are always-inline so they compile for the ISA of the target-attributed caller.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rlpt/kernels/small_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define RLPT_CPU_X86 1
#include <cpuid.h>
#else
#define RLPT_CPU_X86 0
#endif
#define RLPT_ALWAYS_INLINE inline __attribute__((always_inline))

namespace rlpt::kernels::detail {

template <int L>
struct Vec;
template <>
struct Vec<16> {
    using F = float __attribute__((vector_size(64)));
    using H = uint16_t __attribute__((vector_size(32)));
    using U = uint32_t __attribute__((vector_size(64)));
    using Half = Vec<8>;
};
template <>
struct Vec<8> {
    using F = float __attribute__((vector_size(32)));
    using H = uint16_t __attribute__((vector_size(16)));
    using U = uint32_t __attribute__((vector_size(32)));
    using Half = Vec<4>;
};
template <>
struct Vec<4> {
    using F = float __attribute__((vector_size(16)));
    using H = uint16_t __attribute__((vector_size(8)));
    using U = uint32_t __attribute__((vector_size(16)));
};

template <int L>
RLPT_ALWAYS_INLINE typename Vec<L>::F load(const float* p) {
    typename Vec<L>::F v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <int L>
RLPT_ALWAYS_INLINE typename Vec<L>::F load(const uint16_t* p) {  // bfloat16 -> float32
    typename Vec<L>::H h;
    std::memcpy(&h, p, sizeof h);
    const typename Vec<L>::U u = __builtin_convertvector(h, typename Vec<L>::U) << 16;
    return reinterpret_cast<const typename Vec<L>::F&>(u);
}

RLPT_ALWAYS_INLINE float scalar(float w) { return w; }
RLPT_ALWAYS_INLINE float scalar(uint16_t w) {
    const uint32_t bits = static_cast<uint32_t>(w) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// Sum of the lanes, by halving: fixed order for a given L.
template <int L>
RLPT_ALWAYS_INLINE float hsum(const typename Vec<L>::F& v) {
    if constexpr (L == 4) {
        return (v[0] + v[2]) + (v[1] + v[3]);
    } else {
        using H = typename Vec<L>::Half::F;
        H lo, hi;
        std::memcpy(&lo, &v, sizeof lo);
        std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
        return hsum<L / 2>(lo + hi);
    }
}

// The widest variant this CPU runs (kAvx512 needs F, BW, VL and DQ; kAvx2 needs FMA too),
// capped by RLPT_CPU_ISA=portable|avx2|avx512 when set (a test knob: it runs the narrower
// paths on a wide CPU, as CI machines without AVX-512 do).
inline SmallMatmulIsa best_isa() {
    static const SmallMatmulIsa isa = [] {
        SmallMatmulIsa best = SmallMatmulIsa::kPortable;
#if RLPT_CPU_X86
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            best = SmallMatmulIsa::kAvx512;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = SmallMatmulIsa::kAvx2;
#endif
        const char* cap = std::getenv("RLPT_CPU_ISA");
        if (cap == nullptr || *cap == '\0') return best;
        const std::string c(cap);
        const SmallMatmulIsa want = c == "portable" ? SmallMatmulIsa::kPortable
                                    : c == "avx2"   ? SmallMatmulIsa::kAvx2
                                                    : SmallMatmulIsa::kAvx512;
        return static_cast<int>(want) > static_cast<int>(best) ? want : best;  // enum: wider first
    }();
    return isa;
}

}  // namespace rlpt::kernels::detail

#define RLPT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define RLPT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
