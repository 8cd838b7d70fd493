"""`hpcbake verify`'s PCIe link, GPU/NIC topology, vGPU licence and nvidia-smi checks
(src/verify/checks_topology.cpp) against the fakes (tests/fakes: FAKE_GPU_DOMAINS, FAKE_PCIE_*,
FAKE_GRID_LICENSED, FAKE_NVSMI_RC) and a copy of the ND H100 fixture root whose sysfs gets, for each
GPU and NIC of Standard_ND96isr_H100_v5's published layout (manifests/files/nccl/ndv5-topo.xml, read
back from the plan), its numa_node and PCIe link files, and /sys/class/infiniband/mlx5_ibN links to
the NICs in the layout's order."""
import os
import shutil
import unittest

from common import link_device, run_json
from test_cli_verify import VerifyBase

ND = "Standard_ND96isr_H100_v5"
NDV5_GPUS = "1,2,3,8,9,a,b,c"  # the GPUs' PCI domains in ndv5-topo.xml, in NVML's order
NDV5 = {"FAKE_GPU_COUNT": "8", "FAKE_GPU_DOMAINS": NDV5_GPUS}


class VerifyTopology(VerifyBase):
    layout = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if VerifyTopology.layout is None and os.environ.get("HPCBAKE_FAKES"):
            plan = run_json("plan", "--size", ND, "--distro", "ubuntu-22.04", "--json")
            step = next(s for s in plan["steps"] if s["kind"] == "verify")
            VerifyTopology.layout = step["detail"]["checks"]["pci_topology"]

    def setUp(self):
        super().setUp()
        self.nics = [t["bus_id"] for t in self.layout if t["class"].startswith("0x0207")]
        for t in self.layout:
            self.write_device(t["bus_id"], t["numa"], t["link_speed"], t["link_width"])
        for i, bus in enumerate(self.nics):
            d = os.path.join(self.root, "sys", "class", "infiniband", f"mlx5_ib{i}")
            os.makedirs(d, exist_ok=True)
            link_device(os.path.join(d, "device"),
                               os.path.join(self.root, "sys", "bus", "pci", "devices", bus))

    def dev(self, bus):
        return os.path.join(self.root, "sys", "bus", "pci", "devices", bus)

    def write_device(self, bus, numa, speed, width, max_speed=None, max_width=None):
        d = self.dev(bus)
        os.makedirs(d, exist_ok=True)
        for name, value in (("numa_node", numa), ("current_link_speed", speed), ("current_link_width", width),
                            ("max_link_speed", max_speed or speed), ("max_link_width", max_width or width)):
            with open(os.path.join(d, name), "w") as f:
                f.write(f"{value}\n")

    def checks(self, scenario=None, level="0", size=ND):
        doc, _ = self.verify_json(size=size, scenario={**NDV5, **(scenario or {})}, level=level, expect_rc=None)
        return {c["id"]: c for c in doc["checks"]}

    def verify_json(self, *args, expect_rc=6, **kw):
        # The fixture is not a whole ND H100 v5 (no NVSwitch files, the fakes' two IB ports): other
        # checks fail; these tests look at their own checks only.
        import json
        r = self.verify("--json", *args, **kw)
        self.assertIn(r.returncode, (0, 6), r.stdout + r.stderr)
        return json.loads(r.stdout), r

    def test_healthy_layout_passes_and_pairs_each_gpu_with_its_hca(self):
        c = self.checks()
        for i in range(8):
            self.assertEqual(c[f"gpu.{i}.pcie"]["verdict"], "pass", c[f"gpu.{i}.pcie"])
            self.assertEqual(c[f"ib.mlx5_ib{i}.pcie"]["verdict"], "pass", c[f"ib.mlx5_ib{i}.pcie"])
        t = c["topology.gpu_hca"]
        self.assertEqual(t["verdict"], "pass", t)
        self.assertEqual((t["value"], t["threshold"]), (16, 16))
        self.assertIn("GPU 0 0001:00:00.0 <-> mlx5_ib0 0101:00:00.0", t["observed"])
        self.assertIn("GPU 7 000c:00:00.0 <-> mlx5_ib7 0108:00:00.0", t["observed"])
        self.assertIn("ndv5-topo.xml", t["source"])
        self.assertIn("azure_hw_topology_check.nhc", t["source"])
        self.assertIn("x16", c["gpu.0.pcie"]["expected"])
        self.assertNotIn("gpu.0.grid_licence", c)  # not a GRID size
        self.assertNotIn("gpu.health", c)  # level 1

    def test_gpu_at_x8_fails(self):
        c = self.checks({"FAKE_PCIE_WIDTH": "3:8"})
        g = c["gpu.3.pcie"]
        self.assertEqual(g["verdict"], "fail", g)
        self.assertEqual((g["value"], g["threshold"]), (8, 16))
        self.assertIn("0008:00:00.0", g["hint"])
        self.assertEqual(c["gpu.2.pcie"]["verdict"], "pass")

    def test_idle_generation_is_information_not_a_failure(self):
        c = self.checks({"FAKE_PCIE_GEN": "0:1"})
        g = c["gpu.0.pcie"]
        self.assertEqual(g["verdict"], "pass", g)
        self.assertIn("Gen1 now, max Gen5", g["observed"])
        self.assertIn("idle GPU lowers", g["observed"])

    def test_hca_at_16_gts_fails(self):
        self.write_device(self.nics[2], 0, "16.0 GT/s PCIe", 16, max_speed="32.0 GT/s PCIe")
        c = self.checks()
        h = c["ib.mlx5_ib2.pcie"]
        self.assertEqual(h["verdict"], "fail", h)
        self.assertIn("16.0 GT/s PCIe x16 (Gen4", h["observed"])
        self.assertIn("32.0 GT/s PCIe x16", h["expected"])
        self.assertEqual(c["ib.mlx5_ib1.pcie"]["verdict"], "pass")

    def test_hca_outside_the_layout_is_held_to_the_layouts_hca_link(self):
        # An HCA at a bus id the layout does not name (other hardware): every HCA of ndv5-topo.xml is
        # 32.0 GT/s x16, so that is what the size provides.
        self.write_device("0200:00:00.0", 0, "32.0 GT/s PCIe", 8, max_width=16)
        d = os.path.join(self.root, "sys", "class", "infiniband", "mlx5_ib9")
        os.makedirs(os.path.join(d, "ports", "1"))
        with open(os.path.join(d, "ports", "1", "link_layer"), "w") as f:
            f.write("InfiniBand\n")
        os.symlink("../../../bus/pci/devices/0200:00:00.0", os.path.join(d, "device"))
        c = self.checks()
        h = c["ib.mlx5_ib9.pcie"]
        self.assertEqual(h["verdict"], "fail", h)
        self.assertIn("the size's layout for every HCA; 0200:00:00.0 is not in it", h["expected"])
        self.assertEqual(c["ib.mlx5_ib1.pcie"]["verdict"], "pass")

    def test_gpus_outside_the_layout_are_held_to_the_layouts_gpu_link(self):
        # A real one-H200 machine (bench/gpu-health) checked as ND96isr_H200_v5: its GPU at 0000:00:06.0
        # is not in ndv5-topo.xml (topology.gpu_hca, from sysfs, fails that); the link is still held to the
        # layout's x16.
        c = self.checks({"FAKE_GPU_DOMAINS": "20,21,22,23,24,25,26,27", "FAKE_PCIE_WIDTH": "1:8"})
        g = c["gpu.0.pcie"]
        self.assertEqual(g["verdict"], "pass", g)
        self.assertIn("x16 (Gen5 32.0 GT/s PCIe, the size's layout for every GPU; 0020:00:00.0 is not in it",
                      g["expected"])
        self.assertEqual(c["gpu.1.pcie"]["verdict"], "fail", c["gpu.1.pcie"])

    def test_gpu_on_the_wrong_numa_node_fails(self):
        with open(os.path.join(self.dev("0009:00:00.0"), "numa_node"), "w") as f:
            f.write("0\n")
        t = self.checks()["topology.gpu_hca"]
        self.assertEqual(t["verdict"], "fail", t)
        self.assertIn("GPU 0009:00:00.0 on NUMA 0 (layout: 1)", t["observed"])
        self.assertEqual(t["value"], 15)
        self.assertTrue(t["hint"])

    def test_missing_hca_fails(self):
        shutil.rmtree(self.dev(self.nics[3]))
        os.unlink(os.path.join(self.root, "sys", "class", "infiniband", "mlx5_ib3", "device"))
        c = self.checks()
        t = c["topology.gpu_hca"]
        self.assertEqual(t["verdict"], "fail", t)
        self.assertIn("missing from the PCI bus: NIC 0104:00:00.0 (NUMA 0)", t["observed"])
        self.assertNotIn("ib.mlx5_ib3.pcie", c)  # no PCI function: nothing to check a link of
        self.assertNotIn("ib.mlx5_an0.pcie", c)  # Azure's Ethernet NIC is no HCA

    def test_size_without_a_layout_says_so(self):
        c = self.checks(size="Standard_ND4test_v1")
        t = c["topology.gpu_hca"]
        self.assertEqual(t["verdict"], "skip", t)
        self.assertIn("no published layout", t["observed"])
        self.assertIn("no published layout", c["gpu.0.pcie"]["expected"])
        self.assertEqual(c["gpu.0.pcie"]["verdict"], "pass")

    def test_grid_licence(self):
        size = "Standard_NC24lds_xl_RTXPRO6000BSE_v6"  # a GRID size with a pinned driver
        c = self.checks({"FAKE_GPU_COUNT": "1"}, size=size)
        g = c["gpu.0.grid_licence"]
        self.assertEqual(g["verdict"], "pass", g)
        self.assertIn("NVIDIA RTX Virtual Workstation: licensed, expires 2031-01-02", g["observed"])
        c = self.checks({"FAKE_GPU_COUNT": "1", "FAKE_GRID_LICENSED": "0:0"}, size=size)
        g = c["gpu.0.grid_licence"]
        self.assertEqual(g["verdict"], "fail", g)
        self.assertIn("unlicensed", g["observed"])
        self.assertIn("nvidia-gridd", g["hint"])
        self.assertIn("grid-licensing-user-guide", g["source"])

    def test_nvidia_smi_exit_status(self):
        c = self.checks(level="1")
        self.assertEqual(c["gpu.health"]["verdict"], "pass", c["gpu.health"])
        c = self.checks({"FAKE_NVSMI_RC": "15"}, level="1")
        h = c["gpu.health"]
        self.assertEqual(h["verdict"], "fail", h)
        self.assertIn("fallen off the bus", h["observed"])
        self.assertIn("csc_nvidia_smi.nhc", h["source"])


if __name__ == "__main__":
    unittest.main()
