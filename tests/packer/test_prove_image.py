"""packer/prove-image.sh, the build-then-prove step, against a fake `az` (tests/packer/fake-az).

A fake `az` on PATH stands in for Azure: it records every command line and answers in the shapes
the real CLI prints (fake-az's docstring cites them). Nothing here creates a VM, boots an image or
reaches Azure, and nothing here can: what these tests prove is the script's own logic, the
command lines it hands the CLI, and what it makes of the answers. The Run Command script the
script sends runs here, with /bin/sh, against a stand-in `hpcbake` that prints a node state and
exits as `hpcbake verify --node-state --wait` does (0 healthy, 6 unhealthy: docs/health.md).

Cases: a healthy first-boot verdict marks the version for use and deletes the VM; an unhealthy one
does not mark it, deletes the VM and exits 6; an az failure in the middle (Run Command) still
deletes the VM; a creation that fails half-way leaves nothing; a failed clean-up says what is left
(exit 4); no verdict in Run Command's message (exit 3); the documented response shape verbatim;
usage errors before any az command. Under sh (dash) and bash.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(SRC, "packer", "prove-image.sh")
FAKE_AZ = os.path.join(HERE, "fake-az")
VERSION_ID = ("/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/rg-hpcbake-gallery/providers/"
              "Microsoft.Compute/galleries/hpcbakegallery/images/hpcbake-ubuntu-22.04/versions/1.0.0")
FAILED_CHECK = "FAILED gpu.count (level 0): GPU count: expected 8, observed 7 (NVML)"


class ProveImage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-prove-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.bin = os.path.join(self.tmp, "bin")
        self.scenario = os.path.join(self.tmp, "scenario")
        os.makedirs(self.bin)
        os.makedirs(self.scenario)
        os.symlink(FAKE_AZ, os.path.join(self.bin, "az"))
        self.log = os.path.join(self.tmp, "az.log")
        # The stand-in for hpcbake on the VM: records its argv, prints a node state, exits.
        self.hpcbake = os.path.join(self.tmp, "opt", "hpcbake", "bin", "hpcbake")
        os.makedirs(os.path.dirname(self.hpcbake))
        self.hpcbake_argv = os.path.join(self.tmp, "hpcbake.argv")
        with open(self.hpcbake, "w") as f:
            f.write(f'#!/bin/sh\necho "$*" > {self.hpcbake_argv}\nprintf "%s\\n" "$FAKE_NODE_STATE"\n'
                    'exit "${FAKE_VERDICT:-0}"\n')
        os.chmod(self.hpcbake, 0o755)
        self.answer("sig_image-version_show", {"name": "1.0.0", "tags": {
            "built_by": "hpcbake", "size": "Standard_ND96isr_H100_v5", "build_vm_size": "Standard_D8s_v5",
            "hardware": "deferred"}, "publishingProfile": {"excludeFromLatest": True}})
        self.answer("sig_image-definition_show", {"name": "hpcbake-ubuntu-22.04", "hyperVGeneration": "V2",
                                                  "features": [{"name": "SecurityType", "value": "TrustedLaunch"}]})

    def answer(self, command, doc=None, rc=None):
        if doc is not None:
            with open(os.path.join(self.scenario, command + ".json"), "w") as f:
                json.dump(doc, f)
        if rc is not None:
            with open(os.path.join(self.scenario, command + ".rc"), "w") as f:
                f.write(str(rc))

    def prove(self, *args, shell="sh", verdict=0, node_state="node HEALTHY at level 1", **env):
        full = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"], FAKE_AZ_LOG=self.log,
                    FAKE_AZ_DIR=self.scenario, FAKE_AZ_RUN="1", FAKE_VERDICT=str(verdict), FAKE_NODE_STATE=node_state,
                    **env)
        argv = [shell, SCRIPT, "--image-version-id", VERSION_ID, "--resource-group", "rg-prove",
                "--name", "hpcbake-prove-t", "--hpcbake", self.hpcbake, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=full)

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def commands(self):
        out = []
        for argv in self.calls():
            words = []
            for a in argv:
                if a.startswith("-"):
                    break
                words.append(a)
            out.append(" ".join(words))
        return out

    def call(self, command):
        found = [a for a in self.calls() if " ".join(a).startswith(command + " ")]
        self.assertEqual(len(found), 1, f"{command}: {self.calls()}")
        return found[0]

    def left(self):
        path = os.path.join(self.scenario, "resources")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line)["id"] for line in f if line.strip()]

    def assertVmDeleted(self):
        self.assertIn("vm delete", self.commands())
        self.assertEqual(self.left(), [], "the VM, its NIC and its OS disk are gone")

    def test_healthy_verdict_marks_the_version_and_deletes_the_vm(self):
        for shell in ("sh", "bash"):
            with self.subTest(shell=shell):
                os.path.exists(self.log) and os.remove(self.log)
                r = self.prove(shell=shell)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(self.commands(), [
                    "sig image-version show", "sig image-definition show", "vm create", "vm run-command invoke",
                    "sig image-version update", "vm show", "vm delete", "resource list", "disk show"])
                create = self.call("vm create")
                self.assertEqual(create[create.index("--image") + 1], VERSION_ID, "exactly that version, not latest")
                self.assertEqual(create[create.index("--size") + 1], "Standard_ND96isr_H100_v5", "the version's size tag")
                self.assertEqual(create[create.index("--security-type") + 1], "TrustedLaunch")
                self.assertEqual(create[create.index("--enable-secure-boot") + 1], "true")
                self.assertEqual(create[create.index("--public-ip-address") + 1], "", "no public IP by default")
                self.assertEqual(create[create.index("--nsg") + 1], "")
                for opt, value in (("--os-disk-delete-option", "Delete"), ("--nic-delete-option", "Delete"),
                                   ("-g", "rg-prove"), ("-n", "hpcbake-prove-t"), ("--tags", "hpcbake-prove=hpcbake-prove-t"),
                                   ("--os-disk-name", "hpcbake-prove-t-osdisk")):
                    self.assertEqual(create[create.index(opt) + 1], value, opt)
                self.assertIn("--generate-ssh-keys", create)
                invoke = self.call("vm run-command invoke")
                self.assertEqual(invoke[invoke.index("--command-id") + 1], "RunShellScript")
                self.assertEqual(invoke[invoke.index("--query") + 1], "value[0].message")
                with open(self.hpcbake_argv) as f:
                    self.assertEqual(f.read().strip(), "verify --node-state --wait 900")
                definition = self.call("sig image-definition show")
                for opt, value in (("-g", "rg-hpcbake-gallery"), ("-r", "hpcbakegallery"),
                                   ("-i", "hpcbake-ubuntu-22.04"), ("--subscription", "11111111-2222-3333-4444-555555555555")):
                    self.assertEqual(definition[definition.index(opt) + 1], value)
                update = self.call("sig image-version update")
                for opt, value in (("-g", "rg-hpcbake-gallery"), ("-r", "hpcbakegallery"), ("-i", "hpcbake-ubuntu-22.04"),
                                   ("-e", "1.0.0"), ("--subscription", "11111111-2222-3333-4444-555555555555"),
                                   ("--set", "publishingProfile.excludeFromLatest=false")):
                    self.assertEqual(update[update.index(opt) + 1], value, opt)
                self.assertVmDeleted()
                self.assertIn("node HEALTHY at level 1", r.stdout)
                self.assertIn("first-boot verdict on Standard_ND96isr_H100_v5: HEALTHY", r.stdout)
                self.assertIn("marked for use", r.stdout)

    def test_unhealthy_verdict_does_not_mark_deletes_the_vm_and_exits_6(self):
        for shell in ("sh", "bash"):
            with self.subTest(shell=shell):
                os.path.exists(self.log) and os.remove(self.log)
                r = self.prove(shell=shell, verdict=6, node_state=f"verify --boot: {FAILED_CHECK}\nnode UNHEALTHY at level 1")
                self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
                self.assertNotIn("sig image-version update", self.commands(), "an unhealthy version stays out of latest")
                self.assertVmDeleted()
                self.assertIn(FAILED_CHECK, r.stdout, "the failed checks are printed")
                self.assertIn("UNHEALTHY", r.stdout)
                self.assertIn("is not marked for use", r.stdout)

    def test_an_az_failure_in_the_middle_still_deletes_the_vm(self):
        self.answer("vm_run-command_invoke", rc=1)
        r = self.prove()
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("az vm run-command invoke on hpcbake-prove-t failed", r.stderr)
        self.assertNotIn("sig image-version update", self.commands())
        self.assertVmDeleted()
        # Healthy, but the version cannot be marked: a failure (3), and the VM still goes.
        os.remove(os.path.join(self.scenario, "vm_run-command_invoke.rc"))
        os.remove(self.log)
        self.answer("sig_image-version_update", rc=1)
        r = self.prove()
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("it is proven but not marked for use", r.stderr)
        self.assertVmDeleted()

    def test_a_creation_that_fails_half_way_leaves_nothing(self):
        r = self.prove(FAKE_AZ_LEAVE_NIC="1")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("az vm create failed", r.stderr)
        self.assertNotIn("vm run-command invoke", self.commands())
        self.assertNotIn("vm delete", self.commands(), "there was no VM")
        delete = self.call("resource delete")
        self.assertTrue(delete[delete.index("--ids") + 1].endswith("/networkInterfaces/hpcbake-prove-tVMNic"))
        self.assertEqual(self.left(), [])

    def test_a_failed_clean_up_names_what_is_left_and_exits_4(self):
        self.answer("vm_delete", rc=1)
        r = self.prove()
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("the clean-up failed; still in resource group rg-prove: VM:hpcbake-prove-t", r.stderr)
        self.assertIn("HEALTHY", r.stdout, "the verdict was printed before")

    def test_no_verdict_in_the_message_is_a_failure(self):
        self.answer("vm_run-command_invoke", {"value": [{
            "code": "ProvisioningState/succeeded", "displayStatus": "Provisioning succeeded", "level": "Info",
            "message": "Enable succeeded: \n[stdout]\n\n[stderr]\nsh: 1: cannot fork\n", "time": None}]})
        r = self.prove()
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("no verdict came back from hpcbake-prove-t", r.stderr)
        self.assertNotIn("sig image-version update", self.commands())
        self.assertVmDeleted()

    def test_the_documented_response_shape_a_standard_image_and_no_mark(self):
        # Run Command's answer as Microsoft's documentation prints one (fake-az cites it), with the
        # script's last line; a definition without a security type; the size given.
        self.answer("vm_run-command_invoke", {"value": [{
            "code": "ProvisioningState/succeeded", "displayStatus": "Provisioning succeeded", "level": "Info",
            "message": "Enable succeeded: \n[stdout]\nnode HEALTHY at level 1\n\nhpcbake-prove: exit 0\n\n[stderr]\n",
            "time": None}]})
        self.answer("sig_image-definition_show", {"name": "hpcbake-ubuntu-22.04", "features": None})
        r = self.prove("--size", "Standard_NC24ads_A100_v4", "--no-mark", "--wait", "600", "--subnet", "/sub/net")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("sig image-version show", self.commands(), "the size was given")
        self.assertNotIn("sig image-version update", self.commands(), "--no-mark")
        create = self.call("vm create")
        self.assertEqual(create[create.index("--security-type") + 1], "Standard")
        self.assertNotIn("--enable-secure-boot", create)
        self.assertEqual(create[create.index("--size") + 1], "Standard_NC24ads_A100_v4")
        self.assertEqual(create[create.index("--subnet") + 1], "/sub/net")
        self.assertIn("--wait 600", self.call("vm run-command invoke")[-5])
        self.assertVmDeleted()

    def test_usage_errors_run_no_az_command(self):
        for args, message in (
                (["--size", "ND96isr_H100_v5"], "--size must be an Azure size name"),
                (["--wait", "6000"], "Run Command ends a script after 90 minutes"),
                (["--wait", "15m"], "--wait must be a number of seconds"),
                (["--security-type", "ConfidentialVM"], "--security-type must be Standard or TrustedLaunch"),
                (["--name", "bad name"], "--name must be letters"),
                (["--hpcbake", "hpcbake"], "--hpcbake must be an absolute path"),
                (["--bogus"], "unknown option '--bogus'"),
                (["--image-version-id", "/subscriptions/x/versions/1.0.0"], "--image-version-id must be")):
            with self.subTest(args=args):
                r = self.prove(*args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(self.calls(), [])
        # A version without the template's size tag needs --size; nothing was created.
        self.answer("sig_image-version_show", {"name": "1.0.0", "tags": {}})
        r = self.prove()
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("no 'size' tag", r.stderr)
        self.assertNotIn("vm create", self.commands())


if __name__ == "__main__":
    unittest.main(verbosity=2)
