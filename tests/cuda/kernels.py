#!/usr/bin/env python3
"""cuda/kernels: every GPU kernel hpcbake verify launches, checked by NVIDIA's own compilers.

The PTX the binary embeds (src/verify/kernels.cpp, written out by hpcbake_dump_kernels) is
assembled by the CUDA toolkit's ptxas for sm_75 (Turing, CUDA 13's oldest), sm_90 (H100) and
sm_100 (B200): a PTX the driver's JIT would refuse fails here, not on a customer's GPU. Each
kernel's CUDA C++ source (src/verify/kernels/<name>.cu) is compiled by nvcc -ptx, so source and
PTX keep declaring the same entry with the same parameters.

Why the embedded PTX stays hand-written: it is PTX ISA 4.0 for .target sm_50 so that the driver
JIT-compiles it for every GPU hpcbake supports, the M60 (sm_52, the NV-series sizes) included.
CUDA 13's nvcc cannot emit that any more (its oldest virtual architecture is compute_75), and
ptxas 13.0 cannot assemble *for* sm_50 either (--gpu-name sm_50 is refused); PTX written for
sm_50 still assembles for every newer target, which is what is checked here.

Exit 77 (skipped, reason printed) without ptxas or nvcc (/usr/local/cuda/bin, $CUDA_HOME/bin or
PATH).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("HPCBAKE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
KERNELS = os.path.join(SOURCE, "src", "verify", "kernels")
TARGETS = ["sm_75", "sm_90", "sm_100"]


def tool(name):
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        p = os.path.join(d, "bin", name) if d else ""
        if p and os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def params(ptx, entry):
    """The parameter types of `.entry entry(...)`: ['.u64', '.u64', ...]."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        return None
    return re.findall(r"\.param\s+(\.\w+)", m.group(1))


def main():
    dump = sys.argv[1]
    ptxas, nvcc = tool("ptxas"), tool("nvcc")
    if not ptxas or not nvcc:
        print(f"SKIP: {'ptxas' if not ptxas else 'nvcc'} not found (/usr/local/cuda/bin, $CUDA_HOME/bin, PATH): "
              "install the CUDA toolkit (scripts/deps)")
        return 77
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"ptxas: {ptxas} ({version})")
    failures = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([dump, tmp], capture_output=True, text=True, check=True).stdout
        kernels = [line.split() for line in out.splitlines()]
        sources = sorted(f[:-3] for f in os.listdir(KERNELS) if f.endswith(".cu"))
        if sorted(k for k, _ in kernels) != sources:
            failures.append(f"embedded kernels {sorted(k for k, _ in kernels)} != sources in {KERNELS}: {sources}")
        for name, entry in kernels:
            ptx_path = os.path.join(tmp, name + ".ptx")
            ptx = open(ptx_path).read()
            for want in (".version 4.0", ".target sm_50"):
                if want not in ptx:
                    failures.append(f"{name}: the embedded PTX lost '{want}' (the M60 needs sm_50 PTX)")
            for target in TARGETS:
                r = subprocess.run([ptxas, "--gpu-name", target, ptx_path, "-o", os.path.join(tmp, f"{name}.{target}")],
                                   capture_output=True, text=True)
                status = "ok" if r.returncode == 0 else "FAILED"
                print(f"ptxas --gpu-name {target} {name}.ptx: {status}")
                if r.returncode != 0:
                    failures.append(f"ptxas --gpu-name {target} {name}.ptx: {r.stderr.strip()}")
            cu = os.path.join(KERNELS, name + ".cu")
            if not os.path.exists(cu):
                continue
            nv_ptx = os.path.join(tmp, name + ".nvcc.ptx")
            r = subprocess.run([nvcc, "-ptx", "-arch=compute_75", cu, "-o", nv_ptx], capture_output=True, text=True)
            print(f"nvcc -ptx -arch=compute_75 {name}.cu: {'ok' if r.returncode == 0 else 'FAILED'}")
            if r.returncode != 0:
                failures.append(f"nvcc -ptx {name}.cu: {r.stderr.strip()}")
                continue
            # The same entry with the same parameter types (pointers are .u64 in both).
            ours, theirs = params(ptx, entry), params(open(nv_ptx).read(), entry)
            if ours is None or ours != theirs:
                failures.append(f"{name}: .entry {entry} parameters differ: embedded {ours}, nvcc {theirs}")
    print(f"{len(kernels)} kernels, {time.monotonic() - start:.1f} s")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
