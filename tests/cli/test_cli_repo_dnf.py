"""A signed vendor rpm repository through hpcbake and real dnf.

An rpm repository in NVIDIA's CUDA layout (repodata/repomd.xml with a detached, armored
repomd.xml.asc, as NVIDIA/cuda-repo-management SIGNATURES.md describes for the rhel8/rhel9
repositories) holds STAND-IN packages with the vendor's name and a dependency to resolve:
nvidia-fabricmanager 580.126.20-1 (marked "stand-in" in its summary; its payload is the unit
file the real package ships) requiring hpcbake-standin-dependency. rpmbuild builds them,
rpmsign signs them, createrepo_c indexes them and gpg signs repomd.xml, all with a key made for
the test; nginx serves the repository over HTTPS.

`hpcbake install` for Standard_ND96isr_H100_v5 on AlmaLinux 9 (a fixture machine, commands
recorded; its manifests take Fabric Manager from NVIDIA's rpm repository, where the shipped ones
install the pinned rpm file) writes the .repo file and the pinned key; real dnf then installs from exactly those
files into a fresh --installroot: the metadata signature and each package signature verify
against the key hpcbake wrote, the dependency resolves, and the unit file lands. A version the
repository does not have, a package whose bytes differ from the signed metadata, and a tampered
repomd.xml are each refused by dnf with nothing installed; a key other than the pin is refused
by hpcbake before dnf sees it.

dnf reads the repository's gpgkey=file:///etc/pki/rpm-gpg/... from the host's /etc even with
--installroot, so it runs in a private mount namespace (unshare -m) whose /etc is the fixture's
/etc laid over the host's (a read-only overlay): nothing of the host's dnf or rpm state is read
or changed. dnf's "local" plugin (on in Debian's dnf-plugins-core) is turned off.
"""
import glob
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import textwrap
import unittest

import yaml

from common import TestSigner, run, start_https_nginx, stop_https_nginx
from test_cli_contract import Machine

