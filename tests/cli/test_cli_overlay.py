"""Overlays (--overlay, /etc/hpcbake/manifests.d/): one file moves the flagship's driver version
without forking the manifests; plan shows each override and the components that follow the
driver; lint refuses an overlay that breaks a coupling with the message plan gives.

The version the overlays set, 580.126.20, is one the shipped manifests already pin
(components/nvidia-cuda-driver.yaml: the ubuntu-24.04 aarch64 variant, and in its notes
Azure/azhpc-images@8e9d055fb9e1f7385da734969793861c447958a1 versions.json
nvidia.ubuntu24.04.x86_64.baremetal_3p.nvidia_h100; nvidia-fabricmanager=580.126.20-1 is the
package components/nvidia-fabricmanager.yaml pins for its other distros)."""
import json
import os
import re
import shutil
import tempfile
import unittest

from common import SRC, run, host

PLAN = ("plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-24.04", "--no-imds")

DRIVER = """  - component: nvidia-cuda-driver
    set:
      variants[0].version: "580.126.20"
      variants[0].packages: ["nvidia-driver-pinning-580.126.20"]
"""
FABRIC_MANAGER = """  - file: components/nvidia-fabricmanager.yaml
    set:
      variants[0].version: "580.126.20"
      variants[0].packages: ["nvidia-fabricmanager=580.126.20-1"]
"""
PEERMEM = """  - component: nvidia-peermem
    set:
      variants[0].version: "580.126.20"
"""


def problems(stderr):
    """The `FILE:LINE:COL: MESSAGE` lines of plan's manifest error (or of lint's output)."""
    return [line.strip() for line in stderr.splitlines() if re.match(r"\s*\S+:\d+:\d+: ", line)]


