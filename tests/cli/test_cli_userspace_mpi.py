"""The MPI stacks and NCCL (manifests/components/hpcx, openmpi, mvapich, intel-mpi, nccl, pmix)
in the plans of the `hpc` and `ai` profiles, and `hpcbake sizes` saying which profiles a size
supports. The pins are Azure/azhpc-images@8e9d055fb9e1f7385da734969793861c447958a1
versions.json's; the expected values below are read from the manifests, not repeated here."""
import json
import os
import shutil
import tempfile
import unittest

from common import SRC, run, copy_manifest_set

HPCX_2251_U2204 = "hpcx-v2.25.1-gcc-doca_ofed-ubuntu22.04-cuda13-x86_64"
HPCX_2251_U2404 = "hpcx-v2.25.1-gcc-doca_ofed-ubuntu24.04-cuda13-x86_64"
HPCX_2251_EL9 = "hpcx-v2.25.1-gcc-doca_ofed-redhat9-cuda13-x86_64"
NCCL_COMMIT = "1933fdd6360a8bfccaa0166bd71bce363d32e5b6"  # NVIDIA/nccl tag v2.30.4-1


def plan(size, distro, profile, manifests=None):
    args = ["plan", "--size", size, "--distro", distro, "--profile", profile, "--json"]
    if manifests:
        args = ["--manifests", manifests] + args
    return run(*args, timeout=120)


def steps_by_id(doc):
    return {s["id"]: s for s in doc["steps"]}


