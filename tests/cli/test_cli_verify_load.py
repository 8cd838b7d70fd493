"""`hpcbake verify --level 3` load checks against fake programs (tests/fakes/bin): nccl-tests'
all_reduce_perf under a fake mpirun, perftest's ib_write_bw as server and client, and numactl, put
where the plan names them under the fixture root (verify runs the tree's copy of each plan path);
the GPUs and HCAs themselves are the fake libraries' (tests/fakes). A made-up 2-GPU size carries
ND H100 v5's OS settings (its NCCL topology file) and the load thresholds."""
import json
import os
import shutil
import unittest

import yaml

from common import SRC, link_device, run_json
import test_cli_verify as base

FAKE_BIN = os.path.join(SRC, "tests", "fakes", "bin")
SIZE = """schema: 1
size: "Standard_ND{n}load_v1"
family: "hpcbake verify test size"
source: "tests/cli/test_cli_verify_load.py: a made-up size for the load checks ({n} GPUs, 2 NDR ports)"
gpu: {{vendor: nvidia, model: "H100", count: {n}, pci_ids: ["0x2330"], nvswitch_count: 4, fabric_manager: true}}
driver: {{kind: cuda, module_flavour: open}}
infiniband: {{ports: 2, rate_gbps: 400, ipoib: true, gpudirect: true}}
checks: {{gpu_count: {n}, gpu_bw_h2d_gbs: 40, ib_write_bw_gbps: 1, {load}}}
os_settings: ndv5
"""
LOAD = 'nccl_allreduce_gbs: 460.0, nccl_allreduce_message: "16G", ib_write_bw_gdr_gbps: 380'


