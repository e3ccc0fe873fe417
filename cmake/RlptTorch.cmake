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

get_filename_component(_site "${_torch_root}/.." ABSOLUTE)  # site-packages, for a wheel

# LibTorch's CUDA config (Caffe2's FindCUDA, run by find_package(Torch)) looks for the toolkit on
# its own: CUDA_TOOLKIT_ROOT_DIR, else $CUDA_PATH, else the folder above the first nvcc on PATH;
# and it links libnvrtc from that toolkit. On toolkits as users have them that goes wrong twice:
#   - nvcc on PATH is a wrapper script or a link outside the toolkit (conda, Spack, environment
#     modules, a bin folder): the folder above it is no toolkit, and find_package(Torch) stops with
#     "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries";
#   - the toolkit has no libnvrtc (assembled from pip packages, a slim container): configuring
#     succeeds and every link line ends in -lCUDA_nvrtc_LIBRARY-NOTFOUND.
# So LibTorch is handed the toolkit nvcc itself reports (CMake asks nvcc when enabling CUDA:
# CMAKE_CUDA_COMPILER_TOOLKIT_ROOT), and LibTorch's own libnvrtc (the wheel's nvidia/cu*/lib or
# nvidia/cuda_nvrtc/lib, a zip's lib/), else the toolkit's, else configuring stops naming the fix.
# Called after enable_language(CUDA) and find_package(CUDAToolkit).
function(rlpt_cuda_toolkit_for_libtorch)
  set(_root "${CMAKE_CUDA_COMPILER_TOOLKIT_ROOT}")
  if(NOT _root)
    set(_root "${CUDAToolkit_BIN_DIR}/..")
  endif()
  get_filename_component(_root "${_root}" ABSOLUTE)
  set(CUDA_TOOLKIT_ROOT_DIR "${_root}" CACHE PATH "The CUDA toolkit of nvcc (rlpt hands it to LibTorch)" FORCE)

  file(GLOB _nvrtc "${_site}/nvidia/cu*/lib/libnvrtc*.so*" "${_site}/nvidia/cuda_nvrtc/lib/libnvrtc*.so*"
       "${_torch_lib}/libnvrtc*.so*")
  list(FILTER _nvrtc INCLUDE REGEX "/libnvrtc(-[0-9a-f]+)?\\.so[.0-9]*$")  # not -builtins, not .alt
  list(SORT _nvrtc)
  if(_nvrtc)
    list(GET _nvrtc 0 _lib)
    set(_from "LibTorch's")
  elseif(CUDA_nvrtc_LIBRARY AND EXISTS "${CUDA_nvrtc_LIBRARY}")
    set(_lib "${CUDA_nvrtc_LIBRARY}")
    set(_from "the toolkit's")
  else()
    message(FATAL_ERROR
      "LibTorch at ${_torch_root} links libnvrtc, but neither it (${_site}/nvidia) nor the CUDA toolkit "
      "at ${_root} has one. Install the toolkit's NVRTC (apt: cuda-nvrtc-dev-<major>-<minor>; "
      "pip: nvidia-cuda-nvrtc beside torch), or give -DCUDA_nvrtc_LIBRARY=/path/to/libnvrtc.so.")
  endif()
  # Both cached names: Caffe2's cuda.cmake copies the first into the second only when unset.
  set(CUDA_nvrtc_LIBRARY "${_lib}" CACHE FILEPATH "libnvrtc LibTorch links" FORCE)
  set(CUDA_NVRTC_LIB "${_lib}" CACHE FILEPATH "libnvrtc LibTorch links" FORCE)
  message(STATUS "rlpt: CUDA toolkit ${_root} (nvcc ${CMAKE_CUDA_COMPILER}), libnvrtc ${_lib} (${_from})")
endfunction()

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
  # An nvcc that is a link from outside the toolkit (a bin folder, environment modules) finds
  # neither its nvcc.profile nor its headers there: compile with the file it points to.
  if(CMAKE_CUDA_COMPILER AND IS_SYMLINK "${CMAKE_CUDA_COMPILER}")
    get_filename_component(_nvcc_real "${CMAKE_CUDA_COMPILER}" REALPATH)
    get_filename_component(_nvcc_real_name "${_nvcc_real}" NAME)
    if(_nvcc_real_name STREQUAL "nvcc")  # not a ccache masquerade link
      set(CMAKE_CUDA_COMPILER "${_nvcc_real}")
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
  rlpt_cuda_toolkit_for_libtorch()
  set(RLPT_HAVE_CUDA ON)
elseif(NOT _torch_has_cuda AND RLPT_WITH_CUDA STREQUAL "ON")
  message(FATAL_ERROR "RLPT_WITH_CUDA=ON, but LibTorch at ${_torch_root} is CPU-only (no libtorch_cuda.so).")
endif()

