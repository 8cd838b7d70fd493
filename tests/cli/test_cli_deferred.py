"""Bake on any VM, prove it on the target: `--hardware-checks deferred` (plan, install's closing
verify, verify), `seal --verify deferred`, and the boot unit's first boot that runs the deferred
checks, against the fixture machine of test_cli_verify_boot.py (a copy of the ND H100 root, a stored
plan for Standard_ND4test_v1 with two GPUs and two NDR ports, the fake NVIDIA and RDMA libraries).

"No hardware here" is the fakes' absence: without them on LD_LIBRARY_PATH, libnvidia-ml.so.1 and
libcuda.so.1 do not load on this machine, exactly as on a general-purpose build VM."""
import hashlib
import json
import os
import unittest

from common import run
from test_cli_detect import imds_doc, serve
from test_cli_seal import BOOT
import test_cli_verify_boot
from test_cli_verify_boot import NODE_STATE, PROM, UNITS, BootBase

SIZE = "Standard_ND4test_v1"
RECORD = "var/lib/hpcbake/verify.json"
MANIFEST = "var/lib/hpcbake/image-manifest.json"
VERDICT = "var/lib/hpcbake/hardware-verdict.json"
NEXT_BOOT_ID = "0f0e0d0c-0000-4000-8000-000000000002"


