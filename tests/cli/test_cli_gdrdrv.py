"""gdrcopy's kernel module, gdrdrv, through `hpcbake install`'s DKMS path, for real: NVIDIA's
gdrcopy at the commit manifests/components/gdrcopy.yaml pins for Ubuntu 24.04 (tests/fixtures/gdrcopy,
a `git archive` of it that names its commit), built by DKMS with that manifest's own dkms: section
(name, modules, directives) for the running and the next-boot kernel, against the nv-p2p.h of
Debian's nvidia-tesla-535-kernel-dkms sources (tests/fixtures/nvidia-debian/fetch, shared with
nvidia/dkms: nothing of NVIDIA is built here), signed with hpcbake's key, and checked by the plan's
dkms-check steps; then seal's out-of-tree module check. And its library, built as the manifest's
build step builds it (make prefix=... libdir=... lib_install), into a scratch prefix.

In the component the manifest's git source (the git-source step, which needs github.com) is
replaced by the fixture archive as a dkms-module artifact: the DKMS build is the same step
(driver::build_module from a directory or an archive), and the archive's commit is checked first.

Real: DKMS, gcc, kbuild, gdrcopy's Makefile and its kernel probes (scripts/), the kernel's
sign-file, modinfo. Recorded, not run: package and systemctl commands (HPCBAKE_TEST_RUNNER).
kbuild's gcc goes through nvidia/dkms's ccache directory. Needs root, dkms and both header sets
(scripts/deps installs them)."""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import unittest

import yaml

from common import BIN, FIXTURES, SRC, prune_profiles, run
# The module, not its class: a TestCase imported by name would run here too.
import test_cli_nvidia_dkms as nvidia_dkms
from test_cli_nvidia_dkms import FETCH, NEXT_BOOT, RUNNING, modinfo

ARCHIVE = os.path.join(FIXTURES, "gdrcopy", "gdrcopy-2.6.tar.gz")
MANIFEST = os.path.join(SRC, "manifests", "components", "gdrcopy.yaml")
FAKES = os.environ.get("HPCBAKE_FAKES", "")
NVIDIA_SOURCES = "nvidia-tesla-535-535.274.02"  # what fetch unpacks under usr/src (proprietary flavour)


def pinned_variant():
    """gdrcopy.yaml itself, and its Ubuntu 24.04 x86_64 variant (the fixture's commit)."""
    with open(MANIFEST) as f:
        m = yaml.safe_load(f)
    v = next(v for v in m["variants"] if "ubuntu-24.04" in v["distros"] and v.get("arch") == ["x86_64"])
    return m, v


def extract(dest):
    """The fixture archive into dest (its one directory, gdrcopy-2.6); tarfile's safe filter where
    this Python has it."""
    with tarfile.open(ARCHIVE) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(dest, filter="data")
        else:
            t.extractall(dest)


