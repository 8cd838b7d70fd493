"""`hpcbake verify --boot`, `verify --node-state --wait`, and the health units `seal` writes, against
a copy of the ND H100 fixture root with the fake vendor libraries (test_cli_seal.py's machine: a
stored plan for Standard_ND4test_v1, two GPUs expected; FAKE_GPU_COUNT=1 breaks gpu.count).

No systemd boots here: the boot unit's ExecStart line, as seal wrote it, is run verbatim under the
fixture root (what systemd would run at the next boot), and `systemd-analyze verify` reads the unit
files where this machine has systemd. The Batch gallery pool's start task is run by bash as Batch
runs it, with hpcbake pointed at the fixture root."""
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import threading
import time
import unittest

from common import BIN, SRC, run
from test_cli_seal import BOOT, SealBase
from test_cli_verify import FAKES, TWO_NDR

NODE_STATE = "var/lib/hpcbake/node-state.json"
PROM = "var/lib/prometheus/node-exporter/hpcbake.prom"
UNITS = "etc/systemd/system"

# The text format's lines ("Text format details", https://prometheus.io/docs/instrumenting/exposition_formats/):
# HELP and TYPE comments, and samples `name{label="value",...} value` with \\ \" \n escaped in values.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{" + _LABEL + r"(?:," + _LABEL + r")*\})? -?[0-9.e+-]+")
_HELP = re.compile(r"# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*")
_TYPE = re.compile(r"# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (?:counter|gauge|histogram|summary|untyped)")


class BootBase(SealBase):
    def fakes(self, **scenario):
        # tests/fakes/bin first on PATH: the fake nvidia-smi of gpu.health.
        env = {"LD_LIBRARY_PATH": FAKES, "FAKE_IB_PORTS": TWO_NDR, "FAKE_DRIVER_VERSION": self.driver_version,
               "PATH": os.path.join(SRC, "tests", "fakes", "bin") + os.pathsep + os.environ.get("PATH", "")}
        env.update(scenario)
        return env

    def boot(self, *args, **scenario):
        return run("--root", self.root, "verify", "--boot", "--fabric-wait", "1", "--gpu-bw-mib", "4", *args,
                   env=self.fakes(**scenario))

    def node_state(self, *args, timeout=60):
        return run("--root", self.root, "verify", "--node-state", *args, timeout=timeout)

    def read(self, rel):
        with open(os.path.join(self.root, rel)) as f:
            return f.read()

    def assertExposition(self, text):
        self.assertTrue(text.endswith("\n"), "the last line ends with a line feed")
        for line in text[:-1].split("\n"):
            self.assertTrue(_HELP.fullmatch(line) or _TYPE.fullmatch(line) or _SAMPLE.fullmatch(line), line)

    def assertHealthy(self, healthy, level=1, gpu_count_ok=None):
        doc = json.loads(self.read(NODE_STATE))
        self.assertEqual(doc["schema"], 1)
        self.assertEqual(doc["verdict"], "healthy" if healthy else "unhealthy")
        self.assertEqual(doc["boot_id"], BOOT)
        self.assertEqual(doc["level"], level)
        self.assertEqual(doc["size"], "Standard_ND4test_v1")
        self.assertEqual(doc["plan"], {"path": "/var/lib/hpcbake/plan.json", "sha256": self.plan_sha256})
        self.assertGreater(doc["checked_at"], 1_600_000_000)
        self.assertTrue(doc["hpcbake_version"])
        prom = self.read(PROM)
        self.assertExposition(prom)
        self.assertIn(f'hpcbake_node_healthy{{size="Standard_ND4test_v1",level="{level}"}} {int(healthy)}\n', prom)
        self.assertRegex(prom, r"\nhpcbake_verify_timestamp_seconds \d+\n")
        self.assertRegex(prom, r"\nhpcbake_verify_duration_seconds [0-9.e+-]+\n")
        ok = healthy if gpu_count_ok is None else gpu_count_ok
        self.assertIn(f'hpcbake_check_passed{{id="gpu.count",level="0"}} {int(ok)}\n', prom)
        return doc


