"""Prebuilt modules end to end through the binary, with the real DKMS against this machine's
Debian headers: `bundle modules` builds and packs the fixture module once on a build host (a
fixture root), then `install --prebuilt` puts it on a fixture node, and compiles nothing there;
a file that does not fit (another kernel, a changed module) falls back to the DKMS build and
says why, in the plan and in the step's output.

"Compiles nothing" is observed, not assumed: the node's PATH starts with a `make` that logs each
call and then runs the real one. DKMS builds through make (the recipe's MAKE line), so an empty
log means no build ran; the fallback's log shows one did. DKMS's trees are the fixture's
(install keeps them inside --root), and the build host's are its own, removed afterwards.
"""
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

from common import run
from test_cli_install import CAN_DKMS, FAKES, HEADERS, KERNEL, Fixture

SIZE = "Standard_Test1_v1"


def members(path):
    with tarfile.open(path) as t:
        names = t.getnames()
        manifest = json.load(t.extractfile("manifest.json"))
        data = {n: t.extractfile(n).read() for n in names if n != "manifest.json"}
    return names, manifest, data


def rewrite(src, dst, manifest=None, change=None):
    """A copy of the tar at src with another manifest, or one member's bytes changed."""
    names, old, data = members(src)
    with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as t:
        for n in names:
            body = json.dumps(manifest or old).encode() if n == "manifest.json" else data[n]
            if change and n == change:
                body = bytes([body[0] ^ 1]) + body[1:]
            info = tarfile.TarInfo(n)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))


