"""verify against NVIDIA's own libraries: Debian's libnvidia-ml.so.1 and libcuda.so.1 535.261.03
and its nvidia-smi (tests/fixtures/nvidia-debian/fetch downloads them, verified by apt's signed
metadata, and caches them). This machine has no GPU and no nvidia module loaded, so the real
libraries load and then refuse: the test checks that every entry point verify declares resolves
in them, and that verify maps what they really answer to the right checks and hints.

The fakes (tests/fakes) stand in for a working GPU in test_cli_verify.py; here nothing is faked
but the host root verify reads /proc/modules from."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from common import BIN, FIXTURES, SRC, host, run

FETCH = os.path.join(FIXTURES, "nvidia-debian", "fetch")
# Where each library's binding code lives (its entry-point table, or the code calling require/bind),
# and the prefix of the names it looks up.
BINDINGS = {"libnvidia-ml.so.1": ("nvml_entry_points.def", "nvml"), "libcuda.so.1": ("cuda_entry_points.def", "cu"),
            "libibverbs.so.1": ("ibverbs.cpp", "ibv_")}


def declared_in_source(soname):
    """The names the C++ binding code looks up, read from the source itself: the symbol column of an
    entry-point table (HPCBAKE_NVML_ENTRY(member, api, symbol, ...)) or what it passes to require()/bind()."""
    fname, prefix = BINDINGS[soname]
    with open(os.path.join(SRC, "src", "verify", fname)) as f:
        text = f.read()
    p = re.escape(prefix)
    return set(re.findall(r'(?:require|bind)\([^;]*?"(' + p + r'\w+)"\)', text)) | \
        set(re.findall(r'_ENTRY\(\s*\w+,\s*\w+,\s*(' + p + r'\w+),', text))


def dynamic_symbols(path):
    """Defined dynamic symbols of an ELF file, read by binutils (independent of dlsym)."""
    out = subprocess.run(["readelf", "--wide", "--dyn-syms", path], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[6] != "UND":
            names.add(f[7].split("@")[0])
    return names


class RealLibraries(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN:
            raise unittest.SkipTest("HPCBAKE_BIN is not set: run through ctest")
        r = subprocess.run([FETCH], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError("could not fetch Debian's NVIDIA packages (the mirror is needed once per machine):\n"
                                 + r.stderr)
        cls.cache = r.stdout.strip().splitlines()[-1]
        cls.libdir = os.path.join(cls.cache, "root", "usr", "lib", "x86_64-linux-gnu", "nvidia", "current")
        cls.smi = os.path.join(cls.cache, "root", "usr", "lib", "nvidia", "current", "nvidia-smi")
        for so in ("libnvidia-ml.so.1", "libcuda.so.1"):
            assert os.path.exists(os.path.join(cls.libdir, so)), f"{so} is not in {cls.libdir}"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-nvidia-libs-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_every_declared_entry_point_resolves_in_the_real_libraries(self):
        r = run("verify", "--libraries", "--json", env={"LD_LIBRARY_PATH": self.libdir})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        libs = {lib["soname"]: lib for lib in json.loads(r.stdout)["libraries"]}
        self.assertEqual(set(libs), set(BINDINGS))
        missing = [f"{so}: {e['name']}" for so, lib in libs.items() for e in lib["entry_points"] if not e["found"]]
        self.assertEqual(missing, [], "entry points verify declares that the real libraries do not export")
        for so in ("libnvidia-ml.so.1", "libcuda.so.1"):
            lib = libs[so]
            # The real library, not a fake or one elsewhere on the system.
            self.assertEqual(os.path.realpath(lib["path"]), os.path.realpath(os.path.join(self.libdir, so)))
            names = {e["name"] for e in lib["entry_points"]}
            # What --libraries lists is what the binding code asks for: nothing bound elsewhere.
            self.assertEqual(names, declared_in_source(so), so)
            # And binutils agrees the file defines each one (no resolution through another library).
            self.assertEqual(sorted(names - dynamic_symbols(lib["path"])), [], so)
        # Versioned names, exactly as the 535 driver exports them.
        nvml = {e["name"] for e in libs["libnvidia-ml.so.1"]["entry_points"]}
        self.assertTrue({"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetPciInfo_v3"} <= nvml)
        cuda = {e["name"] for e in libs["libcuda.so.1"]["entry_points"]}
        self.assertTrue({"cuCtxCreate_v2", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuEventDestroy_v2"} <= cuda)

        table = run("verify", "--libraries", env={"LD_LIBRARY_PATH": self.libdir})
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertRegex(table.stdout, r"libnvidia-ml\.so\.1: \S+libnvidia-ml\.so\.1 \(24 of 24 entry points\)")
        self.assertNotIn("MISSING", table.stdout)

    def test_a_library_missing_a_required_entry_point_is_named(self):
        # A libcuda.so.1 that exports cuInit and nothing else: an "older" driver.
        c = os.path.join(self.tmp, "old.c")
        with open(c, "w") as f:
            f.write("int cuInit(unsigned flags) { (void)flags; return 0; }\n")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(self.tmp, "libcuda.so.1"), c], check=True)
        r = run("verify", "--libraries", env={"LD_LIBRARY_PATH": f"{self.tmp}:{self.libdir}"})
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"cuInit +required found")
        self.assertRegex(r.stdout, r"cuCtxCreate_v2 +required MISSING")
        # Every lookup is listed, the optional ones after a missing required one too.
        self.assertRegex(r.stdout, r"libcuda\.so\.1: \S+ \(1 of 34 entry points\)")
        self.assertRegex(r.stdout, r"cuDeviceGetPCIBusId +optional MISSING")
        self.assertIn("update the package that provides libcuda.so.1", r.stdout)
        self.assertIn("libcuda.so.1 cannot be used", r.stderr)

    def no_driver_root(self):
        """The ND H100 fixture host with no NVIDIA module loaded (as on this machine)."""
        root = os.path.join(self.tmp, "root")
        shutil.copytree(host("nd96isr_h100_v5"), root, symlinks=True)
        mods = os.path.join(root, "proc", "modules")
        with open(mods) as f:
            kept = [line for line in f if not line.startswith("nvidia")]
        with open(mods, "w") as f:
            f.writelines(kept)
        return root

    def test_verify_maps_what_the_real_libraries_answer_without_a_driver(self):
        root = self.no_driver_root()
        r = run("--root", root, "verify", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04",
                "--level", "1", "--json", env={"LD_LIBRARY_PATH": self.libdir})
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        nvml = checks["gpu.nvml"]
        self.assertEqual(nvml["verdict"], "fail")
        # nvmlInit_v2's real answer here: NVML_ERROR_DRIVER_NOT_LOADED, in NVML's own words.
        self.assertEqual(nvml["observed"], "nvmlInit_v2 failed: Driver Not Loaded (9)")
        self.assertIn("the nvidia kernel module is not loaded: `modprobe nvidia`", nvml["hint"])
        cuda = checks["cuda.init"]
        self.assertEqual(cuda["verdict"], "fail")
        # cuInit's real answer without the module: CUDA_ERROR_NO_DEVICE, named by cuGetErrorName.
        self.assertEqual(cuda["observed"], "cuInit: CUDA_ERROR_NO_DEVICE (100)")
        self.assertIn("the nvidia kernel module is not loaded", cuda["hint"])
        self.assertNotIn("CUDA_VISIBLE_DEVICES", cuda["hint"])
        # Only what is read from the PCI bus (the GPUs' model, the NVSwitches) and the kernel log (no
        # Xid in the fixture's) may pass; nothing the driver answers.
        passed = [c["id"] for c in checks.values() if c["id"].startswith(("gpu.", "cuda.")) and c["verdict"] == "pass"]
        self.assertEqual(passed, ["gpu.pci_ids", "gpu.nvswitch_count", "gpu.xid"])

    def test_no_device_with_the_module_loaded_points_at_the_gpu_instead(self):
        # Same real libcuda answer, but /proc/modules says nvidia is loaded: then the GPU is what is missing.
        root = os.path.join(self.tmp, "root")
        shutil.copytree(host("nd96isr_h100_v5"), root, symlinks=True)
        r = run("--root", root, "verify", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04",
                "--level", "1", "--json", env={"LD_LIBRARY_PATH": self.libdir})
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        cuda = {c["id"]: c for c in json.loads(r.stdout)["checks"]}["cuda.init"]
        self.assertEqual(cuda["observed"], "cuInit: CUDA_ERROR_NO_DEVICE (100)")
        self.assertIn("CUDA_VISIBLE_DEVICES", cuda["hint"])

    def test_nvidia_smi_fails_the_same_way_verify_says(self):
        # verify's hints send the user to nvidia-smi; the real one, on the same libraries, agrees:
        # its exit status is NVML's return code (9, NVML_ERROR_DRIVER_NOT_LOADED).
        env = dict(os.environ, LD_LIBRARY_PATH=self.libdir)
        r = subprocess.run([self.smi], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 9, r.stdout + r.stderr)
        self.assertIn("couldn't communicate with the NVIDIA driver", r.stdout + r.stderr)
        r = subprocess.run([self.smi, "-L"], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 9, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
