#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python build's backend choice (issue 38: `pip install ./python` built
the CUDA backend on a machine with the CUDA toolkit but no GPU, whose module
then failed at every krex.Tenant()). python/cmake/krexGpuDriver.cmake on
planted roots (no driver, the library only, the kernel side only, both; the
toolkit's stubs/libcuda.so is no driver), then python/CMakeLists.txt
configured on this machine: the CUDA backend only where a driver is here,
and -DKREX_WITH_CUDA=ON still builds it where none is.

usage: python_backend_test.py SOURCE_DIR CMAKE
"""
import os
import subprocess
import sys
import tempfile


def driver(cmake, module, root):
    """(present, why) from krex_gpu_driver with ROOT `root` ("" for this machine)."""
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "probe.cmake")
        with open(script, "w", encoding="utf-8") as f:
            f.write(f'include("{module}")\n'
                    f'krex_gpu_driver(ok why ROOT "{root}")\n'
                    'message("present=${ok}")\nmessage("why=${why}")\n')
        p = subprocess.run([cmake, "-P", script], capture_output=True, text=True, check=True)
    out = p.stderr
    return "present=TRUE" in out, out.split("why=", 1)[1].strip()


def plant(root, files):
    for f in files:
        path = os.path.join(root, f)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w", encoding="utf-8").close()


def configure(cmake, src, extra):
    """The backend line of configuring python/ alone (the rest may fail: no pybind11)."""
    with tempfile.TemporaryDirectory() as b:
        p = subprocess.run([cmake, "-S", os.path.join(src, "python"), "-B", b] + extra,
                           capture_output=True, text=True, check=False)
    for line in (p.stdout + p.stderr).splitlines():
        if "krex python: " in line and "backend" in line:
            return line
    raise SystemExit("python_backend_test: no backend line in:\n" + p.stdout + p.stderr)


def main(argv):
    src, cmake = argv[1], argv[2]
    module = os.path.join(src, "python", "cmake", "krexGpuDriver.cmake")
    problems = []
    cases = [
        ([], False, "no GPU driver"),
        (["usr/local/cuda/lib64/stubs/libcuda.so", "usr/lib/x86_64-linux-gnu/stubs/libcuda.so.1"],
         False, "no GPU driver"),
        (["usr/lib/x86_64-linux-gnu/libcuda.so.1"], False, "no GPU driver loaded"),
        (["dev/nvidiactl"], False, "no GPU driver library"),
        (["dev/nvidia0", "usr/lib64/libcuda.so.1"], True, "GPU driver: "),
        (["proc/driver/nvidia/version", "usr/lib/wsl/lib/libcuda.so.1"], True, "GPU driver: "),
        (["dev/dxg", "usr/lib/wsl/lib/libcuda.so.1"], True, "GPU driver: "),
    ]
    for files, want, says in cases:
        with tempfile.TemporaryDirectory() as root:
            plant(root, files)
            got, why = driver(cmake, module, root)
        if got != want or says not in why:
            problems.append(f"{files}: present={got} ({why}), expected {want} ({says})")

    here, why = driver(cmake, module, "")
    print(f"python_backend_test: this machine: driver {'present' if here else 'absent'} ({why})")
    line = configure(cmake, src, [])
    print("python_backend_test: " + line.strip())
    if "krex python: CUDA backend" in line and not here:
        problems.append("the CUDA backend was chosen where no GPU driver is: " + line)
    if "krex python: host backend" in line and here and "no CUDA toolkit" not in line:
        problems.append("the host backend was chosen where a driver and a toolkit are: " + line)
    if not here and "a CUDA toolkit, but no GPU driver" in line:
        if "-DKREX_WITH_CUDA=ON" not in line:
            problems.append("the host choice does not say how to get CUDA: " + line)
        # Told otherwise, it builds CUDA all the same (an image built where it does not run).
        forced = configure(cmake, src, ["-DKREX_WITH_CUDA=ON"])
        print("python_backend_test: -DKREX_WITH_CUDA=ON: " + forced.strip())
        if "CUDA backend (KREX_WITH_CUDA set" not in forced:
            problems.append("-DKREX_WITH_CUDA=ON did not build the CUDA backend: " + forced)
    for p in problems:
        print("python_backend_test: FAIL: " + p)
    print("python_backend_test: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
