# rlpt_torch_target(<target>): link LibTorch and reuse the shared precompiled header.
function(rlpt_torch_target tgt)
  target_link_libraries(${tgt} PUBLIC rlpt_torch)
  if(TARGET rlpt_pch AND NOT tgt STREQUAL "rlpt_pch")
    target_precompile_headers(${tgt} REUSE_FROM rlpt_pch)
  endif()
endfunction()

# rlpt_warnings(<target>)
function(rlpt_warnings tgt)
  target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

# rlpt_parallel_for_sources(<files>...): compile these sources (of a target defined in the calling
# directory) with OpenMP. at::parallel_for's OpenMP body is a header template compiled into its
# caller: in a file built without -fopenmp it silently runs on the calling thread alone, whatever
# torch::set_num_threads says. Such files also skip the shared precompiled header (built without
# OpenMP, its ATen headers are the serial variant). rlpt_check_parallel_for_sources() below fails
# the configure step for any file that calls at::parallel_for without being listed here.
find_package(OpenMP REQUIRED COMPONENTS CXX)
function(rlpt_parallel_for_sources)
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${OpenMP_CXX_FLAGS}" SKIP_PRECOMPILE_HEADERS ON)
  foreach(f ${ARGN})
    get_filename_component(abs ${f} ABSOLUTE)
    set_property(GLOBAL APPEND PROPERTY RLPT_PARALLEL_FOR_SOURCES ${abs})
  endforeach()
endfunction()

function(rlpt_check_parallel_for_sources)
  get_property(listed GLOBAL PROPERTY RLPT_PARALLEL_FOR_SOURCES)
  file(GLOB_RECURSE all CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cpp ${PROJECT_SOURCE_DIR}/kernels/*.cpp
       ${PROJECT_SOURCE_DIR}/roles/*.cpp ${PROJECT_SOURCE_DIR}/comm/*.cpp)
  foreach(f ${all})
    file(STRINGS ${f} uses REGEX "at::parallel_for\\(")
    if(uses AND NOT f IN_LIST listed)
      message(FATAL_ERROR "${f} calls at::parallel_for but is not compiled with OpenMP: it would run on "
                          "one thread. List it in rlpt_parallel_for_sources() in its directory's CMakeLists.txt.")
    endif()
  endforeach()
endfunction()
