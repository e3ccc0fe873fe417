#pragma once
// Few-row matrix product for decode: y = x W^T (+ b) when x has at most kSmallMatmulMaxRows rows.
//
// Why: at decode time every Linear multiplies a handful of rows (the live sequences) by a large
// weight. A BLAS sgemm re-packs every weight panel on every call, so the weights stream at a
// fraction of the memory bandwidth. This kernel reads each weight row once, straight from the
// parameter, and uses it for all rows of x (register-blocked over 4 weight rows x up to 4 x rows,
// vectorised over K), parallel over output columns with at::parallel_for (LibTorch's thread count).
//
// Shapes: x [..., K] (any leading dims; M = their product rows), w [N, K], bias [N] or undefined;
// returns [..., N]. Dtypes: x, w and bias all float32, or all bfloat16 (accumulation is float32;
// a bfloat16 result is rounded once at the end, as torch::linear does). CPU tensors only.
// x rows need not be contiguous (a non-contiguous x is copied); w must be contiguous [N, K] (a
// view is copied, which defeats the purpose: callers pass parameters).
//
// Numerics: each output element is one dot product over K whose summation order depends only on
// K and the instruction set, never on M, N, the row's position in x or the thread count. So a
// sequence's logits do not depend on which other sequences share its decode batch.
//
// Not differentiable: callers use it under no-grad (small_matmul_applies checks that).
// Thread safety: re-entrant; nothing is shared between calls.

#include <torch/torch.h>

#include <cstdint>

namespace rlpt::kernels {

// Row limits of small_matmul_applies (measured crossovers against LibTorch's CPU matmul):
// float32 against OpenBLAS sgemm; bfloat16 against oneDNN on CPUs with AVX512_BF16 (on others
// the float32 limit applies).
constexpr int64_t kSmallMatmulMaxRows = 16;
constexpr int64_t kSmallMatmulMaxRowsBf16 = 4;

// Instruction-set variants. kAuto picks the best the CPU supports at run time.
enum class SmallMatmulIsa { kAuto, kAvx512, kAvx2, kPortable };

// Whether `isa` can run on this CPU (kAuto and kPortable: always).
bool small_matmul_isa_supported(SmallMatmulIsa isa);
// Name of the variant kAuto selects on this CPU: "avx512", "avx2" or "portable".
const char* small_matmul_isa_name();

// How many threads the decode kernels' at::parallel_for really runs on now: LibTorch's thread
// count when they were compiled with OpenMP (kernels/CMakeLists.txt), 1 when they were not (the
// OpenMP body is a header template, so a file compiled without it runs serially). For tests and
// the benchmark's header.
int decode_kernel_threads();

// True when small_matmul is meant for this call: CPU, float32 or bfloat16 (x and w alike),
// 1..kSmallMatmulMaxRows rows (bfloat16: see above), w contiguous, and no autograd graph wanted (grad mode off, or
// neither x, w nor bias requires grad). Cheap: no data is touched.
bool small_matmul_applies(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias);

// y = x w^T + bias (see above). Any number of rows is computed correctly; past
// kSmallMatmulMaxRows BLAS is faster, which is why small_matmul_applies stops there. ValueError
// on bad shapes/dtypes/devices, and for an `isa` this CPU lacks.
torch::Tensor small_matmul(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           SmallMatmulIsa isa = SmallMatmulIsa::kAuto);

// Plain reference (kernels/small_matmul_ref.cpp): one double-precision dot product per output
// element, no blocking, no threads. Same contract as small_matmul but any number of rows.
torch::Tensor small_matmul_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias);

// One product of small_matmul_into: out = x w^T + bias, or with `accumulate` out += x w^T + bias
// (a decoder layer's residual add; the sum is added to out after it is complete, so the result
// is exactly out + small_matmul(x, w, bias) for float32).
struct MatmulTarget {
    torch::Tensor w;          // [N, K] contiguous; float32 or bfloat16, the same for every target
    torch::Tensor bias;       // [N] or undefined (any float dtype; used as float32)
    torch::Tensor out;        // [M, N] float32 with contiguous rows (a column slice of a wider buffer works)
    bool accumulate = false;  // out += product, else out = product
};

// Several products of the same rows x [M, K] (float32, contiguous rows) written into
// preallocated outputs, in ONE parallel region (one thread-pool barrier instead of one per
// weight: the q/k/v or gate/up projections of a decode step). Each element is computed exactly
// as small_matmul computes it (same dot-product order: batch and thread invariant). Allocates
// nothing for float32 biases. Any M. `out` must not overlap x or another target's out.
// ValueError on bad shapes/dtypes/devices, for an `isa` this CPU lacks, or no targets.
void small_matmul_into(const torch::Tensor& x, const std::vector<MatmulTarget>& targets,
                       SmallMatmulIsa isa = SmallMatmulIsa::kAuto);
// The same through the double-precision reference (one target at a time, no threads).
void small_matmul_into_reference(const torch::Tensor& x, const std::vector<MatmulTarget>& targets);

}  // namespace rlpt::kernels
