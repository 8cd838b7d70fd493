"""`hpcbake verify` level 0 kernel log checks (gpu.xid, ib.link_flaps, ib.<dev>:<port>.link_flaps)
against the fake libraries and a copy of the ND H100 fixture root whose /dev/kmsg is one of the
tests/fixtures/kernel_log files (origins in its README) and whose IB port counters the test raises."""
import os
import shutil

from common import FIXTURES
from test_cli_verify import VerifyBase

KLOG = os.path.join(FIXTURES, "kernel_log")


class KernelLog(VerifyBase):
    def use_kmsg(self, name):
        shutil.copy(os.path.join(KLOG, name), os.path.join(self.root, "dev", "kmsg"))

    def counter(self, dev, name, value):
        with open(os.path.join(self.root, "sys", "class", "infiniband", dev, "ports", "1", "counters", name), "w") as f:
            f.write(f"{value}\n")

    def test_a_clean_log_passes(self):
        doc, _ = self.verify_json(expect_rc=0, level="0")
        checks = self.checks(doc)
        self.assertEqual(checks["gpu.xid"]["verdict"], "pass")
        self.assertEqual(checks["gpu.xid"]["level"], 0)
        self.assertRegex(checks["gpu.xid"]["observed"], r"^no Xid \(.*/dev/kmsg: 3 records from 0\.0 s after boot\)$")
        self.assertIn("analyzing-xid-catalog.html", checks["gpu.xid"]["source"])
        self.assertIn("customTests/azure_gpu_xid.nhc", checks["gpu.xid"]["source"])
        self.assertEqual(checks["ib.link_flaps"]["verdict"], "pass")
        ports = sorted(i for i in checks if i.endswith(".link_flaps") and i != "ib.link_flaps")
        self.assertEqual(ports, [f"ib.mlx5_ib{i}:1.link_flaps" for i in range(8)])
        for i in ports:
            self.assertEqual(checks[i]["verdict"], "pass")
            self.assertEqual(checks[i]["value"], 0)
            self.assertEqual(checks[i]["threshold"], 5)

    def test_xid_79_fails_naming_it_and_saying_reboot(self):
        self.use_kmsg("kmsg-xid79")
        doc, r = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), ["gpu.0000:91:00.xid", "gpu.xid"])
        c = self.checks(doc)["gpu.0000:91:00.xid"]
        self.assertIn("Xid 79 x1 (first at 6781741.5 s", c["observed"])
        self.assertIn("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS \"GPU has fallen off the bus\"", c["observed"])
        self.assertIn("NVIDIA: RESTART_BM, reboot the node; Azure fails the node for it", c["observed"])
        self.assertTrue(c["hint"].startswith("reboot the node"))
        # The table shows the failure and its hint; the exit code is verify's "checks failed".
        t = self.verify(level="0")
        self.assertEqual(t.returncode, 6, t.stdout + t.stderr)
        self.assertRegex(t.stdout, r"gpu\.0000:91:00\.xid .*FAIL")
        self.assertIn("reboot the node (NVIDIA's immediate action for Xid 79: RESTART_BM)", t.stdout)

    def test_xid_13_alone_passes_with_nvidias_action(self):
        self.use_kmsg("kmsg-xid13")
        doc, _ = self.verify_json(expect_rc=0, level="0")
        c = self.checks(doc)["gpu.0000:cb:00.xid"]
        self.assertEqual(c["verdict"], "pass")
        self.assertIn("Xid 13 x3", c["observed"])
        self.assertIn("\"Graphics Engine Exception\"; NVIDIA: RESTART_APP, restart the application", c["observed"])
        self.assertNotIn("Azure fails", c["observed"])
        self.assertIn("0000:cb:00 (13)", self.checks(doc)["gpu.xid"]["observed"])

    def test_link_flaps_and_a_raised_link_downed_counter_fail(self):
        self.use_kmsg("kmsg-link-flaps")
        self.counter("mlx5_ib2", "link_downed", 12)
        doc, _ = self.verify_json(level="0")
        self.assertEqual(self.failed(doc), ["ib.link_flaps", "ib.mlx5_ib2:1.link_flaps", "ib.mlx5_ib6:1.link_flaps"])
        checks = self.checks(doc)
        self.assertEqual(checks["ib.link_flaps"]["observed"], "ib6 6")  # ib3's are older than 24 h
        self.assertIn("ib6 6 lost carrier in 24 h", checks["ib.mlx5_ib6:1.link_flaps"]["observed"])
        self.assertEqual(checks["ib.mlx5_ib6:1.link_flaps"]["value"], 6)
        self.assertIn("over threshold: link_downed 12 > 10", checks["ib.mlx5_ib2:1.link_flaps"]["hint"])
        self.assertIn("rdma-core", checks["ib.mlx5_ib2:1.link_flaps"]["source"])

    def test_no_kernel_log_skips_saying_why(self):
        os.remove(os.path.join(self.root, "dev", "kmsg"))
        doc, _ = self.verify_json(expect_rc=0, level="0")
        checks = self.checks(doc)
        for i in ("gpu.xid", "ib.link_flaps"):
            self.assertEqual(checks[i]["verdict"], "skip")
            self.assertRegex(checks[i]["observed"], r"^not checked: .*/dev/kmsg: no such device")
        self.assertIn("lost carrier not counted (kernel log unreadable)", checks["ib.mlx5_ib0:1.link_flaps"]["observed"])


if __name__ == "__main__":
    import unittest
    unittest.main()
