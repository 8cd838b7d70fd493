"""NVIDIA's kernel modules through `hpcbake install`, for real: the module sources of Debian's
nvidia-tesla-535-kernel-dkms 535.274.02 (trixie; builds) and nvidia-open-kernel-dkms 535.261.03
(bookworm; does NOT build against 6.1.0-56: nv-pci.c calls pci_resize_resource with one argument
too few), fetched with apt's signed metadata by tests/fixtures/nvidia-debian/fetch, packed as a
dkms-module component's artifact, and built by DKMS: the version that builds against the cloud
kernel (what Debian's Azure images boot), the version that fails against the generic one, so each
kernel's headers go through NVIDIA's conftest once. That install builds for every kernel that will
boot (the running one and GRUB's next) is shown with the fixture module across both kernels: a
second NVIDIA build of the same sources would add five minutes of conftest and test nothing more
(docs/ci.md). The e2e VM test builds the same NVIDIA sources for the generic kernel too.

Real: DKMS, gcc, kbuild, NVIDIA's conftest and sources, the kernel's sign-file, modinfo. Recorded,
not run: package and systemctl commands (HPCBAKE_TEST_RUNNER), as in test_cli_install.py.

A cold build of both kernels takes minutes on 2 cores; kbuild's gcc goes through ccache
(HPCBAKE_KMOD_CCACHE, default /var/cache/hpcbake-build/ccache-kmod) and each test works in the same
directory every run (kbuild's command lines name it), so a second run on the same machine is fast. Needs root, dkms, makeself and both header sets (scripts/deps installs them)."""
import glob
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import unittest

from common import BIN, FIXTURES, SRC, run

FETCH = os.path.join(FIXTURES, "nvidia-debian", "fetch")
FAKES = os.environ.get("HPCBAKE_FAKES", "")
CCACHE_DIR = os.environ.get("HPCBAKE_KMOD_CCACHE", "/var/cache/hpcbake-build/ccache-kmod")


def headers(flavour):
    """The newest Debian kernel of a flavour ("amd64" or "cloud-amd64") with headers here."""
    found = []
    for p in glob.glob(f"/usr/src/linux-headers-*-{flavour}"):
        k = p.rsplit("linux-headers-", 1)[1]
        if flavour == "amd64" and k.endswith("-cloud-amd64"):
            continue
        found.append(k)
    found.sort(key=lambda k: [int(x) if x.isdigit() else x for x in re.split(r"[.-]", k)])
    return found[-1] if found else None


RUNNING = headers("amd64")
NEXT_BOOT = headers("cloud-amd64")
# What --hold-kernel holds on Debian 12: the distro's kernel metapackages, whichever kernel runs.
HOLD = ["linux-image-amd64", "linux-image-cloud-amd64", "linux-headers-amd64", "linux-headers-cloud-amd64"]


def modinfo(field, ko):
    return subprocess.run(["modinfo", "-F", field, ko], capture_output=True, text=True, check=True).stdout.strip()


