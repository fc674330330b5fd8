# SPDX-License-Identifier: Apache-2.0
# Finds what the krex INTERFACE target links. Included by the top-level
# CMakeLists.txt; cmake/krexConfig.cmake.in repeats the same search for
# consumers of an installed krex.

# No Boost: since segment layout 3 the node segment is a fixed-layout file
# that krex maps itself (include/krex/detail/segment/segment.hpp).

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

if(KREX_WITH_CUDA)
  include("${PROJECT_SOURCE_DIR}/python/cmake/krexCupti.cmake")
  krex_require_cupti("" "reconfigure with -DKREX_WITH_CUDA=OFF")
endif()

if(KREX_WITH_HIP)
  find_package(hip CONFIG REQUIRED)
endif()
