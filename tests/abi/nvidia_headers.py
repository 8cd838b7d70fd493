#!/usr/bin/env python3
"""abi/nvidia-headers: verify's hand-declared NVML and CUDA driver ABI against NVIDIA's own headers.

src/verify/nvml.hpp and cuda.hpp declare the types, constants and entry points verify uses, so
that hpcbake builds without any NVIDIA header (verify dlopen's the libraries and binds the entry
points by name, from src/verify/nvml_entry_points.def and cuda_entry_points.def). This test
compiles tests/abi/nvidia_abi.cpp and nvidia_names.cpp against NVIDIA's nvml.h and cuda.h, with
the same C++ compiler as the build: every entry point, struct, constant and stand-in type is a
static_assert there, so a declaration that differs from NVIDIA's does not compile and the test
fails with the compiler's message naming it. Then it runs the program, which checks that every
declaration of nvml.hpp and cuda.hpp is in its tables and prints a note for each entry point that
binds an older version than the header maps the name to; and checks that the CUDA toolkit's link
stub of the driver library (lib64/stubs/libcuda.so) exports every CUDA symbol verify binds.

Where the headers come from (the same as cuda/userspace-build):
- nvml.h: NVIDIA's nvidia-nvml-dev wheel at CUDA 13.0, unpacked by scripts/deps into
  $HPCBAKE_NVML_DEV_DIR (default /var/cache/hpcbake-deps/nvml-dev-13.0.87), nvidia/cu13/include;
- cuda.h: the CUDA toolkit's include directory as nvcc reports it (`nvcc --dryrun`, INCLUDES);
  nvcc from $HPCBAKE_CUDA_HOME/bin, else PATH, else /usr/local/cuda/bin.

Exit 77 (skipped, reason printed) without either header. The compiler: $HPCBAKE_CXX (ctest passes
CMake's, except in the static build whose compiler links only with packaging/static's glibc shims),
else c++.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
HERE = Path(__file__).resolve().parent
SOURCE_DIR = Path(os.environ.get("HPCBAKE_SOURCE_DIR", HERE.parents[1]))
NVML_DEV = Path(os.environ.get("HPCBAKE_NVML_DEV_DIR", "/var/cache/hpcbake-deps/nvml-dev-13.0.87"))
NVML_INCLUDE = NVML_DEV / "nvidia" / "cu13" / "include"
SOURCES = [HERE / "nvidia_abi.cpp", HERE / "nvidia_names.cpp"]


def skip(reason):
    print(f"abi/nvidia-headers: SKIPPED: {reason}")
    sys.exit(SKIP)


def fail(message):
    print(f"abi/nvidia-headers: FAILED: {message}")
    sys.exit(1)


def find_nvcc():
    home = os.environ.get("HPCBAKE_CUDA_HOME")
    candidates = [Path(home) / "bin" / "nvcc"] if home else []
    if shutil.which("nvcc"):
        candidates.append(Path(shutil.which("nvcc")))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def cuda_include(nvcc):
    """The directory holding cuda.h, as nvcc itself passes it to the host compiler."""
    r = subprocess.run([str(nvcc), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                       capture_output=True, text=True, check=False)
    dirs = []
    for m in re.finditer(r'INCLUDES="([^"]*)"', r.stdout + r.stderr):
        dirs += [arg[2:] for arg in shlex.split(m.group(1)) if arg.startswith("-I")]
    dirs.append(str(nvcc.parent.parent / "include"))  # the toolkit's layout, if nvcc says nothing
    return next((Path(d).resolve() for d in dirs if (Path(d) / "cuda.h").is_file()), None)


def exported(library):
    out = subprocess.run(["readelf", "--wide", "--dyn-syms", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return {f[7].split("@")[0] for f in map(str.split, out.splitlines())
            if len(f) >= 8 and f[0].endswith(":") and f[6] != "UND"}


def bound_symbols(table, macro, prefix):
    text = (SOURCE_DIR / "src" / "verify" / table).read_text()
    return re.findall(macro + r"\(\s*\w+,\s*\w+,\s*(" + prefix + r"\w+),", text)


def main():
    if not (NVML_INCLUDE / "nvml.h").is_file():
        skip(f"{NVML_INCLUDE}/nvml.h is absent: scripts/deps unpacks NVIDIA's nvidia-nvml-dev there "
             "(set HPCBAKE_NVML_DEV_DIR for another place)")
    nvcc = find_nvcc()
    if nvcc is None:
        skip("no nvcc (HPCBAKE_CUDA_HOME/bin, PATH, /usr/local/cuda/bin): no CUDA toolkit, so no cuda.h")
    include = cuda_include(nvcc)
    if include is None:
        skip(f"{nvcc} reports no include directory holding cuda.h")
    cxx = shlex.split(os.environ.get("HPCBAKE_CXX") or "c++")
    work = Path(tempfile.mkdtemp(prefix="hpcbake-abi-"))
    try:
        exe = work / "nvidia_abi"
        argv = cxx + ["-std=c++23", "-Wall", "-Wextra", "-Werror", "-I", str(SOURCE_DIR / "src"),
                      "-isystem", str(NVML_INCLUDE), "-isystem", str(include)] + [str(s) for s in SOURCES] + \
            ["-o", str(exe)]
        start = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        compiled = time.monotonic() - start
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            fail(f"{shlex.join(argv)} failed: where a static_assert above names a declaration, src/verify's "
                 "differs from NVIDIA's headers")
        start = time.monotonic()
        r = subprocess.run([str(exe), str(SOURCE_DIR)], capture_output=True, text=True, check=False)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0:
            fail("see above")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ran = time.monotonic() - start

    # The symbols cuda.h no longer maps to (the notes above) must still be exported: the toolkit's
    # link stub of libcuda.so lists what the driver of its release exports.
    stub = nvcc.parent.parent / "lib64" / "stubs" / "libcuda.so"
    if stub.is_file():
        missing = sorted(set(bound_symbols("cuda_entry_points.def", "HPCBAKE_CUDA_ENTRY", "cu")) - exported(stub))
        if missing:
            fail(f"{stub.resolve()} does not export {', '.join(missing)}: the CUDA driver of this toolkit's release "
                 "no longer has them; bind the version cuda.h maps the name to")
        print(f"abi/nvidia-headers: {stub.resolve()} exports every CUDA symbol verify binds")
    else:
        print(f"abi/nvidia-headers: {stub} is absent: the CUDA symbols' presence in the driver library is not checked")
    print(f"abi/nvidia-headers: nvml.h from {NVML_INCLUDE}, cuda.h from {include}; "
          f"compiled in {compiled:.1f} s ({cxx[0]}), ran in {ran:.2f} s")


if __name__ == "__main__":
    main()