class NvidiaDkms(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not BIN or not FAKES:
            raise unittest.SkipTest("HPCBAKE_BIN/HPCBAKE_FAKES are not set: run through ctest")
        if os.geteuid() != 0:
            raise unittest.SkipTest("SKIPPED: DKMS builds need root (dkms refuses otherwise); run the suite as root")
        for tool in ("dkms", "modinfo", "makeself", "ccache"):
            if not shutil.which(tool):
                raise AssertionError(f"{tool} is missing: scripts/deps installs it")
        if not RUNNING or not NEXT_BOOT:
            raise AssertionError("the headers of a generic and a cloud Debian kernel are needed: scripts/deps installs "
                                 "linux-headers-amd64 and linux-headers-cloud-amd64")
        r = subprocess.run([FETCH], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError("could not fetch Debian's NVIDIA packages (the mirror is needed once per machine):\n"
                                 + r.stderr)
        cls.debs = r.stdout.strip().splitlines()[-1]

    def setUp(self):
        # The same directory in every run of a test: kbuild's compiler lines carry the DKMS tree's
        # absolute path (-I, -o), and ccache hashes them, so a random name per run made every
        # object of NVIDIA's build a miss (15 minutes of CI for two kernels).
        self.tmp = os.path.join(tempfile.gettempdir(), "hpcbake-nvidia-dkms", self._testMethodName)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.make_machine(RUNNING)

    def make_machine(self, kernel):
        """A fresh fixture machine (tests/fixtures/install/make-machine) running `kernel`."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        subprocess.run([os.path.join(FIXTURES, "install", "make-machine"), self.tmp], check=True,
                       env={**os.environ, "KERNEL": kernel}, stdout=subprocess.DEVNULL)
        self.root = os.path.join(self.tmp, "root")
        self.manifests = os.path.join(self.tmp, "manifests")
        self.cache = os.path.join(self.tmp, "cache")

    def add_next_boot_kernel(self):
        """The cloud kernel installed beside the running one and chosen by GRUB for the next boot."""
        boot = os.path.join(self.root, "boot")
        for f in ("vmlinuz", "config", "System.map", "initrd.img"):
            shutil.copy(os.path.join(boot, f"{f}-{RUNNING}"), os.path.join(boot, f"{f}-{NEXT_BOOT}"))
        mods = os.path.join(self.root, "lib", "modules", NEXT_BOOT)
        os.makedirs(mods)
        os.symlink(f"/usr/src/linux-headers-{NEXT_BOOT}", os.path.join(mods, "build"))
        # hpcbake resolves the link inside the root (make-machine says why this stand-in suffices).
        os.makedirs(os.path.join(self.root, "usr", "src", f"linux-headers-{NEXT_BOOT}"), exist_ok=True)
        os.makedirs(os.path.join(self.root, "etc", "default"), exist_ok=True)
        with open(os.path.join(self.root, "etc", "default", "grub"), "w") as f:
            f.write("GRUB_DEFAULT=saved\n")
        os.makedirs(os.path.join(boot, "grub"), exist_ok=True)
        env = f"# GRUB Environment Block\nsaved_entry=gnulinux-advanced-x>gnulinux-{NEXT_BOOT}-advanced-x\n"
        with open(os.path.join(boot, "grub", "grubenv"), "w") as f:
            f.write(env + "#" * (1024 - len(env)))

    def source_tarball(self, package_dir):
        """The module sources packed once per fetched package set, beside it in the fetch cache:
        gzip of NVIDIA's tree took half a minute of every test. Written under a temporary name and
        renamed, so an interrupted run leaves no partial tarball to be reused."""
        tgz = os.path.join(self.debs, "tarballs", package_dir + ".tar.gz")
        if not os.path.isfile(tgz):
            os.makedirs(os.path.dirname(tgz), exist_ok=True)
            part = f"{tgz}.{os.getpid()}.part"
            with tarfile.open(part, "w:gz") as t:
                t.add(os.path.join(self.debs, "root", "usr", "src", package_dir), arcname=package_dir)
            os.replace(part, tgz)
        return tgz

    def add_component(self, package_dir, component):
        """NVIDIA's module sources from the unpacked .deb as a dkms-module component (its own
        dkms.conf, which names the modules PACKAGE_NAME, -modeset, -drm, -uvm, -peermem), pinned
        by the SHA-256 of the tarball made here, and a test size that needs it."""
        name, version = package_dir.rsplit("-", 1)
        tgz = self.source_tarball(package_dir)
        sha = subprocess.run(["sha256sum", tgz], capture_output=True, text=True, check=True).stdout.split()[0]
        os.makedirs(os.path.join(self.cache, "sha256"), exist_ok=True)
        shutil.copy(tgz, os.path.join(self.cache, "sha256", sha))
        modules = [name] + [f"{name}-{m}" for m in ("modeset", "drm", "uvm", "peermem")]
        with open(os.path.join(self.manifests, "components", component + ".yaml"), "w") as f:
            f.write(f"""schema: 1
component: {component}
kind: dkms-module
description: NVIDIA's kernel module sources from Debian's {name}-kernel-dkms {version}
source: "tests/fixtures/nvidia-debian/fetch (Debian's package, checked by apt against the signed Release file)"
dkms:
  name: {name}
  modules: [{", ".join(modules)}]
variants:
  - distros: ["debian-12"]
    version: "{version}"
    artifacts:
      - name: {os.path.basename(tgz)}
        urls: ["http://127.0.0.1:9/{os.path.basename(tgz)}"]
        sha256: "{sha}"
        size: {os.path.getsize(tgz)}
""")
        with open(os.path.join(self.manifests, "sizes", "testnv_v1.yaml"), "w") as f:
            f.write(f"""schema: 1
size: "Standard_TestNv_v1"
family: "hpcbake NVIDIA DKMS test size"
source: "tests/cli/test_cli_nvidia_dkms.py"
infiniband:
  ports: 1
  rate_gbps: 100
  ipoib: true
  gpudirect: false
dkms_modules: [{component}]
""")
        return name, version, modules

    def env(self):
        os.makedirs(CCACHE_DIR, exist_ok=True)
        return {"HPCBAKE_TEST_RUNNER": "record:" + os.path.join(self.tmp, "commands.jsonl"),
                "HPCBAKE_TEST_REAL_COMMANDS": "dkms,depmod", "LD_LIBRARY_PATH": FAKES,
                "FAKE_IB_PORTS": "mlx5_ib0=ACTIVE/LinkUp/EDR/4X/IB", "SOURCE_DATE_EPOCH": "1700000000",
                # kbuild calls plain `gcc`: ccache's masquerade directory first on PATH caches it.
                "PATH": "/usr/lib/ccache:" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                "CCACHE_DIR": CCACHE_DIR, "CCACHE_MAXSIZE": "4G"}

    def install(self, *args, size="Standard_TestNv_v1"):
        t = time.monotonic()
        r = run("--root", self.root, "--manifests", self.manifests, "install", "--size", size,
                "--distro", "debian-12", "--cache", self.cache, "--yes", "--sign", "on", *args, env=self.env(),
                timeout=1800)
        print(f"\ninstall took {time.monotonic() - t:.0f} s (exit {r.returncode})")
        return r

    def test_plan_targets_the_running_and_the_next_boot_kernel(self):
        self.add_next_boot_kernel()
        self.add_component("nvidia-tesla-535-535.274.02", "nvidia-tesla-535")
        r = run("--root", self.root, "--manifests", self.manifests, "plan", "--size", "Standard_TestNv_v1", "--distro",
                "debian-12", "--sign", "on", "--json", env=self.env())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        step = next(s for s in json.loads(r.stdout)["steps"] if s["kind"] == "dkms-build")
        self.assertEqual(step["detail"]["kernels"], [RUNNING, NEXT_BOOT])

    def check_installed(self, kernels, modules, name=None, version=None):
        """Each module installed for each kernel, built for it (kmod's modinfo, independently of
        hpcbake's own reading) and signed with hpcbake's key; the install complete."""
        subject = None
        for k in kernels:
            d = os.path.join(self.root, "lib", "modules", k, "updates", "dkms")
            for m in modules:
                ko = next(iter(glob.glob(os.path.join(d, m + ".ko*"))), None)
                self.assertIsNotNone(ko, f"{m} is not installed for {k}: {os.listdir(d) if os.path.isdir(d) else d}")
                self.assertEqual(modinfo("vermagic", ko).split()[0], k, ko)
                signer = modinfo("signer", ko)
                self.assertTrue(signer, f"{ko} is not signed")
                subject = subject or signer
                self.assertEqual(signer, subject, "every module signed with the same key")
                if m == name:
                    self.assertEqual(modinfo("version", ko), version)
                    self.assertEqual(modinfo("license", ko), "NVIDIA")  # the proprietary flavour
        self.assertEqual(subject, "hpcbake module signing key")
        journal = json.load(open(os.path.join(self.root, "var/lib/hpcbake/state.json")))
        self.assertEqual(journal["state"], "complete", journal)

    def dkms_installs_and_hold(self, hold):
        """The recorded `dkms install` commands' positions and the kernel hold's (apt-mark is
        recorded, not run; dkms ran for real and is recorded too, in order)."""
        with open(os.path.join(self.tmp, "commands.jsonl")) as f:
            argvs = [json.loads(line)["argv"] for line in f]
        self.assertIn(["apt-mark", "hold", *hold], argvs)
        return [i for i, a in enumerate(argvs) if a[:2] == ["dkms", "install"]], argvs.index(["apt-mark", "hold", *hold])

    def test_every_kernel_that_will_boot_gets_the_modules_before_the_kernel_is_held(self):
        # The fixture module (tests/fixtures/modules/hpcbake-fixture; make-machine's Standard_Test1_v1):
        # the same install path as NVIDIA's sources, in seconds.
        self.add_next_boot_kernel()
        r = self.install("--hold-kernel", size="Standard_Test1_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        builds, hold = self.dkms_installs_and_hold(HOLD)
        self.assertEqual(len(builds), 2, "one DKMS build per kernel that will boot")
        self.assertGreater(hold, max(builds), "the kernel is held after both builds")
        self.check_installed([RUNNING, NEXT_BOOT], ["hpcbake_fixture"])

    def test_the_version_that_builds_is_installed_signed_for_the_cloud_kernel(self):
        self.make_machine(NEXT_BOOT)  # the cloud kernel running: DKMS builds for it alone
        name, version, modules = self.add_component("nvidia-tesla-535-535.274.02", "nvidia-tesla-535")
        r = self.install("--hold-kernel")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        builds, hold = self.dkms_installs_and_hold(HOLD)
        self.assertEqual(len(builds), 1)
        self.assertGreater(hold, builds[0])
        self.check_installed([NEXT_BOOT], modules, name, version)

    def test_the_version_that_fails_stops_before_reboot_with_the_compiler_error(self):
        # One kernel is enough to show the stop (both kernels' logs are kept apart: unit-tested in
        # test_driver_dkms.cpp); it saves a minute of CI.
        name, version, modules = self.add_component("nvidia-current-open-535.261.03", "nvidia-open")
        r = self.install("--hold-kernel")
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 5, out)  # a build failure (README "Exit codes")
        # Which kernel, which source, the compiler's first error line, the full log's path.
        self.assertIn(f"{name} {version}", out)
        self.assertIn(RUNNING, out)
        self.assertRegex(out, r"first error: \S+/nv-pci\.c:\d+:\d+: error: too few arguments to function .pci_resize_resource.")
        logs = re.findall(r"(/\S+make\.log)", out)
        self.assertTrue(logs, "the full log's path is printed")
        for log in logs:
            self.assertTrue(os.path.isfile(log), f"{log} is printed but does not exist")
            self.assertTrue(log.startswith(self.root), f"{log} is outside --root")
        # Nothing half-installed: no module, nothing left registered with DKMS.
        for k in (RUNNING,):
            self.assertEqual(glob.glob(os.path.join(self.root, "lib", "modules", k, "updates", "dkms", "*")), [], k)
        self.assertFalse(os.path.exists(os.path.join(self.root, "var", "lib", "dkms", name, version)),
                         "the failed version stays registered with DKMS")
        # Stopped there: the build failed, and nothing after it ran (the module checks, the kernel
        # hold, verify); the kernel was not held.
        with open(os.path.join(self.root, "var/lib/hpcbake/state.json")) as f:
            journal = json.load(f)
        steps = journal["steps"]
        self.assertEqual(journal["state"], "failed", journal["state"])
        self.assertEqual(steps["driver:nvidia-open"]["status"], "failed")
        for sid in [f"dkms:{name}:{RUNNING}", "kernel-hold", "verify"]:
            self.assertNotEqual(steps.get(sid, {}).get("status"), "done", sid)
        with open(os.path.join(self.tmp, "commands.jsonl")) as f:
            self.assertFalse([a for a in map(json.loads, f) if a["argv"][:2] == ["apt-mark", "hold"]])
        # And seal refuses the machine, because of the failed install.
        s = run("--root", self.root, "--manifests", self.manifests, "seal", "--check", "--json", env=self.env())
        self.assertNotEqual(s.returncode, 0, s.stdout + s.stderr)
        self.assertIn("journal.incomplete", s.stdout + s.stderr)


if __name__ == "__main__":
    unittest.main()
