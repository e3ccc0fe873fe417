#pragma once
// CPU features the decode kernels and the rollout's dtype choice depend on (torch-free).

namespace rlpt::kernels {

// Whether this CPU has the AVX512_BF16 dot-product instructions (oneDNN's fast bfloat16 matmul,
// used by LibTorch past small_matmul's row limit). Without them bfloat16 weights still halve the
// bytes a batch-1 decode step streams (small_matmul widens them in registers), but LibTorch's
// bfloat16 matmul of larger batches and the prefill is slower than float32.
bool cpu_has_avx512_bf16();

}  // namespace rlpt::kernels
