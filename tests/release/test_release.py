"""The release in dist/ (scripts/release), tried where nobody built it (issue 16, docs/release.md).

For each architecture's tarball:
  - the binary's NEEDED list and glibc floor (scripts/check-portable);
  - a smoke inside a Debian root of another release, chrooted: Debian 11 (glibc 2.31, OpenSSL
    1.1) and Debian 13 (glibc 2.41, new sonames) for x86_64; Debian 12 arm64 for aarch64, run by
    qemu-user-static. --version, detect against a fixture --root, plan for every size (the same
    plan, byte for byte, as this machine's test build makes), manifest lint, fetch over HTTPS from
    loopback nginx trusting only the root's own CA bundle (then --ca-file, then no CA at all),
    extract, rdma enable on a fixture;
  - the .deb installed with dpkg -i in the Debian 11 and 13 roots, and the binary it installed run;
  - the .deb's and .rpm's dependencies: glibc only;
  - each tarball's man page where the README links it from, and the guides the README, the manual
    and --help link, with every link resolving inside share/doc/hpcbake (issue 46);
  - no test seam in any binary dist/ ships (tarballs, .debs, .rpms, both architectures): no
    HPCBAKE_TEST_* hook named, no runner that records commands instead of running them (those are
    hpcbake-test's, tests/seams/).
Environment: HPCBAKE_DIST (default <source>/dist), HPCBAKE_BIN (the test build, for the plan
comparison). Needs root, debootstrap and qemu-user-static; each test says when it skips and why.
"""
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "cli"))
from common import start_https_nginx, stop_https_nginx  # noqa: E402
from debroot import DebRoot, why_not  # noqa: E402

DIST = os.environ.get("HPCBAKE_DIST", os.path.join(SRC, "dist"))
DEV_BIN = os.environ.get("HPCBAKE_BIN", "")
ROOTS = {"x86_64": [("bullseye", "amd64"), ("trixie", "amd64")], "aarch64": [("bookworm", "arm64")]}
OPT = "/opt/hpcbake"


def tarball(arch):
    found = sorted(glob.glob(os.path.join(DIST, f"hpcbake-*-linux-{arch}.tar.gz")))
    return found[-1] if found else None


def package(pattern):
    found = sorted(glob.glob(os.path.join(DIST, pattern)))
    return found[-1] if found else None


def sizes():
    out = []
    for f in sorted(glob.glob(os.path.join(SRC, "manifests", "sizes", "*.yaml"))):
        with open(f) as fh:
            m = re.search(r'^size:\s*"?([^"\n]+)"?', fh.read(), re.M)
            out.append(m.group(1))
    return out


def why_no_release(arch):
    if not tarball(arch):
        return f"no hpcbake-*-linux-{arch}.tar.gz in {DIST} (scripts/release builds it)"
    return why_not()


