"""`hpcbake manifest lint` on the shipped manifests and on broken copies of them."""
import os
import shutil
import tempfile
import unittest

from common import SRC, run, copy_manifest_set


class Lint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-lint-")
        self.dir = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.dir)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def edit(self, rel, old, new):
        path = os.path.join(self.dir, rel)
        with open(path) as f:
            text = f.read()
        self.assertIn(old, text)
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))

    def test_shipped_manifests_are_clean(self):
        r = run("manifest", "lint", os.path.join(SRC, "manifests"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\d+ files clean \(\d+ sizes, 10 distros, 9 components, 3 repositories, 4 profiles\), 0 unverifiable artifacts")

    def test_unknown_key_names_file_line_column(self):
        self.edit("sizes/nd96isr_h100_v5.yaml", "\ninfiniband:\n", "\ninfiniband:\n  speed: fast\n")
        r = run("manifest", "lint", self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"sizes/nd96isr_h100_v5\.yaml:\d+:3: unknown key 'infiniband\.speed'")

    def test_unquoted_version_and_bad_checksum(self):
        self.edit("distros/ubuntu-22.04.yaml", 'version_id: "22.04"', "version_id: 22.04")
        self.edit("components/nvidia-grid-driver.yaml",
                  "5dbfcd0998e6d3a2b4cf4f5f60587aef07401f3c7a9433c23697ec944a5c542b", "5dbfcd09")
        r = run("manifest", "lint", self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"distros/ubuntu-22\.04\.yaml:\d+:\d+: 'os_release\.version_id' must be a quoted string")
        self.assertRegex(r.stderr, r"components/nvidia-grid-driver\.yaml:\d+:\d+: 'variants\[0\]\.artifacts\[0\]\.sha256': must be 64")
        self.assertIn("2 problem(s)", r.stderr)

    def test_broken_manifests_stop_plan_with_the_manifest_exit_code(self):
        self.edit("sizes/hb120rs_v3.yaml", "rate_gbps: 200", "rate_gbps: fast")
        r = run("--manifests", self.dir, "plan", "--size", "Standard_HB120rs_v3", "--distro", "debian-12")
        self.assertEqual(r.returncode, 2)
        self.assertIn("'infiniband.rate_gbps' must be an integer", r.stderr)
        self.assertIn("hpcbake manifest lint", r.stderr)

    def test_missing_directory(self):
        r = run("manifest", "lint", os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("manifest directory does not exist", r.stderr)



class PlanMatrix(unittest.TestCase):
    """Every size x distro, for every profile: the pair plans with every artifact pinned by SHA-256
    (and every repository by its key's fingerprint), or is refused with the reason. None needs
    --sha256. The counts are printed for the record."""

    def test_every_pair_plans_verifiably_or_is_refused_with_a_reason(self):
        import json
        refs = os.path.join(SRC, "tests", "fixtures", "reference", "azurehpc-health-checks-conf.list")
        for profile in ("default", "minimal", "containers", "ai"):
            with self.subTest(profile=profile):
                r = run("manifest", "matrix", "--profile", profile, "--json", timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                doc = json.loads(r.stdout)
                self.assertEqual(doc["needs_sha256"], 0)
                sizes = {p["size"] for p in doc["pairs"]}
                distros = {p["distro"] for p in doc["pairs"]}
                self.assertEqual(len(doc["pairs"]), len(sizes) * len(distros))
                self.assertEqual(doc["planned"] + doc["refused"], len(doc["pairs"]))
                for p in doc["pairs"]:
                    if p["result"] == "refused":
                        self.assertTrue(p["reason"].strip(), p)
                    else:
                        self.assertEqual(p["result"], "planned", p)
                print(f"\nplan matrix, profile {profile}: {len(sizes)} sizes x {len(distros)} distros: "
                      f"{doc['planned']} planned, {doc['refused']} refused, {doc['needs_sha256']} need --sha256")
                # Every size of the health checks' configurations plans on at least one distro.
                planned = {p["size"].lower() for p in doc["pairs"] if p["result"] == "planned"}
                with open(refs) as f:
                    for line in f:
                        name = line.strip().removesuffix(".conf")
                        if name and not name.startswith("#") and profile == "default":
                            self.assertIn("standard_" + name, planned, f"{name} plans on no distro")


if __name__ == "__main__":
    unittest.main()
