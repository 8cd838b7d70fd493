"""`hpcbake fetch` against a real nginx over HTTPS (HTTP/2), with a test CA made here.

Checks TLS verification (refused without the CA, accepted with --ca-file), ranges and
ETags through nginx (resume, and a changed validator starting over), and connection reuse.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from common import SRC, run, copy_manifest_set, start_https_nginx, stop_https_nginx

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
OPENSSL = shutil.which("openssl")
SIZE = 3 * 1024 * 1024


@unittest.skipUnless(NGINX and OPENSSL, "SKIPPED: nginx or openssl is not installed (scripts/deps installs both)")
class NginxHttps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_https_nginx(cls, "hpcbake-nginx-")

    @classmethod
    def tearDownClass(cls):
        stop_https_nginx(cls)

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="hpcbake-nginx-case-", dir=self.tmp)
        self.cache = os.path.join(self.work, "cache")
        self.manifests = os.path.join(self.work, "manifests")
        copy_manifest_set(self.manifests, manifests=False)
        for sub in ("sizes", "distros", "components"):
            os.makedirs(os.path.join(self.manifests, sub))
        shutil.copy(os.path.join(SRC, "manifests", "distros", "debian-12.yaml"), os.path.join(self.manifests, "distros"))
        open(os.path.join(self.tmp, "access.log"), "w").close()
        self.arts = {}

    def blob(self, name):
        data = os.urandom(SIZE)
        with open(os.path.join(self.tmp, "www", name), "wb") as f:
            f.write(data)
        self.arts[name] = hashlib.sha256(data).hexdigest()
        return data

    def pin(self):
        lines = ["schema: 1", "component: doca-ofed", "kind: ofed", "description: d", "source: tests", "variants:",
                 "  - distros: [debian-12]", '    version: "1"', "    artifacts:"]
        for name, sha in self.arts.items():
            lines += [f"      - name: {name}", f'        urls: ["https://127.0.0.1:{self.port}/{name}"]',
                      f"        sha256: {sha}"]
        with open(os.path.join(self.manifests, "components", "doca-ofed.yaml"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def fetch(self, *args):
        return run("--manifests", self.manifests, "fetch", "--all", "--cache", self.cache, "--retry-backoff", "0.05",
                   *args)

    def access(self):
        with open(os.path.join(self.tmp, "access.log")) as f:
            return [line.split() for line in f if line.strip()]

    def test_tls_is_verified_and_the_test_ca_accepted_with_ca_file(self):
        self.blob("tls.bin")
        self.pin()
        r = self.fetch("--attempts", "1")
        self.assertEqual(r.returncode, 4)
        self.assertRegex(r.stderr.lower(), "certificate|ssl")
        self.assertFalse(os.listdir(os.path.join(self.cache, "sha256")))
        r = self.fetch("--ca-file", os.path.join(self.tmp, "ca.pem"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(os.path.join(self.cache, "sha256")), [self.arts["tls.bin"]])

    def test_four_artifacts_share_connections(self):
        for i in range(4):
            self.blob(f"k{i}.bin")
        self.pin()
        r = self.fetch("--ca-file", os.path.join(self.tmp, "ca.pem"), "--parallel", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.access()
        self.assertEqual(len(log), 4)
        self.assertTrue(all(entry[1] == "200" for entry in log))
        self.assertLess(len({entry[3] for entry in log}), 4, "HTTP/2 multiplexing or keep-alive reuses a connection")

    def test_resume_through_nginx_and_a_changed_validator_starts_over(self):
        data = self.blob("resume.bin")
        self.pin()
        sha = self.arts["resume.bin"]
        part = os.path.join(self.cache, "partial", sha + ".part")
        os.makedirs(os.path.dirname(part))
        with open(part, "wb") as f:
            f.write(data[:SIZE // 2])
        r = self.fetch("--ca-file", os.path.join(self.tmp, "ca.pem"))
        self.assertEqual(r.returncode, 0, r.stderr)
        uri, status, sent = self.access()[-1][:3]
        self.assertEqual((status, int(sent)), ("206", SIZE - SIZE // 2))

        # A sidecar whose validator the server no longer has: If-Range fails, nginx sends it all.
        os.remove(os.path.join(self.cache, "sha256", sha))
        with open(part, "wb") as f:
            f.write(data[:SIZE // 3])
        import hashlib as h
        url = f"https://127.0.0.1:{self.port}/resume.bin"
        with open(os.path.join(self.cache, "partial", sha + ".json"), "w") as f:
            json.dump({"url": url, "url_sha256": h.sha256(url.encode()).hexdigest(), "validator": '"stale-etag"'}, f)
        r = self.fetch("--ca-file", os.path.join(self.tmp, "ca.pem"))
        self.assertEqual(r.returncode, 0, r.stderr)
        entry = self.access()[-1]
        self.assertEqual((entry[1], int(entry[2])), ("200", SIZE))
        self.assertIn("stale-etag", " ".join(entry))  # nginx logs the If-Range it was sent


if __name__ == "__main__":
    unittest.main()
