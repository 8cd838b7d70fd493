"""`hpcbake verify` against fake libnvidia-ml.so.1, libcuda.so.1 and libibverbs.so.1 (tests/fakes),
a copy of the ND H100 fixture root, and the shipped manifests plus two made-up test sizes
(tests/fixtures/verify/sizes). Each scenario is chosen through the fakes' FAKE_* variables."""
import json
import re
import os
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

from common import BIN, FIXTURES, SRC, host, run, run_json, copy_manifest_set
from kofile import write_ko

FAKES = os.environ.get("HPCBAKE_FAKES", "")
BIN_SET = bool(BIN and FAKES)
RUNNING = "6.5.0-1025-azure"
NEXT_BOOT = "6.8.0-1015-azure"
MODULES = ["nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm", "nvidia-peermem"]
TWO_NDR = "mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB;mlx5_ib1=ACTIVE/LinkUp/NDR/4X/IB;mlx5_an0=ACTIVE/LinkUp/EDR/4X/ETH"


def library_on_system(soname):
    """Whether the loader finds `soname` without LD_LIBRARY_PATH (ldconfig's cache)."""
    import ctypes
    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


class VerifyBase(unittest.TestCase):
    driver_version = None

    @classmethod
    def setUpClass(cls):
        # The driver version the manifests pin for the fixture's distro, as the plan resolves it.
        if BIN_SET and VerifyBase.driver_version is None:
            plan = run_json("plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04", "--json")
            step = next(s for s in plan["steps"] if s["kind"] == "verify")
            VerifyBase.driver_version = step["detail"]["checks"]["driver_version"]

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-verify-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.manifests = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.manifests)
        for f in os.listdir(os.path.join(FIXTURES, "verify", "sizes")):
            shutil.copy(os.path.join(FIXTURES, "verify", "sizes", f), os.path.join(self.manifests, "sizes", f))
        self.root = os.path.join(self.tmp, "root")
        shutil.copytree(host("nd96isr_h100_v5"), self.root, symlinks=True)
        with open(os.path.join(self.root, "etc", "waagent.conf"), "a") as f:
            f.write("OS.EnableRDMA=y\n")
        for i in range(2, 8):  # the test size has two InfiniBand ports, so two IPoIB interfaces
            shutil.rmtree(os.path.join(self.root, "sys", "class", "net", f"ib{i}"))
        for kernel in (RUNNING, NEXT_BOOT):
            self.install_modules(kernel)

    def install_modules(self, kernel, built_for=None, names=MODULES):
        d = os.path.join(self.root, "lib", "modules", kernel, "updates", "dkms")
        os.makedirs(d, exist_ok=True)
        for m in names:
            write_ko(os.path.join(d, m + ".ko"), m, built_for or kernel)

    def verify(self, *args, size="Standard_ND4test_v1", scenario=None, libdir=None, level="1"):
        env = {"HPCBAKE_MANIFESTS": self.manifests, "LD_LIBRARY_PATH": libdir if libdir is not None else FAKES,
               "FAKE_IB_PORTS": TWO_NDR, "FAKE_DRIVER_VERSION": self.driver_version,
               "PATH": os.path.join(SRC, "tests", "fakes", "bin") + os.pathsep + os.environ.get("PATH", "")}
        env.update(scenario or {})
        full = ["--root", self.root, "verify", "--size", size, "--level", level, "--fabric-wait", "1",
                "--gpu-bw-mib", "4", "--p2p-mib", "4", *args]
        if "--ib-iterations" not in args:
            full += ["--ib-iterations", "20"]
        return run(*full, env=env)

    def verify_json(self, *args, expect_rc=6, **kw):
        r = self.verify("--json", *args, **kw)
        self.assertEqual(r.returncode, expect_rc, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["schema"], 1)
        self.assertEqual(doc["passed"], expect_rc == 0)
        for c in doc["checks"]:
            for key in ("id", "level", "title", "expected", "observed", "verdict", "hint", "source", "value",
                        "threshold", "seconds"):
                self.assertIn(key, c)
            self.assertIn(c["verdict"], ("pass", "fail", "skip"))
            if c["verdict"] == "fail":
                self.assertTrue(c["hint"], f"{c['id']} failed without saying what to do next")
        return doc, r

    def checks(self, doc):
        return {c["id"]: c for c in doc["checks"]}

    def failed(self, doc):
        return sorted(c["id"] for c in doc["checks"] if c["verdict"] == "fail")


