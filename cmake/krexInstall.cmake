# SPDX-License-Identifier: Apache-2.0
# Install rules and the relocatable CMake package:
#   <prefix>/include/krex/...                      headers
#   <prefix>/<libdir>/cmake/krex/krexConfig.cmake  find_package(krex CONFIG)
#   <prefix>/<libdir>/cmake/krex/krexTargets.cmake krex::krex
#   <prefix>/<libdir>/cmake/krex/krexCompiled.cmake krex::compiled (built by the consumer)
include(CMakePackageConfigHelpers)

set(KREX_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/krex"
    CACHE STRING "Where krexConfig.cmake is installed, relative to the prefix")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/krex"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
install(TARGETS krex EXPORT krexTargets)
install(EXPORT krexTargets NAMESPACE krex:: DESTINATION "${KREX_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/krexConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/krexConfig.cmake"
  INSTALL_DESTINATION "${KREX_INSTALL_CMAKEDIR}")
# Header-only: the pointer size of the build that installed krex says nothing
# about the consumer, hence ARCH_INDEPENDENT.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/krexConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion
  ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/krexConfig.cmake"
              "${PROJECT_BINARY_DIR}/krexConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/krexCompiled.cmake"
        DESTINATION "${KREX_INSTALL_CMAKEDIR}")

if(TARGET krexctl)
  install(TARGETS krexctl RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()

install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/doc/krex")
