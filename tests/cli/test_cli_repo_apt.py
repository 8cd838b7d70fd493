"""A signed vendor repository through hpcbake and real apt, in a real Debian 12 root.

A flat apt repository in NVIDIA's CUDA layout, holding STAND-IN packages with the vendor's
names and dependency shapes (nvidia-driver-pinning-580.126.16 with its apt preferences,
nvidia-open, libnvidia-compute, nvidia-fabricmanager, DCGM's four packages; marked "stand-in"
in their descriptions) and newer versions beside the pins, is signed here with a key made for
the test and served by nginx over HTTPS. `hpcbake install` for Standard_ND96isr_H100_v5 on
Ubuntu 22.04 (a fixture machine, commands recorded) writes the pinned key, the deb822 source and
apt preferences; real apt-get and dpkg in a cached debootstrap'ed Debian 12 root (tests/cli/
debroot.py, through an overlay per test) then read exactly those files and install: the
signature chain verifies, the pins hold against newer versions, and a tampered InRelease, a
version the repository no longer has, and a package whose bytes differ from the signed index
are each refused with nothing half-installed. `bundle create` carries the repository's part the
plan needs, and the same root installs from the bundle's copy with no network.
"""
import glob
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

from common import TestSigner, run, start_https_nginx, stop_https_nginx, tamper_bundle
from debroot import DebRoot, why_not
from test_cli_contract import Machine