class Boot(BootBase):
    def test_a_healthy_node_leaves_its_state_and_metrics(self):
        r = self.boot()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("verify --boot: node healthy at level 1", r.stderr)
        doc = self.assertHealthy(True)
        self.assertEqual(doc["failed_checks"], [])
        self.assertGreater(doc["counts"]["pass"], 10)
        rec = json.loads(self.read("var/lib/hpcbake/verify.json"))  # the usual verify record too
        self.assertEqual(rec["boot_id"], BOOT)
        self.assertTrue(rec["passed"])
        r = self.node_state()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(": healthy (level 1, this boot", r.stdout)

    def test_a_failed_check_makes_the_node_unhealthy_and_the_run_fail(self):
        r = self.boot(FAKE_GPU_COUNT="1")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertRegex(r.stderr, r"verify --boot: FAILED gpu\.count \(level 0\): GPU count: expected 2, observed 1")
        self.assertIn("verify --boot: node UNHEALTHY at level 1", r.stderr)
        doc = self.assertHealthy(False)
        failed = {c["id"]: c for c in doc["failed_checks"]}
        self.assertEqual(failed["gpu.count"]["expected"], "2")
        self.assertTrue(failed["gpu.count"]["observed"].startswith("1"), failed["gpu.count"])
        self.assertTrue(failed["gpu.count"]["hint"])
        r = self.node_state()
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        self.assertIn("FAILED gpu.count (level 0)", r.stdout)
        r = self.node_state("--json")
        self.assertEqual(json.loads(r.stdout), doc)

    def test_the_periodic_level_0_keeps_a_level_1_failure_of_the_same_boot(self):
        self.assertEqual(self.boot("--level", "0").returncode, 0)
        self.assertHealthy(True, level=0)
        r = self.boot(FAKE_VADD_CORRUPT="0:1")  # level 1 fails: device 0's vector add is wrong
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertHealthy(False, gpu_count_ok=True)  # level 1 fails the node
        r = self.boot("--level", "0")  # the periodic run: level 0 passes, the level-1 failure stays
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertEqual(json.loads(self.read(NODE_STATE))["level"], 1)

    def test_the_textfile_dir_is_an_option_and_boot_runs_only_the_quick_levels(self):
        r = self.boot("--textfile-dir", "/srv/metrics")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertExposition(self.read("srv/metrics/hpcbake.prom"))
        self.assertEqual(sorted(os.listdir(os.path.join(self.root, "srv/metrics"))), ["hpcbake.prom"])
        r = self.boot("--level", "2")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--boot runs the quick levels", r.stderr)
        r = run("--root", self.root, "verify", "--wait", "5")
        self.assertEqual(r.returncode, 2, "--wait needs --node-state")


class Wait(BootBase):
    def test_no_result_for_this_boot_within_the_time(self):
        t0 = time.monotonic()
        r = self.node_state("--wait", "1")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)
        self.assertIn("no 'verify --boot' result for this boot", r.stderr)
        self.assertIn("none was ever written", r.stderr)
        # A state of an earlier boot does not count.
        self.assertEqual(self.boot().returncode, 0)
        self.write("proc/sys/kernel/random/boot_id", "0f0e0d0c-0000-4000-8000-000000000001\n")
        r = self.node_state("--wait", "1")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn(f"the last is from boot {BOOT}", r.stderr)
        r = self.node_state()  # without --wait: the last state, whatever boot
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"an earlier boot, {BOOT}", r.stdout)

    def test_the_state_a_real_gpu_machine_wrote_is_read_back(self):
        """node-state.json and hpcbake.prom as `verify --boot` wrote them on a one-H200 machine
        (bench/gpu-health, size Standard_NC40ads_H100_v5: three checks failed, the machine not being
        that size); tests/fixtures/verify/README.md."""
        fixtures = os.path.join(SRC, "tests", "fixtures", "verify")
        with open(os.path.join(fixtures, "node-state-h200.json")) as f:
            state = f.read()
        self.write(NODE_STATE, state)
        self.write("proc/sys/kernel/random/boot_id", json.loads(state)["boot_id"] + "\n")
        r = self.node_state("--wait", "5")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("unhealthy (level 1, this boot", r.stdout)
        self.assertIn("17 passed, 3 failed, 3 skipped", r.stdout)
        for check in ("gpu.pci_ids", "host.cpu", "host.memory"):
            self.assertIn(f"FAILED {check} (level 0)", r.stdout)
        with open(os.path.join(fixtures, "hpcbake-h200.prom")) as f:
            prom = f.read()
        self.assertExposition(prom)
        self.assertIn('hpcbake_node_healthy{size="Standard_NC40ads_H100_v5",level="1"} 0\n', prom)

    def wait_for_verdict(self, **scenario):
        """The start task's wait: started before the boot check has written its state."""
        self.boot(**scenario)
        state = os.path.join(self.root, NODE_STATE)
        aside = state + ".aside"
        os.replace(state, aside)
        later = threading.Timer(1.5, os.replace, (aside, state))
        later.start()
        self.addCleanup(later.cancel)
        t0 = time.monotonic()
        r = self.node_state("--wait", "30")
        self.assertGreaterEqual(time.monotonic() - t0, 1.0, "it waited")
        return r

    def test_waits_for_the_boot_verdict_healthy(self):
        r = self.wait_for_verdict()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(": healthy", r.stdout)

    def test_waits_for_the_boot_verdict_unhealthy(self):
        r = self.wait_for_verdict(FAKE_GPU_COUNT="1")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("the node is unhealthy", r.stderr)


