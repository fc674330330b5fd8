# SPDX-License-Identifier: Apache-2.0
# Consumer tests (label "consumer"), included from tests/CMakeLists.txt:
#   consumer_install        installs this build tree into <build>/consumer-prefix and
#                           checks what docs/BUILDING.md says is installed: the
#                           headers, the CMake package, LICENSE, and krexctl (runs it)
#   consumer_find_package   builds tests/consumer against that prefix with
#                           find_package(krex CONFIG REQUIRED), runs it
#   consumer_add_subdirectory  builds tests/consumer with add_subdirectory(<krex source>), runs it
# Each test drives cmake/krexConsumerTest.cmake with the compiler, generator
# and configuration of this build.
set(krex_consumer_prefix "${PROJECT_BINARY_DIR}/consumer-prefix")
set(krex_consumer_args
  -DKREX_SOURCE_DIR=${PROJECT_SOURCE_DIR}
  -DKREX_BINARY_DIR=${PROJECT_BINARY_DIR}
  -DKREX_PREFIX=${krex_consumer_prefix}
  -DKREX_CONFIG=$<CONFIG>
  "-DKREX_GENERATOR=${CMAKE_GENERATOR}"
  -DKREX_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
  -DKREX_CXX_COMPILER=${CMAKE_CXX_COMPILER}
  -DKREX_WITH_CUDA=${KREX_WITH_CUDA}
  -DKREX_WITH_HIP=${KREX_WITH_HIP}
  -DKREX_VERSION=${PROJECT_VERSION}
  -DKREX_EXPECT_KREXCTL=$<TARGET_EXISTS:krexctl>)
set(krex_consumer_script "${PROJECT_SOURCE_DIR}/cmake/krexConsumerTest.cmake")

add_test(NAME consumer_install
         COMMAND ${CMAKE_COMMAND} ${krex_consumer_args} -DKREX_STEP=install
                 -P ${krex_consumer_script})
add_test(NAME consumer_find_package
         COMMAND ${CMAKE_COMMAND} ${krex_consumer_args} -DKREX_STEP=find_package
                 -P ${krex_consumer_script})
add_test(NAME consumer_add_subdirectory
         COMMAND ${CMAKE_COMMAND} ${krex_consumer_args} -DKREX_STEP=subdirectory
                 -P ${krex_consumer_script})

set_tests_properties(consumer_install consumer_find_package consumer_add_subdirectory
                     PROPERTIES LABELS consumer TIMEOUT 300)
set_tests_properties(consumer_install PROPERTIES FIXTURES_SETUP krex_consumer_prefix)
set_tests_properties(consumer_find_package PROPERTIES FIXTURES_REQUIRED krex_consumer_prefix)