TOOLS = ["gpg", "apt-ftparchive", "dpkg-deb", "unshare", "apt-get", "openssl", "nginx"]
MISSING = [t for t in TOOLS if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
PIN_PREFS = ("Package: nvidia-open libnvidia-compute\nPin: version 580.126.16-1\nPin-Priority: 1000\n")
DCGM = "1:4.5.2-1"
BUNDLE_ENV = {"SOURCE_DATE_EPOCH": "1700000000", "HPCBAKE_TEST_RUNNER": ""}  # bundle create runs for real
# (name, version, depends, files): what the plan for ND96isr_H100_v5 on Ubuntu 22.04 asks of
# NVIDIA's repository, as empty stand-ins with the vendor's names and dependency shapes. The
# pinning package ships apt preferences, as NVIDIA's nvidia-driver-pinning-<version> does.
STANDINS = [("nvidia-driver-pinning-580.126.16", "580.126.16-1", "",
             {"etc/apt/preferences.d/nvidia-driver-pinning.pref": PIN_PREFS}),
            ("nvidia-open", "580.126.16-1", "libnvidia-compute (= 580.126.16-1)", {}),
            ("libnvidia-compute", "580.126.16-1", "", {}),
            ("nvidia-fabricmanager", "580.126.16-1", "", {}),
            ("datacenter-gpu-manager-4-core", DCGM, "", {}),
            ("datacenter-gpu-manager-4-cuda13", DCGM, f"datacenter-gpu-manager-4-core (= {DCGM})", {}),
            ("datacenter-gpu-manager-4-proprietary", DCGM, "", {}),
            ("datacenter-gpu-manager-4-proprietary-cuda13", DCGM, "", {})]
# Newer versions than the pins, as NVIDIA's repository always has: apt's preferences (hpcbake's
# for Fabric Manager, the pinning package's for the driver) must keep apt on the pinned ones.
NEWER = [("nvidia-fabricmanager", "580.126.20-1", "", {}),
         ("nvidia-open", "580.126.20-1", "libnvidia-compute (= 580.126.20-1)", {}),
         ("libnvidia-compute", "580.126.20-1", "", {})]


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


@unittest.skipIf(why_not(), f"SKIPPED: the Debian 12 root for real apt {why_not()}")
@unittest.skipIf(MISSING, f"SKIPPED: missing {', '.join(MISSING)} (scripts/deps installs them)")
class SignedAptRepository(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_https_nginx(cls, "hpcbake-repo-apt-")  # a test CA, serving cls.tmp/www
        t = cls.tmp
        cls.signer = TestSigner(t, "hpcbake stand-in repository <repo@test.invalid>", "ed25519")
        cls.gpg, cls.fpr = cls.signer.gpg, cls.signer.fpr
        www = os.path.join(t, "www")
        cls.repo = os.path.join(www, "repo")
        os.makedirs(cls.repo)
        with open(os.path.join(www, "key.asc"), "w") as f:
            f.write(cls.gpg("--armor", "--export", cls.fpr).stdout)
        for name, version, depends, files in STANDINS + NEWER:
            pkg = os.path.join(t, f"pkg-{name}-{version}")
            os.makedirs(os.path.join(pkg, "DEBIAN"))
            for path, text in files.items():
                os.makedirs(os.path.join(pkg, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(pkg, path), "w") as f:
                    f.write(text)
            with open(os.path.join(pkg, "DEBIAN", "control"), "w") as f:
                f.write(f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
                        + (f"Depends: {depends}\n" if depends else "")
                        + f"Maintainer: hpcbake tests <tests@test.invalid>\n"
                        f"Description: hpcbake test STAND-IN for NVIDIA's {name}\n")
            deb = f"{name}_{version.split(':')[-1]}_all.deb"
            sh("dpkg-deb", "--root-owner-group", "--build", "-Zgzip", pkg, os.path.join(cls.repo, deb))
        cls.sign_repo()
        for d in (t, www):
            os.chmod(d, 0o755)

    @classmethod
    def sign_repo(cls):
        with open(os.path.join(cls.repo, "Packages"), "w") as f:
            f.write(sh("apt-ftparchive", "packages", ".", cwd=cls.repo).stdout)
        with open(os.path.join(cls.repo, "Packages"), "rb") as f, gzip.open(os.path.join(cls.repo, "Packages.gz"), "wb") as g:
            g.write(f.read())  # as NVIDIA's repository lists both
        with open(os.path.join(cls.repo, "Release"), "w") as f:
            f.write(sh("apt-ftparchive", "release", ".", cwd=cls.repo).stdout)
        cls.gpg("--yes", "--clearsign", "-o", os.path.join(cls.repo, "InRelease"), os.path.join(cls.repo, "Release"))

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        stop_https_nginx(cls)

    def setUp(self):
        with open(os.path.join(os.path.dirname(__file__), "..", "golden",
                               "plan-nd96isr_h100_v5-ubuntu-22.04-host.json")) as f:
            golden = json.load(f)
        self.work = tempfile.mkdtemp(prefix="hpcbake-repo-apt-")
        os.chmod(self.work, 0o755)
        self.m = Machine(self.work, golden)
        self.m.server.shutdown()  # its plain-HTTP key server is not used here
        base = f"https://127.0.0.1:{self.port}"
        path = os.path.join(self.m.manifests, "repositories", "nvidia-cuda.yaml")
        with open(path) as f:
            doc = yaml.safe_load(f)
        for v in doc["variants"]:
            v["uri"] = base + "/repo/"
            v["key"]["urls"] = [base + "/key.asc"]
            v["key"]["fingerprint"] = self.fpr
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        self.ca = os.path.join(self.tmp, "ca.pem")
        self.root = DebRoot(self.work)  # a real Debian 12 root, through an overlay for this test

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def install(self):
        return self.m.install_through_reboots("--ca-file", self.ca)

    def give_root(self, *globs):
        """hpcbake's files from the fixture machine into the Debian root, at the same paths, and
        the test CA for apt's https method."""
        for pattern in globs:
            for src in glob.glob(os.path.join(self.m.root, pattern)):
                rel = os.path.relpath(src, self.m.root)
                if os.path.isdir(src):
                    self.root.put_tree(src, rel)
                else:
                    with open(src, "rb") as f:
                        self.root.put(rel, f.read())
        with open(self.ca, "rb") as f:
            self.root.put("/etc/hpcbake-test-ca.pem", f.read())
        self.root.put("/etc/apt/apt.conf.d/99hpcbake-test", 'Acquire::https::CaInfo "/etc/hpcbake-test-ca.pem";\n')

    def apt(self, *args):
        """Real apt-get in the Debian root, on hpcbake's files: the .sources it wrote, the keyring
        at its Signed-By path, the preferences it wrote."""
        return self.root.run("apt-get", "-q", "-y", *args)

    def installed(self, *names):
        r = self.root.run("dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n", *names)
        return {ln.split()[0]: ln.split()[1] for ln in r.stdout.splitlines() if ln.split()[2:] == ["ii"]}

    def test_hpcbake_writes_what_apt_trusts_and_apt_refuses_tampering(self):
        r = self.install()
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        sources = os.path.join(self.m.root, "etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources")
        with open(sources) as f:
            text = f.read()
        self.assertIn("Signed-By: /usr/share/keyrings/hpcbake-nvidia-cuda.gpg\n", text)
        self.give_root("usr/share/keyrings/hpcbake-*", "etc/apt/sources.list.d/hpcbake-*",
                       "etc/apt/preferences.d/hpcbake-*")

        up = self.apt("update")
        self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
        self.assertNotIn("NO_PUBKEY", up.stdout + up.stderr)
        # The preferences hpcbake wrote hold Fabric Manager at the pin though the repository has
        # a newer one: apt's candidate is the pinned version.
        with open(os.path.join(self.m.root, "etc/apt/preferences.d/hpcbake-nvidia-fabricmanager.pref")) as f:
            self.assertIn("Package: nvidia-fabricmanager\nPin: version 580.126.16-1\nPin-Priority: 1001\n", f.read())
        policy = self.root.run("apt-cache", "policy", "nvidia-fabricmanager")
        self.assertRegex(policy.stdout, r"Candidate: 580\.126\.16-1")

        # A version the repository no longer has: apt says so by name.
        gone = self.apt("install", "nvidia-fabricmanager=580.126.99-1")
        self.assertNotEqual(gone.returncode, 0)
        self.assertIn("580.126.99-1", gone.stdout + gone.stderr)

        # As the plan does: the version pin in its own transaction, then the driver by name.
        pin = self.apt("install", "nvidia-driver-pinning-580.126.16")
        self.assertEqual(pin.returncode, 0, pin.stdout + pin.stderr)

        # A package whose bytes differ from the signed index: refused, nothing of it installed.
        deb = os.path.join(self.repo, "nvidia-open_580.126.16-1_all.deb")
        with open(deb, "rb") as f:
            good = f.read()
        try:
            with open(deb, "wb") as f:
                f.write(good[:-1] + bytes([good[-1] ^ 1]))
            bad = self.apt("install", "nvidia-open")
            self.assertNotEqual(bad.returncode, 0, bad.stdout)
            self.assertRegex(bad.stdout + bad.stderr, "Hash Sum mismatch|unexpected size|Hashes of expected file")
            self.assertEqual(self.installed("nvidia-open", "libnvidia-compute"), {}, "nothing half-installed")
        finally:
            with open(deb, "wb") as f:
                f.write(good)

        # The real install: dpkg unpacks and configures each package; the pinning package's
        # preferences and hpcbake's keep apt on the pins though the repository has newer ones.
        full = self.apt("install", "nvidia-open", "nvidia-fabricmanager",
                        *[f"{n}={v}" for n, v, _, _ in STANDINS if n.startswith("datacenter-")])
        self.assertEqual(full.returncode, 0, full.stdout + full.stderr)
        have = self.installed(*[n for n, _, _, _ in STANDINS])
        self.assertEqual(have, {n: v for n, v, _, _ in STANDINS})

        # A tampered InRelease: the signed text changed after signing. With no index from before
        # (a fresh machine), apt refuses the repository; it never reads the tampered index.
        self.root.run("sh", "-c", "rm -f /var/lib/apt/lists/*_* && rm -rf /var/lib/apt/lists/partial/*")
        inrelease = os.path.join(self.repo, "InRelease")
        with open(inrelease) as f:
            signed = f.read()
        try:
            digest = hashlib.sha256(b"tampered").hexdigest()
            with open(inrelease, "w") as f:
                f.write(signed.replace("SHA256:\n", f"SHA256:\n {digest} 1 Extra\n", 1))
            tampered = self.apt("update")
            self.assertRegex(tampered.stdout + tampered.stderr, "BADSIG|not signed|signatures were invalid")
            self.assertNotEqual(tampered.returncode, 0, tampered.stdout + tampered.stderr)
            lists = self.root.run("ls", "/var/lib/apt/lists").stdout.split()
            self.assertFalse([f for f in lists if f.endswith("_Packages")], "no index was taken")
        finally:
            with open(inrelease, "w") as f:
                f.write(signed)

    def make_bundle(self):
        bundle = os.path.join(self.work, "nd96isr.tar")
        r = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", bundle, "--size", self.m.size,
                "--distro", self.m.distro, "--cache", self.m.cache, "--ca-file", self.ca, env=BUNDLE_ENV, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return bundle, r

    def go_offline(self):
        """The node: an empty cache, and manifests whose repository address answers nothing."""
        self.m.cache = os.path.join(self.work, "node-cache")
        os.makedirs(self.m.cache)
        self.m.edit_repositories(lambda v: v.update(uri="https://127.0.0.1:9/repo/",
                                                    key=dict(v["key"], urls=["https://127.0.0.1:9/key.asc"])),
                                 "nvidia-cuda")

    def test_a_bundle_carries_what_the_plan_installs_and_apt_installs_it_offline(self):
        # The server lacks the uncompressed index InRelease lists (as Debian's archives do): the
        # bundle carries the compression it has, and apt on the node reads that one.
        plain = os.path.join(self.repo, "Packages")
        os.rename(plain, plain + ".away")
        try:
            bundle, made = self.make_bundle()
        finally:
            os.rename(plain + ".away", plain)
        # The pinning package's preferences chose the driver, not the repository's newest.
        self.assertIn("nvidia-open=580.126.16-1", made.stdout)
        self.assertIn("libnvidia-compute=580.126.16-1", made.stdout)
        self.assertNotIn("580.126.20", made.stdout)
        with tarfile.open(bundle) as tf:
            index = json.load(tf.extractfile("index.json"))
            members = set(tf.getnames())
        repo = index["repositories"][0]
        self.assertEqual(repo["id"], "nvidia-cuda")
        self.assertEqual(repo["fingerprint"], self.fpr)
        paths = {f["path"] for f in repo["files"]}
        self.assertNotIn("Packages", paths)
        self.assertLessEqual({"InRelease", "Packages.gz", "hpcbake-repository-key",
                              "nvidia-open_580.126.16-1_all.deb", "datacenter-gpu-manager-4-core_4.5.2-1_all.deb"},
                             paths)
        self.assertFalse([p for p in paths if "580.126.20" in p], paths)
        for f in repo["files"]:
            self.assertIn("artifacts/" + f["sha256"], members)

        self.go_offline()
        r = self.m.install_through_reboots("--bundle", bundle)
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        sources = os.path.join(self.m.root, "etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources")
        with open(sources) as f:
            text = f.read()
        self.assertIn("URIs: file:///var/lib/hpcbake/repos/nvidia-cuda/\n", text)
        mirror = os.path.join(self.m.root, "var/lib/hpcbake/repos/nvidia-cuda")
        self.assertEqual(sorted(os.listdir(mirror)), sorted(paths))

        # Real apt, offline, on the copy in a real Debian root: the signature with the pinned key,
        # the indexes against InRelease, each package against the index, then dpkg.
        self.give_root("usr/share/keyrings/hpcbake-*", "etc/apt/sources.list.d/hpcbake-*",
                       "etc/apt/preferences.d/hpcbake-*", "var/lib/hpcbake/repos")
        up = self.apt("update")
        self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
        self.assertNotIn("https://", up.stdout + up.stderr)
        self.assertIn("file:/var/lib/hpcbake/repos/nvidia-cuda", up.stdout)
        for batch in (["nvidia-driver-pinning-580.126.16"],
                      ["nvidia-open", "nvidia-fabricmanager"] + [f"{n}={v}" for n, v, _, _ in STANDINS
                                                                 if n.startswith("datacenter-")]):
            got = self.apt("install", *batch)
            self.assertEqual(got.returncode, 0, got.stdout + got.stderr)
        self.assertEqual(self.installed(*[n for n, _, _, _ in STANDINS]), {n: v for n, v, _, _ in STANDINS})

    def test_a_tampered_bundle_is_refused_before_its_repository_is_used(self):
        bundle, _ = self.make_bundle()
        with tarfile.open(bundle) as tf:
            index = json.load(tf.extractfile("index.json"))
        deb = [f for f in index["repositories"][0]["files"] if f["path"] == "nvidia-open_580.126.16-1_all.deb"][0]
        tampered = os.path.join(self.work, "tampered.tar")
        tamper_bundle(bundle, "artifacts/" + deb["sha256"], tampered)
        self.go_offline()
        r = self.m.install_through_reboots("--bundle", tampered)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("nvidia-cuda/nvidia-open_580.126.16-1_all.deb in bundle", r.stderr)
        self.assertIn("tampered or corrupt", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.m.root, "etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources")))

    def test_bundle_create_refuses_a_repository_whose_signature_fails(self):
        inrelease = os.path.join(self.repo, "InRelease")
        with open(inrelease) as f:
            signed = f.read()
        try:
            with open(inrelease, "w") as f:
                f.write(signed.replace("Packages.gz", "Packages.gX", 1))  # (trailing spaces are not signed)
            bundle = os.path.join(self.work, "bad.tar")
            r = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", bundle, "--size", self.m.size,
                    "--distro", self.m.distro, "--cache", self.m.cache, "--ca-file", self.ca, env=BUNDLE_ENV,
                    timeout=120)
        finally:
            with open(inrelease, "w") as f:
                f.write(signed)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("the signature does not verify with the pinned key", r.stderr)
        self.assertFalse(os.path.exists(bundle))
        self.assertFalse(os.path.exists(bundle + ".tmp"))

    def test_a_repository_key_other_than_the_pin_is_refused_before_apt_sees_it(self):
        path = os.path.join(self.m.manifests, "repositories", "nvidia-cuda.yaml")
        with open(path) as f:
            doc = yaml.safe_load(f)
        for v in doc["variants"]:
            v["key"]["fingerprint"] = "C607052566F81BB2813915641787F05C5250046E"  # tests/fixtures/openpgp test key
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        r = self.install()
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("is not the pinned C607052566F81BB2813915641787F05C5250046E", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.m.root, "etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources")),
                         "no source file is left for a key that was refused")
        self.assertFalse(os.path.exists(os.path.join(self.m.root, "usr/share/keyrings/hpcbake-nvidia-cuda.gpg")))


if __name__ == "__main__":
    unittest.main()