class Passing(VerifyBase):
    def test_every_check_passes_at_level_2(self):
        junit = os.path.join(self.tmp, "verify.xml")
        r = self.verify("--junit", junit, level="2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("FAIL", r.stdout)
        for header in ("CHECK", "EXPECTED", "OBSERVED", "VERDICT", "level 0 (inventory)", "level 1 (function)",
                       "level 2 (fabric)"):
            self.assertIn(header, r.stdout)
        self.assertRegex(r.stdout, r"gpu\.count +2 +2 \(NVML; 8 NVIDIA GPUs on the PCI bus\) +PASS")
        self.assertRegex(r.stdout, r"ib\.mlx5_ib0:1\.rate +400 Gb/s +400 Gb/s \(4X NDR\) +PASS")
        self.assertRegex(r.stdout, r"cuda\.1\.vector_add +1048576 elements correct +1048576 elements correct +PASS")
        self.assertRegex(r.stdout, r"ib\.mlx5_ib1:1\.rdma_write +>= 1 Gb/s, data intact +[0-9.]+ Gb/s over 20 MiB, "
                                   r"LID 2, data intact +PASS")
        self.assertNotIn("mlx5_an0", r.stdout, "Azure's Ethernet RDMA NIC is not an InfiniBand port")
        # The one skip: the made-up size publishes no PCI layout, and the check says so.
        self.assertRegex(r.stdout, r"level 2: \d+ passed, 0 failed, 1 skipped")
        self.assertRegex(r.stdout, r"topology\.gpu_hca +.*no published layout.* SKIP")

        tree = ET.parse(junit)
        suites = tree.getroot()
        self.assertEqual(suites.tag, "testsuites")
        self.assertEqual(suites.get("failures"), "0")
        names = [s.get("name") for s in suites.findall("testsuite")]
        self.assertEqual(names, ["hpcbake.verify.level0 (inventory)", "hpcbake.verify.level1 (function)",
                                 "hpcbake.verify.level2 (fabric)"])
        cases = suites.findall("testsuite/testcase")
        self.assertEqual(int(suites.get("tests")), len(cases))
        self.assertIn("cuda.0.vector_add", [c.get("name") for c in cases])
        self.assertFalse(suites.findall(".//failure"))

    def test_json_schema_and_every_expected_check(self):
        doc, _ = self.verify_json(expect_rc=0)
        self.assertEqual(doc["size"], "Standard_ND4test_v1")
        self.assertEqual(doc["size_id"], "nd4test_v1")
        self.assertEqual(doc["distro"], "ubuntu-22.04")
        self.assertEqual(doc["level"], 1)
        self.assertEqual(doc["kernels"], [RUNNING, NEXT_BOOT])
        self.assertEqual(doc["summary"]["fail"], 0)
        self.assertEqual(doc["summary"]["total"], len(doc["checks"]))
        ids = set(self.checks(doc))
        expected = {"gpu.nvml", "gpu.count", "gpu.pci_ids", "gpu.driver_version", "gpu.nvswitch_count", "ib.verbs",
                    "ib.port_count",
                    "ib.mlx5_ib0:1.state", "ib.mlx5_ib0:1.rate", "ib.mlx5_ib1:1.state", "ib.mlx5_ib1:1.rate",
                    f"kernel.modules.{RUNNING}", f"kernel.modules.{NEXT_BOOT}", "ib.nvidia_peermem",
                    "waagent.enable_rdma", "cuda.init", "kernel.module_signatures", "topology.gpu_hca", "gpu.health",
                    "host.cpu", "host.memory", "host.nvme_count", "ib.ipoib.count", "ib.ipoib.ib0", "ib.ipoib.ib1"}
        for g in (0, 1):
            expected |= {f"gpu.{g}.{c}" for c in ("persistence", "ecc_mode", "ecc_errors", "row_remap", "throttle",
                                                   "nvlink", "fabric", "pcie", "clocks_under_load", "pcie_gen_under_load")}
            expected |= {f"cuda.{g}.{c}" for c in ("vector_add", "bw_h2d", "bw_d2h")}
        expected |= {"gpu.xid", "ib.link_flaps"} | {f"ib.mlx5_ib{i}:1.link_flaps" for i in range(8)}  # kernel log
        self.assertEqual(ids, expected)
        c = self.checks(doc)
        self.assertEqual(c["gpu.count"]["value"], 2)
        self.assertEqual(c["gpu.count"]["source"], "sizes/nd4test_v1.yaml gpu.count")
        self.assertEqual(c["cuda.0.bw_h2d"]["threshold"], 40)
        self.assertAlmostEqual(c["cuda.0.bw_h2d"]["value"], 50, delta=0.5)
        self.assertIn("checks.gpu_bw_h2d_gbs", c["cuda.0.bw_h2d"]["source"])
        self.assertEqual(c["gpu.driver_version"]["expected"], self.driver_version)
        self.assertEqual(c["gpu.driver_version"]["source"], "components/nvidia-cuda-driver.yaml for ubuntu-22.04")

    def test_embedded_ptx_is_what_the_driver_gets(self):
        log = os.path.join(self.tmp, "ptx.txt")
        doc, _ = self.verify_json(expect_rc=0, scenario={"FAKE_PTX_LOG": log})
        with open(log) as f:
            ptx = f.read()
        self.assertIn(".version 4.0", ptx)
        self.assertIn(".target sm_50", ptx)
        self.assertIn(".visible .entry hpcbake_vadd(", ptx)
        self.assertIn("add.f32", ptx)

    def test_level_0_stops_at_inventory(self):
        doc, _ = self.verify_json(expect_rc=0, level="0")
        self.assertTrue(doc["checks"])
        self.assertEqual({c["level"] for c in doc["checks"]}, {0})


class Failing(VerifyBase):
    def test_wrong_gpu_count(self):
        doc, r = self.verify_json(scenario={"FAKE_GPU_COUNT": "1"})
        c = self.checks(doc)["gpu.count"]
        self.assertEqual(c["verdict"], "fail")
        self.assertEqual(c["value"], 1)
        self.assertEqual(c["expected"], "2")
        self.assertIn("nvidia-smi -L", c["hint"])
        self.assertEqual(self.failed(doc), ["gpu.count"])
        self.assertIn("hpcbake: error: verify: 1 of", r.stderr)

    def test_unverified_modules_fail_only_with_secure_boot_on(self):
        # The fixture's /proc/modules is a real ND H100 v5's (Secure Boot off): every NVIDIA and
        # DOCA module carries taint E. Reported, not failed, with Secure Boot off.
        doc, _ = self.verify_json(expect_rc=0)
        c = self.checks(doc)["kernel.module_signatures"]
        self.assertEqual(c["verdict"], "pass")
        self.assertIn("nvidia (POE)", c["observed"])
        self.assertIn("mlx5_ib (OE)", c["observed"])
        # With Secure Boot on (the firmware variable: 4 attribute bytes, then 1), the kernel should
        # have refused them: the check fails and says where to look.
        efivars = os.path.join(self.root, "sys", "firmware", "efi", "efivars")
        os.makedirs(efivars, exist_ok=True)
        with open(os.path.join(efivars, "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"), "wb") as f:
            f.write(b"\x06\x00\x00\x00\x01")
        doc, _ = self.verify_json()
        self.assertEqual(self.failed(doc), ["kernel.module_signatures"])
        c = self.checks(doc)["kernel.module_signatures"]
        self.assertIn("Secure Boot is enabled", c["observed"])
        self.assertIn("lockdown", c["hint"])

    def test_wrong_driver_version(self):
        doc, _ = self.verify_json(scenario={"FAKE_DRIVER_VERSION": "535.183.06"})
        self.assertEqual(self.failed(doc), ["gpu.driver_version"])
        self.assertEqual(self.checks(doc)["gpu.driver_version"]["observed"], "535.183.06")

    def test_ecc_errors(self):
        doc, r = self.verify_json(scenario={"FAKE_ECC_ERRORS": "1:3"})
        self.assertEqual(self.failed(doc), ["gpu.1.ecc_errors"])
        c = self.checks(doc)["gpu.1.ecc_errors"]
        self.assertEqual(c["observed"], "3")
        self.assertIn("nvidia-smi -q -d ECC", c["hint"])
        self.assertEqual(self.checks(doc)["gpu.0.ecc_errors"]["verdict"], "pass")

    def test_ecc_off_persistence_off_and_throttling(self):
        doc, _ = self.verify_json(scenario={"FAKE_ECC_MODE": "0:0", "FAKE_PERSISTENCE": "1:0", "FAKE_THROTTLE": "0:72",
                                            "FAKE_REMAP_PENDING": "1:1", "FAKE_NVLINK_DOWN": "0:7"})
        self.assertEqual(self.failed(doc), ["gpu.0.ecc_mode", "gpu.0.nvlink", "gpu.0.throttle", "gpu.1.persistence",
                                            "gpu.1.row_remap"])
        c = self.checks(doc)
        self.assertIn("HW slowdown, HW thermal slowdown", c["gpu.0.throttle"]["observed"])
        self.assertIn("inactive: 7", c["gpu.0.nvlink"]["observed"])
        self.assertIn("nvidia-persistenced", c["gpu.1.persistence"]["hint"])

    def test_fabric_manager_never_ready(self):
        r = self.verify("--json", scenario={"FAKE_FM": "never"})
        self.assertEqual(r.returncode, 6, r.stderr)
        doc = json.loads(r.stdout)
        c = self.checks(doc)
        self.assertEqual(self.failed(doc), ["cuda.init", "gpu.0.fabric", "gpu.1.fabric"])
        self.assertIn("in progress after", c["gpu.0.fabric"]["observed"])
        self.assertIn("CUDA_ERROR_SYSTEM_NOT_READY (802)", c["cuda.init"]["observed"])
        for cid in ("gpu.0.fabric", "cuda.init"):
            self.assertIn("systemctl status nvidia-fabricmanager", c[cid]["hint"])
        self.assertNotIn("cuda.0.vector_add", c, "no CUDA work is attempted without a ready system")
        self.assertIn("waiting for Fabric Manager", r.stderr)
        table = self.verify(scenario={"FAKE_FM": "never"})
        self.assertIn("next: nvidia-fabricmanager is not running", table.stdout)

    def test_a_gpu_of_another_model_fails_by_its_pci_device_id(self):
        # The plan promises the size's model by PCI device id (gpu_pci_ids): found missing on a
        # real H100 SXM5 (0x2330) checked as an NC H100 v5 size (H100 NVL, 0x2321), where every
        # other check passed (docs/verify.md, "On a real GPU").
        doc, _ = self.verify_json(expect_rc=0, level="0")
        c = self.checks(doc)["gpu.pci_ids"]
        self.assertEqual((c["verdict"], c["expected"]), ("pass", "H100 (0x2330)"), c)
        self.assertEqual(c["observed"], "8 of 8 NVIDIA GPUs on the PCI bus")
        with open(os.path.join(self.root, "sys/bus/pci/devices/0003:00:00.0/device"), "w") as f:
            f.write("0x2321\n")
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), ["gpu.pci_ids"])
        c = self.checks(doc)["gpu.pci_ids"]
        self.assertEqual(c["observed"], "another model: 0x2321 at 0003:00:00.0")
        self.assertIn("not the H100 this size has", c["hint"])
        self.assertEqual(c["source"], "sizes/nd4test_v1.yaml gpu.pci_ids")

    def test_a_gpu_without_a_fabric_state_is_a_skip_saying_what_nvml_returned(self):
        # A real H100 80GB HBM3 alone (no NVSwitch) answers success with the state NOT_SUPPORTED
        # (docs/verify.md, "On a real GPU"); older GPUs the error. CUDA starts as usual on both.
        for fm, said in (("unsupported", "returned Not Supported (3)"),
                         ("state_unsupported", "reports the state NOT_SUPPORTED")):
            doc, _ = self.verify_json(expect_rc=0, scenario={"FAKE_FM": fm})
            c = self.checks(doc)["gpu.0.fabric"]
            self.assertEqual(c["verdict"], "skip", c)
            self.assertIn(f"nvmlDeviceGetGpuFabricInfo {said}", c["observed"])
            self.assertNotIn("Hopper", c["observed"], "no guess at the GPU's generation")
            self.assertEqual(self.checks(doc)["cuda.0.vector_add"]["verdict"], "pass")

    def test_in_a_container_the_running_kernel_modules_are_seen_loaded(self):
        # A container sees the host's kernel and /proc/modules, not /lib/modules/<running>: as on the
        # lent H100 machine (docs/verify.md, "On a real GPU"). All loaded passes; one not loaded is a
        # skip, since its file cannot be seen from here; the next-boot kernel is checked as before.
        shutil.rmtree(os.path.join(self.root, "lib", "modules", RUNNING))
        doc, _ = self.verify_json(expect_rc=0, level="0")
        c = self.checks(doc)[f"kernel.modules.{RUNNING}"]
        self.assertEqual(c["verdict"], "pass", c)
        self.assertIn("loaded (/proc/modules): nvidia, nvidia-modeset, nvidia-uvm, nvidia-drm, nvidia-peermem", c["observed"])
        self.assertIn(f"/lib/modules/{RUNNING} is not in this file system", c["observed"])
        mods = os.path.join(self.root, "proc", "modules")
        with open(mods) as f:
            kept = [line for line in f if not line.startswith("nvidia_drm ")]
        with open(mods, "w") as f:
            f.writelines(kept)
        doc, _ = self.verify_json(expect_rc=0, level="0")
        c = self.checks(doc)[f"kernel.modules.{RUNNING}"]
        self.assertEqual(c["verdict"], "skip", c)
        self.assertIn("not loaded: nvidia-drm; loaded: nvidia, nvidia-modeset, nvidia-uvm, nvidia-peermem", c["observed"])
        self.assertIn("on the host itself", c["hint"])
        self.assertEqual(self.checks(doc)[f"kernel.modules.{NEXT_BOOT}"]["verdict"], "pass")

    def test_vector_add_mismatch(self):
        doc, _ = self.verify_json(scenario={"FAKE_VADD_CORRUPT": "1:1"})
        self.assertEqual(self.failed(doc), ["cuda.1.vector_add"])
        c = self.checks(doc)["cuda.1.vector_add"]
        self.assertRegex(c["observed"], r"^1 of 1048576 elements wrong; first at \[4321\]")
        self.assertEqual(c["value"], 1)
        self.assertEqual(self.checks(doc)["cuda.0.vector_add"]["verdict"], "pass")

    def test_bandwidth_below_threshold(self):
        doc, _ = self.verify_json(scenario={"FAKE_BW_GBS": "20"})
        self.assertEqual(self.failed(doc), ["cuda.0.bw_d2h", "cuda.0.bw_h2d", "cuda.1.bw_d2h", "cuda.1.bw_h2d"])
        c = self.checks(doc)["cuda.0.bw_h2d"]
        self.assertEqual(c["observed"], "20.0 GB/s")  # the fake's virtual clock: 4 MiB at 20 GB/s
        self.assertEqual(c["expected"], ">= 40 GB/s")

    def test_port_down(self):
        ports = "mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB;mlx5_ib1=DOWN/Polling/NDR/4X/IB"
        doc, r = self.verify_json(scenario={"FAKE_IB_PORTS": ports}, level="2")
        self.assertEqual(self.failed(doc), ["ib.mlx5_ib1:1.rdma_write", "ib.mlx5_ib1:1.state"])
        c = self.checks(doc)
        self.assertEqual(c["ib.mlx5_ib1:1.state"]["observed"], "DOWN, Polling")
        self.assertIn("ibstat mlx5_ib1", c["ib.mlx5_ib1:1.state"]["hint"])
        self.assertIn("port is DOWN, not ACTIVE", c["ib.mlx5_ib1:1.rdma_write"]["observed"])
        self.assertEqual(c["ib.mlx5_ib0:1.rdma_write"]["verdict"], "pass")

    def test_rate_100_on_a_400_size(self):
        ports = "mlx5_ib0=ACTIVE/LinkUp/EDR/4X/IB;mlx5_ib1=ACTIVE/LinkUp/NDR/4X/IB"
        doc, _ = self.verify_json(scenario={"FAKE_IB_PORTS": ports})
        self.assertEqual(self.failed(doc), ["ib.mlx5_ib0:1.rate"])
        c = self.checks(doc)["ib.mlx5_ib0:1.rate"]
        self.assertEqual(c["observed"], "100 Gb/s (4X EDR)")
        self.assertEqual(c["value"], 100)
        self.assertEqual(c["threshold"], 400)
        self.assertIn("mlxlink -d mlx5_ib0", c["hint"])

    def test_missing_port(self):
        doc, _ = self.verify_json(scenario={"FAKE_IB_PORTS": "mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB"}, level="0")
        self.assertEqual(self.failed(doc), ["ib.port_count"])

    def test_a_slow_port_stops_at_ib_seconds_and_reports_what_it_moved(self):
        # 2 ms per 1 MiB write: 2000 writes would take 4 s a port; --ib-seconds 0.3 stops after ~150.
        doc, _ = self.verify_json("--ib-iterations", "2000", "--ib-seconds", "0.3", expect_rc=0,
                                  scenario={"FAKE_IB_WRITE_US": "2000"}, level="2")
        c = self.checks(doc)["ib.mlx5_ib0:1.rdma_write"]
        m = re.match(r"([\d.]+) Gb/s over (\d+) MiB \(stopped at ([\d.]+) s\), .*data intact", c["observed"])
        self.assertIsNotNone(m, c["observed"])
        self.assertLess(int(m.group(2)), 2000)
        self.assertGreater(int(m.group(2)), 0)
        self.assertGreaterEqual(float(m.group(3)), 0.3)
        self.assertEqual(c["verdict"], "pass")  # ~4 Gb/s is above this test size's threshold

    def test_rdma_write_data_corrupted(self):
        doc, _ = self.verify_json(scenario={"FAKE_IB_CORRUPT": "1"}, level="2")
        self.assertEqual(self.failed(doc), ["ib.mlx5_ib0:1.rdma_write", "ib.mlx5_ib1:1.rdma_write"])
        self.assertIn("data CORRUPTED", self.checks(doc)["ib.mlx5_ib0:1.rdma_write"]["observed"])

    def test_modules_missing_for_the_next_boot_kernel(self):
        shutil.rmtree(os.path.join(self.root, "lib", "modules", NEXT_BOOT, "updates"))
        self.install_modules(NEXT_BOOT, names=["nvidia", "nvidia-modeset"])
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), [f"kernel.modules.{NEXT_BOOT}"])
        c = self.checks(doc)[f"kernel.modules.{NEXT_BOOT}"]
        self.assertEqual(c["observed"], "missing: nvidia-uvm, nvidia-drm, nvidia-peermem")
        self.assertIn("(next boot)", c["title"])
        self.assertIn(f"--kernel {NEXT_BOOT}", c["hint"])

    def test_modules_built_for_another_kernel(self):
        self.install_modules(NEXT_BOOT, built_for=RUNNING)
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), [f"kernel.modules.{NEXT_BOOT}"])
        self.assertIn(f"built for kernel {RUNNING}", self.checks(doc)[f"kernel.modules.{NEXT_BOOT}"]["observed"])

    def test_rdma_off_in_waagent_and_peermem_not_loaded(self):
        shutil.copy(os.path.join(host("nd96isr_h100_v5"), "etc", "waagent.conf"),
                    os.path.join(self.root, "etc", "waagent.conf"))
        mods = os.path.join(self.root, "proc", "modules")
        with open(mods) as f:
            lines = [l for l in f if not l.startswith("nvidia_peermem ")]
        with open(mods, "w") as f:
            f.writelines(lines)
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), ["ib.nvidia_peermem", "waagent.enable_rdma"])
        c = self.checks(doc)
        self.assertEqual(c["waagent.enable_rdma"]["observed"], "unset (the agent's default is off)")
        self.assertIn("systemctl restart walinuxagent", c["waagent.enable_rdma"]["hint"])
        self.assertIn("modprobe nvidia-peermem", c["ib.nvidia_peermem"]["hint"])

    def test_dkms_autoinstall_left_off_by_a_stopped_install(self):
        # The file install holds while a driver's packages go in (driver/dkms.hpp AutoinstallOff),
        # left behind by a run killed there: no kernel update would rebuild the modules.
        path = os.path.join(self.root, "etc", "dkms", "no-autoinstall")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("# hpcbake: DKMS autoinstall off while a driver's packages install\n")
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), ["dkms.autoinstall"])
        c = self.checks(doc)["dkms.autoinstall"]
        self.assertIn("/etc/dkms/no-autoinstall was left by an hpcbake install", c["observed"])
        self.assertIn("hpcbake install", c["hint"])
        # An administrator's own file is their choice: not reported.
        with open(path, "w") as f:
            f.write("# no DKMS builds on this image\n")
        doc, _ = self.verify_json(level="0", expect_rc=0)
        self.assertNotIn("dkms.autoinstall", self.checks(doc))

    def test_junit_lists_failures_with_messages(self):
        junit = os.path.join(self.tmp, "out", "verify.xml")
        os.makedirs(os.path.dirname(junit))
        r = self.verify("--junit", junit, scenario={"FAKE_GPU_COUNT": "1", "FAKE_ECC_ERRORS": "0:1"})
        self.assertEqual(r.returncode, 6)
        root = ET.parse(junit).getroot()
        self.assertEqual(root.get("failures"), "2")
        failures = {tc.get("name"): tc.find("failure") for tc in root.iter("testcase") if tc.find("failure") is not None}
        self.assertEqual(sorted(failures), ["gpu.0.ecc_errors", "gpu.count"])
        self.assertIn("GPU count: expected 2, observed 1", failures["gpu.count"].get("message"))
        self.assertIn("next: ", failures["gpu.count"].text)


