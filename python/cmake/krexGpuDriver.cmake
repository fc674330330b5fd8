# SPDX-License-Identifier: Apache-2.0
# krex_gpu_driver(<out> <why> [ROOT <dir>]): sets <out> to TRUE where an
# NVIDIA GPU driver is present, FALSE otherwise, and <why> to what was found
# or missing. Present: its kernel side (the module loaded, /proc/driver/nvidia;
# a device node /dev/nvidiactl or /dev/nvidia<N>; WSL's /dev/dxg) and its user
# side (libcuda.so.1 where the loader looks: the usual library directories,
# LD_LIBRARY_PATH, ldconfig's cache; the toolkit's stubs/libcuda.so is no
# driver). python/CMakeLists.txt builds the host backend where none is, so
# that `pip install ./python` on a machine with the toolkit but no GPU gets a
# module that works there. ROOT: look under <dir> instead of / (tests).
function(krex_gpu_driver out why)
  cmake_parse_arguments(arg "" "ROOT" "" ${ARGN})
  set(root "${arg_ROOT}")
  set(kernel "")
  foreach(p proc/driver/nvidia/version dev/nvidiactl dev/dxg)
    if(EXISTS "${root}/${p}")
      set(kernel "${root}/${p}")
      break()
    endif()
  endforeach()
  if(NOT kernel)
    file(GLOB nodes "${root}/dev/nvidia[0-9]*")
    if(nodes)
      list(GET nodes 0 kernel)
    endif()
  endif()
  set(dirs usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib64 usr/lib usr/local/lib
           usr/lib/wsl/lib lib64 lib)
  set(search "")
  foreach(d IN LISTS dirs)
    list(APPEND search "${root}/${d}")
  endforeach()
  if(root STREQUAL "" AND DEFINED ENV{LD_LIBRARY_PATH})
    string(REPLACE ":" ";" ld_dirs "$ENV{LD_LIBRARY_PATH}")
    list(APPEND search ${ld_dirs})
  endif()
  set(lib "")
  foreach(d IN LISTS search)
    if(d AND EXISTS "${d}/libcuda.so.1" AND NOT d MATCHES "/stubs/?$")
      set(lib "${d}/libcuda.so.1")
      break()
    endif()
  endforeach()
  if(NOT lib AND root STREQUAL "")
    find_program(krex_ldconfig NAMES ldconfig PATHS /sbin /usr/sbin NO_CACHE)
    if(krex_ldconfig)
      execute_process(COMMAND "${krex_ldconfig}" -p OUTPUT_VARIABLE cache ERROR_QUIET)
      if(cache MATCHES "libcuda\\.so\\.1 [^\n]*=> ([^\n]+)")
        set(lib "${CMAKE_MATCH_1}")
      endif()
    endif()
  endif()
  if(kernel AND lib)
    set(${out} TRUE PARENT_SCOPE)
    set(${why} "GPU driver: ${kernel}, ${lib}" PARENT_SCOPE)
  elseif(lib)
    set(${out} FALSE PARENT_SCOPE)
    set(${why} "no GPU driver loaded (${lib}, but no /proc/driver/nvidia, /dev/nvidiactl, "
               "/dev/nvidia<N> or /dev/dxg)" PARENT_SCOPE)
  elseif(kernel)
    set(${out} FALSE PARENT_SCOPE)
    set(${why} "no GPU driver library (${kernel}, but no libcuda.so.1)" PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
    set(${why} "no GPU driver (no libcuda.so.1, no /dev/nvidia* or /proc/driver/nvidia)"
        PARENT_SCOPE)
  endif()
endfunction()
