# SPDX-License-Identifier: Apache-2.0
# KREX_WITH_NVBENCH: the nvbench integration (include/krex/nvbench.hpp) built
# against nvbench's CMake package: examples/nvbench/*.cu become
# krex_nvbench_<name>, and tests/nvbench/test_nvbench.cu a unit test that runs
# on the host. nvbench comes from nvbench_DIR, e.g. the package inside the
# cuda-bench wheel (`python -m cuda.bench.nvbench --cmake-dir`, or
# scripts/ci/nvbench.sh, which downloads the wheel into .deps/). Needs nvcc.
#
# Where the CUDA toolkit has no NVML (a machine without the NVIDIA driver),
# libnvbench.so cannot link: a stand-in libnvidia-ml.so.1 whose every call
# fails as without a driver (tests/nvbench/nvml_stub.cpp) is built at
# configure time and used instead. Never where a real NVML is found.

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(krex_nvml_env "")
if(NOT TARGET CUDA::nvml)
  set(krex_nvml_dir "${PROJECT_BINARY_DIR}/nvml-stand-in")
  file(MAKE_DIRECTORY "${krex_nvml_dir}")
  execute_process(
    COMMAND "${CMAKE_CXX_COMPILER}" -shared -fPIC -Wl,-soname,libnvidia-ml.so.1
            -o "${krex_nvml_dir}/libnvidia-ml.so.1" "${PROJECT_SOURCE_DIR}/tests/nvbench/nvml_stub.cpp"
    RESULT_VARIABLE krex_nvml_rc ERROR_VARIABLE krex_nvml_err)
  if(NOT krex_nvml_rc EQUAL 0)
    message(FATAL_ERROR "krex: could not build the NVML stand-in for nvbench: ${krex_nvml_err}")
  endif()
  file(CREATE_LINK libnvidia-ml.so.1 "${krex_nvml_dir}/libnvidia-ml.so" SYMBOLIC)
  add_library(CUDA::nvml SHARED IMPORTED)
  set_target_properties(CUDA::nvml PROPERTIES IMPORTED_LOCATION "${krex_nvml_dir}/libnvidia-ml.so.1")
  # libnvbench.so's own dependency: the executables' RUNPATH does not reach it.
  set(krex_nvml_env "LD_LIBRARY_PATH=${krex_nvml_dir}")
  message(STATUS "krex: no NVML in the CUDA toolkit: nvbench links against a stand-in "
                 "(${krex_nvml_dir}); its programs run only where no GPU is needed")
endif()
find_package(nvbench CONFIG)
if(NOT nvbench_FOUND)
  message(FATAL_ERROR "KREX_WITH_NVBENCH=ON needs nvbench's CMake package: pass -Dnvbench_DIR=... "
                      "(the cuda-bench wheel has one: python -m cuda.bench.nvbench --cmake-dir; "
                      "scripts/ci/nvbench.sh downloads it into .deps/)")
endif()