class Deferred(BootBase):
    def bare(self):
        """This machine without the size's hardware: no fake vendor library on the loader's path."""
        return {"LD_LIBRARY_PATH": ""}

    def deferred_verify(self, *args, **scenario):
        env = self.bare()
        env.update(scenario)
        return run("--root", self.root, "verify", "--hardware-checks", "deferred", "--json", *args, env=env)

    def record(self):
        return json.loads(self.read(RECORD))

    def set_install_level(self, level):
        """The stored plan's install options with --verify-level `level` (its digest recomputed as
        install computes it: SHA-256 of the compact JSON of plan and options)."""
        doc = json.loads(self.read("var/lib/hpcbake/plan.json"))
        doc["options"]["verify_level"] = level
        compact = json.dumps({"plan": doc["plan"], "options": doc["options"]}, sort_keys=True, separators=(",", ":"),
                             ensure_ascii=False)
        doc["sha256"] = self.plan_sha256 = hashlib.sha256(compact.encode()).hexdigest()
        self.write("var/lib/hpcbake/plan.json", json.dumps(doc))
        self.journal("complete")

    def test_plan_says_the_hardware_checks_are_deferred(self):
        r = run("plan", "--size", SIZE, "--distro", "ubuntu-22.04", "--hardware-checks", "deferred", "--json",
                env={"HPCBAKE_MANIFESTS": self.manifests})
        self.assertEqual(r.returncode, 0, r.stderr)
        step = next(s for s in json.loads(r.stdout)["steps"] if s["kind"] == "verify")
        self.assertEqual(step["detail"]["hardware_checks"], "deferred")
        self.assertIn(f"the hardware checks are deferred to the first boot on {SIZE}", step["title"])
        r = run("plan", "--size", SIZE, "--distro", "ubuntu-22.04", "--hardware-checks", "deferred",
                env={"HPCBAKE_MANIFESTS": self.manifests})
        self.assertIn("hardware checks: deferred (run at the first boot on the size", r.stdout)
        # Without the option, the step is as before: checked now, no new field.
        r = run("plan", "--size", SIZE, "--distro", "ubuntu-22.04", "--json", env={"HPCBAKE_MANIFESTS": self.manifests})
        step = next(s for s in json.loads(r.stdout)["steps"] if s["kind"] == "verify")
        self.assertNotIn("hardware_checks", step["detail"])
        r = run("plan", "--size", SIZE, "--distro", "ubuntu-22.04", "--hardware-checks", "later")
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_without_the_hardware_verify_fails(self):
        r = run("--root", self.root, "verify", "--json", env=self.bare())
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertEqual(json.loads(r.stdout)["checks"][0]["id"], "gpu.nvml")

    def test_deferred_verify_checks_the_disk_and_records_each_hardware_check(self):
        r = self.deferred_verify()
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["hardware"], "deferred")
        checks = {c["id"]: c for c in doc["checks"]}
        self.assertEqual(doc["summary"]["fail"], 0)
        ran = {i for i, c in checks.items() if c["verdict"] != "deferred"}
        deferred = {i for i, c in checks.items() if c["verdict"] == "deferred"}
        # What the bake leaves on disk: module files for both target kernels, signatures, the agent.
        self.assertTrue(any(i.startswith("kernel.modules.") for i in ran), ran)
        self.assertIn("waagent.enable_rdma", ran)
        self.assertEqual(checks["waagent.enable_rdma"]["verdict"], "pass")
        # Every hardware check of level 1, named, with what the first boot will expect.
        for i in ("gpu.nvml", "gpu.count", "gpu.driver_version", "gpu.nvswitch_count", "gpu.xid", "gpu.health",
                  "cuda.init", "cuda.vector_add", "ib.verbs", "ib.port_count", "ib.nvidia_peermem"):
            self.assertIn(i, deferred)
        self.assertEqual(checks["gpu.count"]["expected"], "2")
        self.assertIn(f"deferred to the first boot on {SIZE}", checks["gpu.count"]["observed"])
        self.assertNotIn("cuda.p2p", checks)  # level 2: not asked for
        rec = self.record()
        self.assertEqual(rec["hardware"], "deferred")
        self.assertTrue(rec["passed"])
        self.assertEqual(set(rec["deferred_checks"]), deferred)
        self.assertEqual(set(rec["ran_checks"]), ran)
        self.assertEqual(rec["checks"]["deferred"], len(deferred))
        # The table and JUnit say it too.
        r = self.deferred_verify("--junit", os.path.join(self.tmp, "v.xml"))
        with open(os.path.join(self.tmp, "v.xml")) as f:
            junit = f.read()
        self.assertIn("deferred: deferred to the first boot on", junit)
        r = run("--root", self.root, "verify", "--hardware-checks", "deferred", env=self.bare())
        self.assertIn("DEFERRED", r.stdout)
        self.assertIn(f"deferred to the first boot on {SIZE}", r.stdout.splitlines()[-1])

    def test_deferred_verify_still_fails_what_is_wrong_on_disk(self):
        os.remove(os.path.join(self.root, "etc", "waagent.conf"))
        r = self.deferred_verify()
        self.assertEqual(r.returncode, 6, r.stderr)
        checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        self.assertEqual(checks["waagent.enable_rdma"]["verdict"], "fail")
        self.assertFalse(self.record()["passed"])

    def test_seal_refuses_a_deferred_verdict_unless_told_and_then_records_it_pending(self):
        self.assertEqual(self.deferred_verify().returncode, 0)
        r = self.seal("--check")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("verify.deferred", r.stdout + r.stderr)
        self.assertIn("seal --verify deferred", r.stdout + r.stderr)
        r = self.seal("--check", "--verify", "deferred")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.seal("--verify", "deferred")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        doc = json.loads(self.read(MANIFEST))
        self.assertEqual(doc["schema"], 5)
        hv = doc["hardware_verdict"]
        self.assertEqual((hv["state"], hv["size"]), ("pending", SIZE))
        self.assertIn("gpu.count", hv["deferred_checks"])
        self.assertEqual(doc["verify"]["hardware"], "deferred")
        self.assertIn("waagent.enable_rdma", doc["verify"]["ran_checks"])
        self.assertTrue(os.path.exists(os.path.join(self.root, UNITS, "hpcbake-verify-boot.service")))

    def test_a_hardware_verdict_is_accepted_by_seal_verify_deferred_too(self):
        self.verified()
        r = self.seal("--verify", "deferred")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(self.read(MANIFEST))["hardware_verdict"]["state"], "checked")

    def first_boot_after_a_deferred_bake(self, install_level=2):
        self.set_install_level(install_level)
        self.assertEqual(self.deferred_verify().returncode, 0)
        self.assertEqual(self.seal("--verify", "deferred").returncode, 0)
        self.write("proc/sys/kernel/random/boot_id", NEXT_BOOT_ID + "\n")  # the image's first VM boots

    def unit(self, *args, **scenario):
        """The boot unit's command (verify --boot --level 1 --first-boot), with the fakes: the hardware."""
        return self.boot("--first-boot", "--p2p-mib", "4", "--ib-seconds", "1", *args, **scenario)

    def verdict(self):
        return json.loads(self.read(VERDICT))

    def start_task(self):
        """examples/batch-pool-gallery.json's start task, as test_cli_verify_boot.GalleryStartTask runs it."""
        return test_cli_verify_boot.GalleryStartTask.start_task(self)

    def test_the_first_boot_runs_the_deferred_checks_at_the_install_level_until_they_pass(self):
        self.first_boot_after_a_deferred_bake(install_level=2)
        # Before the unit has run, a start task that waits sees no verdict of this boot.
        r = self.unit()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("the first boot of an image whose hardware checks were deferred", r.stderr)
        state = json.loads(self.read(NODE_STATE))
        self.assertEqual((state["verdict"], state["level"], state["boot_id"]), ("healthy", 2, NEXT_BOOT_ID))
        ids = {c["id"] for c in state["checks"]}
        self.assertIn("gpu.count", ids)
        self.assertIn("image.hardware_verdict", ids)
        self.assertTrue(any(i.endswith(".rdma_write") for i in ids), ids)  # level 2 ran
        v = self.verdict()
        self.assertEqual((v["state"], v["passed"], v["level"], v["size"], v["boot_id"]),
                         ("done", True, 2, SIZE, NEXT_BOOT_ID))
        prom = self.read(PROM)
        self.assertIn(f'hpcbake_node_healthy{{size="{SIZE}",level="2"}} 1\n', prom)
        self.assertIn('hpcbake_check_passed{id="image.hardware_verdict",level="0"} 1\n', prom)
        self.assertEqual(self.start_task().returncode, 0)
        # Passed once: the next boot's unit runs its own level, and still shows the verdict.
        self.write("proc/sys/kernel/random/boot_id", BOOT + "\n")
        r = self.unit()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("the first boot of an image", r.stderr)
        self.assertEqual(json.loads(self.read(NODE_STATE))["level"], 1)
        self.assertIn("image.hardware_verdict", {c["id"] for c in json.loads(self.read(NODE_STATE))["checks"]})
        # Another verify afterwards (a job's, by hand) changes nothing of that.
        self.assertEqual(self.deferred_verify().returncode, 0)
        self.assertNotIn("the first boot of an image", self.unit().stderr)

    def test_a_failed_first_boot_keeps_the_node_unhealthy_until_a_boot_passes_the_checks(self):
        self.first_boot_after_a_deferred_bake(install_level=1)
        r = self.unit(FAKE_GPU_COUNT="1")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("verify --boot: FAILED gpu.count (level 0): GPU count: expected 2, observed 1", r.stderr)
        state = json.loads(self.read(NODE_STATE))
        self.assertEqual(state["verdict"], "unhealthy")
        self.assertEqual({c["id"] for c in state["failed_checks"]}, {"gpu.count", "image.hardware_verdict"})
        self.assertEqual((self.verdict()["passed"], self.verdict()["failed_checks"]), (False, ["gpu.count"]))
        r = self.start_task()
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("FAILED gpu.count", r.stdout)
        # The periodic unit (level 0, no --first-boot) in the same boot: still unhealthy, saying why.
        r = self.boot("--level", "0")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("FAILED image.hardware_verdict (level 0)", r.stderr)
        self.assertIn("failed at level 1 in boot " + NEXT_BOOT_ID + ": gpu.count", r.stderr)
        # A reboot with the fault still there: the unit tries again, and fails again.
        self.write("proc/sys/kernel/random/boot_id", BOOT + "\n")
        self.assertEqual(self.unit(FAKE_GPU_COUNT="1").returncode, 6)
        # The next boot on sound hardware: the checks run once more and pass.
        self.write("proc/sys/kernel/random/boot_id", NEXT_BOOT_ID + "\n")
        r = self.unit()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the first boot of an image whose hardware checks were deferred", r.stderr)
        self.assertTrue(self.verdict()["passed"])

    def test_a_first_boot_that_never_finished_is_not_a_pass(self):
        self.first_boot_after_a_deferred_bake(install_level=1)
        self.write(VERDICT, json.dumps({"schema": 1, "state": "running", "passed": False, "boot_id": NEXT_BOOT_ID,
                                        "size": SIZE, "level": 1, "checked_at": 1, "failed_checks": []}))
        r = self.boot("--level", "0")  # the periodic unit: it never runs the deferred checks itself
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertNotIn("the first boot of an image", r.stderr)
        self.assertIn("never finished (stopped or timed out)", r.stderr)
        self.assertEqual(json.loads(self.read(NODE_STATE))["level"], 0)

    def test_seal_leaves_no_verdict_of_this_vm_in_the_image(self):
        # A build VM made from an earlier hpcbake image carries that image's verdicts.
        self.write(VERDICT, json.dumps({"schema": 1, "state": "done", "passed": True}))
        self.write(NODE_STATE, "{}")
        self.assertEqual(self.deferred_verify().returncode, 0)
        self.assertEqual(self.seal("--verify", "deferred").returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.root, VERDICT)))
        self.assertFalse(os.path.exists(os.path.join(self.root, NODE_STATE)))
        self.assertEqual(json.loads(self.read(MANIFEST))["hardware_verdict"]["level"], 1)

    def test_a_deferred_verify_at_level_3_lists_no_load_check(self):
        r = self.deferred_verify("--level", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        levels = {c["level"] for c in json.loads(r.stdout)["checks"] if c["verdict"] == "deferred"}
        self.assertEqual(levels, {0, 1, 2})  # the first boot stops at 2; the load checks are a job's

    def test_boot_refuses_to_defer(self):
        r = self.boot("--hardware-checks", "deferred")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("verify --boot checks this machine's hardware", r.stderr)


class OtherSize(BootBase):
    """A bake for size A on a VM of size B records A; the first boot on size C says the image is
    not for it. A: the stored plan's Standard_ND4test_v1; B and C: the metadata service's answer."""

    def test_a_bake_on_another_size_records_the_target_and_the_first_boot_on_a_third_names_it(self):
        with serve(imds_doc("hb120rs_v3.json")) as (_, url):  # the build VM: an HB120rs v3
            r = run("--root", self.root, "--imds-url", url, "verify", "--hardware-checks", "deferred", "--json",
                    env={"LD_LIBRARY_PATH": ""})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["size"], SIZE)  # --size not given: the stored plan's, A
        rec = json.loads(self.read(RECORD))
        self.assertEqual((rec["size"], rec["hardware"]), (SIZE, "deferred"))
        self.assertEqual(self.seal("--verify", "deferred").returncode, 0)
        self.assertEqual(json.loads(self.read(MANIFEST))["hardware_verdict"]["size"], SIZE)
        self.write("proc/sys/kernel/random/boot_id", NEXT_BOOT_ID + "\n")
        with serve(imds_doc("nd96isr_h100_v5.json")) as (_, url):  # the image's first VM: an ND96isr H100 v5
            r = run("--root", self.root, "--imds-url", url, "verify", "--boot", "--first-boot", "--fabric-wait", "1",
                    "--gpu-bw-mib", "4", env=self.fakes())
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("verify --boot: FAILED image.size (level 0): VM size the image was baked for: expected "
                      f"{SIZE}, observed Standard_ND96isr_H100_v5 (Azure metadata)", r.stderr)
        state = json.loads(self.read(NODE_STATE))
        self.assertEqual(state["size"], SIZE)
        self.assertIn("image.size", [c["id"] for c in state["failed_checks"]])
        verdict = json.loads(self.read(VERDICT))
        self.assertFalse(verdict["passed"])
        self.assertIn("image.size", verdict["failed_checks"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