class Smoke:
    """Mixin: one architecture's tarball unpacked into each of its foreign roots."""

    arch = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"hpcbake-release-{cls.arch}-")
        os.chmod(cls.tmp, 0o755)
        with tarfile.open(tarball(cls.arch)) as t:
            t.extractall(os.path.join(cls.tmp, "unpacked"))
        (top,) = os.listdir(os.path.join(cls.tmp, "unpacked"))
        cls.tree = os.path.join(cls.tmp, "unpacked", top)
        cls.roots = []
        for suite, deb_arch in ROOTS[cls.arch]:
            root = DebRoot(cls.tmp, suite, deb_arch)
            root.put_tree(cls.tree, OPT)
            root.put_tree(os.path.join(SRC, "tests", "fixtures", "hosts"), "/fixtures/hosts")
            cls.roots.append((f"{suite}-{deb_arch}", root))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def hb(self, root, *args, timeout=300):
        return root.run(f"{OPT}/bin/hpcbake", *args, timeout=timeout)

    def ok(self, name, r, what):
        self.assertEqual(r.returncode, 0, f"{name}: {what} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        return r

    def test_version_detect_lint(self):
        for name, root in self.roots:
            with self.subTest(root=name):
                r = self.ok(name, self.hb(root, "--version"), "--version")
                self.assertRegex(r.stdout, r"^hpcbake \S+ .*commit [0-9a-f]{7,}.*manifests sha256:[0-9a-f]{64}", r.stdout)
                facts = json.loads(self.ok(name, self.hb(root, "--root", "/fixtures/hosts/nd96isr_h100_v5", "--no-imds",
                                                         "detect", "--json"), "detect").stdout)
                self.assertEqual(facts["distro"]["id"], "ubuntu", facts)
                self.assertEqual(facts["pci"]["nvidia_gpus"], 8, facts["pci"])
                r = self.ok(name, self.hb(root, "manifest", "lint"), "manifest lint")
                self.assertRegex(r.stdout + r.stderr, r"0 unverifiable artifacts")

    @unittest.skipUnless(DEV_BIN, "SKIPPED: HPCBAKE_BIN (this machine's test build) is not set, so there is no plan to compare with")
    def test_plan_every_size_as_the_test_build_does(self):
        for name, root in self.roots:
            for size in sizes():
                with self.subTest(root=name, size=size):
                    args = ["--no-imds", "plan", "--size", size, "--distro", "ubuntu-22.04", "--json"]
                    got = self.hb(root, *args)
                    env = dict(os.environ, HPCBAKE_MANIFESTS=os.path.join(SRC, "manifests"))
                    want = subprocess.run([DEV_BIN, *args], capture_output=True, text=True, env=env, timeout=120)
                    self.assertEqual(got.returncode, want.returncode, f"{name} {size}: {got.stderr}\n---\n{want.stderr}")
                    self.assertEqual(got.stdout, want.stdout, f"{name} {size}")

    def test_extract_and_rdma_enable(self):
        for name, root in self.roots:
            with self.subTest(root=name):
                src = root.path("/work/payload")
                os.makedirs(os.path.join(src, "sub"), exist_ok=True)
                with open(os.path.join(src, "sub", "file.txt"), "w") as f:
                    f.write("payload\n")
                with tarfile.open(root.path("/work/payload.tar.gz"), "w:gz") as t:
                    t.add(src, arcname="payload")
                self.ok(name, self.hb(root, "extract", "/work/payload.tar.gz", "/work/out"), "extract")
                with open(root.path("/work/out/payload/sub/file.txt")) as f:
                    self.assertEqual(f.read(), "payload\n")
                with open(os.path.join(SRC, "tests", "fixtures", "os-release", "debian-12")) as f:
                    root.put("/rdmaroot/etc/os-release", f.read())
                root.put("/rdmaroot/etc/waagent.conf", "Provisioning.Agent=auto\n# OS.EnableRDMA=y\n")
                self.ok(name, self.hb(root, "--root", "/rdmaroot", "rdma", "enable"), "rdma enable")
                with open(root.path("/rdmaroot/etc/waagent.conf")) as f:
                    self.assertIn("\nOS.EnableRDMA=y\n", f.read())


class HttpsSmoke:
    """Mixin: fetch over HTTPS inside each root, trusting what that root trusts."""

    def test_fetch_https_with_the_roots_own_ca_bundle(self):
        self.srv = types.SimpleNamespace()
        start_https_nginx(self.srv, f"hpcbake-release-nginx-{self.arch}-")
        try:
            data = os.urandom(256 * 1024)
            with open(os.path.join(self.srv.tmp, "www", "blob.bin"), "wb") as f:
                f.write(data)
            sha = hashlib.sha256(data).hexdigest()
            for name, root in self.roots:
                with self.subTest(root=name):
                    self.fetch_in(name, root, sha)
        finally:
            stop_https_nginx(self.srv)

    def fetch_in(self, name, root, sha):
        man = "/work/manifests"
        shutil.copytree(os.path.join(self.tree, "share", "hpcbake", "drivers"), root.path("/work/drivers"), dirs_exist_ok=True)
        for sub in ("sizes", "distros", "components"):
            os.makedirs(root.path(f"{man}/{sub}"), exist_ok=True)
        shutil.copy(os.path.join(SRC, "manifests", "distros", "debian-12.yaml"), root.path(f"{man}/distros/"))
        root.put(f"{man}/components/doca-ofed.yaml", "\n".join([
            "schema: 1", "component: doca-ofed", "kind: ofed", "description: d", "source: tests", "variants:",
            "  - distros: [debian-12]", '    version: "1"', "    artifacts:", "      - name: blob.bin",
            f'        urls: ["https://127.0.0.1:{self.srv.port}/blob.bin"]', f"        sha256: {sha}", ""]))
        with open(os.path.join(self.srv.tmp, "ca.pem")) as f:
            ca = f.read()
        bundle = "/etc/ssl/certs/ca-certificates.crt"  # where Debian keeps the system's bundle
        with open(os.path.join(root.lower, bundle.lstrip("/"))) as f:
            system = f.read() if os.path.getsize(os.path.join(root.lower, bundle.lstrip("/"))) else ""
        fetch = ["--manifests", man, "fetch", "--all", "--attempts", "1", "--cache"]
        # 1. The root's bundle without the test CA: refused.
        r = self.hb(root, *fetch, "/work/cache1")
        self.assertEqual(r.returncode, 4, f"{name}: {r.stderr}")
        self.assertRegex(r.stderr.lower(), "certificate|ssl")
        # 2. The test CA added to the root's own bundle: found there, with no option.
        root.put(bundle, system + ca)
        self.ok(name, self.hb(root, *fetch, "/work/cache2"), "fetch with the root's CA bundle")
        self.assertTrue(any(sha in f for _, _, fs in os.walk(root.path("/work/cache2")) for f in fs), name)
        # 3. No bundle at all, the CA given with --ca-file.
        root.put(bundle, "")
        root.put("/work/ca.pem", ca)
        self.ok(name, self.hb(root, *fetch, "/work/cache3", "--ca-file", "/work/ca.pem"), "fetch --ca-file")


@unittest.skipIf(why_no_release("x86_64"), f"SKIPPED: {why_no_release('x86_64')}")
class X86_64(Smoke, HttpsSmoke, unittest.TestCase):
    arch = "x86_64"

    def test_portable(self):
        r = subprocess.run([os.path.join(SRC, "scripts", "check-portable"), os.path.join(self.tree, "bin", "hpcbake"),
                            self.arch], capture_output=True, text=True)
        print(r.stdout, end="", file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_deb_installs_with_dpkg_and_runs(self):
        deb = package("hpcbake_*_amd64.deb")
        self.assertTrue(deb, f"no hpcbake_*_amd64.deb in {DIST}")
        with open(deb, "rb") as f:
            data = f.read()
        # Fresh roots: the package's /usr/share/hpcbake must not be what the other tests find.
        work = tempfile.mkdtemp(prefix="deb-", dir=self.tmp)
        os.chmod(work, 0o755)
        for suite, deb_arch in ROOTS[self.arch]:
            name, root = f"{suite}-{deb_arch}", DebRoot(work, suite, deb_arch)
            with self.subTest(root=name):
                root.put("/work/hpcbake.deb", data)
                self.ok(name, root.run("dpkg", "-i", "/work/hpcbake.deb"), "dpkg -i")
                self.ok(name, root.run("/usr/bin/hpcbake", "--version"), "the installed hpcbake --version")
                r = self.ok(name, root.run("/usr/bin/hpcbake", "manifest", "lint"), "the installed hpcbake manifest lint")
                self.assertRegex(r.stdout + r.stderr, "0 unverifiable artifacts")

    def test_packages_depend_on_glibc_only(self):
        for pattern, arch in (("hpcbake_*_amd64.deb", "x86_64"), ("hpcbake_*_arm64.deb", "aarch64")):
            deb = package(pattern)
            if not deb:
                continue
            info = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], capture_output=True, text=True, check=True).stdout
            self.assertEqual(info.strip(), "libc6 (>= 2.28)", deb)
        for rpm in glob.glob(os.path.join(DIST, "*.rpm")):
            reqs = subprocess.run(["rpm", "-qpR", rpm], capture_output=True, text=True, check=True).stdout.split("\n")
            for req in filter(None, (r.strip() for r in reqs)):
                with self.subTest(rpm=os.path.basename(rpm), requires=req):
                    self.assertRegex(req, r"^(rpmlib\(|rtld\(GNU_HASH\)$|/bin/sh$|(libc|libm|libdl|libpthread|librt|ld-linux[-a-z0-9_]*)\.so)")


