"""`hpcbake fetch` and `hpcbake cache` against a fault-injecting server on loopback.

Every fault has a test that asserts the retry, resume or clear error, and that nothing
unverified ever lands in <cache>/sha256/.
"""
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from common import SRC, host, run, start, read_until, copy_manifest_set

sys.path.insert(0, os.path.join(SRC, "tests", "servers"))
from fault_server import FaultServer, make_test_ca  # noqa: E402

SIZE = 2 * 1024 * 1024
FAST = ["--retry-backoff", "0.05", "--stall-timeout", "2"]


def component(artifacts, sha_override=None):
    lines = ["schema: 1", "component: doca-ofed", "kind: ofed", "description: test artifacts", "source: tests",
             "variants:", "  - distros: [debian-12]", '    version: "1.0"', "    artifacts:"]
    for name, urls, sha, *size in artifacts:  # a fourth element pins the size
        lines += [f"      - name: {name}", "        urls: [" + ", ".join(f'"{u}"' for u in urls) + "]",
                  f"        sha256: {sha}"] + [f"        size: {s}" for s in size]
    return "\n".join(lines) + "\n"


class FetchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-fetch-")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        self.cache = os.path.join(self.tmp, "cache")
        self.manifests = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.manifests, manifests=False)
        for sub in ("sizes", "distros", "components"):
            os.makedirs(os.path.join(self.manifests, sub))
        shutil.copy(os.path.join(SRC, "manifests", "distros", "debian-12.yaml"),
                    os.path.join(self.manifests, "distros"))
        with open(os.path.join(self.manifests, "sizes", "test_fetch.yaml"), "w") as f:
            f.write("schema: 1\nsize: Standard_Test_Fetch\nfamily: test\nsource: tests\n"
                    "infiniband:\n  ports: 1\n  rate_gbps: 100\n")
        self.server = FaultServer(self.data, trickle_rate=256 * 1024).start()
        self.sha = {}

    def tearDown(self):
        self.server.stop()
        shutil.rmtree(self.tmp)

    def blob(self, name, size=SIZE):
        data = os.urandom(size)
        with open(os.path.join(self.data, name), "wb") as f:
            f.write(data)
        self.sha[name] = hashlib.sha256(data).hexdigest()
        return self.sha[name]

    def pin(self, artifacts):
        with open(os.path.join(self.manifests, "components", "doca-ofed.yaml"), "w") as f:
            f.write(component(artifacts))

    def one(self, fault, name=None, extra_urls=()):
        name = name or f"{fault}.bin"
        sha = self.blob(name)
        self.pin([(name, [self.server.url(fault, name), *extra_urls], sha)])
        return name, sha

    def fetch(self, *args, **kw):
        return run("--manifests", self.manifests, "fetch", "--size", "Standard_Test_Fetch", "--distro", "debian-12",
                   "--cache", self.cache, *FAST, *args, **kw)

    def cached(self):
        return sorted(os.listdir(os.path.join(self.cache, "sha256")))

    def assert_verified(self, sha):
        path = os.path.join(self.cache, "sha256", sha)
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), sha)
        self.assertEqual(glob.glob(os.path.join(self.cache, "partial", "*")), [], "no partial left behind")

    # -- plain, parallel, cache hit ------------------------------------------------------------
    def test_parallel_fetch_then_cache_hit_costs_no_network(self):
        arts = []
        for i in range(4):
            name = f"part{i}.bin"
            arts.append((name, [self.server.url("ok", name)], self.blob(name)))
        self.pin(arts)
        r = self.fetch("--parallel", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cached(), sorted(self.sha.values()))
        for sha in self.sha.values():
            self.assert_verified(sha)
        before = len(self.server.log)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.server.log), before, "a cache hit makes no request")
        self.assertIn("part0.bin cached (2.0 MiB)", r.stderr)
        self.assertIn("(4 cached)", r.stderr)
        self.assertNotIn("/s", r.stderr.splitlines()[-1], "a cache hit is not a transfer rate")

    # -- faults that are retried and resumed ------------------------------------------------------
    def test_dropped_connection_resumes_with_range_and_if_range(self):
        name, sha = self.one("drop")
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual(len(log), 2)
        self.assertEqual(log[0]["bytes"], SIZE // 2)
        self.assertEqual(log[1]["range"], f"bytes={SIZE // 2}-")
        self.assertIsNotNone(log[1]["if_range"])
        self.assertEqual((log[1]["status"], log[1]["bytes"]), (206, SIZE - SIZE // 2))
        self.assert_verified(sha)

    def test_short_body_resumes(self):
        name, sha = self.one("short")
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.server.requests_for(name)[1]["status"], 206)
        self.assert_verified(sha)

    def test_stall_is_detected_by_the_low_speed_timeout_and_resumed(self):
        name, sha = self.one("stall")
        start = time.monotonic()
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.monotonic() - start, 20)
        log = self.server.requests_for(name)
        self.assertEqual(log[-1]["range"], f"bytes={SIZE // 10}-")
        self.assert_verified(sha)

    def test_503_and_429_honour_retry_after(self):
        for code in ("503", "429"):
            with self.subTest(code=code):
                name, sha = self.one(code)
                start = time.monotonic()
                r = self.fetch()
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertGreaterEqual(time.monotonic() - start, 2.0, "two Retry-After: 1 waits")
                self.assertEqual([e["status"] for e in self.server.requests_for(name)], [int(code), int(code), 200])
                self.assertIn("HTTP " + code, r.stderr)
                self.assert_verified(sha)

    def test_changed_etag_starts_over(self):
        name, sha = self.one("etagchange")
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual(log[1]["if_range"], '"v1"')
        self.assertEqual((log[1]["status"], log[1]["bytes"]), (200, SIZE), "validator changed: whole file again")
        self.assert_verified(sha)

    def test_server_that_ignores_ranges_restarts_from_zero(self):
        name, sha = self.one("norange")
        os.makedirs(os.path.join(self.cache, "partial"))
        with open(os.path.join(self.data, name), "rb") as f:
            head = f.read(SIZE // 3)
        with open(os.path.join(self.cache, "partial", sha + ".part"), "wb") as f:
            f.write(head)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual(log[0]["range"], f"bytes={SIZE // 3}-")
        self.assertEqual((log[0]["status"], log[0]["bytes"]), (200, SIZE))
        self.assert_verified(sha)

    def test_a_resumed_download_that_fails_its_digest_is_retried_whole_on_the_same_url(self):
        # Found by bench/chaos: a transfer of bad bytes killed halfway left a .part with a wrong
        # prefix; every later run resumed after it, failed the digest and gave up on the only
        # URL, so the install never converged.
        name, sha = self.one("ok")
        os.makedirs(os.path.join(self.cache, "partial"))
        with open(os.path.join(self.data, name), "rb") as f:
            head = bytearray(f.read(SIZE // 3))
        head[100] ^= 0xFF
        with open(os.path.join(self.cache, "partial", sha + ".part"), "wb") as f:
            f.write(head)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual([(e["range"], e["status"]) for e in log], [(f"bytes={SIZE // 3}-", 206), (None, 200)])
        self.assertIn("trying again from the start", r.stderr)
        self.assertEqual(len(glob.glob(os.path.join(self.cache, "quarantine", sha + ".*"))), 1, "the bad bytes are kept")
        self.assert_verified(sha)

    def test_redirect_is_followed_and_a_loop_moves_to_the_next_url(self):
        name, sha = self.one("loop", extra_urls=[self.server.url("redirect", "loop.bin")])
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("redirect", r.stderr.lower())
        self.assert_verified(sha)

    # -- faults that are not retried on the same URL ------------------------------------------------
    def test_404_moves_to_the_next_url_without_retrying(self):
        name, sha = self.one("404", extra_urls=[self.server.url("ok", "404.bin")])
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([e["status"] for e in self.server.requests_for(name)], [404, 200])
        self.assert_verified(sha)

    def test_wrong_bytes_are_quarantined_and_named(self):
        name, sha = self.one("wrong")
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertEqual(self.cached(), [], "nothing unverified lands in the cache")
        self.assertIn(self.server.url("wrong", name), r.stderr)
        self.assertIn(f"expected {sha}", r.stderr)
        self.assertIn(f"({SIZE} bytes)", r.stderr)
        bad = glob.glob(os.path.join(self.cache, "quarantine", sha + ".*"))
        self.assertEqual(len(bad), 1)
        self.assertEqual(len(self.server.requests_for(name)), 1, "a digest mismatch is not retried on that URL")

    def test_unreachable_server_fails_with_exit_4(self):
        name = "gone.bin"
        self.pin([(name, ["http://127.0.0.1:9/gone.bin"], self.blob(name))])
        r = self.fetch("--attempts", "2")
        self.assertEqual(r.returncode, 4)
        self.assertIn("gone.bin", r.stderr)
        self.assertEqual(self.cached(), [])

    # -- security -------------------------------------------------------------------------------
    def test_sas_token_never_appears_in_output_or_cache(self):
        name = "secret.bin"
        sha = self.blob(name)
        self.pin([(name, [self.server.url("drop", name) + "?sv=2021&sig=TOPSECRET"], sha)])
        for extra in ([], ["--json"]):
            shutil.rmtree(self.cache, ignore_errors=True)
            r = self.fetch(*extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("TOPSECRET", r.stdout + r.stderr)
        bad = self.fetch("--mirror", f"http://127.0.0.1:{self.server.port}/f/404?sig=MIRRORSECRET")
        self.assertNotIn("MIRRORSECRET", bad.stdout + bad.stderr)
        for path in glob.glob(os.path.join(self.cache, "**"), recursive=True):
            if os.path.isfile(path) and "sha256" not in path:
                with open(path, "rb") as f:
                    self.assertNotIn(b"TOPSECRET", f.read())

    def test_a_host_without_ca_certificates_skips_https_says_why_and_keeps_http(self):
        # The CA store is looked for under HPCBAKE_TEST_TLS_ROOT (an empty tree: a host without
        # ca-certificates); a test hook, so --root names a fixture tree. The CA variables of the
        # environment running the tests would win over the tree: empty means unset.
        empty = os.path.join(self.tmp, "no-ca-certificates")
        os.makedirs(empty)
        env = {"HPCBAKE_TEST_TLS_ROOT": empty, "SSL_CERT_FILE": "", "SSL_CERT_DIR": "", "CURL_CA_BUNDLE": ""}

        def fetch():
            return run("--root", empty, "--manifests", self.manifests, "fetch", "--size", "Standard_Test_Fetch",
                       "--distro", "debian-12", "--cache", self.cache, *FAST, env=env)

        looked_at = [os.path.join(empty, p) for p in ("etc/ssl/certs/ca-certificates.crt",
                                                      "etc/pki/tls/certs/ca-bundle.crt",
                                                      "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
                                                      "var/lib/ca-certificates/ca-bundle.pem", "etc/ssl/ca-bundle.pem",
                                                      "etc/ssl/cert.pem", "etc/ssl/certs", "etc/pki/tls/certs")]
        name = "tls.bin"
        sha = self.blob(name)
        self.pin([(name, ["https://127.0.0.1:9/tls.bin", self.server.url("ok", name)], sha)])
        r = fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("https://127.0.0.1:9/tls.bin: no CA certificates to verify TLS with", r.stderr)
        self.assertIn("trying the next URL", r.stderr)
        self.assert_verified(sha)

        name = "tls-only.bin"
        sha = self.blob(name)
        self.pin([(name, ["https://127.0.0.1:9/tls-only.bin"], sha)])
        r = fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        error = [line for line in r.stderr.splitlines() if line.startswith("hpcbake: error: tls-only.bin")]
        self.assertEqual(len(error), 1, r.stderr)
        for path in looked_at:
            self.assertIn(path, error[0])
        self.assertIn("install the distribution's CA certificates", error[0])
        self.assertIn("or pass --ca-file FILE", error[0])
        self.assertEqual(self.server.requests_for(name), [])

        # The small-request client (IMDS, repository keys) says the same.
        r = run("--root", host("plain"), "--imds-url", "https://127.0.0.1:9/metadata", "detect", "--json", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("https://127.0.0.1:9/metadata: no CA certificates to verify TLS with", r.stdout)

    def test_unpinned_artifact_is_refused_unless_pinned_on_the_command_line(self):
        name = "unpinned.bin"
        sha = self.blob(name)
        self.pin([(name, [self.server.url("ok", name)], "unknown")])
        r = self.fetch()
        self.assertEqual(r.returncode, 4)
        self.assertIn("refusing to download without a pinned SHA-256: unpinned.bin", r.stderr)
        self.assertEqual(self.server.log, [])
        r = self.fetch("--sha256", f"{name}={sha}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_verified(sha)
        r = self.fetch("--sha256", f"{name}=abc")
        self.assertEqual(r.returncode, 2)

    # -- mirrors, JSON, kill and resume, cache commands -----------------------------------------------
    def test_mirror_by_sha256_is_tried_first(self):
        name, sha = self.one("404")
        mirror = os.path.join(self.tmp, "mirror")
        os.makedirs(mirror)
        shutil.copy(os.path.join(self.data, name), os.path.join(mirror, sha))
        msrv = FaultServer(mirror).start()
        try:
            r = self.fetch("--mirror", f"http://127.0.0.1:{msrv.port}/f/ok")
        finally:
            msrv.stop()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.server.requests_for(name), [], "the manifest URL was never needed")
        self.assertEqual([e["path"] for e in msrv.log], [f"/f/ok/sha256/{sha}"])
        self.assert_verified(sha)

    def test_json_lines(self):
        name, sha = self.one("drop")
        r = self.fetch("--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        events = [json.loads(line) for line in r.stdout.splitlines()]
        kinds = [e["event"] for e in events]
        self.assertEqual(kinds[0], "started")
        self.assertIn("retrying", kinds)
        self.assertEqual(kinds[-2], "finished")
        self.assertEqual(events[-2]["bytes"], SIZE)
        self.assertEqual(kinds[-1], "result")
        self.assertEqual([(a["name"], a["sha256"]) for a in events[-1]["artifacts"]], [(name, sha)])

    def fetch_until_half(self, sha, size=SIZE):
        """A fetch started in the background, returned once half the artifact is in its .part."""
        env = dict(os.environ, HPCBAKE_MANIFESTS=self.manifests)
        proc = subprocess.Popen([os.environ["HPCBAKE_BIN"], "fetch", "--size", "Standard_Test_Fetch", "--distro",
                                 "debian-12", "--cache", self.cache], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        part = os.path.join(self.cache, "partial", sha + ".part")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if os.path.exists(part) and os.path.getsize(part) >= size // 2:
                break
            time.sleep(0.05)
        return proc, part

    def test_sigkill_halfway_then_the_next_run_fetches_only_the_remainder(self):
        name, sha = self.one("trickle")
        proc, part = self.fetch_until_half(sha)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        kept = os.path.getsize(part)
        self.assertGreater(kept, 0)
        self.assertLess(kept, SIZE)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual(log[-1]["range"], f"bytes={kept}-")
        self.assertEqual(log[-1]["bytes"], SIZE - kept, "the second run fetched only the remainder")
        self.assert_verified(sha)

    def test_ctrl_c_keeps_the_partial_download_says_so_and_the_next_run_resumes(self):
        name, sha = self.one("trickle")
        proc, part = self.fetch_until_half(sha)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130, stderr)
        kept = os.path.getsize(part)
        self.assertGreater(kept, 0)
        self.assertLess(kept, SIZE)
        self.assertIn("hpcbake: interrupted: 0 of 1 artifacts are verified in the cache; 1 partial downloads", stderr)
        self.assertIn(os.path.join(self.cache, "partial"), stderr)
        self.assertIn("partial downloads resume where they stopped", stderr)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual(log[-1]["range"], f"bytes={kept}-")
        self.assert_verified(sha)

    def test_progress_in_a_real_terminal_at_40_80_and_200_columns(self):
        """fetch in tmux: the bars redraw in place and never wrap, and the screen ends with one total."""
        SMALL = 768 * 1024  # 3 s at the server's trickle rate: long enough for several redraws
        if not shutil.which("tmux"):
            self.skipTest("tmux is not installed (scripts/deps installs it)")
        names = []
        for i in range(2):
            name = f"slow{i}.bin"
            names.append((name, self.blob(name, size=SMALL)))
        lines = ["schema: 1", "component: doca-ofed", "kind: ofed", "description: test artifacts", "source: tests",
                 "variants:", "  - distros: [debian-12]", '    version: "1.0"', "    artifacts:"]
        for name, sha in names:
            lines += [f"      - name: {name}", f'        urls: ["{self.server.url("trickle", name)}"]',
                      f"        sha256: {sha}", f"        size: {SMALL}"]
        with open(os.path.join(self.manifests, "components", "doca-ofed.yaml"), "w") as f:
            f.write("\n".join(lines) + "\n")
        for width in (40, 80, 200):
            with self.subTest(width=width):
                shutil.rmtree(self.cache, ignore_errors=True)
                sock = f"hpcbake-test-{os.getpid()}-{width}"
                cmd = " ".join([os.environ["HPCBAKE_BIN"], "--manifests", self.manifests, "fetch", "--size",
                                "Standard_Test_Fetch", "--distro", "debian-12", "--cache", self.cache, *FAST,
                                ">/dev/null; echo EXIT=$?; sleep 60"])
                env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
                subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", str(width), "-y", "30", "-s", "t",
                                "sh", "-c", cmd], check=True, env=env, timeout=30)
                self.addCleanup(subprocess.run, ["tmux", "-L", sock, "kill-server"], capture_output=True)
                saw_bar, screen = False, ""
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and "EXIT=" not in screen:
                    time.sleep(0.25)
                    # -J joins a wrapped line: a bar that wrapped shows up longer than the terminal.
                    screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-J", "-t", "t"],
                                            capture_output=True, text=True, timeout=30).stdout
                    rows = [line for line in screen.splitlines() if line.strip()]
                    for line in rows:
                        self.assertLess(len(line), width, f"a line wraps at {width} columns:\n{screen}")
                    saw_bar = saw_bar or any("slow" in line and "/s" in line for line in rows)
                self.assertIn("EXIT=0", screen)
                self.assertTrue(saw_bar, "a live line with the transfer rate was on the screen")
                totals = [line for line in screen.splitlines() if "/2 done" in line]
                self.assertEqual(len(totals), 1, f"one total, the redraws leave nothing behind:\n{screen}")
                self.assertIn("2/2 done", totals[0])
                self.assertEqual(sum(f"fetched slow{i}.bin" in screen for i in range(2)), 2, screen)

    def test_cache_list_and_verify_quarantine_a_corrupt_entry(self):
        name, sha = self.one("ok")
        self.assertEqual(self.fetch().returncode, 0)
        r = run("cache", "--cache", self.cache, "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(sha, r.stdout)
        r = run("cache", "--cache", self.cache, "verify")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 verified, 0 corrupt", r.stdout)
        with open(os.path.join(self.cache, "sha256", sha), "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))  # always a change; writing a fixed byte was a 1-in-256 no-op on random data
        r = run("cache", "--cache", self.cache, "verify")
        self.assertEqual(r.returncode, 4)
        self.assertIn("0 verified, 1 corrupt", r.stdout)
        self.assertEqual(self.cached(), [])
        self.assertTrue(os.path.exists(os.path.join(self.cache, "quarantine", sha + ".corrupt")))

    def test_bundle_round_trip_and_a_tampered_byte_refused_by_name(self):
        import tarfile
        arts = []
        for i in range(3):
            name = f"b{i}.bin"
            arts.append((name, [self.server.url("ok", name)], self.blob(name, 256 * 1024)))
        self.pin(arts)
        bundle = os.path.join(self.tmp, "bundle.tar")
        r = run("--manifests", self.manifests, "bundle", "create", bundle, "--size", "Standard_Test_Fetch",
                "--distro", "debian-12", "--cache", self.cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        with tarfile.open(bundle) as t:
            names = t.getnames()
            index = json.load(t.extractfile("index.json"))
        self.assertEqual(names[0], "index.json")
        self.assertIn("manifests/components/doca-ofed.yaml", names)
        self.assertEqual(sorted(a["sha256"] for a in index["artifacts"]), sorted(self.sha.values()))
        self.assertFalse(os.path.exists(bundle + ".tmp"))

        # Offline: a fresh cache filled only from the bundle, the server stopped.
        self.server.stop()
        self.server = FaultServer(self.data).start()  # a new, unused server for tearDown
        fresh = os.path.join(self.tmp, "fresh")
        r = run("--manifests", self.manifests, "fetch", "--size", "Standard_Test_Fetch", "--distro", "debian-12",
                "--cache", fresh, "--bundle", bundle)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(fresh, "sha256"))), sorted(self.sha.values()))
        self.assertEqual(self.server.log, [])

        # Flip one byte inside b1.bin's data in the tar.
        with tarfile.open(bundle) as t:
            member = t.getmember("artifacts/" + self.sha["b1.bin"])
            offset = member.offset_data + 1000
        with open(bundle, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ 0xFF]))
        tampered = os.path.join(self.tmp, "tampered")
        r = run("--manifests", self.manifests, "fetch", "--size", "Standard_Test_Fetch", "--distro", "debian-12",
                "--cache", tampered, "--bundle", bundle)
        self.assertEqual(r.returncode, 4)
        self.assertIn("b1.bin in bundle", r.stderr)
        self.assertIn("tampered or corrupt", r.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(tampered, "sha256"))),
                         sorted([self.sha["b0.bin"], self.sha["b2.bin"]]), "only the untouched artifacts land")

    def test_cache_gc_keeps_pinned_entries_and_drops_the_rest(self):
        name, sha = self.one("ok")
        self.assertEqual(self.fetch().returncode, 0)
        stray = os.path.join(self.cache, "sha256", "0" * 64)
        for path in (stray, os.path.join(self.cache, "partial", "1" * 64 + ".part"),
                     os.path.join(self.cache, "quarantine", "2" * 64 + ".0")):
            with open(path, "wb") as f:
                f.write(b"x" * 100)
        r = run("--manifests", self.manifests, "cache", "--cache", self.cache, "gc")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("removed 3 files", r.stdout)
        self.assertEqual(self.cached(), [sha])
        self.assertEqual(os.listdir(os.path.join(self.cache, "partial")), [])
        self.assertEqual(os.listdir(os.path.join(self.cache, "quarantine")), [])

    def test_cache_gc_skips_a_part_file_a_download_holds(self):
        # Regression: gc unlinked .part files without the lock fetch holds on them, so a
        # running download lost its file. fetch holds flock(LOCK_EX) on the .part: so do we.
        import fcntl
        part = os.path.join(self.cache, "partial", "3" * 64 + ".part")
        os.makedirs(os.path.dirname(part), exist_ok=True)
        os.makedirs(os.path.join(self.cache, "sha256"), exist_ok=True)
        os.makedirs(os.path.join(self.cache, "quarantine"), exist_ok=True)
        with open(part, "wb") as held:
            held.write(b"x" * 100)
            held.flush()
            fcntl.flock(held, fcntl.LOCK_EX)
            r = run("--manifests", self.manifests, "cache", "--cache", self.cache, "gc")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("being downloaded by another hpcbake process", r.stderr)
            self.assertIn("removed 0 files", r.stdout)
            self.assertTrue(os.path.exists(part))
        r = run("--manifests", self.manifests, "cache", "--cache", self.cache, "gc")
        self.assertIn("removed 1 files", r.stdout)
        self.assertFalse(os.path.exists(part))


    # -- issue 20: downgrades, secrets in URLs, disks, cache trust, progress ----------------------------
    def tls_server(self, **kw):
        """A second fault server over HTTPS with a CA made here; returns (server, ca file)."""
        ca, tls = make_test_ca(self.tmp)
        srv = FaultServer(self.data, tls=tls, **kw).start()
        self.addCleanup(srv.stop)
        return srv, ca

    def test_an_https_redirect_to_http_is_refused_naming_both_urls(self):
        http_base = f"http://127.0.0.1:{self.server.port}"
        tls, ca = self.tls_server(downgrade_to=http_base)
        name = "down.bin"
        sha = self.blob(name)
        self.pin([(name, [tls.url("downgrade", name)], sha)])
        r = self.fetch("--ca-file", ca)
        self.assertEqual(r.returncode, 4, r.stderr)
        error = [line for line in r.stderr.splitlines() if line.startswith(f"hpcbake: error: {name}")]
        self.assertEqual(len(error), 1, r.stderr)
        self.assertIn(tls.url("downgrade", name), error[0])
        self.assertIn(f"{http_base}/f/ok/{name}", error[0])
        self.assertIn("an https:// URL may only redirect to https://", error[0])
        self.assertIn("ask the server's owner to redirect to https://", error[0])
        self.assertEqual(self.server.requests_for(name), [], "nothing was asked over plain http")
        self.assertEqual(self.cached(), [])
        # https -> https and http -> https are followed.
        self.pin([(name, [tls.url("redirect", name)], sha)])
        self.assertEqual(self.fetch("--ca-file", ca).returncode, 0)
        shutil.rmtree(self.cache)
        self.server.downgrade_to = f"https://127.0.0.1:{tls.port}"
        self.pin([(name, [self.server.url("downgrade", name)], sha)])
        r = self.fetch("--ca-file", ca)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_verified(sha)

    def test_a_password_in_a_url_is_never_printed_nor_written_and_resume_still_works(self):
        password = self.server.credentials[1]
        name = "auth.bin"
        sha = self.blob(name)
        self.server.trickle_rate = 1 << 20  # 2 s in all: slow enough to be killed halfway, no slower
        self.pin([(name, [self.server.userinfo_url("auth+trickle", name)], sha, SIZE)])
        proc, part = self.fetch_until_half(sha)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        kept = os.path.getsize(part)
        self.assertGreater(kept, 0)
        with open(os.path.join(self.cache, "partial", sha + ".json")) as f:
            sidecar = f.read()
        self.assertNotIn(password, sidecar)
        self.assertIn("***@127.0.0.1", sidecar, "the sidecar keeps the URL, redacted")
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"http://***@127.0.0.1:{self.server.port}/f/auth+trickle/{name}", r.stderr)
        log = self.server.requests_for(name)
        self.assertEqual((log[-1]["range"], log[-1]["status"]), (f"bytes={kept}-", 206))
        self.assertIsNotNone(log[-1]["if_range"], "the sidecar's validator still guards the resume")
        self.assertTrue(log[-1]["authorization"], "the credentials were sent")
        outputs = [r.stdout + r.stderr]
        shutil.rmtree(self.cache)
        self.pin([(name, [self.server.userinfo_url("auth+drop", name)], sha, SIZE)])
        r = self.fetch("--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"event":"retrying"', r.stdout)
        outputs.append(r.stdout + r.stderr)
        # A wrong password, and a mirror with one, fail: their errors name the URL without it.
        self.pin([(name, [self.server.userinfo_url("auth", name).replace(password, "WRONG-" + password)], sha)])
        shutil.rmtree(self.cache)
        r = self.fetch("--mirror", f"http://me:MIRROR-{password}@127.0.0.1:{self.server.port}/f/404")
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("HTTP 401", r.stderr)
        outputs.append(r.stdout + r.stderr)
        r = run("--manifests", self.manifests, "plan", "--size", "Standard_Test_Fetch", "--distro", "debian-12",
                "--json")
        outputs.append(r.stdout + r.stderr)
        for text in outputs:
            self.assertNotIn(password, text)
        for path in glob.glob(os.path.join(self.cache, "**"), recursive=True):
            if os.path.isfile(path) and "sha256" not in path:
                with open(path, "rb") as f:
                    self.assertNotIn(password.encode(), f.read(), path)

    def test_a_password_in_a_url_stays_out_of_install_output_and_its_log(self):
        if not os.environ.get("HPCBAKE_FAKES"):
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        from test_cli_install import Fixture
        fx = Fixture(os.path.join(self.tmp, "machine"))
        password = self.server.credentials[1]
        shutil.rmtree(fx.cache)  # nothing cached: the artifact step downloads
        shutil.copy(os.path.join(fx.tmp, "hpcbake-fixture-1.0.run"), self.data)
        comp = os.path.join(fx.manifests, "components", "hpcbake-fixture.yaml")
        with open(comp) as f:
            text = f.read()
        # A wrong password: the artifact step fails fast, before any module build.
        url = self.server.userinfo_url("auth", "hpcbake-fixture-1.0.run").replace(password, "WRONG-" + password)
        with open(comp, "w") as f:
            f.write(text.replace("http://127.0.0.1:9/hpcbake-fixture-1.0.run", url))
        for extra in ([], ["--json"]):
            r = fx.install("Standard_Test1_v1", *extra)
            self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
            self.assertIn("HTTP 401", r.stdout + r.stderr)
            self.assertNotIn(password, r.stdout + r.stderr)
        with open(os.path.join(fx.root, "var/log/hpcbake/install.log")) as f:
            log = f.read()
        self.assertIn(f"http://***@127.0.0.1:{self.server.port}/f/auth/", log)
        self.assertNotIn(password, log)

    def test_a_body_over_the_pinned_size_is_stopped_and_named(self):
        name = "big.bin"
        sha = self.blob(name)
        # Content-Length announces twice the pin: refused before the body.
        self.pin([(name, [self.server.url("oversize", name)], sha, SIZE)])
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(self.server.url("oversize", name), r.stderr)
        self.assertIn(f"announces {2 * SIZE} bytes, more than the pinned {SIZE}", r.stderr)
        self.assertEqual(len(self.server.requests_for(name)), 1, "not retried: the server serves another file")
        self.assertEqual(os.listdir(os.path.join(self.cache, "quarantine")), [], "nothing kept")
        # No Content-Length: the transfer stops as soon as the body passes the pin.
        self.pin([(name, [self.server.url("endless", name)], sha, SIZE)])
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(self.server.url("endless", name), r.stderr)
        self.assertIn(f"more than the pinned {SIZE} bytes", r.stderr)
        self.assertLess(self.server.requests_for(name)[-1]["bytes"], 64 * SIZE, "the server was cut off")
        self.assertEqual(self.cached(), [])
        # More bytes than Content-Length claims: the claimed ones are the file.
        self.pin([(name, [self.server.url("overlong", name)], sha, SIZE)])
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_verified(sha)

    def test_an_unpinned_size_is_bounded_by_max_download_bytes(self):
        name = "endless.bin"
        sha = self.blob(name)
        self.pin([(name, [self.server.url("endless", name)], sha)])
        r = self.fetch("--max-download-bytes", str(3 * SIZE))
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(self.server.url("endless", name), r.stderr)
        self.assertIn(f"more than {3 * SIZE} bytes", r.stderr)
        self.assertIn("--max-download-bytes", r.stderr)
        self.assertEqual(os.listdir(os.path.join(self.cache, "quarantine")), [])
        self.assertIn("--max-download-bytes", run("fetch", "--help").stdout)

    def test_quarantine_keeps_one_copy_per_digest_within_its_budget(self):
        name, sha = self.one("wrong")
        for _ in range(3):
            self.assertEqual(self.fetch().returncode, 4)
        self.assertEqual(len(os.listdir(os.path.join(self.cache, "quarantine"))), 1, "one copy per digest")
        other = "wrong2.bin"
        other_sha = self.blob(other)
        self.pin([(other, [self.server.url("wrong", other)], other_sha)])
        # The first copy made older by its mtime, which is what eviction orders by, not by the clock.
        q = os.path.join(self.cache, "quarantine")
        for f in os.listdir(q):
            os.utime(os.path.join(q, f), (1_600_000_000, 1_600_000_000))
        r = self.fetch("--quarantine-budget", str(SIZE + SIZE // 2))
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertEqual([f.split(".")[0] for f in os.listdir(os.path.join(self.cache, "quarantine"))], [other_sha],
                         "the oldest copy made room")
        r = self.fetch("--quarantine-budget", str(SIZE // 2))
        self.assertIn("larger than the quarantine budget", r.stderr)
        self.assertEqual(os.listdir(os.path.join(self.cache, "quarantine")), [])
        self.assertIn("--quarantine-budget", run("fetch", "--help").stdout)

    def test_a_cache_entry_that_changed_is_quarantined_and_downloaded_again(self):
        name, sha = self.one("ok")
        self.pin([(name, [self.server.url("ok", name)], sha, SIZE)])
        self.assertEqual(self.fetch().returncode, 0)
        entry = os.path.join(self.cache, "sha256", sha)
        with open(entry, "r+b") as f:  # truncated: the size no longer matches the pin
            f.truncate(SIZE - 1)
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("does not match", r.stderr)
        self.assertIn("downloading it again", r.stderr)
        self.assertEqual(len(self.server.requests_for(name)), 2)
        self.assert_verified(sha)
        # Unpinned size, one byte changed in place: the changed mtime makes fetch hash it again.
        self.pin([(name, [self.server.url("ok", name)], sha)])
        with open(entry, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("downloading it again", r.stderr)
        self.assertEqual(len(self.server.requests_for(name)), 3)
        self.assert_verified(sha)
        self.assertTrue(glob.glob(os.path.join(self.cache, "quarantine", sha + ".*")))
        r = self.fetch()  # unchanged since: a cache hit, no request
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.server.requests_for(name)), 3)

    def test_a_gzip_encoded_body_is_refused_and_explained(self):
        name, sha = self.one("gzip")
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("the server compressed the body (Content-Encoding: gzip)", r.stderr)
        self.assertIn("ask the server's owner to serve it uncompressed", r.stderr)
        self.assertEqual(self.server.requests_for(name)[0]["accept_encoding"], "identity")
        self.assertEqual(self.cached(), [])
        # With the size pinned, the compressed body's Content-Length is refused, and explained too.
        self.pin([(name, [self.server.url("gzip", name)], sha, SIZE)])
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("more than the pinned", r.stderr)
        self.assertIn("the server compressed the body (Content-Encoding: gzip)", r.stderr)

    def test_progress_bytes_go_back_only_after_a_restart_event(self):
        small = 512 * 1024
        name = "restart.bin"
        sha = self.blob(name, size=small)
        self.pin([(name, [self.server.url("norange+trickle", name)], sha, small)])
        os.makedirs(os.path.join(self.cache, "partial"))
        with open(os.path.join(self.data, name), "rb") as f:
            head = f.read(small // 2)
        with open(os.path.join(self.cache, "partial", sha + ".part"), "wb") as f:
            f.write(head)
        r = self.fetch("--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        events = [json.loads(line) for line in r.stdout.splitlines()][:-1]
        self.assertEqual(events[0]["bytes"], small // 2)
        restarts = [e for e in events if e["event"] == "restarted"]
        self.assertEqual(len(restarts), 1, events)
        self.assertIn("ignored the range", restarts[0]["message"])
        last = 0
        for e in events:
            if e["event"] != "restarted":
                self.assertGreaterEqual(e["bytes"], last, events)
            last = e["bytes"]
        self.assertEqual(events[-1]["bytes"], small)

    # -- issue 40: what a response may leave behind, what is worth a retry, two fetches at once ---------
    def test_a_203_body_is_never_kept_as_a_partial_and_the_next_run_starts_at_byte_0(self):
        # Item 11: a 203's body went into the .part, the next run resumed after it, failed the
        # digest and downloaded everything again. Only a 200 (or a 206 answering our Range) is the file.
        name = "nonauth.bin"
        sha = self.blob(name)
        self.pin([(name, [f"{self.server.base()}/m/{name}"], sha)])
        self.server.set_mode("203")
        r = self.fetch()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("HTTP 203", r.stderr)
        self.assertIn("only a 200 or 206 response is the file", r.stderr)
        self.assertEqual(glob.glob(os.path.join(self.cache, "partial", "*")), [], "nothing kept as a partial")
        self.assertEqual(self.cached(), [])
        self.server.set_mode("ok")
        r = self.fetch()
        self.assertEqual(r.returncode, 0, r.stderr)
        second = [e for e in self.server.requests_for(name) if e["status"] != 203]
        self.assertEqual([(e["status"], e["range"]) for e in second], [(200, None)], "from byte 0, whole")
        self.assert_verified(sha)

    def test_a_response_header_over_libcurls_limit_is_named_and_not_retried(self):
        # Item 12: a 1 MiB header line read as "Out of memory" and was retried as transient.
        name, sha = self.one("bigheader", extra_urls=[self.server.url("ok", "bigheader.bin")])
        r = self.fetch("--attempts", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([e["status"] for e in self.server.requests_for(name)], [200, 200],
                         "one request to the URL with the long header, then the next URL")
        self.assertEqual(self.server.requests_for(name)[0]["path"], f"/f/bigheader/{name}")
        self.assertIn(f"{self.server.url('bigheader', name)}: the server sent a response header longer than",
                      r.stderr)
        self.assertNotIn("Out of memory", r.stderr)
        self.assert_verified(sha)

    def lock_part(self, sha):
        """The .part's lock, taken as fetch takes it (open O_RDWR|O_CREAT, flock LOCK_EX)."""
        import fcntl
        os.makedirs(os.path.join(self.cache, "partial"), exist_ok=True)
        fd = os.open(os.path.join(self.cache, "partial", sha + ".part"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def test_a_held_download_lock_times_out_with_exit_8_naming_the_lock_and_its_holder(self):
        # Item 6: the second of two fetches exited 4; the manual documents 8 for a held lock.
        name, sha = self.one("ok")
        fd = self.lock_part(sha)
        try:
            began = time.monotonic()
            r = self.fetch("--lock-timeout", "1")
            self.assertEqual(r.returncode, 8, r.stderr)
            self.assertGreaterEqual(time.monotonic() - began, 1.0, "it waited")
        finally:
            os.close(fd)
        part = os.path.join(self.cache, "partial", sha + ".part")
        self.assertIn(f"{name} is being downloaded by another process: {part} is locked", r.stderr)
        self.assertIn(f"(held by pid {os.getpid()}", r.stderr)
        self.assertIn("waited 1 s (--lock-timeout)", r.stderr)
        self.assertEqual(self.server.requests_for(name), [])

    def test_a_second_fetch_waits_for_the_first_and_uses_its_verified_result(self):
        # Item 6: two fetches of one artifact into one cache: the second waits, then takes the
        # first one's verified entry, and the server sees one request.
        name = "shared.bin"
        sha = self.blob(name)
        self.pin([(name, [self.server.url("trickle", name)], sha)])  # 2 MiB at 256 KiB/s: 8 s
        first = start("--manifests", self.manifests, "fetch", "--size", "Standard_Test_Fetch", "--distro",
                      "debian-12", "--cache", self.cache, "--json", *FAST)
        try:
            read_until(first, '"event":"progress"')
            second = self.fetch("--lock-timeout", "60", timeout=90)
            first.communicate(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
                first.communicate()
        self.assertEqual(first.returncode, 0)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn("waiting", second.stderr)
        self.assertIn(f"{name} cached", second.stderr)
        self.assertEqual(len(self.server.requests_for(name)), 1, "downloaded once")
        self.assert_verified(sha)


if __name__ == "__main__":
    unittest.main()
