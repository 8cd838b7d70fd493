"""Issue 40, item 5: a password or token in a --mirror URL, in any spelling, appears nowhere: not
on stdout or stderr, not in a file under the root, the cache or a bundle. Spellings libcurl would
read otherwise than their text reads (no scheme, "//host", an unencoded '/', '?', '#' or '@' in
the password) are refused before anything runs, with exit 2 and the URL redacted; the others are
fetched and shown redacted. The URLs are built here from the issue's description."""
import hashlib
import os
import shutil
import sys
import tempfile
import unittest

from common import SRC, copy_manifest_set, run
from test_cli_fetch import component

sys.path.insert(0, os.path.join(SRC, "tests", "servers"))
from fault_server import FaultServer  # noqa: E402

USAGE = 2
FAST = ["--retry-backoff", "0.05", "--stall-timeout", "2", "--attempts", "1"]


class MirrorSecrets(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-urls-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.data = os.path.join(self.tmp, "data")
        self.cache = os.path.join(self.tmp, "cache")
        self.root = os.path.join(self.tmp, "root")
        self.manifests = os.path.join(self.tmp, "manifests")
        for d in (self.data, self.root):
            os.makedirs(d)
        copy_manifest_set(self.manifests, manifests=False)
        for sub in ("sizes", "distros", "components"):
            os.makedirs(os.path.join(self.manifests, sub))
        shutil.copy(os.path.join(SRC, "manifests", "distros", "debian-12.yaml"), os.path.join(self.manifests, "distros"))
        with open(os.path.join(self.manifests, "sizes", "test_fetch.yaml"), "w") as f:
            f.write("schema: 1\nsize: Standard_Test_Fetch\nfamily: test\nsource: tests\n"
                    "infiniband:\n  ports: 1\n  rate_gbps: 100\n")
        self.server = FaultServer(self.data).start()
        self.addCleanup(self.server.stop)
        data = os.urandom(4096)
        with open(os.path.join(self.data, "a.bin"), "wb") as f:
            f.write(data)
        with open(os.path.join(self.manifests, "components", "doca-ofed.yaml"), "w") as f:
            f.write(component([("a.bin", [self.server.url("ok", "a.bin")], hashlib.sha256(data).hexdigest())]))

    def hostport(self):
        return f"127.0.0.1:{self.server.port}"

    def assert_nowhere(self, r, secrets):
        for s in secrets:
            self.assertNotIn(s, r.stdout + r.stderr)
        for base in (self.tmp,):
            for d, _, names in os.walk(base):
                if d.startswith(self.data) or d.startswith(self.manifests):
                    continue
                for n in names:
                    with open(os.path.join(d, n), "rb") as f:
                        data = f.read()
                    for s in secrets:
                        self.assertNotIn(s.encode(), data, os.path.join(d, n))

    def verbs(self, mirror):
        common = ["--manifests", self.manifests, "--root", self.root]
        sd = ["--size", "Standard_Test_Fetch", "--distro", "debian-12"]
        yield "fetch", run(*common, "fetch", *sd, "--cache", self.cache, *FAST, "--mirror", mirror)
        yield "install --dry-run", run(*common, "install", *sd, "--dry-run", "--cache", self.cache, "--mirror", mirror)
        yield "bundle create", run(*common, "bundle", "create", os.path.join(self.tmp, "b.tar"), *sd, "--cache",
                                   self.cache, "--mirror", mirror)
        yield "plan", run(*common, "plan", *sd, "--mirror", mirror)

    def test_spellings_libcurl_reads_otherwise_are_refused_and_never_shown(self):
        hp = self.hostport()
        spellings = [  # (the --mirror value, the bytes that must never come out)
            (f"Uzz:Pzz1@{hp}/m", ["Uzz", "Pzz1"]),
            (f"//Uzz:Pzz2@{hp}/m", ["Uzz", "Pzz2"]),
            (f"http://Uzz:Pzz3a/Pzz3b@{hp}/m", ["Uzz", "Pzz3a", "Pzz3b"]),
            (f"http://Uzz:4711/Pzz4b@{hp}/m", ["Uzz", "4711", "Pzz4b"]),
            (f"http://Uzz:Pzz5a?Pzz5b@{hp}/m", ["Uzz", "Pzz5a", "Pzz5b"]),
            (f"http://Uzz:4712#Pzz6b@{hp}/m", ["Uzz", "4712", "Pzz6b"]),
            (f"http://Uzz:Pzz7a@Pzz7b@{hp}/m", ["Uzz", "Pzz7a", "Pzz7b"]),
            (f"https:/Uzz:Pzz8@{hp}/m", ["Uzz", "Pzz8"]),
        ]
        for mirror, secrets in spellings:
            for verb, r in self.verbs(mirror):
                with self.subTest(mirror=mirror, verb=verb):
                    self.assertEqual(r.returncode, USAGE, r.stdout + r.stderr)
                    if verb != "plan":  # plan has no --mirror: CLI11 names the option only
                        self.assertIn("--mirror: '", r.stderr)
                    self.assert_nowhere(r, secrets)
        self.assertEqual(self.server.log, [], "nothing was asked of the server")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "b.tar")))

    def test_spellings_libcurl_reads_plainly_are_fetched_and_shown_redacted(self):
        hp = self.hostport()
        for mirror, secrets in [
            (f"http://Uzz:Pzz9a%2FPzz9b%40@{hp}/m", ["Uzz", "Pzz9a", "Pzz9b"]),
            (f"http://Uzz@{hp}/m", ["Uzz"]),
            (f"http://{hp}/m?sv=2022-11-02&sig=Pzz10", ["Pzz10", "sig="]),
            (f"http://{hp}/m#Pzz11", ["Pzz11"]),
            ("http://Uzz:Pzz12@[::1]:9/m", ["Uzz", "Pzz12"]),
        ]:
            with self.subTest(mirror=mirror):
                shutil.rmtree(self.cache, True)
                r = run("--manifests", self.manifests, "--root", self.root, "fetch", "--size", "Standard_Test_Fetch",
                        "--distro", "debian-12", "--cache", self.cache, *FAST, "--mirror", mirror)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("/m/sha256/", r.stdout + r.stderr, "the mirror was tried, and named")
                self.assert_nowhere(r, secrets)


if __name__ == "__main__":
    unittest.main()
