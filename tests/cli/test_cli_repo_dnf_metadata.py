"""A repository that signs its metadata and not its packages, through hpcbake and real dnf.

NVIDIA's rpm repository for the container toolkit publishes unsigned rpms and a signed
repodata/repomd.xml (NVIDIA/libnvidia-container@0ae7307ac8b40cb0e09444dac9954dc1304369e8
stable/rpm/nvidia-container-toolkit.repo: repo_gpgcheck=1, gpgcheck=0). Here a stand-in of it:
rpmbuild makes UNSIGNED stand-in packages with the toolkit's four names at 1.20.0-1 (marked
"stand-in" in their summaries; the toolkit requires the other three), createrepo_c indexes them,
and gpg signs repomd.xml alone (--detach-sign --armor), with a key made for the test. The
repository is a local directory (file://): nothing leaves the machine.

`hpcbake install --profile containers` on AlmaLinux 9 (a fixture machine, commands recorded)
writes the .repo and the pinned key from the shipped manifests (only the URI and the pin point
at the stand-in); real `dnf --installroot` then installs from exactly those files: repomd.xml's
signature verifies against the key hpcbake wrote and each package against the checksum in the
signed metadata. A package changed after createrepo (same name, other bytes), a repomd.xml
changed after signing, and a repomd.xml without its signature are each refused with nothing
installed.

hpcbake's own reading of such a repository (bundle create, over HTTPS from nginx with a test CA)
checks the same chain itself: gpgv with the pinned key on repomd.xml.asc, every data file
against the signed repomd.xml, every rpm against primary.xml; a changed rpm, a changed
primary.xml, a changed repomd.xml and a missing repomd.xml.asc are each refused; SHA-512
metadata (as NVIDIA publishes it) is checked the same way, and a changed rpm refused.

dnf reads gpgkey=file:///etc/pki/rpm-gpg/... from the host's /etc even with --installroot, so it
runs in a private mount namespace (unshare -m) whose /etc is the fixture's /etc laid over the
host's (a read-only overlay), as cli/repo_dnf does.

Needs root and gpg, rpmbuild, createrepo_c, dnf, rpm, unshare, nginx, openssl (scripts/deps
installs them):
without them it exits 77, which ctest counts as skipped, with the reason printed.
"""
import contextlib
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import yaml

from common import GOLDEN, TestSigner, run, start_https_nginx, stop_https_nginx
from test_cli_contract import Machine

TOOLS = ["gpg", "rpmbuild", "createrepo_c", "dnf", "rpm", "unshare", "nginx", "openssl"]
VERSION, RELEASE = "1.20.0", "1"
# NVIDIA's install guide, dnf section: these four at 1.20.0-1 (manifests/components/nvidia-container-toolkit.yaml).
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
REPO_FILE = "etc/yum.repos.d/hpcbake-nvidia-container-toolkit.repo"
DKMS_VERSION = "3.1.6"  # EPEL's dkms for the EL 9 plan's build tools: its stand-in
BUNDLE_ENV = {"SOURCE_DATE_EPOCH": "1700000000", "HPCBAKE_TEST_RUNNER": ""}  # bundle create runs for real


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def build_rpms(top, names):
    """Unsigned noarch stand-ins, each holding one file; returns their paths."""
    os.makedirs(os.path.join(top, "SPECS"), exist_ok=True)
    for name in names:
        path = os.path.join(top, "SPECS", name + ".spec")
        with open(path, "w") as f:
            f.write(spec(name))
        sh("rpmbuild", "--quiet", "--define", f"_topdir {top}", "-bb", path)
    return sorted(glob.glob(os.path.join(top, "RPMS", "*", "*.rpm")))