class MissingLibraries(VerifyBase):
    def test_no_vendor_library_is_a_failed_check_with_the_reason(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        doc, r = self.verify_json(libdir=empty)
        c = self.checks(doc)
        self.assertEqual(c["gpu.nvml"]["verdict"], "fail")
        self.assertIn("libnvidia-ml.so.1 could not be loaded", c["gpu.nvml"]["observed"])
        self.assertIn("install the driver", c["gpu.nvml"]["hint"])
        self.assertEqual(c["cuda.init"]["verdict"], "fail")
        self.assertIn("libcuda.so.1 could not be loaded", c["cuda.init"]["observed"])
        self.assertNotIn("gpu.count", c, "nothing is claimed about GPUs without NVML")
        if library_on_system("libibverbs.so.1"):
            # rdma-core is installed here (libibverbs-dev pulls it in): the real library answers,
            # and this machine has no InfiniBand port, which must not pass either.
            self.assertTrue(c["ib.verbs"]["verdict"] == "fail" or c["ib.port_count"]["verdict"] == "fail",
                            json.dumps(doc, indent=1))
        else:
            self.assertEqual(c["ib.verbs"]["verdict"], "fail")
            self.assertIn("libibverbs.so.1 could not be loaded", c["ib.verbs"]["observed"])
        self.assertEqual(doc["summary"]["pass"] + doc["summary"]["fail"] + doc["summary"]["skip"], len(doc["checks"]))
        self.assertNotIn("pass", {c["gpu.nvml"]["verdict"], c["cuda.init"]["verdict"]})

    def test_cuda_alone_missing(self):
        if library_on_system("libcuda.so.1"):
            self.skipTest("SKIPPED: a real libcuda.so.1 is installed on this machine")
        partial = os.path.join(self.tmp, "partial")
        os.makedirs(partial)
        for lib in ("libnvidia-ml.so.1", "libibverbs.so.1"):
            shutil.copy(os.path.join(FAKES, lib), partial)
        doc, _ = self.verify_json(libdir=partial)
        self.assertEqual(self.failed(doc), ["cuda.init"])
        self.assertIn("libcuda.so.1 could not be loaded", self.checks(doc)["cuda.init"]["observed"])


class RoCE(VerifyBase):
    def test_named_ethernet_device_loops_back_through_a_grh(self):
        doc, r = self.verify_json("--ib-device", "rxe0", size="Standard_HB1test_v1", level="2", expect_rc=0,
                                  scenario={"FAKE_IB_PORTS": "mlx5_ib0=ACTIVE/LinkUp/HDR/4X/IB;rxe0=ACTIVE/LinkUp/EDR/4X/ETH"})
        c = self.checks(doc)
        self.assertEqual(c["ib.port_count"]["observed"], "1: rxe0:1")
        self.assertRegex(c["ib.rxe0:1.rdma_write"]["observed"], r"GID index 1 \(::ffff:10\.0\.0\.2\), data intact$")
        self.assertNotIn("ib.mlx5_ib0:1.state", c)

    def test_a_gid_index_without_address_fails_truthfully(self):
        doc, _ = self.verify_json("--ib-device", "rxe0", "--gid-index", "1", size="Standard_HB1test_v1", level="2",
                                  scenario={"FAKE_IB_PORTS": "rxe0=ACTIVE/LinkUp/EDR/4X/IB"})
        # An InfiniBand port has no GID at index 1 in the fake: the loopback cannot be addressed.
        self.assertEqual(self.failed(doc), ["ib.rxe0:1.rdma_write"])
        self.assertIn("GID index 1 is empty", self.checks(doc)["ib.rxe0:1.rdma_write"]["observed"])


# What nvidia-ctk cdi generate writes, cut to what verify reads (kind, device names): index names,
# UUID names and "all" (NVIDIA/nvidia-container-toolkit: `nvidia-ctk cdi list` prints
# nvidia.com/gpu=0, nvidia.com/gpu=GPU-<uuid>, nvidia.com/gpu=all).
CDI_TWO_GPUS = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: GPU-8a7c2f5e-0000-0000-0000-000000000000
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"""


class Containers(VerifyBase):
    """The container level of a machine baked with --profile containers: the runtime in Docker's and
    containerd's configs (written by `hpcbake container configure`), the CDI spec, no image to run."""

    def configure(self):
        r = run("--root", self.root, "container", "configure", "--rdma")
        self.assertEqual(r.returncode, 0, r.stderr)
        # The test size has InfiniBand: the HCAs' CDI spec too (test_cli_verify_container_rdma.py).
        from test_cli_verify_container_rdma import extend_root
        extend_root(self.root)
        self.assertEqual(run("--root", self.root, "container", "cdi", "--rdma").returncode, 0)

    def write_cdi(self, text):
        d = os.path.join(self.root, "var", "run", "cdi")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "nvidia.yaml"), "w") as f:
            f.write(text)

    def test_the_container_level_passes_against_the_fakes(self):
        self.configure()
        self.write_cdi(CDI_TWO_GPUS)
        doc, _ = self.verify_json("--profile", "containers", expect_rc=0)
        c = self.checks(doc)
        for cid in ("container.docker.runtime", "container.containerd.runtime", "container.cdi"):
            self.assertEqual(c[cid]["verdict"], "pass", c[cid])
        self.assertIn("2 GPUs, kind nvidia.com/gpu", c["container.cdi"]["observed"])
        self.assertEqual(c["container.docker.gpus"]["verdict"], "skip")
        self.assertIn("--container-image", c["container.docker.gpus"]["observed"])
        # Without the profile nothing about containers is checked.
        doc, _ = self.verify_json(expect_rc=0)
        self.assertFalse([k for k in self.checks(doc) if k.startswith("container.")])

    def test_a_missing_runtime_and_a_stale_spec_fail_clearly(self):
        doc, _ = self.verify_json("--profile", "containers")
        c = self.checks(doc)
        self.assertEqual(self.failed(doc), ["container.cdi", "container.containerd.runtime", "container.docker.runtime",
                                            "container.rdma.cdi_hcas", "container.rdma.cdi_nodes",
                                            "container.rdma.docker_memlock"])
        self.assertIn("does not exist", c["container.docker.runtime"]["observed"])
        self.assertIn("hpcbake container configure --engine docker", c["container.docker.runtime"]["hint"])
        self.assertIn("nvidia-cdi-refresh", c["container.cdi"]["hint"])
        # A spec made on a VM with another GPU count (the bake VM's) is caught.
        self.configure()
        self.write_cdi(CDI_TWO_GPUS.replace('- name: "1"', '- name: "x1"'))
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.cdi"])
        self.assertIn("1 GPUs", self.checks(doc)["container.cdi"]["observed"])


class Usage(VerifyBase):
    def test_usage_and_unsupported(self):
        self.assertEqual(self.verify(level="4").returncode, 2)
        r = self.verify(size="Standard_NoSuchSize")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("unknown VM size", r.stderr)
        r = run("--no-imds", "--root", self.root, "verify", env={"HPCBAKE_MANIFESTS": self.manifests})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("pass --size", r.stderr)
        self.assertIn("verify", run("--help").stdout)


if __name__ == "__main__":
    unittest.main()
