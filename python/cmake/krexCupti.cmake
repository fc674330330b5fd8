# SPDX-License-Identifier: Apache-2.0
# krex_require_cupti(<who> <otherwise>): finds the CUDA toolkit and stops the
# configuration, naming <who> and saying what to do (<otherwise>), when it
# has no CUPTI (CUDA::cupti), which the CUDA backend gates launches with.
# The top-level build (cmake/krexDependencies.cmake) and the Python binding
# built on its own (python/CMakeLists.txt: pip, an sdist) both use it.
function(krex_require_cupti who otherwise)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::cupti)
    message(FATAL_ERROR "${who}KREX_WITH_CUDA=ON needs CUPTI (CUDA::cupti), which this CUDA "
                        "toolkit does not provide: install CUPTI or ${otherwise}")
  endif()
endfunction()