# What only the test binaries have (tests/seams/): the hook variables, the runners that record
# commands (their class names reach a binary as RTTI even when it is stripped) and the recording
# runner's made-up failure.
SEAM_TEXT = (b"HPCBAKE_TEST_", b"RecordingRunner", b"TestRunner", b"simulated failure of")


def shipped_binaries():
    """(package, bytes) of the hpcbake binary in each tarball, .deb and .rpm in dist/."""
    out = []
    for path in sorted(glob.glob(os.path.join(DIST, "hpcbake-*-linux-*.tar.gz"))):
        with tarfile.open(path) as t:
            (member,) = [m for m in t.getmembers() if m.name.endswith("/bin/hpcbake")]
            out.append((os.path.basename(path), t.extractfile(member).read()))
    for path in sorted(glob.glob(os.path.join(DIST, "hpcbake_*.deb"))):
        fs = subprocess.run(["dpkg-deb", "--fsys-tarfile", path], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(fs)) as t:
            out.append((os.path.basename(path), t.extractfile("./usr/bin/hpcbake").read()))
    for path in sorted(glob.glob(os.path.join(DIST, "hpcbake-*.rpm"))):
        cpio = subprocess.run(["rpm2cpio", path], capture_output=True, check=True).stdout
        out.append((os.path.basename(path), subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "./usr/bin/hpcbake"],
                                                           input=cpio, capture_output=True, check=True).stdout))
    return out


