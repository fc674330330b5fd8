# SPDX-License-Identifier: Apache-2.0
# What examples/, tests/ and bench/ do with their globbed sources: one target
# per file, the Google Benchmark ones only where it is found, the CUDA ones
# in C++17 with cuBLAS.

# krex_sources(<out> <glob>): the files matching <glob>; gbench*/test_gbench*
# ones are left out, with a message, where Google Benchmark is missing.
function(krex_sources out glob)
  file(GLOB found CONFIGURE_DEPENDS "${glob}")
  set(kept)
  foreach(src IN LISTS found)
    get_filename_component(stem "${src}" NAME_WE)
    if(stem MATCHES "^(test_)?gbench" AND NOT TARGET benchmark::benchmark)
      file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${src}")
      message(STATUS "krex: ${rel} skipped: Google Benchmark not found")
      continue()
    endif()
    list(APPEND kept "${src}")
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()

# krex_source_target(<target> <src>): links Google Benchmark to the target of
# a gbench source; a .cu source's target gets C++17 and cuBLAS (the GPU tests
# and benchmarks check that cuBLAS launches are gated).
function(krex_source_target target src)
  get_filename_component(stem "${src}" NAME_WE)
  if(stem MATCHES "^(test_)?gbench")
    target_link_libraries(${target} PRIVATE benchmark::benchmark)
  endif()
  if(src MATCHES "\\.cu$")
    set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
    target_link_libraries(${target} PRIVATE CUDA::cublas)
  endif()
endfunction()
