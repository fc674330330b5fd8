# SPDX-License-Identifier: Apache-2.0
# What examples/, tests/ and bench/ do with their sources: one target per
# file, the Google Benchmark ones only where it is found, the CUDA ones in
# C++17 with cuBLAS (the GPU tests and benchmarks check that cuBLAS launches
# are gated).
#
#   krex_targets(<out> <glob> <prefix> <add>)
#
# For every file matching <glob> (gbench*/test_gbench* ones left out, with a
# message, where Google Benchmark is missing): <add>(<prefix><stem> <file>)
# makes the target, which then gets benchmark::benchmark for a gbench file and
# C++17 and CUDA::cublas for a .cu file. <out>: the targets made. A directory
# with .cu files calls enable_language(CUDA) itself (a directory-scope command).
function(krex_targets out glob prefix add)
  file(GLOB found CONFIGURE_DEPENDS "${glob}")
  set(made)
  foreach(src IN LISTS found)
    get_filename_component(stem "${src}" NAME_WE)
    set(target ${prefix}${stem})
    if(stem MATCHES "^(test_)?gbench")
      if(NOT TARGET benchmark::benchmark)
        file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${src}")
        message(STATUS "krex: ${rel} skipped: Google Benchmark not found")
        continue()
      endif()
      cmake_language(CALL ${add} ${target} "${src}")
      target_link_libraries(${target} PRIVATE benchmark::benchmark)
    else()
      cmake_language(CALL ${add} ${target} "${src}")
    endif()
    if(src MATCHES "\\.cu$")
      set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
      target_link_libraries(${target} PRIVATE CUDA::cublas)
    endif()
    list(APPEND made ${target})
  endforeach()
  set(${out} "${made}" PARENT_SCOPE)
endfunction()