class NoTestSeams(unittest.TestCase):
    def test_no_shipped_binary_has_a_test_hook_or_a_recording_runner(self):
        if not glob.glob(os.path.join(DIST, "hpcbake*")):
            self.skipTest(f"SKIPPED: nothing in {DIST} (scripts/release builds it)")
        for tool, package in (("dpkg-deb", "dpkg"), ("rpm2cpio", "rpm"), ("cpio", "cpio")):
            if not shutil.which(tool):
                self.skipTest(f"SKIPPED: {tool} is not installed (Debian package {package}; scripts/deps installs it)")
        found = shipped_binaries()
        self.assertTrue(found, f"no release binary in {DIST}")
        for name, data in found:
            with self.subTest(package=name):
                self.assertGreater(len(data), 1 << 20, "the binary was read")
                self.assertIn(b"hpcbake", data)
                self.assertEqual([t.decode() for t in SEAM_TEXT if t in data], [], f"{name}: bin/hpcbake names a test seam")


class TarballDocs(unittest.TestCase):
    def test_each_tarball_carries_the_man_page_and_the_guides_and_their_links_resolve(self):
        found = sorted(glob.glob(os.path.join(DIST, "hpcbake-*-linux-*.tar.gz")))
        if not found:
            self.skipTest(f"SKIPPED: no hpcbake-*-linux-*.tar.gz in {DIST} (scripts/release builds it)")
        sys.path.insert(0, os.path.join(SRC, "tests", "docs"))
        import test_doc_links as links  # noqa: E402  (the docs/links test's parser)
        for path in found:
            top = os.path.basename(path)[:-len(".tar.gz")]
            with self.subTest(tarball=os.path.basename(path)), tempfile.TemporaryDirectory() as tmp:
                with tarfile.open(path) as t:
                    names = set(t.getnames())
                    t.extractall(tmp, members=[m for m in t.getmembers() if m.name.startswith(f"{top}/share/doc/")])
                # README.md: ln -sf /opt/hpcbake-VERSION-linux-ARCH/share/man/man1/hpcbake.1.gz ...
                self.assertIn(f"{top}/share/man/man1/hpcbake.1.gz", names)
                docdir = os.path.join(tmp, top, "share", "doc", "hpcbake")
                for doc in ("README.md", "docs/manual.md", "docs/secure-boot.md", "docs/kernels.md", "docs/security.md",
                            "docs/verify.md", "packer/README.md"):
                    self.assertTrue(os.path.isfile(os.path.join(docdir, doc)), doc)
                problems, followed = links.shipped_problems(docdir)
                self.assertEqual(problems, [], "\n".join(problems))
                self.assertGreater(followed, 100, "the links were read")

@unittest.skipIf(why_no_release("aarch64"), f"SKIPPED: {why_no_release('aarch64')}")
class PortableSigning(unittest.TestCase):
    """The portable binary signs a module and reads the signature back (libkmod built with
    OpenSSL): without it every signed module read as unsigned, and install refused every module
    it signed under Secure Boot. On this machine, with DKMS and the headers of a kernel here."""

    def test_module_install_signs_and_checks_the_signer(self):
        if not tarball("x86_64"):
            self.skipTest(why_no_release("x86_64"))
        if os.geteuid() != 0 or not shutil.which("dkms"):
            self.skipTest("SKIPPED: needs root and dkms (scripts/deps installs it)")
        kernels = sorted(k for k in os.listdir("/lib/modules") if os.path.isdir(f"/lib/modules/{k}/build"))
        if not kernels:
            self.skipTest("SKIPPED: no kernel headers under /lib/modules/*/build (scripts/deps installs them)")
        k = kernels[-1]
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(tarball("x86_64")) as t:
                t.extractall(tmp)
            tree = glob.glob(os.path.join(tmp, "hpcbake-*-linux-x86_64"))[0]
            os.makedirs(os.path.join(tmp, "inst", k))
            r = subprocess.run([os.path.join(tree, "bin", "hpcbake"), "--manifests", os.path.join(SRC, "manifests"),
                                "module", "install", os.path.join(SRC, "tests", "fixtures", "modules", "hpcbake-fixture"),
                                "--name", "hpcbake-fixture", "--version", "1.0", "--module", "hpcbake_fixture",
                                "--kernel", k, "--dkmstree", f"{tmp}/dkms", "--sourcetree", f"{tmp}/src",
                                "--installtree", f"{tmp}/inst", "--no-depmod", "--sign", "on", "--key-dir",
                                f"{tmp}/keys"], capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("signed by 'hpcbake module signing key'", r.stdout)
            ko = os.path.join(tmp, "inst", k, "updates", "dkms", "hpcbake_fixture.ko")
            signer = subprocess.run(["modinfo", "-F", "signer", ko], capture_output=True, text=True).stdout.strip()
            self.assertEqual(signer, "hpcbake module signing key")


class Aarch64(Smoke, HttpsSmoke, unittest.TestCase):
    arch = "aarch64"

    def test_portable(self):
        r = subprocess.run([os.path.join(SRC, "scripts", "check-portable"), os.path.join(self.tree, "bin", "hpcbake"),
                            self.arch], capture_output=True, text=True)
        print(r.stdout, end="", file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
