"""hpcbake install against a fixture machine (--root), end to end through the binary.

What is real here: the journal, the graph engine, the lock (flock), config edits
(waagent.conf), the artifact cache, the closing verify (against the fake vendor libraries
the test suite builds), and, when running as root, DKMS: the fixture module is built for
real against this machine's 6.1.0-56-amd64 headers, with DKMS's trees inside the fixture.
What is recorded, not run: package-manager and systemctl commands (HPCBAKE_TEST_RUNNER).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from common import (RESUME_DROPIN, RESUME_UNIT, RESUME_WANTS, SRC, bin_for, host, read_until, resume_command, run, run_json,
                    start, systemd_words)

def newest_headers():
    import glob
    found = [p.rsplit("linux-headers-", 1)[1] for p in glob.glob("/usr/src/linux-headers-*-amd64")
             if "-cloud-" not in p]
    found.sort(key=lambda k: [int(x) if x.isdigit() else x for x in k.replace("-", ".").split(".")])
    return found[-1] if found else "6.1.0-56-amd64"


KERNEL = os.environ.get("KERNEL") or newest_headers()
HEADERS = f"/usr/src/linux-headers-{KERNEL}"
FAKES = os.environ.get("HPCBAKE_FAKES", "")
IS_ROOT = os.geteuid() == 0
CAN_DKMS = IS_ROOT and shutil.which("dkms") and os.path.isdir(HEADERS) and shutil.which("makeself")


class Fixture:
    """A fixture machine made by tests/fixtures/install/make-machine (see there)."""

    def __init__(self, tmp):
        self.tmp = tmp
        subprocess.run([os.path.join(SRC, "tests", "fixtures", "install", "make-machine"), tmp], check=True,
                       env={**os.environ, "KERNEL": KERNEL})
        self.root = os.path.join(tmp, "root")
        self.cache = os.path.join(tmp, "cache")
        self.manifests = os.path.join(tmp, "manifests")
        self.commands = os.path.join(tmp, "commands.jsonl")

    def write(self, rel, text):
        with open(os.path.join(self.manifests, rel), "w") as f:
            f.write(text)

    def set_boot(self, boot_id):
        with open(os.path.join(self.root, "proc/sys/kernel/random/boot_id"), "w") as f:
            f.write(boot_id + "\n")

    def env(self, **extra):
        e = {"HPCBAKE_TEST_RUNNER": "record:" + self.commands, "HPCBAKE_TEST_REAL_COMMANDS": "dkms,depmod",
             "LD_LIBRARY_PATH": os.path.join(FAKES), "FAKE_IB_PORTS": "mlx5_ib0=ACTIVE/LinkUp/EDR/4X/IB",
             "SOURCE_DATE_EPOCH": "1700000000"}
        for k in list(os.environ):
            if k.startswith("AZ_BATCH_"):
                e[k] = ""
        e.update(extra)
        return e

    def install_args(self, size="Standard_Test2_v1", *args):
        return ["--root", self.root, "--manifests", self.manifests, "install", "--size", size, "--distro",
                "debian-12", "--cache", self.cache, "--yes", *args]

    def install(self, size="Standard_Test2_v1", *args, env=None, timeout=120):
        return run(*self.install_args(size, *args), env=self.env(**(env or {})), timeout=timeout)

    def journal(self):
        with open(os.path.join(self.root, "var/lib/hpcbake/state.json")) as f:
            return json.load(f)

    def recorded(self):
        if not os.path.exists(self.commands):
            return []
        with open(self.commands) as f:
            return [json.loads(line)["argv"] for line in f]

    def state(self):
        """What an install leaves: journal statuses and digests, and the edited files."""
        j = self.journal()
        files = {}
        for rel in ("etc/waagent.conf", "etc/waagent.conf.hpcbake-orig"):
            p = os.path.join(self.root, rel)
            files[rel] = open(p, "rb").read() if os.path.exists(p) else None
        return j["state"], {k: (v["status"], v["digest"]) for k, v in j["steps"].items()}, files


class InstallTest(unittest.TestCase):
    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-install-")
        self.fx = Fixture(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_full_install_then_a_rerun_executes_nothing(self):
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        r = self.fx.install("Standard_Test1_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("install complete: 8 steps run", r.stdout)
        j = self.fx.journal()
        self.assertEqual(j["state"], "complete")
        self.assertEqual({v["status"] for v in j["steps"].values()}, {"done"})
        self.assertEqual(j["steps"]["verify"]["started_at"], 1700000000, "SOURCE_DATE_EPOCH is honoured")
        # DKMS really built and installed the module inside the fixture.
        ko = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(self.fx.root, "lib/modules", KERNEL))
              for f in fs if f.startswith("hpcbake_fixture.ko")]
        self.assertTrue(ko, "the module is installed under the fixture's /lib/modules")
        # The closing verify checks that module for the target kernel, as it checks NVIDIA's.
        with open(os.path.join(self.fx.root, "var/lib/hpcbake/verify-install.json")) as f:
            checks = {c["id"]: c for c in json.load(f)["checks"]}
        c = checks[f"kernel.hpcbake-fixture.{KERNEL}"]
        self.assertEqual(c["verdict"], "pass", c)
        self.assertEqual(c["expected"], f"hpcbake_fixture: vermagic {KERNEL}")
        self.assertIn("updates/dkms", c["observed"])
        argv = self.fx.recorded()
        self.assertIn(["systemctl", "restart", "walinuxagent"], argv)
        self.assertTrue(any(a[:2] == ["apt-get", "install"] and "rdma-core" in a for a in argv))
        self.assertTrue(any(a[:2] == ["dkms", "install"] and KERNEL in a for a in argv))
        conf = open(os.path.join(self.fx.root, "etc/waagent.conf")).read()
        self.assertIn("\nOS.EnableRDMA=y\n", conf)
        self.assertNotIn("# OS.EnableRDMA=y", conf)

        os.remove(self.fx.commands)
        before = os.stat(os.path.join(self.fx.root, "var/lib/hpcbake/state.json")).st_mtime_ns
        r = self.fx.install("Standard_Test1_v1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing to do: all 8 steps are done", r.stdout)
        self.assertEqual(self.fx.recorded(), [], "a re-run on a finished machine runs no command")
        self.assertEqual(os.stat(os.path.join(self.fx.root, "var/lib/hpcbake/state.json")).st_mtime_ns, before,
                         "and does not rewrite the journal")

        # The module gone (a kernel update, a removed DKMS tree): verify says so, with the fix.
        for path in ko:
            os.remove(path)
        r = run("--root", self.fx.root, "--manifests", self.fx.manifests, "verify", "--size", "Standard_Test1_v1",
                "--distro", "debian-12", "--level", "0", "--json", env=self.fx.env())
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        c = {c["id"]: c for c in json.loads(r.stdout)["checks"]}[f"kernel.hpcbake-fixture.{KERNEL}"]
        self.assertEqual((c["verdict"], c["observed"]), ("fail", "missing: hpcbake_fixture"))
        self.assertIn("hpcbake install", c["hint"])

    def test_packages_already_installed_are_not_asked_of_apt(self):
        # dpkg-query really runs (on this machine's package database): a step whose packages are
        # all installed skips apt-get; one with a package missing asks apt-get for all of them,
        # after one `apt-get update` in the run (a cloud image may have no package lists at all).
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        r = self.fx.install("Standard_Test1_v1", env={"HPCBAKE_TEST_REAL_COMMANDS": "dkms,depmod,dpkg-query"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        plan = json.loads(run("--root", self.fx.root, "--manifests", self.fx.manifests, "plan", "--size",
                              "Standard_Test1_v1", "--distro", "debian-12", "--json", env=self.fx.env()).stdout)
        steps = self.fx.journal()["steps"]
        asked = [a for a in self.fx.recorded() if a[:2] == ["apt-get", "install"]]
        seen = {"installed": 0, "missing": 0}
        for s in plan["steps"]:
            d = s["detail"]
            if s["kind"] != "packages" or d["files"] or d["repository"]:
                continue
            self.assertTrue(d["refresh"], f"{s['id']}: installs from the index, which the plan says it refreshes")
            q = subprocess.run(["dpkg-query", "-W", "-f=${Status}\n", *d["packages"]], capture_output=True, text=True)
            present = q.returncode == 0 and all(ln.endswith(" installed") for ln in q.stdout.splitlines())
            seen["installed" if present else "missing"] += 1
            by_apt = [a for a in asked if set(d["packages"]) <= set(a)]
            if present:
                self.assertIn("all installed already", steps[s["id"]]["message"], s["id"])
                self.assertEqual(by_apt, [], f"{s['id']}: apt-get was asked for installed packages")
            else:
                self.assertNotIn("all installed already", steps[s["id"]]["message"], s["id"])
                self.assertEqual(len(by_apt), 1, f"{s['id']}: apt-get install of {d['packages']}: {asked}")
        self.assertGreater(seen["installed"] + seen["missing"], 0, "the plan has a distro packages step")
        recorded = self.fx.recorded()
        updates = [i for i, a in enumerate(recorded) if a[:2] == ["apt-get", "update"]]
        installs = [i for i, a in enumerate(recorded) if a[:2] == ["apt-get", "install"]]
        if seen["missing"]:
            self.assertEqual(len(updates), 1, f"one refresh in the run, before the first install: {recorded}")
            self.assertLess(updates[0], installs[0], recorded)
        else:
            self.assertEqual(updates, [], "nothing to install, so no refresh")
        # dpkg-query failing is a doubt, never "installed": apt-get decides.
        os.remove(self.fx.commands)
        fx = Fixture(os.path.join(self.tmp, "second"))
        r = fx.install("Standard_Test1_v1", env={"HPCBAKE_TEST_FAIL_COMMANDS": "dpkg-query"})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        recorded = fx.recorded()
        build = next(i for i, a in enumerate(recorded) if a[:2] == ["apt-get", "install"] and "build-essential" in a)
        self.assertEqual(len([a for a in recorded[:build] if a[:2] == ["apt-get", "update"]]), 1,
                         f"the index refreshed once, before the first install: {recorded}")

    def test_install_refuses_inside_a_container_and_changes_nothing(self):
        with open(os.path.join(self.fx.root, ".dockerenv"), "w"):
            pass
        d = run("--root", self.fx.root, "detect", "--json", env=self.fx.env())
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertEqual(json.loads(d.stdout)["container"], {"engine": "docker", "source": "/.dockerenv"})
        r = self.fx.install()
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("this is a docker container (/.dockerenv)", r.stderr)
        self.assertIn("hpcbake verify", r.stderr)
        self.assertEqual(self.fx.recorded(), [], "nothing ran")
        self.assertFalse(os.path.exists(os.path.join(self.fx.root, "var/lib/hpcbake/state.json")), "no journal")
        # What install would do can still be read there.
        r = self.fx.install("Standard_Test2_v1", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        os.remove(os.path.join(self.fx.root, ".dockerenv"))
        self.assertEqual(self.fx.install().returncode, 0)

    def test_install_then_seal_needs_no_separate_verify(self):
        r = self.fx.install("Standard_Test2_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.fx.root, "var/lib/hpcbake/verify.json")) as f:
            rec = json.load(f)
        self.assertTrue(rec["passed"], rec)
        self.assertEqual(rec["size"], "Standard_Test2_v1")
        r = run("--root", self.fx.root, "--manifests", self.fx.manifests, "seal", "--check", env=self.fx.env())
        self.assertNotIn("verify.missing", r.stdout + r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def tree(self, top):
        """Every path under top with its type, mode, size and mtime: what a dry run must not change."""
        out = {}
        for d, dirs, files in os.walk(top):
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                out[os.path.relpath(p, top)] = (st.st_mode, st.st_size, st.st_mtime_ns)
        return out

    def test_dry_run_prints_every_step_and_changes_nothing(self):
        before = self.tree(self.tmp)
        r = self.fx.install("Standard_Test2_v1", "--dry-run")
        self.assertEqual(self.tree(self.tmp), before, "a dry run changes nothing: no log, no lock, no directory")
        self.assertEqual(r.returncode, 0, r.stderr)
        for step in ("packages:rdma-core", "waagent:rdma", "verify"):
            self.assertIn(step, r.stdout)
        self.assertIn("packages: rdma-core", r.stdout)
        self.assertIn("nothing was changed", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.fx.root, "var/lib/hpcbake/state.json")))
        self.assertEqual(self.fx.recorded(), [])

    def test_a_failed_step_exits_with_its_code_and_the_rerun_retries_only_it(self):
        r = self.fx.install(env={"HPCBAKE_TEST_FAIL_COMMANDS": "apt-get"})
        self.assertEqual(r.returncode, 5, r.stdout + r.stderr)
        self.assertIn("step packages:rdma-core failed", r.stderr)
        self.assertIn("simulated failure of apt-get", r.stderr)
        j = self.fx.journal()
        self.assertEqual(j["state"], "failed")
        self.assertEqual(j["steps"]["packages:rdma-core"]["status"], "failed")
        rec = j["steps"]["packages:rdma-core"]
        self.assertIn("simulated failure", rec.get("output_tail", "") + rec["message"])
        self.assertNotIn("waagent:rdma", j["steps"], "steps after a failed one do not start")
        os.remove(self.fx.commands)
        r = self.fx.install()
        self.assertEqual(r.returncode, 0, r.stderr)
        j = self.fx.journal()
        self.assertEqual(j["steps"]["packages:rdma-core"]["attempts"], 2)
        self.assertEqual(j["state"], "complete")

    def test_of_several_failures_the_first_in_plan_order_decides_in_every_run(self):
        # Three independent steps fail in one run: packages:build and packages:rdma-core (exit 5,
        # first in the plan) and the artifact's download (exit 4, an https:// URL with no CA store to
        # verify it: refused at once; a port libcurl cannot parse is a manifest error now). The
        # packages steps are made to fail after the download: their dpkg-query (run for real, from
        # PATH) waits until the journal records the artifact failed. The first failure in plan order
        # decides the exit code and comes first among the errors, whatever finished first.
        rel = "components/hpcbake-fixture.yaml"
        with open(os.path.join(self.fx.manifests, rel)) as f:
            text = f.read()
        self.assertIn("http://127.0.0.1:9/", text)
        self.fx.write(rel, text.replace("http://127.0.0.1:9/", "https://127.0.0.1:9/"))
        shutil.rmtree(os.path.join(self.fx.cache, "sha256"))  # the artifact must be downloaded
        journal = os.path.join(self.fx.root, "var/lib/hpcbake/state.json")
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        with open(os.path.join(bindir, "dpkg-query"), "w") as f:
            f.write(f"""#!/usr/bin/env python3