find_package(Torch REQUIRED CONFIG)
foreach(_l IN LISTS TORCH_LIBRARIES)
  if(_l MATCHES "NOTFOUND")
    message(FATAL_ERROR "LibTorch's CMake config at ${Torch_DIR} left ${_l} in TORCH_LIBRARIES: every link "
                        "would fail. Give that library's path as -D<name>=/path/to/lib (the name before "
                        "-NOTFOUND).")
  endif()
endforeach()
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

# ---- NCCL: the one LibTorch uses ----------------------------------------------------------
# libtorch_cuda and rlpt must use one NCCL: both ask for libnccl.so.2, and the first one loaded
# serves the process, so an rlpt linked against another NCCL would run LibTorch's collectives on
# it, or rlpt's on a library whose nccl.h it was not compiled with. A wheel's LibTorch loads the
# wheel's NCCL (site-packages/nvidia/nccl, or nvidia/cu*/): when that exists it is the only one
# taken, searched before anything else (CMake would otherwise try the name libnccl.so in every
# folder, system ones included, before pip's libnccl.so.2), and an NCCL_HOME naming another is
# refused. Without one (a libtorch zip) NCCL comes from NCCL_HOME or the CUDA toolkit, and nccl.h
# from beside the library found.
set(RLPT_HAVE_NCCL OFF)
if(RLPT_HAVE_CUDA AND NOT RLPT_WITH_NCCL STREQUAL "OFF")
  file(GLOB _wheel_nccl_libs "${_site}/nvidia/nccl/lib/libnccl.so*" "${_site}/nvidia/cu*/lib/libnccl.so*")
  set(_nccl_home "${NCCL_HOME}")
  if(NOT _nccl_home)
    set(_nccl_home "$ENV{NCCL_HOME}")
  endif()
  if(_wheel_nccl_libs)
    list(SORT _wheel_nccl_libs)
    list(GET _wheel_nccl_libs 0 _lib)
    get_filename_component(_lib_dir "${_lib}" DIRECTORY)
    get_filename_component(_nccl_root "${_lib_dir}/.." ABSOLUTE)
    if(_nccl_home)
      get_filename_component(_home_real "${_nccl_home}" REALPATH)
      get_filename_component(_wheel_real "${_nccl_root}" REALPATH)
      if(NOT _home_real STREQUAL _wheel_real)
        message(FATAL_ERROR
          "NCCL_HOME=${_nccl_home}, but LibTorch at ${_torch_root} loads the NCCL of its wheel "
          "(${_nccl_root}): libtorch_cuda and rlpt must use one NCCL. Unset NCCL_HOME (rlpt then "
          "uses the wheel's), or build against a LibTorch that uses the NCCL in NCCL_HOME.")
      endif()
    endif()
    set(_nccl_lib_hints "${_lib_dir}")
    set(_nccl_from "LibTorch's, from its wheel")
    # Only the wheel's folder (a cached NCCL_LIBRARY from an older configure is searched again).
    unset(NCCL_LIBRARY CACHE)
    find_library(NCCL_LIBRARY NAMES libnccl.so.2 nccl HINTS ${_nccl_lib_hints} NO_DEFAULT_PATH)
  else()
    set(_nccl_lib_hints ${_nccl_home} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_LIBRARY_DIR})
    set(_nccl_from "NCCL_HOME or the CUDA toolkit")
    # NCCL_HOME alone first: a libnccl.so elsewhere (CMAKE_LIBRARY_PATH is searched before any
    # hint) must not win over an NCCL_HOME in pip's layout (only libnccl.so.2).
    if(_nccl_home)
      find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_home} PATH_SUFFIXES lib lib64
                   NO_DEFAULT_PATH)
    endif()
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_lib_hints} PATH_SUFFIXES lib lib64)
  endif()
  if(NCCL_LIBRARY)
    # nccl.h from the same NCCL as the library (lib/.. or lib64/..), else the usual places.
    get_filename_component(_lib_dir "${NCCL_LIBRARY}" DIRECTORY)
    unset(NCCL_INCLUDE_DIR CACHE)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${_lib_dir}/../include" NO_DEFAULT_PATH)
    if(NOT NCCL_INCLUDE_DIR AND NOT _wheel_nccl_libs)
      find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_lib_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    endif()
  endif()
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(rlpt_nccl UNKNOWN IMPORTED)
    set_target_properties(rlpt_nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                               INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(RLPT_HAVE_NCCL ON)
    message(STATUS "rlpt: NCCL ${NCCL_LIBRARY} with ${NCCL_INCLUDE_DIR}/nccl.h (${_nccl_from})")
  elseif(_wheel_nccl_libs)
    message(FATAL_ERROR
      "LibTorch's wheel has NCCL (${_wheel_nccl_libs}) but no nccl.h beside it in ${_nccl_root}/include: "
      "reinstall the wheel's NCCL (pip install --force-reinstall nvidia-nccl-cu<major>), or configure "
      "with -DRLPT_WITH_NCCL=OFF (then device tensors move over MPI only).")
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
