# LibTorch, CUDA and NCCL for rlpt. Included once from the top-level CMakeLists.txt.
#
# Where LibTorch comes from (first that applies):
#   -DTorch_DIR=<libtorch>/share/cmake/Torch      an unpacked libtorch zip (or any TorchConfig)
#   -DRLPT_TORCH_PYTHON=<python>                  the torch package of that Python (a pip wheel;
#                                                 scripts/setup.sh passes its .venv or
#                                                 $RLPT_TORCH_PYTHON)
#   CMAKE_PREFIX_PATH                             as usual
#
# What this defines:
#   rlpt_torch            INTERFACE target: LibTorch's libraries, includes and flags, with a
#                         shim that makes <fmt/...> mean the fmt package rlpt links (LibTorch
#                         ships its own fmt headers, another major version, in its include dir)
#   RLPT_TORCH_VERSION    e.g. "2.13.0+cpu" (the wheel's or zip's full version when known)
#   RLPT_TORCH_CUDA       "CPU" or the CUDA version LibTorch was built for, e.g. "13.0"
#   RLPT_HAVE_CUDA        ON when rlpt's CUDA kernels are built (LibTorch has CUDA and nvcc exists)
#   RLPT_HAVE_NCCL        ON when the NCCL collectives are built
#   rlpt_nccl             IMPORTED target when RLPT_HAVE_NCCL
#
# Rules: a CUDA LibTorch needs nvcc and NCCL; when either is missing, configuring fails with a
# message saying what to install or which option (-DRLPT_WITH_CUDA=OFF / -DRLPT_WITH_NCCL=OFF)
# builds without it, rather than silently producing a CPU-only binary. A CPU-only LibTorch builds
# neither (the kernels could never see a CUDA tensor), whatever nvcc is on the machine.

set(RLPT_TORCH_PYTHON "" CACHE FILEPATH "A Python whose torch package provides LibTorch")

set(_rlpt_torch_pyver "")
set(_rlpt_torch_pycuda "")
if(RLPT_TORCH_PYTHON)
  execute_process(
    COMMAND ${RLPT_TORCH_PYTHON} -c
            "import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or '')"
    OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "RLPT_TORCH_PYTHON=${RLPT_TORCH_PYTHON} cannot import torch:\n${_err}")
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _prefix)
  list(GET _out 1 _rlpt_torch_pyver)
  list(LENGTH _out _n)
  if(_n GREATER 2)
    list(GET _out 2 _rlpt_torch_pycuda)
  endif()
  if(NOT Torch_DIR)
    set(Torch_DIR "${_prefix}/Torch" CACHE PATH "LibTorch's CMake config" FORCE)
  endif()
endif()

# Find TorchConfig.cmake without loading it: whether this LibTorch has CUDA decides whether
# CUDA must be enabled before it loads (its config looks for the CUDA toolkit itself).
find_file(RLPT_TORCH_CONFIG TorchConfig.cmake
          HINTS ${Torch_DIR} ENV Torch_DIR PATH_SUFFIXES share/cmake/Torch NO_CACHE)
if(NOT RLPT_TORCH_CONFIG)
  message(FATAL_ERROR "LibTorch not found. Give one of: -DRLPT_TORCH_PYTHON=<python with torch> "
                      "(scripts/setup.sh does this), -DTorch_DIR=<libtorch>/share/cmake/Torch, "
                      "or CMAKE_PREFIX_PATH.")
endif()
get_filename_component(_torch_root "${RLPT_TORCH_CONFIG}/../../../.." ABSOLUTE)
set(_torch_lib "${_torch_root}/lib")
if(EXISTS "${_torch_lib}/libtorch_cuda.so" OR EXISTS "${_torch_lib}/libc10_cuda.so")
  set(_torch_has_cuda ON)
else()
  set(_torch_has_cuda OFF)
endif()

