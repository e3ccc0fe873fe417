// CPU features (rlpt/kernels/cpu_features.h) against what the compiler's cpuid probe says.
#include <gtest/gtest.h>

#include <string>

#include "rlpt/kernels/cpu_features.h"
#include "rlpt/kernels/small_matmul.h"

TEST(CpuFeatures, Avx512Bf16IsTheCpuFlagUnderTheKernelsIsa) {
#if defined(__x86_64__) && defined(__GNUC__)
    const bool cpu_flag = __builtin_cpu_supports("avx512bf16");
#else
    const bool cpu_flag = false;
#endif
    // RLPT_CPU_ISA below avx512 hides the flag as it hides the AVX-512 kernels.
    const bool avx512_kernels = std::string(rlpt::kernels::small_matmul_isa_name()) == "avx512";
    EXPECT_EQ(rlpt::kernels::cpu_has_avx512_bf16(), cpu_flag && avx512_kernels);
}
