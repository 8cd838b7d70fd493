"""`hpcbake manifest lint` on the shipped manifests and on broken copies of them."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from common import BIN, SRC, run, copy_manifest_set, edit_once


class Lint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-lint-")
        self.dir = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.dir)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def edit(self, rel, old, new):
        edit_once(self, os.path.join(self.dir, rel), old, new)

    def test_shipped_manifests_are_clean(self):
        r = run("manifest", "lint", os.path.join(SRC, "manifests"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\d+ files clean \(\d+ sizes, 10 distros, 18 components, 4 repositories, 6 profiles\), 0 unverifiable artifacts")

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


def run_bytes(*args):
    """common.run, but stdout and stderr stay bytes: the output under test may not be UTF-8."""
    if not BIN:
        raise unittest.SkipTest("HPCBAKE_BIN is not set: run through ctest")
    env = dict(os.environ)
    env.pop("HPCBAKE_IMDS_URL", None)
    env["HPCBAKE_MANIFESTS"] = os.path.join(SRC, "manifests")
    return subprocess.run([BIN, *args], capture_output=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


class HostileInput(unittest.TestCase):
    """Issue 20, items 3 to 6: numbers that wrapped, duplicate keys, invalid UTF-8, cross-file
    errors without a position, values too long to quote; `lint` and `plan --json` on a copy of
    manifests/ with one file altered, and `detect --json` on a host whose os-release is Latin-1."""

    PLAN = ("plan", "--size", "Standard_HB120rs_v3", "--distro", "debian-12", "--json")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-hostile-")
        self.dir = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.dir)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def edit(self, rel, old, new):
        edit_once(self, os.path.join(self.dir, rel), old, new)

    def lint(self):
        r = run_bytes("manifest", "lint", self.dir)
        self.assertEqual(r.returncode, 2, r.stdout[:2000])
        return r.stderr.decode("utf-8")  # every diagnostic is UTF-8, whatever the file held

    def plan_refuses(self, message):
        r = run_bytes("--manifests", self.dir, *self.PLAN)
        self.assertEqual(r.returncode, 2, r.stderr[:2000])  # the manifest exit code, not an internal error
        self.assertNotIn(b"internal error", r.stderr)
        self.assertRegex(r.stderr.decode("utf-8"), message)

    def test_a_fifo_or_a_directory_named_yaml_is_refused_not_waited_on(self):
        # Item 10's shape in a manifest folder: a FIFO made `lint` wait forever for a writer.
        fifo = os.path.join(self.dir, "sizes", "nd96isr_h100_v5.yaml")
        os.remove(fifo)
        os.mkfifo(fifo)
        os.mkdir(os.path.join(self.dir, "sizes", "zz-folder.yaml"))
        r = run_bytes("manifest", "lint", self.dir)
        self.assertEqual(r.returncode, 2, r.stderr[:2000])
        err = r.stderr.decode("utf-8")
        self.assertIn("sizes/nd96isr_h100_v5.yaml: is a FIFO, not a regular file", err)
        self.assertIn("sizes/zz-folder.yaml: is a directory, not a regular file", err)

    def test_integers_that_would_wrap_are_refused_where_they_are_written(self):
        self.edit("sizes/hb120rs_v3.yaml", b"rate_gbps: 200", b"rate_gbps: 4294967696")
        self.edit("sizes/nd96isr_h100_v5.yaml", b"\n  count: 8\n", b"\n  count: 3000000000\n")
        self.edit("sizes/nd96isr_h100_v5.yaml", b"nvswitch_count: 4", b"nvswitch_count: 4294967300")
        err = self.lint()
        self.assertRegex(err, r"sizes/hb120rs_v3\.yaml:13:14: 'infiniband\.rate_gbps' is 4294967696: must be from 1 to 10000")
        self.assertRegex(err, r"sizes/nd96isr_h100_v5\.yaml:14:10: 'gpu\.count' is 3000000000: must be from 1 to")
        self.assertRegex(err, r"sizes/nd96isr_h100_v5\.yaml:17:19: 'gpu\.nvswitch_count' is 4294967300: must be from 0 to")
        self.assertNotIn("-1294967296", err)
        self.plan_refuses(r"'infiniband\.rate_gbps' is 4294967696")

    def test_a_duplicate_key_is_refused_naming_both_positions(self):
        self.edit("sizes/hb120rs_v3.yaml", b"  rate_gbps: 200\n", b"  rate_gbps: 200\n  rate_gbps: 400\n")
        self.edit("sizes/hb120rs_v3.yaml", b"checks:\n", b"family: HBv4\nchecks:\n")
        err = self.lint()
        f = re.escape(os.path.join(self.dir, "sizes", "hb120rs_v3.yaml"))
        self.assertRegex(err, f + r":14:3: duplicate key 'infiniband\.rate_gbps': first at " + f + r":13:3")
        self.assertRegex(err, f + r":16:1: duplicate key 'family': first at " + f + r":3:1")
        self.plan_refuses(r"duplicate key 'infiniband\.rate_gbps'")

    def test_invalid_utf8_in_a_manifest_is_refused_with_its_position(self):
        self.edit("sizes/hb120rs_v3.yaml", b'family: "HBv3"', b'family: "HBv3\xff"')
        err = self.lint()
        self.assertRegex(err, r"sizes/hb120rs_v3\.yaml:3:14: invalid UTF-8")
        self.plan_refuses(r"hb120rs_v3\.yaml:3:14: invalid UTF-8")

    def test_detect_json_replaces_invalid_utf8_from_the_host(self):
        root = os.path.join(self.tmp, "root")
        shutil.copytree(os.path.join(SRC, "tests", "fixtures", "hosts", "plain"), root, symlinks=True)
        path = os.path.join(root, "etc", "os-release")
        with open(path, "rb") as f:
            text = f.read()
        with open(path, "wb") as f:  # Latin-1, as an old or hand-edited file may be
            f.write(text.replace(b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"',
                                 b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm) \xe9dition"'))
        r = run_bytes("--root", root, "--no-imds", "detect", "--json")
        self.assertEqual(r.returncode, 0, r.stderr[:2000])
        doc = json.loads(r.stdout.decode("utf-8"))  # strict: valid UTF-8 throughout
        self.assertIn("(bookworm) \ufffddition", json.dumps(doc, ensure_ascii=False))
        t = run_bytes("--root", root, "--no-imds", "detect")  # the text form: no raw Latin-1 byte either
        self.assertEqual(t.returncode, 0, t.stderr[:2000])
        self.assertIn("(bookworm) \ufffddition", t.stdout.decode("utf-8"))

    def test_cross_file_errors_carry_a_position(self):
        self.edit("components/nvidia-peermem.yaml", b'- distros: ["ubuntu-24.04"]', b'- distros: ["ubuntu-24.04", "ubuntu-99.04"]')
        self.edit("sizes/hb120rs_v3.yaml", b"checks:\n", b"dkms_modules: [ghost]\nchecks:\n")
        err = self.lint()
        self.assertRegex(err, r"components/nvidia-peermem\.yaml:14:31: variant \S+ names unknown distro 'ubuntu-99\.04'")
        self.assertRegex(err, r"sizes/hb120rs_v3\.yaml:15:16: dkms_modules names unknown component 'ghost'")

    def test_a_10_mb_value_is_quoted_as_a_short_excerpt(self):
        huge = b"A" * (10 * 1024 * 1024)
        self.edit("sizes/hb120rs_v3.yaml", b'size: "Standard_HB120rs_v3"', b'size: "Standard_HB120rs_v3' + huge + b'"')
        self.edit("sizes/hb120rs_v3.yaml", b"  rate_gbps: 200", b"  rate_gbps: 9" + huge.replace(b"A", b"9"))
        err = self.lint()
        self.assertLess(len(err.encode()), 4096, err[:4096])
        self.assertIn("\u2026 (10485779 bytes)", err)  # Standard_HB120rs_v3 and the 10 MiB of A
        self.assertIn("\u2026 (10485761 bytes)", err)
        r = run_bytes("--manifests", self.dir, *self.PLAN)
        self.assertEqual(r.returncode, 2)
        self.assertLess(len(r.stderr), 4096)



class PlanMatrix(unittest.TestCase):
    """Every size x distro, for every profile: the pair plans with every artifact pinned by SHA-256
    (and every repository by its key's fingerprint), or is refused with the reason. None needs
    --sha256. The counts are printed for the record."""

    def test_every_pair_plans_verifiably_or_is_refused_with_a_reason(self):
        import json
        refs = os.path.join(SRC, "tests", "fixtures", "reference", "azurehpc-health-checks-conf.list")
        for profile in ("default", "minimal", "containers", "ai", "hpc", "kubernetes"):
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
                        # Issue 45: NVIDIA's metadata-signed rpm repository is trusted (signatures: metadata).
                        self.assertNotIn("signs its metadata but not its packages", p["reason"], p)
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
