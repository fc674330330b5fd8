# Finds what the krex INTERFACE target links. Included by the top-level
# CMakeLists.txt; cmake/krexConfig.cmake.in repeats the same search for
# consumers of an installed krex.

# Boost: prefer BoostConfig.cmake (Boost >= 1.70 ships it; CMake >= 3.30
# drops the FindBoost module), fall back to FindBoost for older setups.
# Both define Boost::headers (FindBoost since CMake 3.15).
find_package(Boost 1.71 QUIET CONFIG)
if(NOT Boost_FOUND)
  find_package(Boost 1.71 REQUIRED)
endif()

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

if(KREX_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET CUDA::cupti)
    message(FATAL_ERROR "KREX_WITH_CUDA=ON needs CUPTI (CUDA::cupti), which this CUDA "
                        "toolkit does not provide: install CUPTI or reconfigure with "
                        "-DKREX_WITH_CUDA=OFF")
  endif()
endif()

if(KREX_WITH_HIP)
  find_package(hip CONFIG REQUIRED)
endif()