TOOLS = ["gpg", "rpmbuild", "rpmsign", "createrepo_c", "dnf", "rpm", "unshare", "openssl", "nginx"]
MISSING = [t for t in TOOLS if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
FM = ("nvidia-fabricmanager", "580.126.20", "1")
DEP = ("hpcbake-standin-dependency", "1", "1")
DKMS = ("dkms", "3.1.6", "1")  # EPEL's, for the build tools: the one package of them EPEL gives
BUNDLE_ENV = {"SOURCE_DATE_EPOCH": "1700000000", "HPCBAKE_TEST_RUNNER": ""}  # bundle create runs for real
UNIT = "usr/lib/systemd/system/nvidia-fabricmanager.service"


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def spec(name, version, release, requires=None, unit=None):
    lines = [f"Name: {name}", f"Version: {version}", f"Release: {release}",
             f"Summary: hpcbake test STAND-IN for {name} (not the vendor's package)", "License: none",
             "BuildArch: noarch"]
    if requires:
        lines.append(f"Requires: {requires}")
    lines += ["%description", "A stand-in built by hpcbake's tests.", "%install"]
    if unit:
        lines += [f"mkdir -p %{{buildroot}}/{os.path.dirname(unit)}",
                  f"printf '[Unit]\\nDescription=stand-in\\n[Service]\\nExecStart=/bin/true\\n' > %{{buildroot}}/{unit}"]
    lines += ["%files"] + ([f"/{unit}"] if unit else [])
    return "\n".join(lines) + "\n"


@unittest.skipUnless(os.geteuid() == 0, "SKIPPED: needs root (dnf in a private mount namespace)")
@unittest.skipIf(MISSING, f"SKIPPED: missing {', '.join(MISSING)} (scripts/deps installs them)")
class SignedRpmRepository(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_https_nginx(cls, "hpcbake-repo-dnf-")  # a test CA, serving cls.tmp/www
        t = cls.tmp
        cls.signer = TestSigner(t, "hpcbake stand-in rpm repository <repo@test.invalid>", "rsa3072")
        cls.gpg, cls.fpr, cls.genv = cls.signer.gpg, cls.signer.fpr, cls.signer.env
        www = os.path.join(t, "www")
        cls.repo = os.path.join(www, "rpm")
        os.makedirs(cls.repo)
        with open(os.path.join(www, "key.asc"), "w") as f:
            f.write(cls.gpg("--armor", "--export", cls.fpr).stdout)
        top = os.path.join(t, "rpmbuild")
        os.makedirs(os.path.join(top, "SPECS"))
        # EPEL's stand-in: its own directory, dkms and the dependency, unsigned metadata (as EPEL's).
        cls.epel = os.path.join(www, "epel")
        os.makedirs(cls.epel)
        for name, version, release in (FM, DEP, DKMS):
            path = os.path.join(top, "SPECS", name + ".spec")
            with open(path, "w") as f:
                f.write(spec(name, version, release, requires=DEP[0] if name in (FM[0], DKMS[0]) else None,
                             unit=UNIT if name == FM[0] else None))
            sh("rpmbuild", "--quiet", "--define", f"_topdir {top}", "-bb", path)
        for rpm in glob.glob(os.path.join(top, "RPMS", "*", "*.rpm")):
            base = os.path.basename(rpm)
            if not base.startswith("dkms-"):
                shutil.copy(rpm, cls.repo)
            if not base.startswith(FM[0]):
                shutil.copy(rpm, cls.epel)
        cls.rpms = sorted(glob.glob(os.path.join(cls.repo, "*.rpm")))
        epel_rpms = sorted(glob.glob(os.path.join(cls.epel, "*.rpm")))
        sh("rpmsign", "--define", f"__gpg {shutil.which('gpg')}", "--define", f"_gpg_name {cls.fpr}",
           "--define", "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase=", "--addsign",
           *cls.rpms, *epel_rpms, env=cls.genv)
        for rpm in cls.rpms + epel_rpms:
            assert "Key ID" in sh("rpm", "-qpi", rpm).stdout, f"{rpm} is not signed"
        sh("createrepo_c", "--quiet", cls.repo)
        sh("createrepo_c", "--quiet", cls.epel)
        cls.repomd = os.path.join(cls.repo, "repodata", "repomd.xml")
        cls.gpg("--yes", "--armor", "--detach-sign", "-o", cls.repomd + ".asc", cls.repomd)
        for d in (t, www):
            os.chmod(d, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        stop_https_nginx(cls)

    def setUp(self):
        import json
        with open(os.path.join(os.path.dirname(__file__), "..", "golden",
                               "plan-nd96isr_h100_v5-almalinux-9.json")) as f:
            golden = json.load(f)
        self.work = tempfile.mkdtemp(prefix="hpcbake-repo-dnf-")
        self.m = Machine(self.work, golden)
        self.m.server.shutdown()  # its plain-HTTP key server is not used here
        self.pin(self.fpr)
        self.ca = os.path.join(self.tmp, "ca.pem")
        # The shipped EL variant installs the pinned rpm file (as azhpc-images does); this copy
        # takes Fabric Manager from NVIDIA's rpm repository instead, the way a site with its own
        # mirror of it would, so that the repository flow runs through dnf.
        path = os.path.join(self.m.manifests, "components", "nvidia-fabricmanager.yaml")
        with open(path) as f:
            doc = yaml.safe_load(f)
        for v in doc["variants"]:
            if "almalinux-9" in v["distros"]:
                v.pop("artifacts", None)
                v["repository"] = "nvidia-cuda"
                v["packages"] = ["-".join(FM)]
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def pin(self, fingerprint):
        """Both repositories of the EL plan point at their stand-ins (nvidia-cuda, epel)."""
        base = f"https://127.0.0.1:{self.port}"
        for path in glob.glob(os.path.join(self.m.manifests, "repositories", "*.yaml")):
            with open(path) as f:
                doc = yaml.safe_load(f)
            for v in doc["variants"]:
                v["uri"] = base + ("/epel/" if path.endswith("epel.yaml") else "/rpm/")
                v["key"]["urls"] = [base + "/key.asc"]
                v["key"]["fingerprint"] = fingerprint
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)

    def install(self):
        return self.m.install_through_reboots("--ca-file", self.ca)

    def dnf(self, *args, epel=False):
        """Real dnf on hpcbake's files, into a fresh installroot; returns (result, installroot).
        The fixture's /etc and /var/lib (where a bundle's repository copies are) lie over the host's."""
        inst = tempfile.mkdtemp(prefix="installroot-", dir=self.work)
        # Only the CUDA repository unless asked: the tampering cases are about NVIDIA's signed
        # metadata (EPEL does not sign its repomd.xml).
        opts = ["-y", "--disableplugin=local", f"--installroot={inst}", "--releasever=9",
                "--setopt=reposdir=/etc/yum.repos.d", f"--setopt=sslcacert={self.ca}",
                f"--setopt=cachedir={inst}/var/cache/dnf"] + ([] if epel else ["--disablerepo=hpcbake-epel"])
        script = ('mount -t overlay overlay -o "lowerdir=$0/etc:/etc" /etc && '
                  'mount -t overlay overlay -o "lowerdir=$0/var/lib:/var/lib" /var/lib && exec dnf "$@"')
        os.makedirs(os.path.join(self.m.root, "var/lib"), exist_ok=True)
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                            self.m.root, *opts, *args],
                           capture_output=True, text=True, timeout=180)
        return r, inst

    @staticmethod
    def installed(inst):
        return sorted(subprocess.run(["rpm", "--root", inst, "-qa", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\\n"],
                                     capture_output=True, text=True).stdout.split())

    def nothing_installed(self, inst):
        self.assertFalse([p for p in self.installed(inst) if not p.startswith("gpg-pubkey")],
                         "a refused install leaves no package behind")

    def test_hpcbake_writes_what_dnf_trusts_and_dnf_refuses_tampering(self):
        r = self.install()
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        with open(os.path.join(self.m.root, "etc/yum.repos.d/hpcbake-nvidia-cuda.repo")) as f:
            text = f.read()
        for line in ("gpgcheck=1\n", "repo_gpgcheck=1\n", "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-nvidia-cuda\n"):
            self.assertIn(line, text)
        # hpcbake's own plan asked dnf for exactly this spec (recorded on the fixture).
        asked = [a for a in self.m.recorded() if a[:3] == ["dnf", "-y", "install"]]
        self.assertIn(["dnf", "-y", "install", "nvidia-fabricmanager-580.126.20-1"], asked)

        name, version, release = FM
        ok, inst = self.dnf("install", f"{name}-{version}-{release}")
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        self.assertIn(f"{name}-{version}-{release}", self.installed(inst))
        self.assertIn("-".join(DEP), self.installed(inst), "the dependency resolved")
        self.assertTrue(os.path.isfile(os.path.join(inst, UNIT)), "the package's unit file is on disk")
        self.assertIn(f"gpg-pubkey-{self.fpr[-8:].lower()}", " ".join(self.installed(inst)),
                      "rpm imported the key hpcbake wrote")

        # A version the repository does not have: dnf names it, installs nothing.
        gone, inst = self.dnf("install", f"{name}-580.126.99-1")
        self.assertNotEqual(gone.returncode, 0)
        self.assertIn("580.126.99-1", gone.stdout + gone.stderr)
        self.nothing_installed(inst)

        # A package whose bytes differ from the signed metadata.
        rpm = [p for p in self.rpms if os.path.basename(p).startswith(name)][0]
        with open(rpm, "rb") as f:
            good = f.read()
        try:
            with open(rpm, "wb") as f:
                f.write(good[:-1] + bytes([good[-1] ^ 1]))
            bad, inst = self.dnf("install", f"{name}-{version}-{release}")
            self.assertNotEqual(bad.returncode, 0, bad.stdout)
            self.assertRegex(bad.stdout + bad.stderr, "(?i)checksum doesn't match|incorrect checksum")
            self.nothing_installed(inst)
        finally:
            with open(rpm, "wb") as f:
                f.write(good)

        # A tampered repomd.xml: changed after signing. repo_gpgcheck refuses the repository.
        with open(self.repomd) as f:
            signed = f.read()
        try:
            with open(self.repomd, "w") as f:
                f.write(signed.replace("<revision>", "<revision>1", 1))
            tampered, inst = self.dnf("install", f"{name}-{version}-{release}")
            self.assertNotEqual(tampered.returncode, 0, tampered.stdout)
            self.assertIn("repomd.xml GPG signature verification error", tampered.stdout + tampered.stderr)
            self.nothing_installed(inst)
        finally:
            with open(self.repomd, "w") as f:
                f.write(signed)

    def test_a_bundle_carries_both_repositories_and_dnf_installs_from_it_offline(self):
        bundle = os.path.join(self.work, "el9.tar")
        made = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", bundle, "--size", self.m.size,
                   "--distro", self.m.distro, "--cache", self.m.cache, "--ca-file", self.ca, env=BUNDLE_ENV,
                   timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        self.assertIn("nvidia-fabricmanager-580.126.20-1.noarch", made.stdout)
        self.assertIn("dkms-3.1.6-1.noarch", made.stdout)
        with tarfile.open(bundle) as tf:
            index = json.load(tf.extractfile("index.json"))
        repos = {r["id"]: r for r in index["repositories"]}
        self.assertEqual(set(repos), {"nvidia-cuda", "epel"})
        cuda = {f["path"] for f in repos["nvidia-cuda"]["files"]}
        self.assertLessEqual({"repodata/repomd.xml", "repodata/repomd.xml.asc", "hpcbake-repository-key"}, cuda)
        self.assertEqual(sorted(p for p in cuda if p.endswith(".rpm")), sorted(os.path.basename(p) for p in self.rpms))
        epel = {f["path"] for f in repos["epel"]["files"]}
        self.assertNotIn("repodata/repomd.xml.asc", epel, "EPEL does not sign its metadata")
        self.assertTrue([p for p in epel if p.startswith("dkms-")], epel)
        # The build tools EPEL does not have are the distribution's.
        self.assertIn("gcc", repos["epel"]["from_distribution"])

        # The node: no network (the manifests' repository address answers nothing), an empty cache.
        self.m.cache = os.path.join(self.work, "node-cache")
        os.makedirs(self.m.cache)
        self.m.edit_repositories(lambda v: v.update(uri="https://127.0.0.1:9/rpm/",
                                                    key=dict(v["key"], urls=["https://127.0.0.1:9/key.asc"])))
        r = self.m.install_through_reboots("--bundle", bundle)
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        with open(os.path.join(self.m.root, "etc/yum.repos.d/hpcbake-nvidia-cuda.repo")) as f:
            self.assertIn("baseurl=file:///var/lib/hpcbake/repos/nvidia-cuda/\n", f.read())
        # Real dnf from the copies alone: repomd.xml's signature, each rpm's, the dependencies.
        ok, inst = self.dnf("install", "-".join(FM), "dkms", epel=True)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        self.assertNotIn("https://", ok.stdout + ok.stderr)
        for pkg in (FM, DEP, DKMS):
            self.assertIn("-".join(pkg), self.installed(inst))

    def test_a_repository_key_other_than_the_pin_is_refused_before_dnf_sees_it(self):
        self.pin("C607052566F81BB2813915641787F05C5250046E")  # tests/fixtures/openpgp test key
        r = self.install()
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("is not the pinned C607052566F81BB2813915641787F05C5250046E", r.stderr)
        for path in ("etc/yum.repos.d/hpcbake-epel.repo", "etc/pki/rpm-gpg/RPM-GPG-KEY-hpcbake-epel",
                     "etc/yum.repos.d/hpcbake-nvidia-cuda.repo"):
            self.assertFalse(os.path.exists(os.path.join(self.m.root, path)), f"{path} is not left behind")


if __name__ == "__main__":
    unittest.main()
