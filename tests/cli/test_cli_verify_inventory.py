"""`hpcbake verify`'s host inventory (level 0) on a copy of the ND H100 v5 fixture root: CPUs
(check_hw_cpuinfo 2 96 96), memory (check_hw_physmem 1915071MB 1915071MB 5%), NVMe
(check_nvme_count 8) and the eight IPoIB interfaces (check_hw_eth ib0 .. ib7), the figures of
Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a conf/nd96isr_h100_v5.conf
as sizes/nd96isr_h100_v5.yaml carries them. Each is broken in the copy the way a bad node is."""
import json
import os
import re
import shutil
import unittest

import test_cli_verify as base
from common import host

ND = "Standard_ND96isr_H100_v5"
EIGHT_NDR = ";".join(f"mlx5_ib{i}=ACTIVE/LinkUp/NDR/4X/IB" for i in range(8))
INVENTORY = ["host.cpu", "host.memory", "host.nvme_count", "ib.ipoib.count"] + [f"ib.ipoib.ib{i}" for i in range(8)]


class Inventory(base.VerifyBase):
    def setUp(self):
        super().setUp()
        # VerifyBase keeps two IPoIB interfaces for its two-port test size; this size has eight.
        shutil.copytree(os.path.join(host("nd96isr_h100_v5"), "sys", "class", "net"),
                        os.path.join(self.root, "sys", "class", "net"), dirs_exist_ok=True)

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def edit(self, rel, fn):
        with open(self.path(rel)) as f:
            text = f.read()
        with open(self.path(rel), "w") as f:
            f.write(fn(text))

    def inventory(self, size=ND):
        doc, _ = self.verify_json(size=size, level="0", expect_rc=None,
                                  scenario={"FAKE_GPU_COUNT": "8", "FAKE_IB_PORTS": EIGHT_NDR})
        return self.checks(doc)

    def verify_json(self, *args, expect_rc=6, **kw):
        if expect_rc is not None:
            return super().verify_json(*args, expect_rc=expect_rc, **kw)
        r = self.verify("--json", *args, **kw)
        self.assertIn(r.returncode, (0, 6), r.stdout + r.stderr)
        return json.loads(r.stdout), r

    def failed_of(self, checks):
        return sorted(i for i in INVENTORY if i in checks and checks[i]["verdict"] == "fail")

    def test_healthy_node_passes_every_inventory_check(self):
        c = self.inventory()
        for i in INVENTORY:
            self.assertEqual(c[i]["verdict"], "pass", c[i])
            self.assertEqual(c[i]["level"], 0)
        self.assertEqual(c["host.cpu"]["expected"], "2 sockets, 96 cores, 96 threads")
        self.assertTrue(c["host.cpu"]["observed"].startswith("2 sockets, 96 cores, 96 threads"), c["host.cpu"])
        self.assertIn("96 logical CPUs", c["host.cpu"]["observed"])
        self.assertIn("sizes/nd96isr_h100_v5.yaml cpu.sockets", c["host.cpu"]["source"])
        self.assertIn("mej/nhc@9c4a38c0c9f48f92005c9120ca88145c33841dac scripts/lbnl_hw.nhc", c["host.cpu"]["source"])
        # 1915071MB is 1915071 x 1024 kB for NHC.
        self.assertEqual(c["host.memory"]["threshold"], 1915071 * 1024)
        self.assertEqual(c["host.memory"]["value"], 1959874560)
        self.assertEqual(c["host.nvme_count"]["observed"],
                         "8: " + ", ".join(f"nvme{i}n1" for i in range(8)))
        self.assertIn("customTests/azure_nvme_count.nhc", c["host.nvme_count"]["source"])
        self.assertEqual(c["ib.ipoib.count"]["observed"], "8: " + ", ".join(f"ib{i}" for i in range(8)))
        self.assertIn("conf/nd96isr_h100_v5.conf", c["ib.ipoib.count"]["source"])
        self.assertEqual(c["ib.ipoib.ib0"]["observed"], "operstate up; 172.16.1.12/16, fe80::15:5dff:fe00:10/64")
        self.assertEqual(c["ib.ipoib.ib5"]["observed"], "operstate up; fe80::15:5dff:fe00:510/64")

    def test_seven_nvme_devices(self):
        os.remove(self.path("dev", "nvme7n1"))
        c = self.inventory()
        self.assertEqual(self.failed_of(c), ["host.nvme_count"])
        self.assertEqual(c["host.nvme_count"]["value"], 7)
        self.assertEqual(c["host.nvme_count"]["threshold"], 8)
        self.assertIn("ls /dev/nvme*", c["host.nvme_count"]["hint"])

    def test_memory_ten_percent_low(self):
        low = 1915071 * 1024 * 9 // 10
        self.edit("proc/meminfo", lambda t: re.sub(r"MemTotal: +\d+ kB", f"MemTotal:       {low} kB", t))
        c = self.inventory()
        self.assertEqual(self.failed_of(c), ["host.memory"])
        self.assertIn(f"MemTotal {low} kB (-10% from the size's figure", c["host.memory"]["observed"])
        self.assertIn("MemTotal", c["host.memory"]["hint"])

    def test_one_socket_missing(self):
        def first_socket(text):
            blocks = [b for b in text.split("\n\n") if b.strip()]
            return "\n\n".join(b for b in blocks if "physical id\t: 0" in b) + "\n\n"
        self.edit("proc/cpuinfo", first_socket)
        c = self.inventory()
        self.assertEqual(self.failed_of(c), ["host.cpu"])
        self.assertIn("wrong: sockets 1 (expected 2), cores 48 (expected 96), threads 48 (expected 96)",
                      c["host.cpu"]["observed"])
        self.assertIn("lscpu", c["host.cpu"]["hint"])

    def test_ib3_down_and_ib5_without_address(self):
        with open(self.path("sys/class/net/ib3/operstate"), "w") as f:
            f.write("down\n")
        self.edit("proc/net/if_inet6", lambda t: "".join(l for l in t.splitlines(True) if not l.endswith(" ib5\n")))
        c = self.inventory()
        self.assertEqual(self.failed_of(c), ["ib.ipoib.ib3", "ib.ipoib.ib5"])
        self.assertTrue(c["ib.ipoib.ib3"]["observed"].startswith("operstate down; fe80::"), c["ib.ipoib.ib3"])
        self.assertIn("ip link set ib3 up", c["ib.ipoib.ib3"]["hint"])
        self.assertEqual(c["ib.ipoib.ib5"]["observed"], "operstate up; no address")
        self.assertIn("ip addr show ib5", c["ib.ipoib.ib5"]["hint"])

    def test_an_ipoib_interface_missing(self):
        shutil.rmtree(self.path("sys/class/net/ib7"))
        c = self.inventory()
        self.assertEqual(self.failed_of(c), ["ib.ipoib.count"])
        self.assertEqual(c["ib.ipoib.count"]["value"], 7)
        self.assertNotIn("ib.ipoib.ib7", c)

    def test_a_size_with_nothing_published_skips_saying_so(self):
        # The made-up CPU-only size publishes no CPU, memory or NVMe figure.
        c = self.inventory(size="Standard_HB1test_v1")
        for i in ("host.cpu", "host.memory", "host.nvme_count"):
            self.assertEqual(c[i]["verdict"], "skip", c[i])
            self.assertIn("no expectation published", c[i]["observed"])
            self.assertFalse(c[i]["hint"])

    def test_memory_without_a_tolerance_skips_saying_so(self):
        size = os.path.join(self.manifests, "sizes", "nd96isr_h100_v5.yaml")
        with open(size) as f:
            text = f.read()
        with open(size, "w") as f:
            f.write(re.sub(r"\n  memory_tolerance_pct: \d+", "", text))
        c = self.inventory()
        self.assertEqual(c["host.memory"]["verdict"], "skip")
        self.assertIn("no tolerance published", c["host.memory"]["observed"])


if __name__ == "__main__":
    unittest.main()
