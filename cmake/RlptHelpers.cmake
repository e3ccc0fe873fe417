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