class SealedUnits(BootBase):
    """Option B of the issue's proof: no real boot; the sealed unit's command, verbatim."""

    def sealed(self):
        self.verified()
        r = self.seal("--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"would write /etc/systemd/system/hpcbake-verify-boot.service, enabled: "
                      f"/etc/systemd/system/multi-user.target.wants/hpcbake-verify-boot.service", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, UNITS, "hpcbake-verify-boot.service")),
                         "--check changes nothing")
        r = self.seal()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote /etc/systemd/system/hpcbake-verify-boot.service", r.stdout)
        return json.loads(self.read("var/lib/hpcbake/image-manifest.json"))

    def exec_start(self, unit):
        lines = [l for l in self.read(os.path.join(UNITS, unit)).splitlines() if l.startswith("ExecStart=")]
        self.assertEqual(len(lines), 1)
        line = lines[0][len("ExecStart="):]
        # systemd's quoting (systemd.service(5) "Command lines"): double quotes with C escapes; %% and $$
        # would be specifiers and variables, which a temp path has none of.
        self.assertNotIn("%", line)
        self.assertNotIn("$", line)
        return shlex.split(line)

    def test_seal_writes_and_enables_the_units_and_the_boot_command_runs(self):
        doc = self.sealed()
        self.assertEqual(doc["schema"], 5)
        units = {u["unit"]: u for u in doc["health_units"]}
        self.assertEqual(set(units), {"hpcbake-verify-boot.service", "hpcbake-verify-periodic.service",
                                      "hpcbake-verify.timer"})
        self.assertTrue(units["hpcbake-verify-boot.service"]["enabled"])
        self.assertTrue(units["hpcbake-verify.timer"]["enabled"])
        self.assertFalse(units["hpcbake-verify-periodic.service"]["enabled"])
        sysd = os.path.join(self.root, UNITS)
        self.assertEqual(os.readlink(os.path.join(sysd, "multi-user.target.wants/hpcbake-verify-boot.service")),
                         "/etc/systemd/system/hpcbake-verify-boot.service")
        self.assertEqual(os.readlink(os.path.join(sysd, "timers.target.wants/hpcbake-verify.timer")),
                         "/etc/systemd/system/hpcbake-verify.timer")
        argv = self.exec_start("hpcbake-verify-boot.service")
        # The executable seal ran as (where the install put hpcbake), and the tree it sealed.
        self.assertEqual(os.path.realpath(argv[0]), os.path.realpath(BIN))
        self.assertEqual(argv[1:], ["--root", os.path.abspath(self.root), "verify", "--boot", "--level", "1", "--first-boot"])
        self.assertEqual(self.exec_start("hpcbake-verify-periodic.service")[-4:], ["verify", "--boot", "--level", "0"])

        # The next boot (a new boot id), as systemd would start the unit: its command line only.
        self.write("proc/sys/kernel/random/boot_id", BOOT + "\n")
        os.remove(os.path.join(self.root, "var/lib/hpcbake/verify.json"))
        env = dict(os.environ, **self.fakes())
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertHealthy(True)
        # The same unit on a node whose fakes report the wrong GPU count: the unit fails (exit 6).
        r = subprocess.run(argv, capture_output=True, text=True, env=dict(env, FAKE_GPU_COUNT="1"), timeout=120,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("verify --boot: FAILED gpu.count", r.stderr)
        self.assertHealthy(False)

    def test_systemd_analyze_verify_reads_the_units(self):
        analyze = shutil.which("systemd-analyze")
        if not analyze:
            self.skipTest("systemd-analyze is not installed")
        self.sealed()
        sysd = os.path.join(self.root, UNITS)
        files = [os.path.join(sysd, u) for u in ("hpcbake-verify-boot.service", "hpcbake-verify-periodic.service",
                                                 "hpcbake-verify.timer")]
        # --man=no: Documentation=man:hpcbake(1) is not installed on this machine.
        r = subprocess.run([analyze, "verify", "--man=no", *files], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning"))
        own = [l for l in (r.stdout + r.stderr).splitlines() if "hpcbake-verify" in l]
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(own, [], "systemd-analyze complained about the hpcbake units")


class GalleryStartTask(BootBase):
    """examples/batch-pool-gallery.json's start task, run by bash as Batch runs it, with
    /opt/hpcbake/bin/hpcbake standing for this build pointed at the fixture root."""

    def start_task(self):
        with open(os.path.join(SRC, "examples", "batch-pool-gallery.json")) as f:
            st = json.load(f)["startTask"]
        self.assertIs(st["waitForSuccess"], True)
        argv = shlex.split(st["commandLine"])
        self.assertEqual(argv[:2], ["/bin/bash", "-c"])
        self.assertIn("/opt/hpcbake/bin/hpcbake verify --node-state --wait", argv[2])
        wrapper = os.path.join(self.tmp, "hpcbake")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec {shlex.quote(BIN)} --root {shlex.quote(self.root)} \"$@\"\n")
        os.chmod(wrapper, stat.S_IRWXU)
        script = argv[2].replace("/opt/hpcbake/bin/hpcbake", wrapper)
        return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, AZ_BATCH_TASK_WORKING_DIR=self.tmp), stdin=subprocess.DEVNULL)

    def test_the_start_task_passes_on_a_healthy_node(self):
        self.assertEqual(self.boot().returncode, 0)
        r = self.start_task()
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_the_start_task_fails_on_an_unhealthy_node(self):
        self.assertEqual(self.boot(FAKE_GPU_COUNT="1").returncode, 6)
        r = self.start_task()
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("FAILED gpu.count", r.stdout)


if __name__ == "__main__":
    unittest.main()
