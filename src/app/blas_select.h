#pragma once
// LibTorch's CPU speed is the BLAS's. Debian's OpenBLAS does not recognise some current
// Xeons and falls back to a generic core (~35 GFLOP/s per thread on the dev VM); the
// SkylakeX kernels reach ~125-170 GFLOP/s there. OpenBLAS reads OPENBLAS_CORETYPE once, when
// the library loads, so the choice has to be made before this process starts: when the
// user has not set OPENBLAS_CORETYPE (their setting always wins), the loaded library is
// OpenBLAS on a generic core and the CPU has AVX-512 F/BW/DQ/VL, rlpt sets
// OPENBLAS_CORETYPE=SkylakeX and re-executes itself once (before MPI_Init, so it is safe
// under mpirun and srun). RLPT_BLAS_CORETYPE=off disables this.
// scripts/demo_robustness.sh trains the demo under each core to compare the results
// (docs/benchmarks/demo.md).
#include <string>

namespace rlpt::app {

void maybe_select_blas_core(int argc, char** argv);
// "OpenBLAS core <core> (<who chose it>)" when LibTorch uses a system OpenBLAS (Debian's
// libtorch), else the BLAS LibTorch was built with, e.g. "mkl (LibTorch's BLAS)" (pip wheels).
std::string blas_description();

}  // namespace rlpt::app
