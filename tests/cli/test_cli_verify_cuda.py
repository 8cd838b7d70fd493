"""`hpcbake verify`'s CUDA load and peer-to-peer checks (src/verify/checks_cuda.cpp) against the
fake libcuda.so.1 and libnvidia-ml.so.1 (tests/fakes/README.md: FAKE_P2P_*, FAKE_THROTTLE_LOAD,
FAKE_SM_CLOCK_LOAD, FAKE_PCIE_GEN_LOAD): gpu.N.clocks_under_load and gpu.N.pcie_gen_under_load at
level 1, cuda.p2p.R-S at level 2. The made-up 2-GPU NVSwitch size Standard_ND4test_v1
(tests/fixtures/verify/sizes) gets the P2P threshold Azure's conf/nd96isr_h100_v5.conf publishes
for the H100 (check_gpu_bw 48 335), so a slow pair has something to fail against."""
import os
import unittest

from test_cli_verify import VerifyBase


class CudaVerifyBase(VerifyBase):
    def setUp(self):
        super().setUp()
        with open(os.path.join(self.manifests, "sizes", "nd4test_v1.yaml"), "a") as f:
            f.write("  gpu_bw_p2p_gbs: 335\n")  # checks: is the file's last section

    def verdicts(self, doc, prefix):
        return {c["id"]: c["verdict"] for c in doc["checks"] if c["id"].startswith(prefix)}


class PeerToPeer(CudaVerifyBase):
    def test_healthy_pairs_pass_with_bandwidth_and_latency(self):
        doc, _ = self.verify_json(expect_rc=0, level="2")
        self.assertEqual(self.verdicts(doc, "cuda.p2p"), {"cuda.p2p.0-1": "pass", "cuda.p2p.1-0": "pass"})
        c = self.checks(doc)["cuda.p2p.0-1"]
        self.assertEqual(c["level"], 2)
        self.assertAlmostEqual(c["value"], 350, delta=1)  # FAKE_P2P_GBS, timed by the fake's events
        self.assertEqual(c["threshold"], 335)
        self.assertEqual(c["expected"], ">= 335 GB/s")
        self.assertRegex(c["observed"], r"^350\.\d GB/s \(median of 10 x 16 copies of 4 MiB\); 4 B copy \d+\.\d\d us")
        self.assertIn("device_to_device_memcpy_read_ce", c["source"])
        self.assertIn("azure_gpu_bandwidth.nhc", c["source"])

    def test_one_slow_pair_fails(self):
        doc, _ = self.verify_json(level="2", scenario={"FAKE_P2P_PAIR": "1-0:120"})
        self.assertEqual(self.failed(doc), ["cuda.p2p.1-0"])
        c = self.checks(doc)["cuda.p2p.1-0"]
        self.assertAlmostEqual(c["value"], 120, delta=1)
        self.assertIn("nvidia-smi topo -m", c["hint"])
        self.assertEqual(self.checks(doc)["cuda.p2p.0-1"]["verdict"], "pass")

    def test_denied_pair_fails_on_an_nvswitch_size(self):
        doc, _ = self.verify_json(level="2", scenario={"FAKE_P2P_DENY": "0-1"})
        self.assertEqual(self.failed(doc), ["cuda.p2p.0-1"])
        self.assertIn("no peer access", self.checks(doc)["cuda.p2p.0-1"]["observed"])

    def test_denied_pair_skips_where_the_size_promises_no_peer_access(self):
        # The same size without NVSwitches and without a P2P threshold: a PCIe-only machine.
        path = os.path.join(self.manifests, "sizes", "nd4test_v1.yaml")
        with open(path) as f:
            text = f.read()
        text = text.replace("  nvswitch_count: 4\n", "").replace("  fabric_manager: true\n", "")
        with open(path, "w") as f:
            f.write(text.replace("  gpu_bw_p2p_gbs: 335\n", ""))
        doc, _ = self.verify_json(expect_rc=0, level="2", scenario={"FAKE_P2P_DENY": "0-1,1-0"})
        # Nothing published for P2P: one skip that says so, and no copies.
        self.assertEqual(self.verdicts(doc, "cuda.p2p"), {"cuda.p2p": "skip"})
        self.assertIn("no expectation published", self.checks(doc)["cuda.p2p"]["observed"])

    def test_a_single_gpu_skips_saying_why(self):
        doc, _ = self.verify_json(level="2", scenario={"FAKE_GPU_COUNT": "1"})
        c = self.checks(doc)["cuda.p2p"]
        self.assertEqual(c["verdict"], "skip")
        self.assertEqual(c["observed"], "needs at least two GPUs (CUDA sees 1)")
        self.assertNotIn("cuda.p2p.0-1", self.checks(doc))

    def test_level_1_measures_no_pairs(self):
        doc, _ = self.verify_json(expect_rc=0)
        self.assertEqual(self.verdicts(doc, "cuda.p2p"), {})