def spec(name):
    version, release = (DKMS_VERSION, "1") if name == "dkms" else (VERSION, RELEASE)
    lines = [f"Name: {name}", f"Version: {version}", f"Release: {release}",
             f"Summary: hpcbake test STAND-IN for {name} (not NVIDIA's package)", "License: none",
             "BuildArch: noarch"]
    if name == PACKAGES[0]:
        lines += [f"Requires: {p} = {VERSION}-{RELEASE}" for p in PACKAGES[1:]]
    lines += ["%description", "A stand-in built by hpcbake's tests.", "%install",
              "mkdir -p %{buildroot}/usr/share/hpcbake-standin",
              f"echo {name} > %{{buildroot}}/usr/share/hpcbake-standin/{name}",
              "%files", f"/usr/share/hpcbake-standin/{name}"]
    return "\n".join(lines) + "\n"


class MetadataSignedRpmRepository(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hpcbake-repo-dnf-metadata-")
        os.chmod(cls.tmp, 0o755)
        cls.signer = TestSigner(cls.tmp, "hpcbake stand-in metadata-signed repository <meta@test.invalid>", "rsa3072")
        cls.repo = os.path.join(cls.tmp, "rpm")
        os.makedirs(cls.repo)
        top = os.path.join(cls.tmp, "rpmbuild")
        os.makedirs(os.path.join(top, "SPECS"))
        for name in PACKAGES:
            path = os.path.join(top, "SPECS", name + ".spec")
            with open(path, "w") as f:
                f.write(spec(name))
            sh("rpmbuild", "--quiet", "--define", f"_topdir {top}", "-bb", path)
        for rpm in glob.glob(os.path.join(top, "RPMS", "*", "*.rpm")):
            shutil.copy(rpm, cls.repo)
            assert "Key ID" not in sh("rpm", "-qpi", rpm).stdout, "the stand-ins are unsigned, as NVIDIA's"
        cls.rpms = sorted(glob.glob(os.path.join(cls.repo, "*.rpm")))
        sh("createrepo_c", "--quiet", cls.repo)
        cls.repomd = os.path.join(cls.repo, "repodata", "repomd.xml")
        cls.signer.gpg("--yes", "--armor", "--detach-sign", "-o", cls.repomd + ".asc", cls.repomd)
        with open(os.path.join(cls.tmp, "key.asc"), "w") as f:
            f.write(cls.signer.gpg("--armor", "--export", cls.signer.fpr).stdout)

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        with open(os.path.join(GOLDEN, "plan-nd96isr_h100_v5-almalinux-9-containers.json")) as f:
            golden = json.load(f)
        self.work = tempfile.mkdtemp(prefix="hpcbake-repo-dnf-metadata-")
        self.m = Machine(self.work, golden)  # every repository's key on its loopback server, the test key pinned
        shutil.copy(os.path.join(self.tmp, "key.asc"), os.path.join(self.m.key_dir, "meta-key.asc"))
        port = self.m.server.server_address[1]
        # Only the stand-in's address and pin change: signatures: metadata and the rest are the shipped manifest's.
        self.m.edit_repositories(lambda v: v.update(uri=f"file://{self.repo}/",
                                                    key=dict(v["key"], urls=[f"http://127.0.0.1:{port}/meta-key.asc"],
                                                             fingerprint=self.signer.fpr)),
                                 "nvidia-container-toolkit")

    def tearDown(self):
        self.m.server.shutdown()
        shutil.rmtree(self.work, ignore_errors=True)

    def dnf(self, *args):
        """Real dnf on hpcbake's files, the toolkit's repository alone, into a fresh installroot."""
        inst = tempfile.mkdtemp(prefix="installroot-", dir=self.work)
        opts = ["-y", "--disableplugin=local", f"--installroot={inst}", "--releasever=9",
                "--setopt=reposdir=/etc/yum.repos.d", f"--setopt=cachedir={inst}/var/cache/dnf",
                "--disablerepo=*", "--enablerepo=hpcbake-nvidia-container-toolkit"]
        script = 'mount -t overlay overlay -o "lowerdir=$0/etc:/etc" /etc && exec dnf "$@"'
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, self.m.root, *opts, *args],
                           capture_output=True, text=True, timeout=180)
        return r, inst

    @staticmethod
    def installed(inst):
        return sorted(subprocess.run(["rpm", "--root", inst, "-qa", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\\n"],
                                     capture_output=True, text=True).stdout.split())

    def nothing_installed(self, inst):
        self.assertFalse([p for p in self.installed(inst) if not p.startswith("gpg-pubkey")],
                         "a refused install leaves no package behind")

    def install_toolkit(self):
        return self.dnf("install", *[f"{p}-{VERSION}-{RELEASE}" for p in PACKAGES])

    def hpcbake_writes_the_repository(self):
        r = self.m.install_through_reboots()
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        with open(os.path.join(self.m.root, REPO_FILE)) as f:
            text = f.read()
        return text

    def test_hpcbake_writes_what_dnf_trusts_and_dnf_refuses_tampering(self):
        text = self.hpcbake_writes_the_repository()
        asked = [a for a in self.m.recorded() if a[:3] == ["dnf", "-y", "install"]]
        self.assertIn(["dnf", "-y", "install"] + [f"{p}-{VERSION}-{RELEASE}" for p in PACKAGES], asked)

        ok, inst = self.install_toolkit()
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        for p in PACKAGES:
            self.assertIn(f"{p}-{VERSION}-{RELEASE}", self.installed(inst))
        # gpgcheck=0: no package signature is checked, so rpm imports no key (dnf checked repomd.xml.asc with it).

        # A package whose bytes differ from the signed metadata: same name, other bytes.
        rpm = [p for p in self.rpms if os.path.basename(p).startswith(PACKAGES[0] + "-1")][0]
        with open(rpm, "rb") as f:
            good = f.read()
        try:
            with open(rpm, "wb") as f:
                f.write(good[:-1] + bytes([good[-1] ^ 1]))
            bad, inst = self.install_toolkit()
            self.assertNotEqual(bad.returncode, 0, bad.stdout)
            self.assertRegex(bad.stdout + bad.stderr, "(?i)checksum doesn't match|incorrect checksum")
            self.nothing_installed(inst)
        finally:
            with open(rpm, "wb") as f:
                f.write(good)

        # repomd.xml changed after signing: its signature no longer matches.
        with open(self.repomd) as f:
            signed = f.read()
        try:
            with open(self.repomd, "w") as f:
                f.write(signed.replace("<revision>", "<revision>1", 1))
            tampered, inst = self.install_toolkit()
            self.assertNotEqual(tampered.returncode, 0, tampered.stdout)
            self.assertIn("repomd.xml GPG signature verification error", tampered.stdout + tampered.stderr)
            self.nothing_installed(inst)
        finally:
            with open(self.repomd, "w") as f:
                f.write(signed)

        # repomd.xml without its signature: an unsigned repository is refused.
        asc = self.repomd + ".asc"
        os.rename(asc, asc + ".away")
        try:
            unsigned, inst = self.install_toolkit()
            self.assertNotEqual(unsigned.returncode, 0, unsigned.stdout)
            self.assertRegex(unsigned.stdout + unsigned.stderr, "repomd.xml.asc|GPG signature verification error")
            self.nothing_installed(inst)
        finally:
            os.rename(asc + ".away", asc)

        # What made dnf do all that: the lines hpcbake wrote (checked last, so that a .repo without
        # repo_gpgcheck=1 shows above what dnf then lets through).
        for line in ("gpgcheck=0\n", "repo_gpgcheck=1\n",
                     "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-nvidia-container-toolkit\n"):
            self.assertIn(line, text)

    def test_a_key_other_than_the_pin_is_refused_before_dnf_sees_it(self):
        other = "C607052566F81BB2813915641787F05C5250046E"  # tests/fixtures/openpgp test key
        self.m.edit_repositories(lambda v: v.update(key=dict(v["key"], fingerprint=other)), "nvidia-container-toolkit")
        r = self.m.install_through_reboots()
        # 4 (fetch) or 5 (more than one step failed: the fixture's stand-in artifacts fail their own steps).
        self.assertIn(r.returncode, (4, 5), r.stdout + r.stderr)
        self.assertIn("is not the pinned C607052566F81BB2813915641787F05C5250046E", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.m.root, REPO_FILE)), "no .repo is left behind")

    def test_signatures_metadata_needs_its_source_and_refuses_repo_gpgcheck_off(self):
        path = os.path.join(self.m.manifests, "repositories", "nvidia-container-toolkit.yaml")
        with open(path) as f:
            doc = yaml.safe_load(f)
        el = [v for v in doc["variants"] if v.get("signatures") == "metadata"]
        self.assertTrue(el, "the shipped manifest trusts NVIDIA's rpm repository through its metadata")
        el[0].pop("signatures_source")
        el[0]["repo_gpgcheck"] = False
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        r = self.m.hb("plan")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("signatures_source", r.stderr)
        self.assertIn("needs repo_gpgcheck", r.stderr)