import json, sys, time
end = time.monotonic() + 60  # a bound for a broken run, not a wait for the download
while time.monotonic() < end:
    try:
        if json.load(open({journal!r}))["steps"]["artifact:hpcbake-fixture-1.0.run"]["status"] == "failed":
            break
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.02)
sys.exit(1)  # a doubt: apt-get decides, and fails
""")
        os.chmod(os.path.join(bindir, "dpkg-query"), 0o755)
        # No CA store (an empty tree as the host's, no TLS variables): the https:// URL is refused at once.
        env = {"HPCBAKE_TEST_FAIL_COMMANDS": "apt-get", "HPCBAKE_TEST_REAL_COMMANDS": "dpkg-query",
               "HPCBAKE_TEST_TLS_ROOT": bindir, "SSL_CERT_FILE": "", "SSL_CERT_DIR": "", "CURL_CA_BUNDLE": "",
               "PATH": bindir + ":" + os.environ["PATH"]}
        seen = []
        for _ in range(5):
            if os.path.exists(journal):
                os.remove(journal)  # the same failing install each time, from the start
            r = self.fx.install("Standard_Test1_v1", env=env)
            failed = [line.split()[3] for line in r.stdout.splitlines() if " FAILED " in line]
            self.assertEqual(failed[0], "artifact:hpcbake-fixture-1.0.run", "the download failed first: " + r.stdout)
            errors = [line for line in r.stderr.splitlines() if line.startswith("hpcbake: error:")]
            seen.append((r.returncode, errors))
        self.assertEqual(seen[0][0], 5, r.stdout + r.stderr)
        self.assertTrue(seen[0][1][0].startswith("hpcbake: error: step packages:build failed: "), seen[0][1])
        self.assertIn("step artifact:hpcbake-fixture-1.0.run failed", seen[0][1][-1])
        self.assertEqual(seen, [seen[0]] * 5, "five runs, one exit code and the same errors in the same order")

    def test_a_changed_manifest_redoes_the_changed_step_and_what_depends_on_it(self):
        self.assertEqual(self.fx.install().returncode, 0)
        rel = "distros/debian-12.yaml"
        text = open(os.path.join(self.fx.manifests, rel)).read()
        self.assertIn("perftest", text)
        self.fx.write(rel, text.replace("perftest", "perftest, rdmacm-utils", 1))
        os.remove(self.fx.commands)
        r = self.fx.install()
        self.assertEqual(r.returncode, 0, r.stderr)
        started = [line.split()[3] for line in r.stdout.splitlines() if " start " in line]
        self.assertEqual(started, ["packages:rdma-core", "waagent:rdma", "verify"], r.stdout)

    def test_sigkill_after_every_journal_write_converges_to_the_same_state(self):
        clean = Fixture(os.path.join(self.tmp, "clean"))
        self.assertEqual(clean.install().returncode, 0)
        want = clean.state()
        n, crashes = 1, 0
        while True:
            fx = Fixture(os.path.join(self.tmp, f"crash-{n}"))
            r = fx.install(env={"HPCBAKE_TEST_CRASH_AFTER_WRITES": str(n)})
            if r.returncode == 0:
                break  # fewer journal writes than n: every crash point was covered
            self.assertEqual(r.returncode, -signal.SIGKILL, r.stderr)
            crashes += 1
            json.load(open(os.path.join(fx.root, "var/lib/hpcbake/state.json")))  # never torn
            r = fx.install()
            self.assertEqual(r.returncode, 0, f"after a crash at write {n}: {r.stdout}{r.stderr}")
            self.assertEqual(fx.state(), want, f"after a crash at write {n}")
            self.assertEqual(fx.install().stdout.count(" start "), 0, "and then a re-run does nothing")
            n += 1
        self.assertGreaterEqual(crashes, 8, "every step's start and end was a crash point")

    def test_a_second_install_waits_for_the_lock_then_exits_8(self):
        lock = os.path.join(self.fx.root, "run/hpcbake/install.lock")
        os.makedirs(os.path.dirname(lock))
        # flock takes the lock, then runs the shell, which says so (-o: the shell and its sleep do
        # not inherit the lock: it is flock's, released when flock dies). Its own session, so the
        # whole group is killed at the end.
        holder = subprocess.Popen(["flock", "-o", lock, "sh", "-c", "echo held; exec sleep 300"],
                                  stdout=subprocess.PIPE, start_new_session=True)
        waiter = None
        try:
            read_until(holder, "held\n")
            r = self.fx.install("Standard_Test2_v1", "--lock-timeout", "1")
            self.assertEqual(r.returncode, 8, r.stdout + r.stderr)
            self.assertIn("waiting for another hpcbake install", r.stdout)
            self.assertIn("another hpcbake install holds", r.stderr)
            self.assertEqual(self.fx.recorded(), [])
            # Released while the second one waits (it has said so): it proceeds.
            waiter = start(*self.fx.install_args("Standard_Test2_v1", "--lock-timeout", "60"), env=self.fx.env())
            seen = read_until(waiter, "waiting for another hpcbake install")
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
            out, err = waiter.communicate(timeout=120)
            self.assertEqual(waiter.returncode, 0, seen + out.decode() + err.decode())
        finally:
            if waiter and waiter.poll() is None:
                waiter.kill()
                waiter.communicate()
            if holder.poll() is None:
                os.killpg(holder.pid, signal.SIGKILL)
                holder.wait()
            holder.stdout.close()

    def test_two_concurrent_installs_one_runs_the_other_finds_it_done(self):
        env = {**os.environ, **self.fx.env()}
        procs = [subprocess.Popen([bin_for(env), "--root", self.fx.root, "--manifests", self.fx.manifests, "install",
                                   "--size", "Standard_Test2_v1", "--distro", "debian-12", "--cache", self.fx.cache,
                                   "--yes"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outs)
        restarts = [a for a in self.fx.recorded() if a[:2] == ["systemctl", "restart"]]
        self.assertEqual(len(restarts), 1, "the steps ran once")

    def test_batch_start_task_mode(self):
        wd = os.path.join(self.tmp, "batch-task")
        os.makedirs(wd)
        env = {"AZ_BATCH_TASK_ID": "starttask", "AZ_BATCH_NODE_ID": "tvmps_1", "AZ_BATCH_TASK_WORKING_DIR": wd}
        r = run("--root", self.fx.root, "--manifests", self.fx.manifests, "install", "--size", "Standard_Test2_v1",
                "--distro", "debian-12", "--cache", self.fx.cache, env=self.fx.env(**env))  # no --yes: Batch implies it
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Azure Batch start task", r.stdout)
        self.assertNotIn("\r", r.stdout, "no terminal progress")
        log = open(os.path.join(wd, "hpcbake-install.log")).read()
        self.assertIn("install complete", log)
        self.assertIn("waagent:rdma", log)
        # Outside Batch and without a terminal, --yes is required.
        r = run("--root", self.fx.root, "--manifests", self.fx.manifests, "install", "--size", "Standard_Test2_v1",
                "--distro", "debian-12", "--cache", self.fx.cache, env=self.fx.env())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("pass --yes", r.stderr)

    def test_json_lines_quiet_and_iso_timestamps(self):
        r = self.fx.install("Standard_Test2_v1", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        events = [json.loads(line) for line in r.stdout.splitlines()]  # every line is one JSON object
        kinds = [e["event"] for e in events]
        self.assertIn("step.started", kinds)
        self.assertIn("step.finished", kinds)
        self.assertTrue(all(e["step"] for e in events if e["event"].startswith("step.")))
        self.assertEqual(events[-1], {"event": "result", "outcome": "complete", "exit_code": 0,
                                      "journal": os.path.join(self.fx.root, "var/lib/hpcbake/state.json")})
        with open(os.path.join(self.fx.root, "var/log/hpcbake/install.log")) as f:
            lines = [line for line in f.read().splitlines() if line]
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", "ISO 8601 UTC, not epoch seconds")
        # -q on a machine where every step runs: the headline and the outcome, not the step lines
        # (the same install without -q prints them: the check above saw their events).
        quiet = Fixture(os.path.join(self.tmp, "quiet"))
        r = quiet.install("Standard_Test2_v1", "-q")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("install complete", r.stdout)
        self.assertFalse([line for line in r.stdout.splitlines() if line.startswith("[")], r.stdout)
        loud = Fixture(os.path.join(self.tmp, "loud"))
        r = loud.install("Standard_Test2_v1")
        self.assertTrue([line for line in r.stdout.splitlines() if line.startswith("[")], r.stdout)

    def test_reboot_exit_code_resume_unit_and_resume_after_the_reboot(self):
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        r = self.fx.install("Standard_Test3_v1", "--resume-unit")
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        self.assertIn("reboot required", r.stdout)
        unit = os.path.join(self.fx.root, RESUME_UNIT)
        wants = os.path.join(self.fx.root, RESUME_WANTS)
        text = open(unit).read()
        self.assertIn("Type=oneshot", text)
        with open(os.path.join(SRC, "packaging", "systemd", "hpcbake-resume.service")) as f:
            self.assertEqual(text, f.read(), "one definition: the unit install writes is the packaged one")
        argv = resume_command(self.fx.root)
        self.assertEqual(argv[1:], ["--root", self.fx.root, "install", "--resume"],
                         "the unit continues the stored plan: nothing of the first command line but the root")
        self.assertEqual(os.readlink(wants), "/etc/systemd/system/hpcbake-resume.service")
        j = self.fx.journal()
        self.assertEqual(j["state"], "reboot-required")
        self.assertEqual(j["steps"]["reboot:hpcbake-fixture-reboot"]["boot_id"], "boot-1")
        self.assertNotIn("verify", j["steps"])
        # Same boot: still a reboot to do.
        r = self.fx.install("Standard_Test3_v1", "--resume-unit")
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        # After the reboot: the install continues and the unit goes.
        self.fx.set_boot("boot-2")
        r = self.fx.install("Standard_Test3_v1", "--resume-unit")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("resumed", r.stdout)
        self.assertEqual(self.fx.journal()["state"], "complete")
        self.assertFalse(os.path.exists(unit))
        self.assertFalse(os.path.lexists(wants))
        self.assertFalse(os.path.exists(os.path.join(self.fx.root, RESUME_DROPIN)))

    def test_resume_unit_quotes_paths_with_spaces_percent_dollar_and_quotes_as_systemd_parses_them(self):
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        if not shutil.which("systemd-analyze"):
            self.skipTest("needs systemd-analyze (SKIPPED, not passed)")
        # Arguments: a cache path and an RDMA device name with every character systemd treats
        # specially. (Not the --root: DKMS itself cannot build under a path with quotes or $.)
        fx = Fixture(os.path.join(self.tmp, "plain"))
        odd_cache = os.path.join(self.tmp, "c a%n$HOME'q\"x")
        shutil.copytree(fx.cache, odd_cache)
        device = "r x%i$y'\"\\z"
        # systemd runs no executable whose path holds a quote or a backslash: space, % and $ only.
        exe_dir = os.path.join(self.tmp, "bin dir%i$USER")
        os.makedirs(exe_dir)
        exe = os.path.join(exe_dir, "hpcbake")
        env = dict(os.environ, **fx.env(), HPCBAKE_MANIFESTS=fx.manifests)
        shutil.copy2(bin_for(env), exe)
        r = subprocess.run([exe, "--root", fx.root, "--manifests", fx.manifests, "install", "--size", "Standard_Test3_v1",
                            "--distro", "debian-12", "--cache", odd_cache, "--yes", "--resume-unit", "--ib-device", device,
                            "--ib-seconds", "2.5"],
                           capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        argv = resume_command(fx.root)
        self.assertEqual(argv, [exe, "--root", fx.root, "install", "--resume"])
        # The options travel in the stored plan, byte for byte, not through systemd's quoting.
        with open(os.path.join(fx.root, "var/lib/hpcbake/plan.json")) as f:
            options = json.load(f)["options"]
        self.assertEqual(options["cache_dir"], odd_cache)
        self.assertEqual(options["ib_devices"], [device])
        self.assertEqual(options["ib_seconds"], 2.5)  # the closing verify after the reboot loops back as long
        units = os.path.join(fx.root, "etc/systemd/system")
        v = subprocess.run(["systemd-analyze", "verify", "--man=no", os.path.join(units, "hpcbake-resume.service")],
                           capture_output=True, text=True, env=dict(os.environ, SYSTEMD_UNIT_PATH=units + ":"))
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        self.assertNotIn("hpcbake-resume", v.stderr, "no complaint about the unit or its drop-in")
        # An executable systemd would refuse is refused before anything changes.
        bad_dir = os.path.join(self.tmp, "it's")
        os.makedirs(bad_dir)
        shutil.copy2(bin_for(env), os.path.join(bad_dir, "hpcbake"))
        fx2 = Fixture(os.path.join(self.tmp, "second"))
        r = subprocess.run([os.path.join(bad_dir, "hpcbake"), "--root", fx2.root, "--manifests", fx2.manifests, "install",
                            "--size", "Standard_Test3_v1", "--distro", "debian-12", "--cache", fx2.cache, "--yes",
                            "--resume-unit"], capture_output=True, text=True, env=dict(os.environ, **fx2.env()),
                           timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("systemd refuses an executable path", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(fx2.root, "var/lib/hpcbake/state.json")), "nothing ran")

    def test_systemd_words_reads_what_install_writes(self):
        self.assertEqual(systemd_words('"/a b/x" "100%%" "$$HOME" "q\\"" "\\\\" "t\\x09"'),
                         ["/a b/x", "100%", "$HOME", 'q"', "\\", "t\t"])

    def test_reboot_never_fails_and_auto_reboots(self):
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        r = self.fx.install("Standard_Test3_v1", "--reboot=never")
        self.assertEqual(r.returncode, 7)
        self.assertIn("--reboot=never", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.fx.root, RESUME_UNIT)))
        r = self.fx.install("Standard_Test3_v1", "--reboot=auto")
        self.assertEqual(r.returncode, 7)
        self.assertEqual(self.fx.recorded()[-1], ["systemctl", "reboot"])
        self.assertTrue(os.path.exists(os.path.join(self.fx.root, "etc/systemd/system/hpcbake-resume.service")))

    def test_resume_runs_the_stored_plan_with_its_options_and_verify_and_seal_read_it(self):
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        keys = os.path.join(self.fx.root, "srv/keys")
        r = self.fx.install("Standard_Test3_v1", "--resume-unit", "--profile", "minimal", "--fabric-wait", "300",
                            "--jobs", "2", "--verify-level", "0", "--lock-timeout", "120", "--sign", "on",
                            "--key-dir", keys)
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        plan_file = os.path.join(self.fx.root, "var/lib/hpcbake/plan.json")
        with open(plan_file) as f:
            stored = json.load(f)
        self.assertEqual(stored["plan"]["profile"], "minimal")
        self.assertEqual({k: stored["options"][k] for k in ("jobs", "verify_level", "fabric_wait_s", "key_dir")},
                         {"jobs": 2, "verify_level": 0, "fabric_wait_s": 300, "key_dir": keys})
        self.assertEqual(self.fx.journal()["plan_sha256"], stored["sha256"])
        self.assertTrue(os.path.exists(os.path.join(keys, "signing.key")))
        # Between the reboot and the resume the manifests change: a faster port the fixture's
        # does not have, another module version, another source. The resumed run reads none of it.
        size = os.path.join(self.fx.manifests, "sizes", "test3_v1.yaml")
        text = open(size).read()
        with open(size, "w") as f:
            f.write(text.replace("rate_gbps: 100", "rate_gbps: 400").replace("make-machine", "elsewhere"))
        comp = os.path.join(self.fx.manifests, "components", "hpcbake-fixture-reboot.yaml")
        text = open(comp).read()
        with open(comp, "w") as f:
            f.write(text.replace('version: "1.0"', 'version: "2.0"'))
        self.fx.set_boot("boot-2")
        argv = resume_command(self.fx.root)
        r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **self.fx.env()}, timeout=300,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"resuming the stored plan {plan_file} (sha256 {stored['sha256']}; profile minimal): jobs 2, "
                      f"verify level 0, fabric wait 300 s, lock timeout 120 s, key directory {keys}", r.stdout)
        j = self.fx.journal()
        self.assertEqual(j["state"], "complete")
        self.assertEqual(j["plan_sha256"], stored["sha256"])
        with open(os.path.join(self.fx.root, "var/lib/hpcbake/verify-install.json")) as f:
            report = json.load(f)
        self.assertEqual(report["level"], 0)  # --verify-level 0, from the stored options
        rates = [c for c in report["checks"] if c["id"].endswith(".rate")]
        self.assertTrue(rates and all(c["expected"].startswith("100") for c in rates), rates)
        with open(plan_file) as f:
            self.assertEqual(json.load(f)["sha256"], stored["sha256"], "the stored plan is the one that ran")
        # verify and seal: no size, profile or level repeated; the stored plan answers.
        r = run("--root", self.fx.root, "verify", "--json", env=self.fx.env())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("against the plan installed on this machine", r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual((doc["size"], doc["level"]), ("Standard_Test3_v1", 0))
        r = run("--root", self.fx.root, "verify", "--size", "test3_v1", env=self.fx.env())  # another spelling
        self.assertIn("against the plan installed on this machine", r.stderr)
        r = run("--root", self.fx.root, "--manifests", self.fx.manifests, "verify", "--size", "Standard_Test2_v1",
                env=self.fx.env())
        self.assertIn("against a plan made now for Standard_Test2_v1 on debian-12 (--size Standard_Test2_v1; the "
                      "install on this machine stored Standard_Test3_v1", r.stderr)
        r = run("--root", self.fx.root, "seal", "--check", env=self.fx.env())
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("[signing.private-key] /srv/keys/signing.key", r.stderr)

    def test_resume_refuses_what_would_change_the_stored_plan_and_a_machine_without_one(self):
        r = run("--root", self.fx.root, "install", "--resume", env=self.fx.env())
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("there is no stored plan", r.stderr)
        r = run("--root", self.fx.root, "install", "--resume", "--size", "Standard_Test2_v1", "--jobs", "3",
                env=self.fx.env())
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--size, --jobs would change them", r.stderr)

    def test_a_removed_stored_plan_is_stored_again_by_the_next_run(self):
        # The no-op re-run (the plan memo) stands only while the stored plan is the journal's.
        r = self.fx.install("Standard_Test2_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        plan_file = os.path.join(self.fx.root, "var/lib/hpcbake/plan.json")
        with open(plan_file) as f:
            sha = json.load(f)["sha256"]
        os.remove(plan_file)
        r = self.fx.install("Standard_Test2_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("nothing to do", r.stdout)
        with open(plan_file) as f:
            self.assertEqual(json.load(f)["sha256"], sha)
        self.assertEqual(self.fx.journal()["plan_sha256"], sha)

    def test_rewording_a_manifest_reruns_nothing_and_a_changed_value_reruns_its_step(self):
        r = self.fx.install("Standard_Test2_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        before = self.fx.journal()["steps"]
        size = os.path.join(self.fx.manifests, "sizes", "test2_v1.yaml")
        text = open(size).read()
        with open(size, "w") as f:  # provenance only
            f.write(text.replace('source: "tests/fixtures/install/make-machine"', 'source: "another citation"'))
        r = self.fx.install("Standard_Test2_v1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"nothing to do: all {len(before)} steps are done", r.stdout)
        self.assertEqual({k: v["attempts"] for k, v in self.fx.journal()["steps"].items()},
                         {k: v["attempts"] for k, v in before.items()})
        with open(size, "w") as f:  # what verify expects of the port
            f.write(text.replace("rate_gbps: 100", "rate_gbps: 200"))
        r = self.fx.install("Standard_Test2_v1")
        after = self.fx.journal()["steps"]
        redone = sorted(k for k in after if after[k]["attempts"] != before[k]["attempts"])
        self.assertEqual(redone, ["verify"], r.stdout + r.stderr)

    def test_a_corrupt_journal_is_refused_not_replaced(self):
        path = os.path.join(self.fx.root, "var/lib/hpcbake/state.json")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write('{"version": 1, "steps": {"x": {"status": "half-done"}}}')
        r = self.fx.install()
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown status 'half-done'", r.stderr)
        self.assertIn("Move the file aside", r.stderr)
        self.assertEqual(open(path).read(), '{"version": 1, "steps": {"x": {"status": "half-done"}}}')



MEMO_LINE = "plan: from the plan memo"


class PlanMemoTest(unittest.TestCase):
    """The no-op re-run from /var/lib/hpcbake/plan-memo.json (src/install/plan_memo.hpp): taken only
    while every input and the journal agree, never trusted past a change."""

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-memo-")
        self.fx = Fixture(self.tmp)
        self.memo = os.path.join(self.fx.root, "var/lib/hpcbake/plan-memo.json")
        self.state_file = os.path.join(self.fx.root, "var/lib/hpcbake/state.json")
        r = self.fx.install()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        os.remove(self.fx.commands)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def rerun(self, *args, env=None):
        r = self.fx.install("Standard_Test2_v1", "-v", *args, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_a_finished_install_leaves_a_memo_and_the_rerun_uses_it_writing_nothing(self):
        with open(self.memo) as f:
            memo = json.load(f)
        self.assertEqual(sorted(memo["steps"]), sorted(self.fx.journal()["steps"]))
        for step, digest in memo["steps"].items():
            self.assertEqual(self.fx.journal()["steps"][step]["digest"], digest, step)
        before = (os.stat(self.state_file).st_mtime_ns, os.stat(self.memo).st_mtime_ns)
        r = self.rerun()
        self.assertIn("nothing to do: all 3 steps are done", r.stdout)
        self.assertIn(MEMO_LINE, r.stdout)
        self.assertEqual(self.fx.recorded(), [])
        self.assertEqual((os.stat(self.state_file).st_mtime_ns, os.stat(self.memo).st_mtime_ns), before,
                         "a no-op from the memo writes neither the journal nor the memo")
        log = open(os.path.join(self.fx.root, "var/log/hpcbake/install.log")).read()
        self.assertIn(MEMO_LINE, log)

    def test_a_changed_manifest_byte_is_planned_in_full_and_the_memo_follows(self):
        with open(self.memo) as f:
            old = json.load(f)["inputs"]
        rel = "distros/debian-12.yaml"
        with open(os.path.join(self.fx.manifests, rel)) as f:
            self.fx.write(rel, f.read() + "# a comment changes no step\n")
        r = self.rerun()
        self.assertIn("nothing to do", r.stdout)
        self.assertNotIn(MEMO_LINE, r.stdout, "an input changed: the memo is not used")
        with open(self.memo) as f:
            self.assertNotEqual(json.load(f)["inputs"], old, "the memo is made again for the new inputs")
        self.assertIn(MEMO_LINE, self.rerun().stdout)

    def test_only_the_named_size_of_sizes_is_an_input(self):
        # install --size reads sizes/<size>.yaml alone; another size's file cannot change this plan.
        other = "sizes/nd96isr_h100_v5.yaml"
        with open(os.path.join(self.fx.manifests, other)) as f:
            self.fx.write(other, f.read() + "# another size\n")
        self.assertIn(MEMO_LINE, self.rerun().stdout)
        own = "sizes/test2_v1.yaml"
        with open(os.path.join(self.fx.manifests, own)) as f:
            self.fx.write(own, f.read() + "# this size\n")
        self.assertNotIn(MEMO_LINE, self.rerun().stdout)

    def test_a_manifest_change_that_changes_a_step_runs_it(self):
        rel = "distros/debian-12.yaml"
        with open(os.path.join(self.fx.manifests, rel)) as f:
            text = f.read()
        self.fx.write(rel, text.replace("perftest", "perftest, rdmacm-utils", 1))
        r = self.rerun()
        started = [line.split()[3] for line in r.stdout.splitlines() if " start " in line]
        self.assertEqual(started, ["packages:rdma-core", "waagent:rdma", "verify"], r.stdout)

    def test_a_changed_option_is_planned_in_full(self):
        # This size builds no module, so holding the kernel adds no step: the full plan says so.
        r = self.rerun("--hold-kernel")
        self.assertNotIn(MEMO_LINE, r.stdout)
        self.assertIn("nothing to do: all 3 steps are done", r.stdout)
        self.assertIn(MEMO_LINE, self.rerun("--hold-kernel").stdout, "the memo now holds for the new options")
        self.assertNotIn(MEMO_LINE, self.rerun().stdout, "and not for the old ones")

    def test_a_changed_driver_source_is_planned_in_full(self):
        # --driver-source decides the NVIDIA driver's steps: the memo of another source never holds.
        self.assertNotIn(MEMO_LINE, self.rerun("--driver-source", "repository").stdout)
        self.assertIn(MEMO_LINE, self.rerun("--driver-source", "repository").stdout)
        self.assertNotIn(MEMO_LINE, self.rerun().stdout)

    def test_a_changed_host_fact_is_planned_in_full(self):
        conf = os.path.join(self.fx.root, "etc/waagent.conf")
        with open(conf) as f:
            text = f.read()
        with open(conf, "w") as f:
            f.write(text.replace("OS.EnableRDMA=y", "OS.EnableRDMA=n"))
        r = self.rerun()
        self.assertNotIn(MEMO_LINE, r.stdout, "detect reads another waagent.conf: the memo is not used")

    def test_a_journal_that_no_longer_says_done_is_not_overruled_by_the_memo(self):
        j = self.fx.journal()
        j["state"] = "failed"
        j["steps"]["verify"]["status"] = "failed"
        with open(self.state_file, "w") as f:
            json.dump(j, f)
        r = self.rerun()
        self.assertNotIn(MEMO_LINE, r.stdout)
        started = [line.split()[3] for line in r.stdout.splitlines() if " start " in line]
        self.assertEqual(started, ["verify"], r.stdout)

    def test_a_damaged_memo_is_ignored_and_replaced(self):
        for damage in ["", "{not json", '{"version": 1, "inputs": 7}', '{"version": 99}', "\xff\xfe"]:
            with open(self.memo, "w", encoding="latin-1") as f:
                f.write(damage)
            r = self.rerun()
            self.assertIn("nothing to do", r.stdout)
            self.assertNotIn(MEMO_LINE, r.stdout, repr(damage))
            with open(self.memo) as f:
                self.assertEqual(json.load(f)["version"], 1, "the full run wrote a good memo again")

    def test_json_lines_plan_in_full_so_every_step_has_its_event(self):
        r = self.fx.install("Standard_Test2_v1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(sorted(e["step"] for e in events if e["event"] == "step.skipped"),
                         sorted(self.fx.journal()["steps"]))




class SignedPackagedModulesTest(unittest.TestCase):
    """--sign on with a stack whose packages ship DKMS sources (as DOCA-OFED's do on Debian and
    Ubuntu): autoinstall is held while the packages install, then hpcbake builds every DKMS source
    they added, for real, with its own key. What is recorded, not run: apt-get (the package is
    stood in for by its unpacked sources in /usr/src, registered with nobody, as a postinst held
    off by /etc/dkms/no-autoinstall leaves them)."""

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-signed-pkg-")
        self.fx = Fixture(self.tmp)
        # A DOCA-OFED variant for the fixture's debian-12 whose package is the fixture module's sources.
        with open(os.path.join(self.fx.manifests, "components", "doca-ofed.yaml"), "a") as f:
            f.write('  - distros: ["debian-12"]\n    version: "1.0"\n    packages: ["hpcbake-fixture-dkms"]\n'
                    '    notes: the fixture stand-in (tests/cli/test_cli_install.py)\n')
        src = os.path.join(self.fx.root, "usr/src/hpcbake-fixture-1.0")
        shutil.copytree(os.path.join(SRC, "tests/fixtures/modules/hpcbake-fixture"), src)
        with open(os.path.join(SRC, "drivers/dkms/dkms.conf.in")) as f:
            conf = f.read()
        conf = conf.replace("@NAME@", "hpcbake-fixture").replace("@VERSION@", "1.0").replace("@DIRECTIVES@\n", "")
        conf = conf.replace("@MODULES@\n", 'BUILT_MODULE_NAME[0]="hpcbake_fixture"\n'
                            'DEST_MODULE_LOCATION[0]="/updates/dkms"\n')
        with open(os.path.join(src, "dkms.conf"), "w") as f:
            f.write(conf)
        # dpkg's file list of the stand-in package, as dpkg writes it once the package is unpacked.
        info = os.path.join(self.fx.root, "var/lib/dpkg/info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "hpcbake-fixture-dkms.list"), "w") as f:
            f.write("/.\n/usr\n/usr/src\n/usr/src/hpcbake-fixture-1.0\n/usr/src/hpcbake-fixture-1.0/dkms.conf\n")
        # Sources no package owns, as a .run driver's step running beside this one unpacks them (the
        # e2e/secure-boot guest caught DOCA's step building those too, colliding with that step's own
        # build): not this step's, never built by it.
        other = os.path.join(self.fx.root, "usr/src/unowned-2.0")
        os.makedirs(other)
        with open(os.path.join(other, "dkms.conf"), "w") as f:
            f.write('PACKAGE_NAME="unowned"\nPACKAGE_VERSION="2.0"\nBUILT_MODULE_NAME[0]="unowned"\n')

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_sign_on_builds_the_packages_dkms_modules_with_hpcbakes_key_and_releases_the_hold(self):
        plan = json.loads(run("--root", self.fx.root, "--manifests", self.fx.manifests, "plan", "--size",
                              "Standard_Test2_v1", "--distro", "debian-12", "--sign", "on", "--json",
                              env=self.fx.env()).stdout)
        doca = next(s for s in plan["steps"] if s["id"] == "driver:doca-ofed")
        self.assertEqual(doca["detail"]["signed_by"], "hpcbake-key")
        self.assertEqual(doca["detail"]["dkms"]["dkms_name"], "", "every DKMS source the packages add")
        self.assertEqual(plan["signing"]["route"], "hpcbake-key")
        r = self.fx.install("Standard_Test2_v1", "--sign", "on", "--json", timeout=300)
        # 7: the reboot the plan asks for once DOCA's modules are in (they replace the running ones).
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        self.assertEqual(self.fx.journal()["steps"]["driver:doca-ofed"]["status"], "done", r.stdout + r.stderr)
        msg = self.fx.journal()["steps"]["driver:doca-ofed"]["message"]
        self.assertIn("built with hpcbake's key: hpcbake-fixture 1.0", msg)
        self.assertNotIn("unowned", msg)
        # The module DKMS installed is signed by hpcbake's certificate (modinfo reads it with libkmod).
        ko = os.path.join(self.fx.root, "lib/modules", KERNEL, "updates/dkms/hpcbake_fixture.ko")
        for ext in ("", ".xz", ".zst", ".gz"):
            if os.path.exists(ko + ext):
                ko += ext
                break
        signer = subprocess.run(["modinfo", "-F", "signer", ko], capture_output=True, text=True).stdout.strip()
        cert = os.path.join(self.fx.root, "var/lib/hpcbake/signing/signing.der")
        subject = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", cert, "-noout", "-subject",
                                  "-nameopt", "multiline"], capture_output=True, text=True).stdout
        cn = next(line.split("=", 1)[1].strip() for line in subject.splitlines() if "commonName" in line)
        self.assertEqual(signer, cn)
        self.assertIn(f"signed by '{cn}'", msg)
        # The hold is gone, and apt-get ran while it was there (recorded, in the step).
        self.assertFalse(os.path.exists(os.path.join(self.fx.root, "etc/dkms/no-autoinstall")))
        self.assertTrue(any(a[:2] == ["apt-get", "install"] and "hpcbake-fixture-dkms" in a
                            for a in self.fx.recorded()), self.fx.recorded())

    def test_a_retry_after_a_failed_build_still_builds_and_signs(self):
        # The first run's build fails (a source that does not compile); the step's own `dkms add`
        # registered the sources, and they were there before the packages went in. The retry must
        # build them all the same (a review found it reported "no DKMS module" and passed).
        c = os.path.join(self.fx.root, "usr/src/hpcbake-fixture-1.0/hpcbake_fixture.c")
        with open(c) as f:
            good = f.read()
        with open(c, "w") as f:
            f.write(good + "\n#error the first build fails\n")
        r = self.fx.install("Standard_Test2_v1", "--sign", "on", timeout=300)
        self.assertEqual(r.returncode, 5, r.stdout + r.stderr)
        self.assertEqual(self.fx.journal()["steps"]["driver:doca-ofed"]["status"], "failed")
        with open(c, "w") as f:
            f.write(good)
        r = self.fx.install("Standard_Test2_v1", "--sign", "on", timeout=300)
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        msg = self.fx.journal()["steps"]["driver:doca-ofed"]["message"]
        self.assertIn("built with hpcbake's key: hpcbake-fixture 1.0", msg)
        self.assertNotIn("no DKMS module", msg)



class DryRunAnywhere(unittest.TestCase):
    """A dry run from any machine (issue 46): the target's kernel named with --kernel, the plan and the
    dry run for a size x distro this machine is not, as text and as JSON lines."""

    FLAGSHIP = ["--size", "ND96isr_H100_v5", "--distro", "ubuntu-24.04"]

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="hpcbake-anywhere-")  # an empty machine: nothing of the target

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_install_dry_run_json_for_another_distro_and_kernel(self):
        r = run("--root", self.root, "--json", "install", "--dry-run", *self.FLAGSHIP, "--kernel", "6.8.0-1030-azure")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(line) for line in r.stdout.splitlines()]  # JSON lines only, no text
        self.assertEqual([x["event"] for x in lines], ["dry_run", "result"])
        dry, result = lines
        plan = dry["plan"]
        self.assertEqual(plan["kernels"], ["6.8.0-1030-azure"])
        self.assertIn("--kernel 6.8.0-1030-azure", plan["kernels_source"])
        self.assertEqual([s["id"] for s in dry["steps"]], [s["id"] for s in plan["steps"]])
        ids = {s["id"] for s in dry["steps"]}
        self.assertIn("kernel-headers:6.8.0-1030-azure", ids)
        self.assertIn("dkms:nvidia:6.8.0-1030-azure", ids)
        self.assertEqual(dry["would_run"], sum(1 for s in dry["steps"] if s["runs"]))
        self.assertEqual(result, {"event": "result", "outcome": "dry-run", "exit_code": 0,
                                  "journal": dry["journal"]})
        self.assertEqual(os.listdir(self.root), [], "a dry run writes nothing under --root")

    def test_plan_takes_every_kernel_given(self):
        p = run_json("--root", self.root, "--json", "plan", *self.FLAGSHIP, "--kernel", "6.8.0-1030-azure", "--kernel",
                     "6.8.0-1031-azure", "--kernel", "6.8.0-1030-azure")
        self.assertEqual(p["kernels"], ["6.8.0-1030-azure", "6.8.0-1031-azure"], "each once, in the order given")
        ids = [s["id"] for s in p["steps"]]
        for k in p["kernels"]:
            self.assertIn(f"dkms:nvidia:{k}", ids)

    def test_without_kernel_the_dry_run_names_the_option(self):
        r = run("--root", self.root, "install", "--dry-run", *self.FLAGSHIP)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("no target kernel is known", r.stderr)
        self.assertIn("--dry-run --kernel RELEASE", r.stderr)

    def test_kernel_without_dry_run_is_refused_before_anything_runs(self):
        r = run("--root", self.root, "install", "--yes", *self.FLAGSHIP, "--kernel", "6.8.0-1030-azure")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--kernel is for a dry run", r.stderr)
        self.assertEqual(os.listdir(self.root), [])

    def test_a_kernel_that_is_not_a_release_is_a_usage_error(self):
        for bad in ("../6.8.0", "6.8 0", "", ".."):
            r = run("--root", self.root, "plan", *self.FLAGSHIP, "--kernel", bad)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("is not a kernel release", r.stderr)

if __name__ == "__main__":
    unittest.main()