def plan_digest(stored):
    """install/plan_file.cpp plan_digest: SHA-256 of the compact JSON of {"options", "plan"}, keys
    sorted (nlohmann's objects are ordered maps)."""
    text = json.dumps({"options": stored["options"], "plan": stored["plan"]}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class Gdrdrv(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN or not FAKES:
            raise unittest.SkipTest("HPCBAKE_BIN/HPCBAKE_FAKES are not set: run through ctest")
        if os.geteuid() != 0:
            raise unittest.SkipTest("SKIPPED: DKMS builds need root (dkms refuses otherwise); run the suite as root")
        for tool in ("dkms", "modinfo", "ccache", "git", "make"):
            if not shutil.which(tool):
                raise AssertionError(f"{tool} is missing: scripts/deps installs it")
        if not RUNNING or not NEXT_BOOT:
            raise AssertionError("the headers of a generic and a cloud Debian kernel are needed: scripts/deps installs "
                                 "linux-headers-amd64 and linux-headers-cloud-amd64")
        cls.manifest, cls.variant = pinned_variant()
        # The archive is the pinned commit (git archive's pax header names it), or nothing is built.
        tar = subprocess.run(["gzip", "-dc", ARCHIVE], capture_output=True, check=True).stdout
        r = subprocess.run(["git", "get-tar-commit-id"], input=tar, capture_output=True, check=True)
        cls.commit = r.stdout.decode().strip()
        r = subprocess.run([FETCH], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError("could not fetch Debian's NVIDIA packages (the mirror is needed once per machine):\n"
                                 + r.stderr)
        cls.debs = r.stdout.strip().splitlines()[-1]

    def setUp(self):
        # The same directory every run, as nvidia/dkms does: kbuild's command lines name it, and
        # ccache hashes them.
        self.tmp = os.path.join(tempfile.gettempdir(), "hpcbake-gdrdrv", self._testMethodName)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        nvidia_dkms.NvidiaDkms.make_machine(self, RUNNING)

    def test_fixture_is_the_pinned_commit(self):
        self.assertEqual(self.commit, self.variant["git"]["commit"])
        self.assertEqual(self.variant["version"], "2.6")

    def add_component(self):
        """gdrcopy.yaml's dkms: section as a dkms-module component whose artifact is the fixture
        archive (pinned by its SHA-256 here), and a test size that builds it."""
        comps = os.path.join(self.manifests, "components")
        # The userspace component itself goes: its variant plans a git-source step (github.com) and
        # the library's build, which this test does not run; its dkms: section is all it needs.
        os.remove(os.path.join(comps, "gdrcopy.yaml"))
        prune_profiles(self.manifests)  # the ai profile names gdrcopy
        sha = subprocess.run(["sha256sum", ARCHIVE], capture_output=True, text=True, check=True).stdout.split()[0]
        os.makedirs(os.path.join(self.cache, "sha256"), exist_ok=True)
        shutil.copy(ARCHIVE, os.path.join(self.cache, "sha256", sha))
        component = {"schema": 1, "component": "gdrdrv-fixture", "kind": "dkms-module",
                     "description": "gdrcopy's gdrdrv from tests/fixtures/gdrcopy, with gdrcopy.yaml's dkms: section",
                     "source": "tests/fixtures/gdrcopy/README.md", "dkms": self.manifest["dkms"],
                     "variants": [{"distros": ["debian-12"], "version": self.variant["version"],
                                   "artifacts": [{"name": os.path.basename(ARCHIVE),
                                                  "urls": ["http://127.0.0.1:9/" + os.path.basename(ARCHIVE)],
                                                  "sha256": sha, "size": os.path.getsize(ARCHIVE)}]}]}
        with open(os.path.join(comps, "gdrdrv-fixture.yaml"), "w") as f:
            yaml.safe_dump(component, f, sort_keys=False, width=1000)
        with open(os.path.join(self.manifests, "sizes", "testgdr_v1.yaml"), "w") as f:
            f.write("""schema: 1
size: "Standard_TestGdr_v1"
family: "hpcbake gdrdrv DKMS test size"
source: "tests/cli/test_cli_gdrdrv.py"
infiniband:
  ports: 1
  rate_gbps: 100
  ipoib: true
  gpudirect: false
dkms_modules: [gdrdrv-fixture]
""")
        # The NVIDIA driver's DKMS sources where its packages put them (in the root's source tree,
        # which DKMS reads as ${source_tree}): a link to the fetched, unbuilt tree.
        os.makedirs(os.path.join(self.root, "usr", "src"), exist_ok=True)
        os.symlink(os.path.join(self.debs, "root", "usr", "src", NVIDIA_SOURCES),
                   os.path.join(self.root, "usr", "src", NVIDIA_SOURCES))

    def env(self):
        return nvidia_dkms.NvidiaDkms.env(self)

    def test_gdrdrv_is_built_signed_and_checked_for_both_kernels(self):
        nvidia_dkms.NvidiaDkms.add_next_boot_kernel(self)
        self.add_component()
        t = time.monotonic()
        r = run("--root", self.root, "--manifests", self.manifests, "install", "--size", "Standard_TestGdr_v1",
                "--distro", "debian-12", "--cache", self.cache, "--yes", "--sign", "on", env=self.env(), timeout=900)
        print(f"\ninstall (gdrdrv for {RUNNING} and {NEXT_BOOT}) took {time.monotonic() - t:.0f} s")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.root, "var/lib/hpcbake/state.json")) as f:
            journal = json.load(f)
        self.assertEqual(journal["state"], "complete", journal)
        for k in (RUNNING, NEXT_BOOT):
            ko = next(iter(glob.glob(os.path.join(self.root, "lib", "modules", k, "updates", "dkms", "gdrdrv.ko*"))),
                      None)
            self.assertIsNotNone(ko, f"gdrdrv is not installed for {k}")
            self.assertEqual(modinfo("vermagic", ko).split()[0], k, ko)
            self.assertEqual(modinfo("signer", ko), "hpcbake module signing key", ko)
            self.assertEqual(modinfo("version", ko), self.variant["version"])
            self.assertEqual(modinfo("license", ko), "Dual MIT/GPL")
            # gdrcopy's Makefile found NVIDIA's proprietary sources (NVIDIA_SRC_DIR from the directive):
            # the open flavour would say "opensource".
            self.assertEqual(modinfo("description", ko), "GDRCopy kernel-mode driver built for proprietary NVIDIA driver")
            # Only gdrdrv is installed: nv-p2p-dummy, built beside it for modpost, stays in the build tree.
            self.assertFalse(glob.glob(os.path.join(self.root, "lib", "modules", k, "updates", "dkms", "nv-p2p*")))
        # hpcbake's own dkms-check step per kernel (vermagic, signer) ran and passed.
        for k in (RUNNING, NEXT_BOOT):
            self.assertEqual(journal["steps"].get(f"dkms:gdrdrv:{k}", {}).get("status"), "done",
                             sorted(journal["steps"]))
        # seal's out-of-tree module check reads gdrdrv of the next-boot kernel too: present, built for
        # it, signed by hpcbake's key; and, the plan signing for Secure Boot, it refuses the image
        # because Debian 12's kernel trusts no db key for modules (module_keyrings.platform false).
        s = run("--root", self.root, "--manifests", self.manifests, "seal", "--check", "--json", env=self.env())
        self.assertNotEqual(s.returncode, 0, s.stdout + s.stderr)
        refusals = json.loads(s.stdout)["refusals"]
        about = [x for x in refusals if "gdrdrv" in x["message"]]
        self.assertEqual([x["id"] for x in about], ["module.image-secure-boot"], json.dumps(refusals, indent=1))
        self.assertIn(f"/lib/modules/{NEXT_BOOT}/updates/dkms/gdrdrv.ko: signed by 'hpcbake module signing key'",
                      about[0]["message"])

    def test_from_a_checkout_directory_after_the_missing_nvidia_sources_stopped_it(self):
        """The install's first run has no NVIDIA driver sources: gdrdrv's build stops, naming
        nv-p2p.h. Then the sources come from a directory (a dkms-build step's source_dir, what the
        git-source step's checkout gives): until the userspace planner writes such steps, this
        test writes it into the stored plan (and the journal's record of that plan), adds the
        NVIDIA sources, and resumes. One kernel: the two-kernel path is the test above."""
        self.add_component()
        os.remove(os.path.join(self.root, "usr", "src", NVIDIA_SOURCES))
        args = ["--root", self.root, "--manifests", self.manifests, "install", "--size", "Standard_TestGdr_v1",
                "--distro", "debian-12", "--cache", self.cache, "--yes", "--sign", "on"]
        r = run(*args, env=self.env(), timeout=900)
        self.assertEqual(r.returncode, 5, r.stdout + r.stderr)  # a build failure
        # NVIDIA_SRC_DIR names a directory that does not exist (an empty one made gdrcopy's Makefile
        # grep -r all of / for the driver's licence: 140 s here).
        log = os.path.join(self.root, "var", "log", "hpcbake", "dkms", f"gdrdrv-2.6-{RUNNING}.make.log")
        with open(log) as f:
            self.assertIn(f"NVIDIA_SRC_DIR={self.root}/usr/src/no-nvidia-driver-sources.", f.read())
        self.assertRegex(r.stdout + r.stderr, r"first error: \S+\.c:\d+:\d+: fatal error: nv-p2p\.h: No such file")
        # The checkout: the fixture's tree where git-source would put it.
        checkout = "/var/lib/hpcbake/build/gdrcopy-2.6"
        extract(os.path.join(self.root, "var", "lib", "hpcbake", "build"))
        os.rename(os.path.join(self.root, "var", "lib", "hpcbake", "build", "gdrcopy-2.6"), self.root + checkout)
        plan_file = os.path.join(self.root, "var", "lib", "hpcbake", "plan.json")
        with open(plan_file) as f:
            stored = json.load(f)
        self.assertEqual(plan_digest(stored), stored["sha256"], "the stored plan's digest as install computes it")
        step = next(s for s in stored["plan"]["steps"] if s["kind"] == "dkms-build")
        step["detail"]["source"], step["detail"]["source_dir"] = "", checkout
        stored["sha256"] = plan_digest(stored)
        with open(plan_file, "w") as f:
            json.dump(stored, f, indent=1)
        state_file = os.path.join(self.root, "var", "lib", "hpcbake", "state.json")
        with open(state_file) as f:
            state = json.load(f)
        state["plan_sha256"] = stored["sha256"]
        with open(state_file, "w") as f:
            json.dump(state, f)
        os.symlink(os.path.join(self.debs, "root", "usr", "src", NVIDIA_SOURCES),
                   os.path.join(self.root, "usr", "src", NVIDIA_SOURCES))
        r = run("--root", self.root, "install", "--resume", "--yes", env=self.env(), timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ko = os.path.join(self.root, "lib", "modules", RUNNING, "updates", "dkms", "gdrdrv.ko")
        self.assertEqual(modinfo("vermagic", ko).split()[0], RUNNING)
        self.assertEqual(modinfo("signer", ko), "hpcbake module signing key")
        # Registered from the checkout (its .git-less tree here), with the directives in its dkms.conf.
        with open(os.path.join(self.root, "usr", "src", "gdrdrv-2.6", "dkms.conf")) as f:
            conf = f.read()
        for line in self.manifest["dkms"]["directives"]:
            self.assertIn(line + "\n", conf)
        with open(state_file) as f:
            self.assertEqual(json.load(f)["steps"][f"dkms:gdrdrv:{RUNNING}"]["status"], "done")

    def test_the_library_builds_as_the_manifest_says(self):
        """The variant's first build command (its make line), with the prefix and libdir moved
        into a scratch directory and only the library (the tools need a GPU's libcuda to run)."""
        build = os.path.join(self.tmp, "build")
        os.makedirs(build)
        extract(build)
        make = self.variant["build"]["commands"][0]
        self.assertEqual(make[:3], ["make", "prefix=/usr", "libdir=/usr/lib/x86_64-linux-gnu"])
        self.assertIn("lib_install", make)
        usr = os.path.join(self.tmp, "usr")
        argv = ["make", f"prefix={usr}", f"libdir={usr}/lib/x86_64-linux-gnu", "lib_install"]
        r = subprocess.run(argv, cwd=os.path.join(build, "gdrcopy-2.6"), capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        creates = self.variant["build"]["creates"].replace("/usr", usr, 1)
        self.assertTrue(os.path.isfile(creates), creates)
        self.assertEqual(os.readlink(creates), "libgdrapi.so.2.6")
        soname = subprocess.run(["objdump", "-p", creates], capture_output=True, text=True, check=True).stdout
        self.assertIn("SONAME               libgdrapi.so.2", soname)
        self.assertTrue(os.path.isfile(os.path.join(usr, "include", "gdrapi.h")))


if __name__ == "__main__":
    unittest.main()