class Prebuilt(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not FAKES:
            raise unittest.SkipTest("HPCBAKE_FAKES is not set: run through ctest")
        if not CAN_DKMS:
            raise unittest.SkipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        # One build host for the whole suite: the prebuilt file is made once, as in a pool.
        cls.tmp = tempfile.mkdtemp(prefix="hpcbake-prebuilt-")
        cls.fx = Fixture(os.path.join(cls.tmp, "node0"))
        cls.build_root = os.path.join(cls.tmp, "build-root")
        shutil.copytree(cls.fx.root, cls.build_root, symlinks=True)
        cls.file = os.path.join(cls.tmp, "modules.tar")
        cls.made = cls.bundle_modules(cls.build_root, cls.file)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def bundle_modules(cls, root, out, *extra):
        return run("--root", root, "--manifests", cls.fx.manifests, "bundle", "modules", out, "--size", SIZE,
                   "--distro", "debian-12", "--kernel", KERNEL, "--cache", cls.fx.cache, *extra,
                   env=cls.fx.env(), timeout=300)

    def node(self, name):
        """A fresh fixture node sharing the build host's manifests and cache (the same pinned .run)."""
        root = os.path.join(self.tmp, name)
        shutil.copytree(os.path.join(self.tmp, "node0", "root"), root, symlinks=True)
        shutil.rmtree(os.path.join(root, "var/lib/hpcbake"), ignore_errors=True)
        shutil.rmtree(os.path.join(root, "var/lib/dkms"), ignore_errors=True)
        shutil.rmtree(os.path.join(root, "lib/modules", KERNEL, "updates"), ignore_errors=True)
        bin_dir = os.path.join(self.tmp, name + "-bin")
        os.makedirs(bin_dir)
        make_log = os.path.join(self.tmp, name + "-make.log")
        shim = os.path.join(bin_dir, "make")
        real = shutil.which("make")
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\necho "make $*" >> "{make_log}"\nexec "{real}" "$@"\n')
        os.chmod(shim, 0o755)
        env = {"PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        return root, env, make_log

    def install(self, root, env, *extra):
        commands = os.path.join(root, "..", os.path.basename(root) + "-commands.jsonl")
        return run("--root", root, "--manifests", self.fx.manifests, "install", "--size", SIZE, "--distro",
                   "debian-12", "--cache", self.fx.cache, "--yes", "--json", *extra,
                   env={**self.fx.env(HPCBAKE_TEST_RUNNER="record:" + commands), **env}, timeout=300)

    def step_message(self, r, step):
        for line in r.stdout.splitlines():
            e = json.loads(line)
            if e.get("event") == "step.finished" and e.get("step") == step:
                return e.get("message", "")
        self.fail(f"no step.finished event for {step}:\n{r.stdout}\n{r.stderr}")

    def test_bundle_modules_writes_the_signed_or_unsigned_module_with_its_digest(self):
        r = self.made
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"prebuilt modules for {KERNEL}", r.stdout)
        names, m, data = members(self.file)
        self.assertEqual(names[0], "manifest.json")
        self.assertEqual((m["format"], m["schema"], m["kernel"], m["distro"]),
                         ("hpcbake-prebuilt-modules", 1, KERNEL, "debian-12"))
        pkg = m["packages"][0]
        self.assertEqual((pkg["dkms_name"], pkg["version"]), ("hpcbake-fixture", "1.0"))
        mod = pkg["modules"][0]
        ko = data["modules/hpcbake-fixture/1.0/" + mod["file"]]
        self.assertEqual(mod["sha256"], hashlib.sha256(ko).hexdigest())
        self.assertEqual(mod["size"], len(ko))
        self.assertTrue(mod["vermagic"].startswith(KERNEL + " "), mod)
        # The build host's own DKMS state and /lib/modules are untouched: the build had its own trees.
        self.assertFalse(os.path.exists(os.path.join(self.build_root, "var/lib/dkms/hpcbake-fixture")))
        self.assertFalse(os.path.exists(os.path.join(self.build_root, "lib/modules", KERNEL, "updates")))
        self.assertEqual(os.listdir(os.path.join(self.build_root, "var/lib/hpcbake/prebuild")), [])

    def test_install_with_prebuilt_modules_compiles_nothing_and_dkms_knows_them(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        root, env, make_log = self.node("node1")
        plan = json.loads(run("--root", root, "--manifests", self.fx.manifests, "plan", "--size", SIZE, "--distro",
                              "debian-12", "--json", "--prebuilt", self.file, env=self.fx.env()).stdout)
        step = next(s for s in plan["steps"] if s["id"] == "driver:hpcbake-fixture")
        pre = step["detail"]["prebuilt"]
        self.assertEqual(pre["kernels"], [{"kernel": KERNEL, "use": True, "why_not": ""}])
        with open(self.file, "rb") as f:
            self.assertEqual(pre["sha256"], hashlib.sha256(f.read()).hexdigest())

        r = self.install(root, env, "--prebuilt", self.file)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        msg = self.step_message(r, "driver:hpcbake-fixture")
        self.assertIn("prebuilt, from " + self.file, msg)
        self.assertFalse(os.path.exists(make_log), "no make ran on the node: " +
                         (open(make_log).read() if os.path.exists(make_log) else ""))
        # The module is the packed one, byte for byte, and DKMS counts it as installed.
        _, m, data = members(self.file)
        ko = os.path.join(root, "lib/modules", KERNEL, "updates/dkms/hpcbake_fixture.ko")
        with open(ko, "rb") as f:
            self.assertEqual(f.read(), data["modules/hpcbake-fixture/1.0/hpcbake_fixture.ko"])
        vdir = os.path.join(root, "var/lib/dkms/hpcbake-fixture/1.0")
        self.assertFalse(os.path.exists(os.path.join(vdir, KERNEL, m["arch"], "log", "make.log")))
        status = subprocess.run(["dkms", "status", "--dkmstree", os.path.join(root, "var/lib/dkms"),
                                 "--sourcetree", os.path.join(root, "usr/src"), "--installtree",
                                 os.path.join(root, "lib/modules")], capture_output=True, text=True)
        self.assertIn(f"hpcbake-fixture/1.0, {KERNEL}, {m['arch']}: installed", status.stdout, status)
        # The sources are registered, so a later kernel is built from them.
        self.assertTrue(os.path.isfile(os.path.join(root, "usr/src/hpcbake-fixture-1.0/dkms.conf")))
        self.assertTrue(os.path.islink(os.path.join(vdir, "source")))

    def test_another_kernel_falls_back_to_dkms_and_says_why(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        _, m, _ = members(self.file)
        m["kernel"] = "6.1.0-0-other-amd64"
        other = os.path.join(self.tmp, "other-kernel.tar")
        rewrite(self.file, other, manifest=m)
        root, env, make_log = self.node("node2")
        why = f"built for kernel 6.1.0-0-other-amd64, the target kernel is {KERNEL}"
        p = run("--root", root, "--manifests", self.fx.manifests, "plan", "--size", SIZE, "--distro", "debian-12",
                "--prebuilt", other, env=self.fx.env())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{KERNEL}: dkms build (prebuilt modules not used: {why})", p.stdout)
        r = self.install(root, env, "--prebuilt", other)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("built with DKMS; prebuilt modules not used: " + why, self.step_message(r, "driver:hpcbake-fixture"))
        self.assertTrue(os.path.exists(make_log), "the fallback really built")

    def test_a_changed_module_is_refused_at_install_and_built_instead(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        _, m, _ = members(self.file)
        member = "modules/hpcbake-fixture/1.0/" + m["packages"][0]["modules"][0]["file"]
        bad = os.path.join(self.tmp, "tampered.tar")
        rewrite(self.file, bad, change=member)
        root, env, make_log = self.node("node3")
        r = self.install(root, env, "--prebuilt", bad)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        msg = self.step_message(r, "driver:hpcbake-fixture")
        self.assertIn("prebuilt modules not used", msg)
        self.assertIn(f"{member} has SHA-256", msg)
        self.assertTrue(os.path.exists(make_log), "the fallback really built")

    def test_signed_modules_are_used_only_where_the_plan_signs_with_the_same_certificate(self):
        # The build host signs (--sign on: a key generated in its /var/lib/hpcbake/signing).
        build = os.path.join(self.tmp, "build-signed")
        shutil.copytree(os.path.join(self.tmp, "node0", "root"), build, symlinks=True)
        signed = os.path.join(self.tmp, "signed.tar")
        r = self.bundle_modules(build, signed, "--sign", "on")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        _, m, _ = members(signed)
        self.assertTrue(m["signing"]["signed"], m)
        self.assertEqual(m["packages"][0]["modules"][0]["signer"], m["signing"]["signer"])
        # A node whose image carries the same key: the modules are used as they are.
        root, env, make_log = self.node("node5")
        shutil.copytree(os.path.join(build, "var/lib/hpcbake/signing"), os.path.join(root, "var/lib/hpcbake/signing"))
        r = self.install(root, env, "--prebuilt", signed, "--sign", "on")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("prebuilt, from " + signed, self.step_message(r, "driver:hpcbake-fixture"))
        self.assertFalse(os.path.exists(make_log))
        # A node with a key of its own (generated there): another serial, so DKMS builds and signs.
        root, env, make_log = self.node("node6")
        r = self.install(root, env, "--prebuilt", signed, "--sign", "on")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        msg = self.step_message(r, "driver:hpcbake-fixture")
        self.assertIn("prebuilt modules not used", msg)
        self.assertIn(f"signed by '{m['signing']['signer']}' (serial {m['signing']['serial']}), this plan signs with",
                      msg)
        self.assertTrue(os.path.exists(make_log), "the fallback really built")

    def test_a_prebuilt_file_others_can_change_is_refused_before_anything_runs(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        writable = os.path.join(self.tmp, "writable.tar")
        shutil.copy(self.file, writable)
        os.chmod(writable, 0o666)
        root, env, make_log = self.node("node4")
        r = self.install(root, env, "--prebuilt", writable)
        self.assertEqual(r.returncode, 9, r.stdout + r.stderr)
        self.assertIn("prebuilt modules file", r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(root, "var/lib/hpcbake/state.json")))

    def test_a_size_without_dkms_modules_has_nothing_to_prebuild(self):
        r = run("--root", self.build_root, "--manifests", self.fx.manifests, "bundle", "modules",
                os.path.join(self.tmp, "none.tar"), "--size", "Standard_Test2_v1", "--distro", "debian-12",
                "--kernel", KERNEL, "--cache", self.fx.cache, env=self.fx.env())
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("builds no module with DKMS: there is nothing to prebuild", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "none.tar")))
        # Given to plan for such a size, the file is said to be unused, not silently ignored.
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        p = run("--root", self.build_root, "--manifests", self.fx.manifests, "plan", "--size", "Standard_Test2_v1",
                "--distro", "debian-12", "--json", "--prebuilt", self.file, env=self.fx.env())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"the prebuilt modules in {self.file} are not used: this plan builds no module with DKMS",
                      "\n".join(json.loads(p.stdout)["notes"]))

    def test_a_file_that_is_not_prebuilt_modules_is_refused_by_plan(self):
        junk = os.path.join(self.tmp, "junk.tar")
        with open(junk, "wb") as f:
            f.write(b"not a tar at all\n" * 100)
        r = run("--root", self.build_root, "--manifests", self.fx.manifests, "plan", "--size", SIZE, "--distro",
                "debian-12", "--prebuilt", junk, env=self.fx.env())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("prebuilt modules " + junk, r.stderr)


if __name__ == "__main__":
    unittest.main()