class DoneWhen(unittest.TestCase):
    """Issue 42's five pairs: `plan --profile ai` for ND96isr_H100_v5 on Ubuntu 22.04/24.04 and
    AlmaLinux 9, `plan --profile hpc` for HB176rs_v4 and HX176rs. Each resolves with every artifact
    pinned by SHA-256 and every source by its commit, or is refused naming the published reason."""

    def assert_pinned(self, doc):
        for s in doc["steps"]:
            if s["kind"] == "artifact":
                self.assertRegex(s["detail"]["sha256"], r"^[0-9a-f]{64}$", s["id"])
            if s["kind"] == "git-source":
                self.assertRegex(s["detail"]["commit"], r"^[0-9a-f]{40}$", s["id"])

    def test_ai_nd96isr_h100_v5_ubuntu_2204(self):
        r = plan("Standard_ND96isr_H100_v5", "ubuntu-22.04", "ai")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assert_pinned(doc)
        st = steps_by_id(doc)
        # HPC-X: the verified tarball unpacked into /opt/<its name>, the module loading its own.
        self.assertEqual(st["unpack:hpcx"]["detail"]["dest"], "/opt/" + HPCX_2251_U2204)
        self.assertEqual(st["artifact:" + HPCX_2251_U2204 + ".tbz"]["detail"]["sha256"],
                         "f64228e4d54c6fc83d7ea9ad7048bad1545a58388c9baad9f335d16c881f5d9d")
        mod = st["config:module-hpcx"]["detail"]
        self.assertEqual(mod["path"], "/usr/share/modules/modulefiles/mpi/hpcx")
        self.assertIn("module load /opt/%s/modulefiles/hpcx\n" % HPCX_2251_U2204, mod["content"])
        # NCCL: no 2.30.4 in the CUDA repository's ubuntu2204 directory is shown by any public
        # source, so it is built from NVIDIA's source at the tag's commit, as Azure builds it.
        self.assertEqual(st["git-source:nccl"]["detail"]["commit"], NCCL_COMMIT)
        build = st["build:nccl"]["detail"]
        self.assertIn(["make", "src.build", "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"], build["commands"])
        self.assertIn(["apt-mark", "hold", "libnccl2", "libnccl-dev"], build["commands"])
        self.assertIn("packages:nvidia-cuda-toolkit", _closure(doc, "build:nccl"))

    def test_ai_nd96isr_h100_v5_ubuntu_2404(self):
        r = plan("Standard_ND96isr_H100_v5", "ubuntu-24.04", "ai")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assert_pinned(doc)
        st = steps_by_id(doc)
        self.assertEqual(st["unpack:hpcx"]["detail"]["dest"], "/opt/" + HPCX_2251_U2404)
        nccl = st["packages:nccl"]["detail"]
        self.assertEqual(nccl["repository"], "nvidia-cuda")
        self.assertEqual(nccl["packages"], ["libnccl2=2.30.4-1+cuda13.2", "libnccl-dev=2.30.4-1+cuda13.2"])
        self.assertTrue(nccl["hold"])
        self.assertNotIn("build:nccl", st)

    def test_ai_nd96isr_h100_v5_almalinux_9(self):
        r = plan("Standard_ND96isr_H100_v5", "almalinux-9", "ai")
        # The profile's container toolkit comes from NVIDIA's rpm repository, trusted through its
        # signed repomd.xml (signatures: metadata); the MPI and NCCL parts plan beside it, all pinned.
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assert_pinned(doc)
        st = steps_by_id(doc)
        self.assertEqual(st["repository:nvidia-container-toolkit"]["detail"]["trust"], "metadata")
        self.assertEqual(st["unpack:hpcx"]["detail"]["dest"], "/opt/" + HPCX_2251_EL9)
        self.assertEqual(st["config:module-hpcx"]["detail"]["path"], "/usr/share/Modules/modulefiles/mpi/hpcx")
        self.assertIn(["dnf", "versionlock", "add", "libnccl", "libnccl-devel", "libnccl-static"],
                      st["build:nccl"]["detail"]["commands"])

    def check_hpc(self, size, distro, hpcx):
        r = plan(size, distro, "hpc")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assert_pinned(doc)
        st = steps_by_id(doc)
        self.assertEqual(st["unpack:hpcx"]["detail"]["dest"], "/opt/" + hpcx)
        # Open MPI is built against HPC-X's UCX and HCOLL, after HPC-X is in place.
        cfg = st["build:openmpi"]["detail"]["commands"][0]
        self.assertIn("--with-ucx=/opt/%s/ucx" % hpcx, cfg)
        self.assertIn("--with-hcoll=/opt/%s/hcoll" % hpcx, cfg)
        self.assertIn("--prefix=/opt/openmpi-5.0.10", cfg)
        self.assertIn("unpack:hpcx", _closure(doc, "build:openmpi"))
        self.assertEqual(st["build:openmpi"]["detail"]["creates"], "/opt/openmpi-5.0.10/bin/mpirun")
        return doc, st

    def test_hpc_hb176rs_v4_ubuntu_2404(self):
        doc, st = self.check_hpc("Standard_HB176rs_v4", "ubuntu-24.04", HPCX_2251_U2404)
        # MVAPICH 4.1 (versions.json mvapich.ubuntu24.04.x86_64) with gfortran's Ubuntu flag.
        self.assertIn("FFLAGS=-fallow-argument-mismatch", st["build:mvapich"]["detail"]["commands"][0])
        self.assertEqual(st["build:mvapich"]["detail"]["creates"], "/opt/mvapich-4.1/bin/mpirun")
        self.assertEqual(st["packages:pmix"]["detail"]["packages"], ["pmix=4.2.9-2"])
        self.assertFalse(any(s["id"].endswith(":nccl") for s in doc["steps"]))  # no GPU

    def test_hpc_hx176rs_almalinux_9(self):
        doc, st = self.check_hpc("Standard_HX176rs", "almalinux-9", HPCX_2251_EL9)
        self.assertNotIn("FFLAGS=-fallow-argument-mismatch", st["build:mvapich"]["detail"]["commands"][0])
        self.assertEqual(st["packages:pmix"]["detail"]["packages"], ["pmix=4.2.9-2.el9"])

    def test_hpc_on_debian_12_is_debians_open_mpi(self):
        r = plan("Standard_HB176rs_v4", "debian-12", "hpc")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        st = steps_by_id(doc)
        self.assertEqual(st["packages:openmpi"]["detail"]["packages"],
                         ["openmpi-bin=4.1.4-3+b1", "libopenmpi-dev=4.1.4-3+b1", "libucx0=1.13.1-1", "ucx-utils=1.13.1-1"])
        self.assertNotIn("unpack:hpcx", st)
        self.assertTrue(any("hpcx is refused for debian-12" in n for n in doc["notes"]), doc["notes"])