class Overlay(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-overlay-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def overlay(self, *parts, name="driver.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("schema: 1\noverrides:\n" + "".join(parts))
        return path

    def test_one_file_moves_the_flagship_driver_and_plan_shows_it(self):
        path = self.overlay(DRIVER, FABRIC_MANAGER, PEERMEM)
        r = run("--overlay", path, *PLAN)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("override: components/nvidia-cuda-driver.yaml:variants[0].version = 580.126.20 (from %s:5)"
                      % path, r.stdout)
        self.assertIn("override: components/nvidia-peermem.yaml:variants[0].version = 580.126.20 (from %s:13)"
                      % path, r.stdout)
        # The coupled components follow: the pinning package, Fabric Manager.
        self.assertIn("select the NVIDIA driver 580.126.20 (nvidia-driver-pinning-580.126.20)", r.stdout)
        self.assertIn("install Fabric Manager 580.126.20", r.stdout)
        self.assertNotIn("580.173.02", r.stdout)
        j = run("--overlay", path, "--json", *PLAN)
        self.assertEqual(j.returncode, 0, j.stderr)
        doc = json.loads(j.stdout)
        self.assertEqual(len(doc["overrides"]), 5)
        self.assertEqual(doc["overrides"][0], {"what": "components/nvidia-cuda-driver.yaml:variants[0].version",
                                               "value": "580.126.20", "file": path, "line": 5})
        fm = [s for s in doc["steps"] if s["id"] == "packages:nvidia-fabricmanager"]
        self.assertEqual(fm[0]["detail"]["version"], "580.126.20")
        # Without an overlay, no `overrides` key: every other plan reads as before.
        self.assertNotIn("overrides", json.loads(run("--json", *PLAN).stdout))
        lint = run("manifest", "lint", "--overlay", path)
        self.assertEqual(lint.returncode, 0, lint.stderr)
        self.assertIn("override: components/nvidia-fabricmanager.yaml:variants[0].packages = "
                      "[nvidia-fabricmanager=580.126.20-1] (from %s:10)" % path, lint.stdout)

    def test_lint_refuses_what_plan_refuses_with_the_same_message(self):
        # The tree: driver and Fabric Manager moved, nvidia-peermem forgotten. Before the
        # shared rule, lint called it clean while plan refused it on the peermem version.
        path = self.overlay(DRIVER, FABRIC_MANAGER)
        plan = run("--overlay", path, *PLAN)
        self.assertEqual(plan.returncode, 2, plan.stderr)
        self.assertEqual(problems(plan.stderr), [
            "%s:5:7: nvidia-peermem 580.173.02 (%s) does not equal the driver version 580.126.20 for ubuntu-24.04"
            % (path, os.path.join(SRC, "manifests", "components", "nvidia-peermem.yaml"))])
        self.assertIn("hpcbake manifest lint --overlay %s" % path, plan.stderr)
        lint = run("manifest", "lint", "--overlay", path)
        self.assertEqual(lint.returncode, 2, lint.stdout)
        self.assertEqual(problems(lint.stderr), problems(plan.stderr))
        # The driver alone: Fabric Manager and nvidia-peermem, both at the driver's line.
        path = self.overlay(DRIVER, name="alone.yaml")
        plan = run("--overlay", path, *PLAN)
        self.assertEqual(plan.returncode, 2, plan.stderr)
        found = problems(plan.stderr)
        self.assertEqual(len(found), 2, plan.stderr)
        self.assertTrue(found[0].startswith("%s:5:7: Fabric Manager 580.173.02 (" % path), found)
        self.assertTrue(found[1].startswith("%s:5:7: nvidia-peermem 580.173.02 (" % path), found)
        self.assertEqual(problems(run("manifest", "lint", "--overlay", path).stderr), found)

    def test_the_system_directory_under_root_is_read_by_default(self):
        root = os.path.join(self.tmp, "root")
        shutil.copytree(host("nd96isr_h100_v5"), root, symlinks=True)
        d = os.path.join(root, "etc", "hpcbake", "manifests.d")
        os.makedirs(d)
        shutil.move(self.overlay(DRIVER, FABRIC_MANAGER, PEERMEM), os.path.join(d, "50-driver.yaml"))
        r = run("--root", root, *PLAN)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("= 580.126.20 (from %s:5)" % os.path.join(d, "50-driver.yaml"), r.stdout)
        # --overlay replaces the directory.
        other = self.overlay(PEERMEM, name="other.yaml")
        r = run("--root", root, "--overlay", other, *PLAN)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("nvidia-peermem 580.126.20 (", r.stderr)

    def test_a_broken_overlay_is_a_manifest_error_at_its_line(self):
        path = self.overlay("  - component: nvidia-cuda-driver\n    set:\n      variants[0].verison: \"1\"\n")
        r = run("--overlay", path, *PLAN)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("%s:5:7: components/nvidia-cuda-driver.yaml has no value at 'variants[0].verison'" % path,
                      r.stderr)
        r = run("--overlay", os.path.join(self.tmp, "missing.yaml"), *PLAN)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("overlay does not exist", r.stderr)


    def test_driver_version_selects_a_pinned_version_or_lists_them(self):
        r = run(*PLAN, "--driver-version", "580.173.02")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("install Fabric Manager 580.173.02", r.stdout)
        r = run(*PLAN, "--driver-version", "580.126.20")
        self.assertEqual(r.returncode, 3, r.stdout)
        self.assertIn("--driver-version 580.126.20: ", r.stderr)
        self.assertIn("pins no NVIDIA driver 580.126.20 for ubuntu-24.04 (x86_64)", r.stderr)
        self.assertIn("pinned for ubuntu-24.04: 580.173.02;", r.stderr)
        # An overlay pins it: then the shortcut finds it.
        path = self.overlay(DRIVER, FABRIC_MANAGER, PEERMEM)
        r = run("--overlay", path, *PLAN, "--driver-version", "580.126.20")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("install Fabric Manager 580.126.20", r.stdout)


if __name__ == "__main__":
    unittest.main()