# examples/nvbench/<name>.cu -> krex_nvbench_<name>, with nvbench's main;
# krex_nvbench_all builds them and the test (in parallel under -j).
add_custom_target(krex_nvbench_all)
file(GLOB krex_nvbench_examples CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/examples/nvbench/*.cu")
foreach(src IN LISTS krex_nvbench_examples)
  get_filename_component(stem "${src}" NAME_WE)
  add_executable(krex_nvbench_${stem} "${src}")
  set_target_properties(krex_nvbench_${stem} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                        RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/examples/nvbench")
  target_link_libraries(krex_nvbench_${stem} PRIVATE krex::krex nvbench::main)
  add_dependencies(krex_nvbench_all krex_nvbench_${stem})
endforeach()

if(KREX_BUILD_TESTS)
  find_package(GTest REQUIRED)
  add_executable(test_nvbench "${PROJECT_SOURCE_DIR}/tests/nvbench/test_nvbench.cu")
  set_target_properties(test_nvbench PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                        RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tests")
  target_link_libraries(test_nvbench PRIVATE krex::krex krex_testkit nvbench::nvbench GTest::gtest_main)
  # The host backend: the test runs without a GPU (on a CUDA build too).
  target_compile_definitions(test_nvbench PRIVATE KREX_DEFAULT_BACKEND_HOST=1)
  add_dependencies(krex_nvbench_all test_nvbench)
  set(registry "KREX_DEVICE_REGISTRY=${PROJECT_BINARY_DIR}/tests/device-registry-test_nvbench")
  if(krex_nvml_env)
    string(APPEND registry ";${krex_nvml_env}")
  endif()
  add_test(NAME test_nvbench COMMAND test_nvbench)
  add_test(NAME test_nvbench_off COMMAND test_nvbench --gtest_filter=nvbench_switch.*)
  add_test(NAME test_nvbench_bad_switch COMMAND test_nvbench --gtest_filter=nvbench_switch.*)
  set_tests_properties(test_nvbench PROPERTIES TIMEOUT 120 LABELS "unit;nvbench"
                       ENVIRONMENT "${registry}")
  set_tests_properties(test_nvbench_off PROPERTIES TIMEOUT 60 LABELS "unit;nvbench"
                       ENVIRONMENT "${registry};KREX_NVBENCH_REGIONS=0")
  # Strict mode: the krex error fails the program (status 1, this message).
  set_tests_properties(test_nvbench_bad_switch PROPERTIES TIMEOUT 60 LABELS "unit;nvbench"
                       ENVIRONMENT "${registry};KREX_NVBENCH_REGIONS=maybe"
                       PASS_REGULAR_EXPRESSION "krex: nvbench: strict mode: 1 state\\(s\\) had a krex error"
                       FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\]")
  # The example end to end on a GPU (skipped, saying why, without one), and
  # nvbench's compare script (from nvbench_DIR's cuda-bench wheel, if there) on its JSON.
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND AND TARGET krex_nvbench_copy)
    get_filename_component(krex_nvb_compare "${nvbench_DIR}/../../../../../scripts/nvbench_compare.py" ABSOLUTE)
    add_test(NAME nvbench_example
             COMMAND Python3::Interpreter "${PROJECT_SOURCE_DIR}/tests/nvbench/example_test.py"
                     $<TARGET_FILE:krex_nvbench_copy> "${krex_nvb_compare}")
    set_tests_properties(nvbench_example PROPERTIES TIMEOUT 300 LABELS "unit;nvbench;gpu"
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${registry}")
  endif()
  # The include order (host C++: nvbench's headers compile without nvcc): krex's
  # header first installs NVBENCH_MAIN's join hook silently; after nvbench's
  # main.cuh it says at compile time that the tenants will join late.
  set(krex_nvb_includes "-I${PROJECT_SOURCE_DIR}/include")
  get_target_property(krex_nvb_dirs nvbench::nvbench INTERFACE_INCLUDE_DIRECTORIES)
  foreach(dir IN LISTS krex_nvb_dirs CUDAToolkit_INCLUDE_DIRS)
    list(APPEND krex_nvb_includes "-I${dir}")
  endforeach()
  foreach(order IN ITEMS first late)
    add_test(NAME nvbench_include_${order}
             COMMAND "${CMAKE_CXX_COMPILER}" -std=c++17 -fsyntax-only ${krex_nvb_includes}
                     "${PROJECT_SOURCE_DIR}/tests/nvbench/include_${order}.cpp"
             COMMAND_EXPAND_LISTS)
  endforeach()
  set_tests_properties(nvbench_include_first PROPERTIES TIMEOUT 120 LABELS "unit;nvbench"
                       FAIL_REGULAR_EXPRESSION "pragma message|error")
  set_tests_properties(nvbench_include_late PROPERTIES TIMEOUT 120 LABELS "unit;nvbench"
                       PASS_REGULAR_EXPRESSION "included after nvbench/main.cuh.*include krex/nvbench.hpp first")
endif()
