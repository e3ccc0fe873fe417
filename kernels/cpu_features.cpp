// CPU features (rlpt/kernels/cpu_features.h), from cpuid and the kernels' instruction-set choice.
#include "rlpt/kernels/cpu_features.h"

#include "cpu_simd.h"

namespace rlpt::kernels {

bool cpu_has_avx512_bf16() {
#if RLPT_CPU_X86
    // RLPT_CPU_ISA below avx512 (the test knob of detail::best_isa) also hides AVX512_BF16.
    if (detail::best_isa() != SmallMatmulIsa::kAvx512) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
#else
    return false;
#endif
}

}  // namespace rlpt::kernels