class ClocksUnderLoad(CudaVerifyBase):
    def test_healthy_clocks_and_pcie_generation_under_load(self):
        doc, _ = self.verify_json(expect_rc=0)
        for i in (0, 1):
            c = self.checks(doc)[f"gpu.{i}.clocks_under_load"]
            self.assertEqual((c["verdict"], c["level"]), ("pass", 1))
            self.assertIn("SM clock 1980 MHz of max 1980 MHz (spin kernel on 2 GPUs", c["observed"])
            self.assertIn("reasons: none (0x0)", c["observed"])
            self.assertEqual(c["value"], 1980)
            self.assertIn("azure_gpu_clock_throttling.nhc", c["source"])
            p = self.checks(doc)[f"gpu.{i}.pcie_gen_under_load"]
            self.assertEqual((p["verdict"], p["value"], p["threshold"]), ("pass", 5, 5))
        # At idle the same fake GPU reports "GPU idle" and generation 1: what was sampled is the load.
        self.assertIn("0x1", self.checks(doc)["gpu.0.throttle"]["observed"])

    def test_throttling_under_load_fails(self):
        # 0x40: HW thermal slowdown, on GPU 1 and only while the spin kernel runs.
        doc, _ = self.verify_json(scenario={"FAKE_THROTTLE_LOAD": "1:64", "FAKE_SM_CLOCK_LOAD": "1:1200"})
        self.assertEqual(self.failed(doc), ["gpu.1.clocks_under_load"])
        c = self.checks(doc)["gpu.1.clocks_under_load"]
        self.assertIn("SM clock 1200 MHz of max 1980 MHz", c["observed"])
        self.assertIn("HW thermal slowdown", c["observed"])
        self.assertIn("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i 1", c["hint"])
        self.assertEqual(self.checks(doc)["gpu.1.throttle"]["verdict"], "pass")  # idle: nothing wrong

    def test_pcie_generation_below_maximum_under_load_fails(self):
        doc, _ = self.verify_json(scenario={"FAKE_PCIE_GEN_LOAD": "0:3"})
        self.assertEqual(self.failed(doc), ["gpu.0.pcie_gen_under_load"])
        c = self.checks(doc)["gpu.0.pcie_gen_under_load"]
        self.assertEqual((c["value"], c["threshold"]), (3, 5))

    def test_spin_kernel_is_embedded_ptx_the_driver_gets(self):
        log = os.path.join(self.tmp, "ptx.txt")
        self.verify_json(expect_rc=0, scenario={"FAKE_PTX_LOG": log})
        with open(log) as f:
            ptx = f.read()
        self.assertIn(".visible .entry hpcbake_spin(", ptx)
        self.assertIn("%globaltimer", ptx)

    def test_level_0_runs_no_load(self):
        doc, _ = self.verify_json(expect_rc=0, level="0")
        self.assertFalse([c for c in doc["checks"] if "under_load" in c["id"]])


if __name__ == "__main__":
    unittest.main()