class Load(base.VerifyBase):
    def setUp(self):
        super().setUp()
        sizes = os.path.join(self.manifests, "sizes")
        for n, load in ((2, LOAD), (1, LOAD), (3, "ib_write_bw_gdr_gbps: 380")):
            with open(os.path.join(sizes, f"nd{n}load_v1.yaml"), "w") as f:
                f.write(SIZE.format(n=n, load=load))
        # The distro's inbox rdma-core stack (its rdma_packages name perftest) instead of DOCA-OFED.
        doca = os.path.join(self.manifests, "components", "doca-ofed.yaml")
        with open(doca) as f:
            comp = yaml.safe_load(f)
        comp["variants"] = [v for v in comp["variants"] if "ubuntu-22.04" not in v["distros"]]
        with open(doca, "w") as f:
            yaml.safe_dump(comp, f)
        plan = run_json("plan", "--size", "Standard_ND2load_v1", "--distro", "ubuntu-22.04", "--profile", "ai",
                        "--json", env={"HPCBAKE_MANIFESTS": self.manifests})
        self.expect = next(s for s in plan["steps"] if s["kind"] == "verify")["detail"]["checks"]
        self.place("all_reduce_perf", self.expect["all_reduce_perf"])
        self.place("mpirun", self.expect["mpirun"])
        self.place("ib_write_bw", "/usr/bin/ib_write_bw")
        topo = self.tree(self.expect["nccl_topo_file"])
        os.makedirs(os.path.dirname(topo), exist_ok=True)
        shutil.copy(os.path.join(SRC, "manifests", "files", "nccl", "ndv5-topo.xml"), topo)
        # mlx5_ib0 is the NIC beside GPU 0001:00:00.0 in the topology; mlx5_ib1's bus id is not in
        # it, so its GPU is one on its NUMA node (1).
        self.hca("mlx5_ib0", "0101:00:00.0", 0)
        self.hca("mlx5_ib1", "0200:00:00.0", 1)

    def tree(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def place(self, fake, path):
        dst = self.tree(path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy(os.path.join(FAKE_BIN, fake), dst)

    def hca(self, dev, bus, numa):
        pci = os.path.join(self.root, "sys", "devices", "pci" + bus[:4], bus)
        os.makedirs(pci, exist_ok=True)
        with open(os.path.join(pci, "numa_node"), "w") as f:
            f.write(f"{numa}\n")
        link_device(self.tree(f"/sys/class/infiniband/{dev}/device"), pci)

    def load(self, size="Standard_ND2load_v1", scenario=None):
        env = {"PATH": FAKE_BIN + os.pathsep + os.environ.get("PATH", "")}
        env.update(scenario or {})
        r = self.verify("--json", "--profile", "ai", size=size, level="3", scenario=env)
        self.assertIn(r.returncode, (0, 6), r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        return {c["id"]: c for c in doc["checks"] if c["id"].startswith("nccl.") or "gdr_write_bw" in c["id"]}

    def test_healthy_node_passes_both_load_checks(self):
        self.assertTrue(self.expect["mpirun"].endswith("/ompi/bin/mpirun"), self.expect["mpirun"])
        c = self.load()
        self.assertEqual(sorted(c), ["ib.mlx5_ib0.gdr_write_bw", "ib.mlx5_ib1.gdr_write_bw", "nccl.all_reduce"])
        n = c["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "pass", n)
        self.assertEqual(n["level"], 3)
        self.assertAlmostEqual(n["value"], 480.5)
        self.assertEqual(n["threshold"], 460)
        self.assertEqual(n["expected"], ">= 460 GB/s at 16G, no wrong values")
        self.assertIn("mpirun, 2 ranks", n["observed"])
        self.assertIn("customTests/azure_nccl_allreduce.nhc", n["source"])
        g0, g1 = c["ib.mlx5_ib0.gdr_write_bw"], c["ib.mlx5_ib1.gdr_write_bw"]
        self.assertEqual((g0["verdict"], g1["verdict"]), ("pass", "pass"), (g0, g1))
        self.assertAlmostEqual(g0["value"], 390.25)
        self.assertEqual(g0["threshold"], 380)
        self.assertIn("GPU 0001:00:00.0 beside HCA 0101:00:00.0 in the size's PCI layout", g0["observed"])
        self.assertIn("GPU 0009:00:00.0 on the HCA's NUMA node 1", g1["observed"])
        self.assertIn("numactl", g0["observed"])

    def test_low_bus_bandwidth_fails(self):
        n = self.load(scenario={"FAKE_NCCL_BUSBW": "401.5"})["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "fail")
        self.assertAlmostEqual(n["value"], 401.5)
        self.assertIn("401.5 GB/s average bus bandwidth", n["observed"])
        self.assertIn("NVLink", n["hint"])

    def test_out_of_bounds_values_fail(self):
        n = self.load(scenario={"FAKE_NCCL_WRONG": "2"})["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "fail")
        # One size, out-of-place and in-place: 2 tests with wrong values, 2 wrong elements each.
        self.assertIn("2 out-of-bounds values, 4 wrong elements", n["observed"])
        self.assertIn("exited with 7", n["observed"])  # testNumResults: all_reduce_perf's status on errors
        self.assertIn("dcgmi diag", n["hint"])

    def test_one_hca_with_low_gdr_bandwidth_fails_alone(self):
        c = self.load(scenario={"FAKE_GDR_GBPS": "mlx5_ib1:212.5"})
        self.assertEqual(c["ib.mlx5_ib0.gdr_write_bw"]["verdict"], "pass")
        g1 = c["ib.mlx5_ib1.gdr_write_bw"]
        self.assertEqual(g1["verdict"], "fail")
        self.assertAlmostEqual(g1["value"], 212.5)
        self.assertIn("nvidia-smi topo -m", g1["hint"])

    def test_a_client_without_its_server_fails(self):
        c = self.load(scenario={"FAKE_GDR_NO_SERVER": "mlx5_ib0"})
        self.assertEqual(c["ib.mlx5_ib1.gdr_write_bw"]["verdict"], "pass")
        g0 = c["ib.mlx5_ib0.gdr_write_bw"]
        self.assertEqual(g0["verdict"], "fail")
        self.assertIsNone(g0["value"])
        self.assertIn("client exited with 1", g0["observed"])
        self.assertIn("Couldn't connect to localhost:18510", g0["observed"])
        self.assertIn("server exited with 1", g0["observed"])
        self.assertIn("peermem", g0["hint"])

    def test_missing_all_reduce_perf_skips_with_the_reason(self):
        os.remove(self.tree(self.expect["all_reduce_perf"]))
        n = self.load()["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "skip")
        self.assertIn("all_reduce_perf is not there: the plan's nccl-tests build has not run", n["observed"])

    def test_one_gpu_skips_and_a_size_without_a_figure_says_so(self):
        n = self.load(size="Standard_ND1load_v1", scenario={"FAKE_GPU_COUNT": "1"})["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "skip")
        self.assertIn("needs at least two GPUs", n["observed"])
        n = self.load(size="Standard_ND3load_v1", scenario={"FAKE_GPU_COUNT": "3"})["nccl.all_reduce"]
        self.assertEqual(n["verdict"], "skip")
        self.assertIn("no expectation published", n["observed"])

    def test_without_perftest_in_the_plan_the_binary_decides(self):
        # The shipped DOCA-OFED for ubuntu-22.04: its step names doca-ofed, not perftest, but its
        # userland may carry ib_write_bw: run where it is there, skip saying why where it is not.
        shutil.copy(os.path.join(SRC, "manifests", "components", "doca-ofed.yaml"),
                    os.path.join(self.manifests, "components", "doca-ofed.yaml"))
        c = self.load()
        gdr = {k: v["verdict"] for k, v in c.items() if k.endswith(".gdr_write_bw")}
        self.assertEqual(gdr, {"ib.mlx5_ib0.gdr_write_bw": "pass", "ib.mlx5_ib1.gdr_write_bw": "pass"})
        os.unlink(self.tree("/usr/bin/ib_write_bw"))
        c = self.load()
        self.assertEqual(c["ib.gdr_write_bw"]["verdict"], "skip")
        self.assertIn("perftest is not installed (the plan does not name it", c["ib.gdr_write_bw"]["observed"])


if __name__ == "__main__":
    unittest.main()
