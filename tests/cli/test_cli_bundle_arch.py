"""`bundle create` carries a repository's packages for the plan's architecture.

One signed flat apt repository in NVIDIA's CUDA layout, served by nginx over HTTPS, holds every
package two plans on Ubuntu 24.04 ask of it twice: an amd64 build and an arm64 build of the same
name and version (empty STAND-INs, "stand-in" in their descriptions), beside the
architecture-independent pinning packages (Architecture: all, with the apt preferences NVIDIA's
nvidia-driver-pinning-<version> ships). Both builds are in the one Packages index, as apt on an
Arm64 node reads it, so only the architecture decides which one a bundle takes:

- Standard_ND128isr_NDR_GB200_v6 (aarch64) carries the arm64 builds and no amd64 one;
- Standard_ND96isr_H100_v5 (x86_64) still carries the amd64 builds and no arm64 one.

Each carried .deb is checked by its bytes against the repository's file of that architecture.
The package lists come from `plan --json` for each size, so the stand-ins follow the manifests.
"""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import yaml

from common import TestSigner, run, run_json, start_https_nginx, stop_https_nginx
from test_cli_contract import Machine

TOOLS = ["gpg", "gpgv", "apt-ftparchive", "dpkg-deb", "openssl", "nginx"]
MISSING = [t for t in TOOLS if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
DISTRO = "ubuntu-24.04"
ARM = "Standard_ND128isr_NDR_GB200_v6"  # manifests/sizes/nd128isr_ndr_gb200_v6.yaml: arch: aarch64
X86 = "Standard_ND96isr_H100_v5"
BUNDLE_ENV = {"SOURCE_DATE_EPOCH": "1700000000", "HPCBAKE_TEST_RUNNER": ""}  # bundle create runs gpgv for real
ARCHES = ("amd64", "arm64")


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def requests(size):
    """What the plan for `size` asks of nvidia-cuda: (name, version, component version) each."""
    plan = run_json("--no-imds", "plan", "--size", size, "--distro", DISTRO, "--json")
    out = []
    for s in plan["steps"]:
        d = s["detail"]
        if s["kind"] != "packages" or d.get("repository") != "nvidia-cuda":
            continue
        for p in d["packages"]:
            name, _, version = p.partition("=")
            out.append((name, version, d["version"]))
    return plan["arch"], out


def standins(reqs):
    """(name, version, arch, depends, files) for the stand-ins that serve `reqs`: each named
    version, the pinning package (all) with its preferences, and a driver that depends on a
    library of its own architecture, so the closure must stay on one architecture too."""
    out = []
    for name, version, component in reqs:
        v = version or (component if "-" in component else component + "-1")
        if name.startswith("nvidia-driver-pinning-"):
            prefs = f"Package: nvidia-open libnvidia-compute\nPin: version {v}\nPin-Priority: 1000\n"
            out.append((name, v, "all", "", {"etc/apt/preferences.d/nvidia-driver-pinning.pref": prefs}))
            continue
        for arch in ARCHES:
            if name == "nvidia-open":
                out.append((name, v, arch, f"libnvidia-compute (= {v})", {}))
                out.append(("libnvidia-compute", v, arch, "", {}))
            else:
                out.append((name, v, arch, "", {}))
    return out


@unittest.skipIf(MISSING, f"SKIPPED: missing {', '.join(MISSING)} (scripts/deps installs them)")
class BundleArchitecture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        arm_arch, arm = requests(ARM)
        x86_arch, x86 = requests(X86)
        assert (arm_arch, x86_arch) == ("aarch64", "x86_64"), (arm_arch, x86_arch)
        cls.wants = {ARM: arm, X86: x86}
        start_https_nginx(cls, "hpcbake-bundle-arch-")
        t = cls.tmp
        cls.signer = TestSigner(t, "hpcbake stand-in repository <repo@test.invalid>", "ed25519")
        www = os.path.join(t, "www")
        cls.repo = os.path.join(www, "repo")
        os.makedirs(cls.repo)
        with open(os.path.join(www, "key.asc"), "w") as f:
            f.write(cls.signer.gpg("--armor", "--export", cls.signer.fpr).stdout)
        made = set()
        for name, version, arch, depends, files in standins(arm + x86):
            deb = f"{name}_{version.split(':')[-1]}_{arch}.deb"
            if deb in made:
                continue
            made.add(deb)
            pkg = os.path.join(t, "pkg-" + deb)
            os.makedirs(os.path.join(pkg, "DEBIAN"))
            for path, text in files.items():
                os.makedirs(os.path.join(pkg, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(pkg, path), "w") as f:
                    f.write(text)
            with open(os.path.join(pkg, "DEBIAN", "control"), "w") as f:
                f.write(f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
                        + (f"Depends: {depends}\n" if depends else "")
                        + "Maintainer: hpcbake tests <tests@test.invalid>\n"
                        f"Description: hpcbake test STAND-IN for NVIDIA's {name} ({arch})\n")
            sh("dpkg-deb", "--root-owner-group", "--build", "-Zgzip", pkg, os.path.join(cls.repo, deb))
        with open(os.path.join(cls.repo, "Packages"), "w") as f:
            f.write(sh("apt-ftparchive", "packages", ".", cwd=cls.repo).stdout)
        with open(os.path.join(cls.repo, "Packages"), "rb") as f, \
                gzip.open(os.path.join(cls.repo, "Packages.gz"), "wb") as g:
            g.write(f.read())
        with open(os.path.join(cls.repo, "Release"), "w") as f:
            f.write(sh("apt-ftparchive", "-o", "APT::FTPArchive::Release::Architectures=amd64 arm64", "release", ".",
                       cwd=cls.repo).stdout)
        cls.signer.gpg("--yes", "--clearsign", "-o", os.path.join(cls.repo, "InRelease"),
                       os.path.join(cls.repo, "Release"))
        for d in (t, www):
            os.chmod(d, 0o755)
        # One fixture machine's manifests (artifacts pinned to stand-ins already in its cache),
        # with NVIDIA's repository, every variant of it (x86_64 and sbsa), at the stand-in.
        cls.work = tempfile.mkdtemp(prefix="hpcbake-bundle-arch-")
        cls.m = Machine(cls.work, {"size": ARM, "distro": DISTRO, "steps": []})
        cls.m.server.shutdown()  # its plain-HTTP key server is not used here
        base = f"https://127.0.0.1:{cls.port}"
        cls.m.edit_repositories(lambda v: v.update(uri=base + "/repo/", key=dict(
            v["key"], urls=[base + "/key.asc"], fingerprint=cls.signer.fpr)), "nvidia-cuda")

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        stop_https_nginx(cls)
        shutil.rmtree(cls.work, ignore_errors=True)

    def bundle(self, size):
        out = os.path.join(self.work, size + ".tar")
        r = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", out, "--size", size, "--distro",
                DISTRO, "--cache", self.m.cache, "--ca-file", os.path.join(self.tmp, "ca.pem"), env=BUNDLE_ENV,
                timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with tarfile.open(out) as tf:
            index = json.load(tf.extractfile("index.json"))
            repos = {x["id"]: x for x in index["repositories"]}
            self.assertIn("nvidia-cuda", repos, index)
            carried = repos["nvidia-cuda"]
            debs = {f["path"]: tf.extractfile("artifacts/" + f["sha256"]).read()
                    for f in carried["files"] if f["path"].endswith(".deb")}
        return r, carried, debs

    def check(self, size, arch, other):
        r, carried, debs = self.bundle(size)
        want = set()
        for name, version, component in self.wants[size]:
            v = version or (component if "-" in component else component + "-1")
            a = "all" if name.startswith("nvidia-driver-pinning-") else arch
            want.add(f"{name}_{v.split(':')[-1]}_{a}.deb")
            self.assertIn(f"{name}={v}", carried["packages"], r.stdout)
            if name == "nvidia-open":  # its library, of the same architecture, through the closure
                want.add(f"libnvidia-compute_{v}_{arch}.deb")
        self.assertEqual(set(debs), want, r.stdout)
        self.assertFalse([p for p in debs if p.endswith(f"_{other}.deb")], r.stdout)
        for path, data in debs.items():  # the bytes are the repository's build of that architecture
            with open(os.path.join(self.repo, path), "rb") as f:
                self.assertEqual(hashlib.sha256(data).hexdigest(), hashlib.sha256(f.read()).hexdigest(), path)
        self.assertIn("nvidia-cuda: ", r.stdout)

    def test_an_aarch64_plan_carries_the_arm64_builds_and_no_amd64_one(self):
        self.check(ARM, "arm64", "amd64")

    def test_an_x86_64_plan_still_carries_the_amd64_builds_and_no_arm64_one(self):
        self.check(X86, "amd64", "arm64")


if __name__ == "__main__":
    unittest.main()
