#!/usr/bin/env python3
"""cuda/userspace-build: nccl-tests and nvbandwidth built here the way the image builds them.

The git and build sections of manifests/components/{nccl-tests,nvbandwidth}.yaml, run on this
machine against its CUDA toolkit (nvcc) and NCCL: the pinned sources come from the git bundles in
tests/fixtures/userspace-src (never the network), are cloned, checked out at the pinned commit and
verified with `git rev-parse HEAD` as the plan's git-source step does; then every build argv runs
in the build directory, and `creates` must exist. The checks: the binaries' dynamic section names
NCCL, the CUDA runtime (or driver) and MPI (readelf -d), libnccl.so.2 resolves to this machine's
NCCL, the embedded GPU code is for the size's GPU only (the fatbin's architectures), and the
binaries start and print their usage (no GPU is needed for that).

What differs from the image, and only in the environment, never in an argv:
- HPC-X is stood in for by Debian's Open MPI ({prefix:hpcx}/ompi is a directory of links to it);
- nvml.h comes from NVIDIA's nvidia-nvml-dev wheel (scripts/deps), as this machine's toolkit does
  not carry it (the image's cuda-toolkit does), via CPATH; libnvidia-ml.so is a link stub made
  from that header's function names (as the toolkit's stubs/ are), via LIBRARY_PATH;
- the manifest's absolute paths (prefix, git destination, build directory) are placed under a
  scratch root in the cache, not in /opt.

The build outputs are cached outside the clone, in $HPCBAKE_BUILD_CACHE/userspace-build (default
/var/cache/hpcbake-build), keyed by the digest of the sources, the resolved argv and environment,
nvcc's version, NCCL's and MPI's versions: a warm run only checks.

Exit 77 (skipped, reason printed) without nvcc, git, Open MPI's or boost's development files or the
nvml header.

Where the argv come from: steps() reads the manifest and resolves its placeholders as the planner
does (docs/userspace.md, "NCCL tests and nvbandwidth"). Once `hpcbake plan --json` shows userspace
steps, steps() can take them from there instead (same shape: git-source {url, commit, dest},
build {dir, env, commands, creates}); the rest of this file does not change.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import yaml

SKIP = 77
SOURCE_DIR = Path(os.environ.get("HPCBAKE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
FIXTURES = SOURCE_DIR / "tests" / "fixtures" / "userspace-src"
CACHE = Path(os.environ.get("HPCBAKE_BUILD_CACHE", "/var/cache/hpcbake-build")) / "userspace-build"
NVML_DEV = Path(os.environ.get("HPCBAKE_NVML_DEV_DIR", "/var/cache/hpcbake-deps/nvml-dev-13.0.87"))
NVML_INCLUDE = NVML_DEV / "nvidia" / "cu13" / "include"
CUDA_HOME = Path(os.environ.get("HPCBAKE_CUDA_HOME", "/usr/local/cuda"))  # the manifests' {cuda_home}
NCCL_HEADER = Path("/usr/local/include/nccl.h")  # this machine's NCCL (the image: libnccl-dev's /usr/include)
OPENMPI = Path("/usr/lib/x86_64-linux-gnu/openmpi")  # Debian's libopenmpi-dev
CACHE_FORMAT = "1"  # bump when what a cache entry holds changes

# The plan the test stands for: ND96isr_H100_v5 (gpu.model H100) on Ubuntu 24.04, x86_64.
# {gencode} for H100/H200 is arch=compute_90,code=sm_90 (the planner's table, docs/userspace.md).
DISTRO, ARCH = "ubuntu-24.04", "x86_64"
GENCODE = "-gencode=arch=compute_90,code=sm_90"
GPU_ARCHES = {90}  # the sm_NN the fatbins must hold, nothing else

COMPONENTS = {
    # component: (fixture bundle, binaries to check (relative to the prefix), NEEDED entries each must have)
    "nccl-tests": ("nccl-tests-v2.19.6.bundle",
                   ["build/all_reduce_perf", "build/sendrecv_perf"],
                   ["libnccl.so.2", "libcudart.so.13", "libmpi.so.40"]),
    # nvbandwidth's CMakeLists.txt links libcuda and NVML; CMake links the CUDA runtime statically
    "nvbandwidth": ("nvbandwidth-v0.8.bundle", ["nvbandwidth"],
                    ["libcuda.so.1", "libnvidia-ml.so.1", "libmpi.so.40"]),
}

# What the usage run must print: nccl-tests' usage; nvbandwidth's version (its CMakeLists.txt takes
# `git describe --tags` of the clone) and, from MPI_Init of the -DMULTINODE build, the MPI library.
USAGE = {
    "nccl-tests": ("-h", ["USAGE: all_reduce_perf"]),
    "nvbandwidth": ("--help", ["Built from Git version: v{version}", "MPI version: Open MPI", "nvbandwidth CLI:"]),
}


def skip(reason):
    print(f"cuda/userspace-build: SKIPPED: {reason}")
    sys.exit(SKIP)


def fail(message):
    print(f"cuda/userspace-build: FAILED: {message}")
    sys.exit(1)


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prerequisites():
    if not (CUDA_HOME / "bin" / "nvcc").exists():
        skip(f"{CUDA_HOME}/bin/nvcc is absent: no CUDA toolkit on this machine")
    for tool in ("git", "make", "cmake", "readelf", "g++", "mpicxx"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (scripts/deps installs it)")
    if not (OPENMPI / "include" / "mpi.h").exists():
        skip(f"{OPENMPI}/include/mpi.h is absent: Debian's libopenmpi-dev (scripts/deps)")
    if not Path("/usr/include/boost/program_options.hpp").exists():
        skip("boost/program_options.hpp is absent: libboost-program-options-dev (scripts/deps)")
    if not (NVML_INCLUDE / "nvml.h").exists():
        skip(f"{NVML_INCLUDE}/nvml.h is absent: scripts/deps unpacks nvidia-nvml-dev there")
    if not (CUDA_HOME / "lib64" / "libnccl.so.2").exists() or not NCCL_HEADER.exists():
        skip(f"{CUDA_HOME}/lib64/libnccl.so.2 or {NCCL_HEADER} is absent (no NCCL beside the toolkit)")


def machine_versions():
    """What the build outputs depend on beyond the sources and argv."""
    nvcc = run([str(CUDA_HOME / "bin" / "nvcc"), "--version"]).stdout
    nccl = re.findall(r"#define NCCL_(MAJOR|MINOR|PATCH) (\d+)", NCCL_HEADER.read_text())
    mpi = run(["dpkg-query", "-W", "-f=${Version}", "libopenmpi-dev"]).stdout
    boost = run(["dpkg-query", "-W", "-f=${Version}", "libboost-program-options-dev"]).stdout
    return {"nvcc": nvcc, "nccl": nccl, "nccl_lib": sha256_file(CUDA_HOME / "lib64" / "libnccl.so.2"),
            "openmpi": mpi, "boost": boost, "nvml_dev": NVML_DEV.name}


def pick_variant(manifest):
    for variant in manifest["variants"]:
        if DISTRO in variant["distros"] and ARCH in variant.get("arch", ["x86_64"]):
            return variant
    fail(f"{manifest['component']}: no variant for {DISTRO} {ARCH}")


def steps(component):
    """The component's git-source and build steps for the test's plan, placeholders left for root."""
    path = SOURCE_DIR / "manifests" / "components" / f"{component}.yaml"
    manifest = yaml.safe_load(path.read_text())
    variant = pick_variant(manifest)
    values = {"prefix": "{root}" + variant["prefix"], "prefix:hpcx": "{hpcx}",
              "version": variant["version"],
              "cuda_home": str(CUDA_HOME), "gencode": GENCODE}

    def resolve(text):
        out = re.sub(r"\{(prefix(?::[a-z0-9-]+)?|version|cuda_home|gencode)\}",
                     lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), text)
        left = re.findall(r"\{[a-z_:0-9-]+\}", out.replace("{root}", "").replace("{hpcx}", ""))
        if left:
            fail(f"{path.name}: placeholder {left[0]} has no value in this test")
        return out

    build = variant["build"]
    return {
        "component": component, "version": variant["version"], "prefix": "{root}" + variant["prefix"],
        "git": {"url": variant["git"]["url"], "commit": variant["git"]["commit"],
                "dest": "{root}" + variant["git"]["to"]},
        "build": {"dir": "{root}" + build["dir"], "env": [resolve(e) for e in build.get("env", [])],
                  "commands": [[resolve(a) for a in argv] for argv in build["commands"]],
                  "creates": resolve(build["creates"])},
    }


def nvml_stub(directory):
    """libnvidia-ml.so(.1): every function nvml.h declares, for linking (as CUDA's stubs/ do)."""
    directory.mkdir(parents=True, exist_ok=True)
    pre = run(["gcc", "-E", "-P", f"-I{NVML_INCLUDE}", "-"], input="#include <nvml.h>\n")
    if pre.returncode != 0:
        fail(f"preprocessing nvml.h: {pre.stderr[-2000:]}")
    names = sorted(set(re.findall(r"\b(nvml[A-Za-z0-9_]+)\s*\(", pre.stdout)))
    source = directory / "nvml_stub.c"
    source.write_text("".join(f"int {n}(void) {{ return 999; }}\n" for n in names))  # NVML_ERROR_UNKNOWN
    lib = directory / "libnvidia-ml.so.1"
    built = run(["gcc", "-shared", "-fPIC", "-o", str(lib), "-Wl,-soname,libnvidia-ml.so.1", str(source)])
    if built.returncode != 0:
        fail(f"building the NVML link stub: {built.stderr[-2000:]}")
    (directory / "libnvidia-ml.so").unlink(missing_ok=True)
    (directory / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    # the toolkit's libcuda stub under its SONAME, so that the binaries load without a driver
    (directory / "libcuda.so.1").unlink(missing_ok=True)
    (directory / "libcuda.so.1").symlink_to(CUDA_HOME / "lib64" / "stubs" / "libcuda.so")
    return directory


def hpcx_standin(directory):
    """{prefix:hpcx}/ompi as HPC-X lays it out (bin, include, lib), linking Debian's Open MPI."""
    ompi = directory / "ompi"
    ompi.mkdir(parents=True, exist_ok=True)
    for name, target in (("bin", Path("/usr/bin")), ("include", OPENMPI / "include"), ("lib", OPENMPI / "lib")):
        link = ompi / name
        if not link.is_symlink():
            link.symlink_to(target)
    return directory


def substitute(text, root, hpcx):
    return text.replace("{root}", str(root)).replace("{hpcx}", str(hpcx))


def cache_key(step, bundle, versions, test_env):
    blob = json.dumps({"format": CACHE_FORMAT, "step": step, "bundle": sha256_file(bundle),
                       "versions": versions, "test_env": test_env}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def git_source(git, bundle, dest):
    """The plan's git-source step, with the fixture bundle for the URL."""
    heads = run(["git", "bundle", "list-heads", str(bundle)]).stdout.split()
    if git["commit"] not in heads:
        fail(f"{bundle.name} does not hold the manifest's commit {git['commit']} (heads: {heads})")
    for argv in (["git", "clone", "--quiet", str(bundle), str(dest)],
                 ["git", "-C", str(dest), "checkout", "--quiet", "--detach", git["commit"]]):
        done = run(argv)
        if done.returncode != 0:
            fail(f"{' '.join(argv)}: {done.stderr[-2000:]}")
    head = run(["git", "-C", str(dest), "rev-parse", "HEAD"]).stdout.strip()
    if head != git["commit"]:
        fail(f"git rev-parse HEAD in {dest} is {head}, the manifest pins {git['commit']}")


def build(step, bundle, root, hpcx, env, log):
    git, b = step["git"], step["build"]
    git_source(git, bundle, Path(substitute(git["dest"], root, hpcx)))
    workdir = Path(substitute(b["dir"], root, hpcx))
    workdir.mkdir(parents=True, exist_ok=True)
    # As install runs a build step (src/install/userspace.cpp parallel_env): one make/cmake job per
    # CPU unless the component sets its own.
    env.setdefault("MAKEFLAGS", f"-j{os.cpu_count() or 1}")
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    for entry in b["env"]:
        name, _, value = substitute(entry, root, hpcx).partition("=")
        env[name] = value
    with open(log, "w") as out:
        for argv in b["commands"]:
            argv = [substitute(a, root, hpcx) for a in argv]
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            started = time.monotonic()
            done = subprocess.run(argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
            out.write(f"# exit {done.returncode} after {time.monotonic() - started:.1f} s\n")
            if done.returncode != 0:
                out.flush()
                tail = Path(log).read_text()[-4000:]
                fail(f"{step['component']}: {' '.join(argv)} exited {done.returncode} in {workdir}:\n{tail}")
    creates = Path(substitute(b["creates"], root, hpcx))
    if not creates.exists():
        fail(f"{step['component']}: the build ran but {creates} ('creates') does not exist")


def fatbin_arches(binary):
    """The sm_NN of the GPU code (ELF entries) in the binary's .nv_fatbin section."""
    data = Path(binary).read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = sections[shstrndx][4]
    fatbin = None
    for name, _type, _flags, _addr, offset, size in sections:
        end = data.index(b"\0", strtab_off + name)
        if data[strtab_off + name:end] == b".nv_fatbin":
            fatbin = (offset, offset + size)
    if fatbin is None:
        return set(), set()
    elf, ptx = set(), set()
    pos, end = fatbin
    while pos + 16 <= end:
        magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != 0xBA55ED50:
            pos += 8  # fatbins are 8-byte aligned in the section
            continue
        entry, stop = pos + header, pos + header + size
        while entry < stop:
            kind, _unknown, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch, = struct.unpack_from("<I", data, entry + 28)
            (elf if kind == 2 else ptx).add(arch)
            entry += entry_header + entry_size
        pos = stop
    return elf, ptx


def check(component, version, root, binaries, needed, run_env):
    for rel in binaries:
        binary = root / rel
        dynamic = run(["readelf", "-d", "-W", str(binary)]).stdout
        have = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        missing = [lib for lib in needed if lib not in have]
        if missing:
            fail(f"{binary}: readelf -d shows no NEEDED {missing} (it has {have})")
        elf, ptx = fatbin_arches(binary)
        if elf != GPU_ARCHES or ptx:
            fail(f"{binary}: GPU code for sm {sorted(elf)} and PTX {sorted(ptx)}, expected sm {sorted(GPU_ARCHES)} only ({GENCODE})")
        if "libnccl.so.2" in needed:
            ldd = run(["ldd", str(binary)], env=run_env).stdout
            resolved = re.search(r"libnccl\.so\.2 => (\S+)", ldd)
            if not resolved or Path(resolved.group(1)).resolve() != (CUDA_HOME / "lib64" / "libnccl.so.2").resolve():
                fail(f"{binary}: libnccl.so.2 does not resolve to this machine's NCCL:\n{ldd}")
        print(f"  {rel}: NEEDED {', '.join(lib for lib in have if lib in needed)}; GPU code sm_{', sm_'.join(map(str, sorted(elf)))} only")
    usage_argv, expected = USAGE[component]
    usage = run([str(root / binaries[0]), usage_argv], env=run_env, timeout=120)
    text = usage.stdout + usage.stderr
    expected = [e.format(version=version) for e in expected]
    if usage.returncode != 0 or not all(e in text for e in expected):
        fail(f"{root / binaries[0]} {usage_argv}: exit {usage.returncode}, expected {expected} in:\n{text[-3000:]}")
    print(f"  {binaries[0]} {usage_argv}: exit 0, prints {' and '.join(repr(e) for e in expected)}")


def main():
    prerequisites()
    started = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    versions = machine_versions()
    hpcx = hpcx_standin(CACHE / "hpcx-standin")
    stubs = nvml_stub(CACHE / f"stubs-{NVML_DEV.name}")
    test_env = {"CPATH": str(NVML_INCLUDE), "LIBRARY_PATH": str(stubs)}
    run_env = dict(os.environ, LD_LIBRARY_PATH=f"{stubs}:{CUDA_HOME / 'lib64'}",
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(f"cuda/userspace-build: {DISTRO} {ARCH}, {GENCODE}, nvcc "
          f"{re.search(r'release ([0-9.]+)', versions['nvcc']).group(1)}, NCCL {'.'.join(v for _, v in versions['nccl'])}, "
          f"Debian Open MPI {versions['openmpi']} for HPC-X; cache {CACHE}")
    for component, (bundle_name, binaries, needed) in COMPONENTS.items():
        bundle = FIXTURES / bundle_name
        step = steps(component)
        key = cache_key(step, bundle, versions, test_env)
        entry = CACHE / f"{component}-{key}"
        root = entry / "root"
        t0 = time.monotonic()
        with open(CACHE / f"{component}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (entry / "complete").exists():
                how = f"cache hit ({entry.name}), build skipped"
            else:
                shutil.rmtree(entry, ignore_errors=True)
                root.mkdir(parents=True)
                env = dict(os.environ, **test_env)
                build(step, bundle, root, hpcx, env, entry / "build.log")
                (entry / "complete").write_text(json.dumps(step, indent=1) + "\n")
                how = f"built in {time.monotonic() - t0:.1f} s (cache miss; log {entry / 'build.log'})"
        print(f"{component} {step['version']} @ {step['git']['commit'][:12]}: {how}")
        check(component, step["version"], Path(substitute(step["prefix"], root, hpcx)), binaries, needed, run_env)
    print(f"cuda/userspace-build: passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