@unittest.skipUnless(os.geteuid() == 0, "needs root (nginx as in cli/repo_dnf)")
class HpcbakeReadsTheSignedChain(unittest.TestCase):
    """hpcbake's own reading of the repository (bundle create): repomd.xml.asc verified by gpgv
    with the pinned key, every data file against the signed repomd.xml, every rpm against
    primary.xml; a change at any level, or no signature, refuses the repository."""

    @classmethod
    def setUpClass(cls):
        start_https_nginx(cls, "hpcbake-repo-dnf-metadata-https-")  # a test CA, serving cls.tmp/www
        www = os.path.join(cls.tmp, "www")
        cls.signer = TestSigner(cls.tmp, "hpcbake stand-in metadata-signed repository <meta@test.invalid>", "rsa3072")
        with open(os.path.join(www, "key.asc"), "w") as f:
            f.write(cls.signer.gpg("--armor", "--export", cls.signer.fpr).stdout)
        rpms = build_rpms(os.path.join(cls.tmp, "rpmbuild"), PACKAGES + ["dkms"])
        # NVIDIA's stand-in twice: SHA-256 metadata (createrepo_c's default) and SHA-512 (as NVIDIA's own).
        for d, extra in (("rpm", []), ("rpm512", ["--checksum", "sha512"])):
            os.makedirs(os.path.join(www, d))
            for rpm in rpms:
                if not os.path.basename(rpm).startswith("dkms-"):
                    shutil.copy(rpm, os.path.join(www, d))
            sh("createrepo_c", "--quiet", *extra, os.path.join(www, d))
            repomd = os.path.join(www, d, "repodata", "repomd.xml")
            cls.signer.gpg("--yes", "--armor", "--detach-sign", "-o", repomd + ".asc", repomd)
        # EPEL's stand-in (dkms for the build tools; EPEL signs packages, not repomd.xml).
        os.makedirs(os.path.join(www, "epel"))
        shutil.copy([r for r in rpms if os.path.basename(r).startswith("dkms-")][0], os.path.join(www, "epel"))
        sh("createrepo_c", "--quiet", os.path.join(www, "epel"))
        cls.repo = os.path.join(www, "rpm")
        cls.ca = os.path.join(cls.tmp, "ca.pem")
        for d in (cls.tmp, www):
            os.chmod(d, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        stop_https_nginx(cls)

    def setUp(self):
        with open(os.path.join(GOLDEN, "plan-nd96isr_h100_v5-almalinux-9-containers.json")) as f:
            golden = json.load(f)
        self.work = tempfile.mkdtemp(prefix="hpcbake-repo-dnf-metadata-")
        self.m = Machine(self.work, golden)  # a fresh cache each time: nothing verified before is reused
        self.m.server.shutdown()
        self.point("rpm")

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def point(self, toolkit_dir):
        base = f"https://127.0.0.1:{self.port}"
        for name, d in (("nvidia-container-toolkit", toolkit_dir), ("epel", "epel")):
            self.m.edit_repositories(lambda v, d=d: v.update(uri=f"{base}/{d}/", key=dict(
                v["key"], urls=[f"{base}/key.asc"], fingerprint=self.signer.fpr)), name)

    def bundle(self):
        out = os.path.join(self.work, "el9.tar")
        r = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", out, "--size", self.m.size,
                "--distro", self.m.distro, *self.m.profile, "--cache", self.m.cache, "--ca-file", self.ca,
                env=BUNDLE_ENV, timeout=120)
        return r, out

    @staticmethod
    @contextlib.contextmanager
    def changed(path, edit):
        """`path` rewritten by edit(bytes) -> bytes for the block, restored afterwards."""
        with open(path, "rb") as f:
            good = f.read()
        with open(path, "wb") as f:
            f.write(edit(good))
        try:
            yield
        finally:
            with open(path, "wb") as f:
                f.write(good)

    def test_the_signed_chain_is_carried(self):
        r, out = self.bundle()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with tarfile.open(out) as tf:
            index = json.load(tf.extractfile("index.json"))
        repos = {x["id"]: x for x in index["repositories"]}
        files = {f["path"] for f in repos["nvidia-container-toolkit"]["files"]}
        self.assertLessEqual({"repodata/repomd.xml", "repodata/repomd.xml.asc"}, files)
        self.assertEqual(sorted(p for p in files if p.endswith(".rpm")),
                         sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.repo, "*.rpm"))))

    def test_a_package_changed_after_createrepo_is_refused(self):
        rpm = glob.glob(os.path.join(self.repo, PACKAGES[0] + "-1*.rpm"))[0]
        with self.changed(rpm, lambda b: b[:-1] + bytes([b[-1] ^ 1])):
            r, _ = self.bundle()
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn(os.path.basename(rpm), r.stderr)
        self.assertRegex(r.stderr, "(?i)sha-?256")

    def test_a_primary_changed_after_signing_is_refused(self):
        primary = glob.glob(os.path.join(self.repo, "repodata", "*-primary.xml.gz"))[0]
        with self.changed(primary, lambda b: gzip.compress(gzip.decompress(b).replace(b"STAND-IN", b"STAND-IN!"))):
            r, _ = self.bundle()
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("primary.xml.gz", r.stderr)

    def test_a_repomd_changed_after_signing_is_refused(self):
        with self.changed(os.path.join(self.repo, "repodata", "repomd.xml"),
                          lambda b: b.replace(b"<revision>", b"<revision>1", 1)):
            r, _ = self.bundle()
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("the signature does not verify with the pinned key", r.stderr)

    def test_an_unsigned_repomd_is_refused(self):
        asc = os.path.join(self.repo, "repodata", "repomd.xml.asc")
        os.rename(asc, asc + ".away")
        try:
            r, _ = self.bundle()
        finally:
            os.rename(asc + ".away", asc)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("repomd.xml.asc", r.stderr)

    def test_sha512_metadata_as_nvidia_publishes_it_is_carried_and_checked(self):
        self.point("rpm512")
        r, out = self.bundle()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with tarfile.open(out) as tf:
            index = json.load(tf.extractfile("index.json"))
        files = {f["path"] for x in index["repositories"] if x["id"] == "nvidia-container-toolkit" for f in x["files"]}
        self.assertEqual(len([p for p in files if p.endswith(".rpm")]), len(PACKAGES))

    def test_sha512_metadata_a_changed_package_is_refused(self):
        self.point("rpm512")
        rpm = glob.glob(os.path.join(self.tmp, "www", "rpm512", PACKAGES[0] + "-1*.rpm"))[0]
        with self.changed(rpm, lambda b: b[:-1] + bytes([b[-1] ^ 1])):
            r, _ = self.bundle()
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("SHA-512 mismatch", r.stderr)
        self.assertIn(os.path.basename(rpm), r.stderr)

def missing():
    if os.geteuid() != 0:
        return "needs root (dnf in a private mount namespace)"
    gone = [t for t in TOOLS if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
    return f"missing {', '.join(gone)} (scripts/deps installs them)" if gone else None


if __name__ == "__main__":
    why = missing()
    if why:
        print(f"SKIPPED: {why}")
        sys.exit(77)
    unittest.main()