def _closure(doc, step_id):
    """Every step `step_id` waits for, directly or not."""
    after = {s["id"]: s["after"] for s in doc["steps"]}
    seen, todo = set(), list(after[step_id])
    while todo:
        a = todo.pop()
        if a not in seen:
            seen.add(a)
            todo.extend(after.get(a, []))
    return seen


class SizesProfiles(unittest.TestCase):
    """`hpcbake sizes` says which profiles each size supports (text and --json)."""

    def sizes(self, *args, manifests=None):
        pre = ["--manifests", manifests] if manifests else []
        r = run(*pre, "sizes", "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {s["size"]: s["profiles"] for s in json.loads(r.stdout)["sizes"]}

    def test_json_per_size(self):
        p = self.sizes()
        hb = p["Standard_HB176rs_v4"]
        self.assertTrue(hb["hpc"]["supported"])
        self.assertIn("ubuntu-24.04", hb["hpc"]["distros"])
        self.assertIn("debian-12", hb["hpc"]["distros"])  # Debian's own Open MPI
        self.assertFalse(hb["ai"]["supported"])
        self.assertIn("needs an NVIDIA GPU", hb["ai"]["reason"])
        nd = p["Standard_ND96isr_H100_v5"]
        self.assertTrue(nd["ai"]["supported"])
        self.assertTrue(nd["hpc"]["supported"])
        # The container toolkit comes from NVIDIA's rpm repository on EL (signatures: metadata).
        self.assertIn("almalinux-9", nd["ai"]["distros"])
        # A GPU size without InfiniBand: ai (HPC-X skipped, as the plan skips it), not hpc.
        nc = p["Standard_NC24ads_A100_v4"]
        self.assertTrue(nc["ai"]["supported"])
        self.assertFalse(nc["hpc"]["supported"])
        self.assertIn("openmpi is not for this size", nc["hpc"]["reason"])
        for profiles in p.values():
            self.assertTrue(profiles["minimal"]["supported"])

    def test_text_column(self):
        r = run("sizes", "HB176rs_v4")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].rstrip().endswith("PROFILES"), lines[0])
        row = [l for l in lines if l.startswith("Standard_HB176rs_v4 ")][0]
        self.assertIn("hpc", row.split()[-1].split(","))
        self.assertNotIn("ai", row.split()[-1].split(","))

    def test_a_refused_component_takes_the_profile_away(self):
        tmp = tempfile.mkdtemp(prefix="hpcbake-mpi-")
        try:
            d = os.path.join(tmp, "manifests")
            copy_manifest_set(d)
            # Every Open MPI variant refused: hpc is supported nowhere, and says why.
            p = os.path.join(d, "components", "openmpi.yaml")
            with open(p) as f:
                text = f.read()
            head, _, _ = text.partition("variants:\n")
            with open(p, "w") as f:
                f.write(head + 'variants:\n  - distros: ["ubuntu-22.04"]\n    version: "5.0.10"\n'
                        '    refused: "no published checksum (test)"\n')
            hb = self.sizes("HB176rs_v4", manifests=d)["Standard_HB176rs_v4"]
            self.assertFalse(hb["hpc"]["supported"])
            self.assertEqual(hb["hpc"]["distros"], [])
            self.assertIn("openmpi is refused for ubuntu-22.04: no published checksum (test)", hb["hpc"]["reason"])
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
