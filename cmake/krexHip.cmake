# SPDX-License-Identifier: Apache-2.0
# KREX_WITH_HIP: how krex's own HIP device sources are built. Included by the
# top-level CMakeLists.txt after krexDependencies (which finds hip::host, all
# that the krex target itself needs: the backend is host C++ over the HIP
# runtime).
#
# Device sources (tests/test_*.hip, examples/hip/*.hip, the CK example and the
# patched ckProfiler GEMM profiler) are compiled by the C++ compiler, which
# must then be hipcc (preset `hip`: CMAKE_CXX_COMPILER=hipcc,
# --offload-arch=gfx90a). CMake's own HIP language is not used: CMake < 3.28
# does not find Debian's multiarch hip-lang package, and hipcc is what ROCm
# users build with. With another C++ compiler the device sources are skipped
# (with a warning) and only the host parts of the backend are built.
#
#   krex_hip_device_sources     ON when device sources can be built
#   krex_hip_sources(<src>...)  marks sources as HIP for hipcc (the C++ compiler)
#
# Composable Kernel (KREX_WITH_CK, preset `hip`): the pinned, patched CK tree
# from lab/scripts/ck.sh at KREX_CK_DIR; defines the INTERFACE target krex_ck
# (CK's include directories, as SYSTEM so CK's warnings are not krex's).

get_filename_component(krex_cxx_name "${CMAKE_CXX_COMPILER}" NAME)
if(krex_cxx_name MATCHES "^hipcc")
  set(krex_hip_device_sources ON)
else()
  set(krex_hip_device_sources OFF)
  message(WARNING "KREX_WITH_HIP=ON with C++ compiler ${CMAKE_CXX_COMPILER}: the HIP device "
                  "sources (test_hip, krex_ck_gemm) are skipped; configure with "
                  "-DCMAKE_CXX_COMPILER=hipcc (cmake --preset hip) to build them")
endif()

# Marks `src...` (in the calling directory) as HIP sources compiled by the C++
# compiler (hipcc): CMake passes `-x c++` for a C++ source with a non-C++
# extension, so `-xhip` is added after it.
function(krex_hip_sources)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS -xhip)
endfunction()

option(KREX_WITH_CK "Build the Composable Kernel example and the patched ckProfiler GEMM profiler (needs lab/scripts/ck.sh)" OFF)
set(KREX_CK_DIR "${PROJECT_SOURCE_DIR}/.deps/composable_kernel" CACHE PATH
    "Pinned, patched Composable Kernel source tree (lab/scripts/ck.sh puts it here)")

if(KREX_WITH_CK AND krex_hip_device_sources)
  if(NOT EXISTS "${KREX_CK_DIR}/include/ck/ck.hpp"
     OR NOT EXISTS "${KREX_CK_DIR}/profiler/include/krex_ck_region.hpp")
    message(FATAL_ERROR "KREX_WITH_CK=ON: no patched Composable Kernel at ${KREX_CK_DIR}: run "
                        "lab/scripts/ck.sh (it fetches the pinned CK release and applies "
                        "patches/ck-krex-regions.patch), set KREX_CK_DIR, or reconfigure with "
                        "-DKREX_WITH_CK=OFF")
  endif()
  add_library(krex_ck INTERFACE)
  target_include_directories(krex_ck SYSTEM INTERFACE
    "${KREX_CK_DIR}/include" "${KREX_CK_DIR}/library/include" "${KREX_CK_DIR}")
endif()