set(RLPT_WITH_CUDA AUTO CACHE STRING "CUDA kernels: AUTO (when LibTorch has CUDA), ON or OFF")
set(RLPT_WITH_NCCL AUTO CACHE STRING "NCCL collectives: AUTO (when CUDA is on), ON or OFF")
set_property(CACHE RLPT_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE RLPT_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

set(RLPT_HAVE_CUDA OFF)
if(_torch_has_cuda AND NOT RLPT_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(RLPT_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
    if(RLPT_NVCC)
      set(CMAKE_CUDA_COMPILER "${RLPT_NVCC}")
    endif()
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR
      "LibTorch at ${_torch_root} is a CUDA build, but no CUDA compiler (nvcc) was found. Install "
      "the CUDA Toolkit it was built for (or set CMAKE_CUDA_COMPILER / CUDA_HOME / put nvcc on PATH), or "
      "configure with -DRLPT_WITH_CUDA=OFF for a binary that runs on the CPU only.")
  endif()
  # Ampere and Hopper by default; -DCMAKE_CUDA_ARCHITECTURES=... to choose.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90")
  endif()
  # LibTorch's CUDA config compiles and runs a GPU probe unless TORCH_CUDA_ARCH_LIST is set: give
  # it the same architectures, so a build machine without a GPU configures too.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(_arch_list "")
    foreach(a ${CMAKE_CUDA_ARCHITECTURES})
      string(REGEX REPLACE "-(real|virtual)$" "" a "${a}")
      string(REGEX REPLACE "^([0-9]+)([0-9])$" "\\1.\\2" a "${a}")
      list(APPEND _arch_list "${a}")
    endforeach()
    set(TORCH_CUDA_ARCH_LIST "${_arch_list}")
  endif()
  # rlpt's .cu files are torch-free C++17 (CMake before 3.26 knows no CUDA20 dialect for nvcc).
  if(NOT DEFINED CMAKE_CUDA_STANDARD)
    set(CMAKE_CUDA_STANDARD 17)
  endif()
  set(_rlpt_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(RLPT_HAVE_CUDA ON)
elseif(NOT _torch_has_cuda AND RLPT_WITH_CUDA STREQUAL "ON")
  message(FATAL_ERROR "RLPT_WITH_CUDA=ON, but LibTorch at ${_torch_root} is CPU-only (no libtorch_cuda.so).")
endif()

find_package(Torch REQUIRED CONFIG)
if(RLPT_HAVE_CUDA)
  # LibTorch's CUDA config sets CMAKE_CUDA_ARCHITECTURES to OFF (it passes its own -gencode flags
  # to its own targets); rlpt's kernels keep the architectures chosen above.
  set(CMAKE_CUDA_ARCHITECTURES "${_rlpt_cuda_archs}")
endif()

# The version string users see (rlpt --version, the configure log).
set(RLPT_TORCH_VERSION "${Torch_VERSION}")
if(_rlpt_torch_pyver)
  set(RLPT_TORCH_VERSION "${_rlpt_torch_pyver}")
elseif(EXISTS "${_torch_root}/build-version")
  file(STRINGS "${_torch_root}/build-version" RLPT_TORCH_VERSION LIMIT_COUNT 1)
endif()
if(NOT _torch_has_cuda)
  set(RLPT_TORCH_CUDA "CPU")
elseif(_rlpt_torch_pycuda)
  set(RLPT_TORCH_CUDA "${_rlpt_torch_pycuda}")
elseif(CUDAToolkit_VERSION)
  set(RLPT_TORCH_CUDA "${CUDAToolkit_VERSION}")
else()
  set(RLPT_TORCH_CUDA "CUDA")
endif()

# LibTorch wheels carry their own libgomp.so.1: link that one, so the OpenMP code rlpt compiles
# (rlpt_parallel_for_sources) and LibTorch's share one runtime and thread pool.
if(EXISTS "${_torch_lib}/libgomp.so.1")
  set(OpenMP_CXX_LIBRARIES "${_torch_lib}/libgomp.so.1")
endif()

# ---- NCCL: the CUDA toolkit's, $NCCL_HOME, or the pip wheel's (nvidia/nccl beside torch) --
set(RLPT_HAVE_NCCL OFF)
if(RLPT_HAVE_CUDA AND NOT RLPT_WITH_NCCL STREQUAL "OFF")
  get_filename_component(_site "${_torch_root}/.." ABSOLUTE)
  file(GLOB _wheel_nccl LIST_DIRECTORIES true "${_site}/nvidia/nccl" "${_site}/nvidia/cu*/nccl" "${_site}/nvidia/cu*")
  set(_nccl_hints $ENV{NCCL_HOME} ${NCCL_HOME} ${_wheel_nccl} ${CUDAToolkit_LIBRARY_ROOT})
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  # pip's NCCL wheel ships only libnccl.so.2 (no libnccl.so development link).
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(rlpt_nccl UNKNOWN IMPORTED)
    set_target_properties(rlpt_nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                               INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(RLPT_HAVE_NCCL ON)
  else()
    message(FATAL_ERROR
      "LibTorch has CUDA, but NCCL (nccl.h and libnccl) was not found: looked in NCCL_HOME, the "
      "CUDA toolkit and ${_site}/nvidia. Set -DNCCL_HOME=<dir with include/nccl.h and lib/libnccl.so*>, "
      "or configure with -DRLPT_WITH_NCCL=OFF (then device tensors move over MPI only).")
  endif()
elseif(RLPT_WITH_NCCL STREQUAL "ON")
  message(FATAL_ERROR "RLPT_WITH_NCCL=ON needs CUDA kernels (a CUDA LibTorch, RLPT_WITH_CUDA not OFF)")
endif()

# ---- rlpt_torch: one imported target for LibTorch ------------------------------------------
# fmt shim: LibTorch's include dir carries its own fmt headers (fmt 11/12) while rlpt links the
# fmt package found above (Debian's fmt 9). An -isystem dir holding only a link named fmt to
# that package's headers, placed before LibTorch's, makes every <fmt/...> mean the package's.
get_target_property(_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
set(_fmt_headers "")
foreach(d ${_fmt_inc})
  if(NOT _fmt_headers AND EXISTS "${d}/fmt/format.h")
    set(_fmt_headers "${d}/fmt")
  endif()
endforeach()
if(NOT _fmt_headers)
  foreach(d ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES} /usr/include /usr/local/include)
    if(NOT _fmt_headers AND EXISTS "${d}/fmt/format.h")
      set(_fmt_headers "${d}/fmt")
    endif()
  endforeach()
endif()
if(NOT _fmt_headers)
  message(FATAL_ERROR "fmt's headers (fmt/format.h) not found beside fmt::fmt")
endif()
set(_fmt_shim "${CMAKE_BINARY_DIR}/fmt-shim")
file(MAKE_DIRECTORY "${_fmt_shim}")
file(CREATE_LINK "${_fmt_headers}" "${_fmt_shim}/fmt" SYMBOLIC)

add_library(rlpt_torch INTERFACE)
target_include_directories(rlpt_torch SYSTEM BEFORE INTERFACE "${_fmt_shim}")
target_link_libraries(rlpt_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(rlpt_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(rlpt_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_torch_flags}>)

message(STATUS "rlpt: LibTorch ${RLPT_TORCH_VERSION} (${RLPT_TORCH_CUDA}) at ${_torch_root}")
message(STATUS "rlpt: CUDA kernels ${RLPT_HAVE_CUDA}, NCCL collectives ${RLPT_HAVE_NCCL}, C++${CMAKE_CXX_STANDARD}")
