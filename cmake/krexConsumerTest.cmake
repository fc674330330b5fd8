# SPDX-License-Identifier: Apache-2.0
# cmake -P driver for the consumer tests (see cmake/krexConsumerTests.cmake).
#   KREX_STEP=install       cmake --install KREX_BINARY_DIR into a fresh KREX_PREFIX
#   KREX_STEP=find_package  configure, build and run tests/consumer against KREX_PREFIX
#   KREX_STEP=subdirectory  configure, build and run tests/consumer with
#                           add_subdirectory(KREX_SOURCE_DIR)
cmake_minimum_required(VERSION 3.20)

function(krex_run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}")
  endif()
endfunction()

if(NOT KREX_CONFIG)
  set(KREX_CONFIG Release)
endif()

if(KREX_STEP STREQUAL "install")
  file(REMOVE_RECURSE "${KREX_PREFIX}")
  krex_run(${CMAKE_COMMAND} --install "${KREX_BINARY_DIR}" --prefix "${KREX_PREFIX}"
           --config "${KREX_CONFIG}")
  # The installed headers are the library's, include/krex/, and nothing of the
  # tools (tools/krex_tools/: krexctl's snapshot, parser, JSON writer).
  file(GLOB_RECURSE installed RELATIVE "${KREX_PREFIX}/include" "${KREX_PREFIX}/include/*")
  file(GLOB_RECURSE library RELATIVE "${KREX_SOURCE_DIR}/include"
       "${KREX_SOURCE_DIR}/include/krex/*.hpp" "${KREX_SOURCE_DIR}/include/krex/*.cuh")
  file(GLOB_RECURSE tools_only RELATIVE "${KREX_SOURCE_DIR}/tools" "${KREX_SOURCE_DIR}/tools/*.hpp")
  if(NOT installed)
    message(FATAL_ERROR "no header installed under ${KREX_PREFIX}/include")
  endif()
  foreach(header IN LISTS installed)
    if(NOT header IN_LIST library OR header IN_LIST tools_only)
      message(FATAL_ERROR "installed ${header}: not a library header (include/krex/); "
                          "tools-only code stays in tools/ and is not installed")
    endif()
    file(STRINGS "${KREX_PREFIX}/include/${header}" tool_includes REGEX "#[ \t]*include.*krex_tools/")
    if(tool_includes)
      message(FATAL_ERROR "installed ${header} includes tool code: ${tool_includes}")
    endif()
  endforeach()
  foreach(header IN LISTS library)
    if(NOT header IN_LIST installed)
      message(FATAL_ERROR "${header} was not installed")
    endif()
  endforeach()
  # The rest of what docs/BUILDING.md ("Install and use from another project")
  # says is installed: the CMake package, the licence and, when built, krexctl,
  # which the README sends users to and which must run from the prefix.
  foreach(f krexConfig.cmake krexConfigVersion.cmake krexTargets.cmake krexCompiled.cmake)
    file(GLOB_RECURSE found "${KREX_PREFIX}/lib*/${f}")
    if(NOT found)
      message(FATAL_ERROR "${f} was not installed under ${KREX_PREFIX}/lib*/")
    endif()
  endforeach()
  if(NOT EXISTS "${KREX_PREFIX}/share/doc/krex/LICENSE")
    message(FATAL_ERROR "LICENSE was not installed to ${KREX_PREFIX}/share/doc/krex/")
  endif()
  if(KREX_EXPECT_KREXCTL)
    if(NOT EXISTS "${KREX_PREFIX}/bin/krexctl")
      message(FATAL_ERROR "krexctl was built but not installed to ${KREX_PREFIX}/bin/")
    endif()
    execute_process(COMMAND "${KREX_PREFIX}/bin/krexctl" -V RESULT_VARIABLE rc
                    OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "^krexctl \\(krex\\) ${KREX_VERSION}")
      message(FATAL_ERROR "installed krexctl -V: exit ${rc}, '${out}' "
                          "(expected 'krexctl (krex) ${KREX_VERSION}')")
    endif()
  endif()
  return()
endif()

set(args -S "${KREX_SOURCE_DIR}/tests/consumer" -G "${KREX_GENERATOR}"
         -DCMAKE_BUILD_TYPE=${KREX_CONFIG} "-DCMAKE_CXX_COMPILER=${KREX_CXX_COMPILER}")
if(KREX_MAKE_PROGRAM)
  list(APPEND args "-DCMAKE_MAKE_PROGRAM=${KREX_MAKE_PROGRAM}")
endif()

if(KREX_STEP STREQUAL "find_package")
  set(bin "${KREX_BINARY_DIR}/consumer/find_package")
  # Only the install prefix may provide krex: no package registry, no build tree.
  list(APPEND args -DKREX_CONSUMER_MODE=find_package "-DCMAKE_PREFIX_PATH=${KREX_PREFIX}"
       "-DKREX_EXPECT_PREFIX=${KREX_PREFIX}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
elseif(KREX_STEP STREQUAL "subdirectory")
  set(bin "${KREX_BINARY_DIR}/consumer/subdirectory")
  # The backends this build has on, so the subproject compiles the same headers.
  list(APPEND args -DKREX_CONSUMER_MODE=subdirectory "-DKREX_SOURCE_DIR=${KREX_SOURCE_DIR}"
       -DKREX_WITH_CUDA=${KREX_WITH_CUDA} -DKREX_WITH_HIP=${KREX_WITH_HIP})
else()
  message(FATAL_ERROR "KREX_STEP must be install, find_package or subdirectory, not '${KREX_STEP}'")
endif()

file(REMOVE_RECURSE "${bin}")
krex_run(${CMAKE_COMMAND} ${args} -B "${bin}")
krex_run(${CMAKE_COMMAND} --build "${bin}" --config "${KREX_CONFIG}")
krex_run("${bin}/bin/krex_consumer")
krex_run("${bin}/bin/krex_consumer_compiled")
