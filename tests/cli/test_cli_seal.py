"""`hpcbake seal` against a copy of the ND H100 fixture root: the real `verify` (fake vendor
libraries, as in test_cli_verify.py) records its result with this boot's id, then seal either
refuses with every reason (exit 3) or writes /var/lib/hpcbake/image-manifest.json."""
import base64
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

from common import run
from kofile import make_key, sign_ko, write_ko
from test_cli_verify import MODULES, NEXT_BOOT, RUNNING, VerifyBase

BOOT = "3c9d7a4e-5b1f-4e0a-8d2c-6f7e8a9b0c1d"
SAS_SECRET = "c2VjcmV0LXNpZ25hdHVyZS12YWx1ZQ%3D%3D"


class SealBase(VerifyBase):
    def setUp(self):
        super().setUp()
        self.write("proc/sys/kernel/random/boot_id", BOOT + "\n")
        # The driver (from NVIDIA's CUDA repository on Ubuntu), Fabric Manager and DCGM, installed and held.
        dcgm = "".join(f"Package: datacenter-gpu-manager-4-{p}\nStatus: hold ok installed\nVersion: 1:4.5.2-1\n\n"
                       for p in ("cuda13", "core", "proprietary", "proprietary-cuda13"))
        self.write("var/lib/dpkg/status",
                   "Package: nvidia-driver-pinning-580.126.16\nStatus: hold ok installed\nVersion: 580.126.16-1\n\n"
                   "Package: nvidia-open\nStatus: hold ok installed\nVersion: 580.126.16-1\n\n" + dcgm +
                   "Package: nvidia-fabricmanager\nStatus: hold ok installed\nVersion: 580.126.16-1\n")
        self.plan_sha256 = self.store_plan()
        self.journal("complete")
        self.write("var/cache/hpcbake/sha256/" + "c" * 64, "artifact")

    def store_plan(self, key_dir=None, extra=()):
        """/var/lib/hpcbake/plan.json as install writes it, for the plan `plan --json` prints for this
        machine (no artifact: seal fetches nothing): the digest is SHA-256 over the compact JSON of the
        stored plan and the options (install/plan_file.cpp)."""
        r = run("--root", self.root, "plan", "--json", "--size", "Standard_ND4test_v1", "--distro", "ubuntu-22.04",
                *extra, env={"HPCBAKE_MANIFESTS": self.manifests})
        self.assertEqual(r.returncode, 0, r.stderr)
        shown = json.loads(r.stdout)
        options = {"jobs": 4, "lock_timeout_s": 600, "verify_level": 1, "ib_devices": [], "ib_seconds": 10.0,
                   "fabric_wait_s": 60, "cache_dir": os.path.join(self.root, "var/cache/hpcbake"), "ca_file": "",
                   "parallel": 4, "attempts_per_url": 4, "low_speed_seconds": 30, "backoff_initial_s": 1.0,
                   "max_unpinned_bytes": 4294967296, "quarantine_budget": 2147483648, "bundle": "",
                   "sha256_overrides": [], "key_dir": key_dir or os.path.join(self.root, "var/lib/hpcbake/signing")}
        stored = dict(shown, artifacts=[], artifacts_redacted=[])  # seal downloads nothing
        compact = json.dumps({"plan": stored, "options": options}, sort_keys=True, separators=(",", ":"),
                             ensure_ascii=False)
        sha = hashlib.sha256(compact.encode()).hexdigest()
        self.write("var/lib/hpcbake/plan.json", json.dumps(
            {"format": "hpcbake-plan", "version": 1, "sha256": sha, "options": options, "plan": stored}))
        return sha

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def journal(self, state, steps=None):
        self.write("var/lib/hpcbake/state.json", json.dumps({
            "version": 1, "size": "Standard_ND4test_v1", "distro": "ubuntu-22.04", "state": state,
            "updated_at": 1, "plan_sha256": self.plan_sha256, "steps": steps or {"packages:nvidia-fabricmanager": {
                "digest": "d", "status": "done", "started_at": 1, "finished_at": 2, "attempts": 1}}}))

    def seal(self, *args):
        return run("--root", self.root, "seal", *args, env={"HPCBAKE_MANIFESTS": self.manifests})

    def verified(self):
        r = self.verify()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.root, "var/lib/hpcbake/verify.json")) as f:
            rec = json.load(f)
        self.assertEqual(rec["boot_id"], BOOT)
        self.assertTrue(rec["passed"])
        self.assertEqual(rec["size"], "Standard_ND4test_v1")
        return rec


class Success(SealBase):
    def test_verify_then_seal_writes_the_image_manifest(self):
        self.verified()
        r = self.seal("--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("can be sealed", r.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.root, "var/cache/hpcbake/sha256", "c" * 64)),
                        "--check changes nothing")

        r = self.seal()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote /var/lib/hpcbake/image-manifest.json", r.stdout)
        with open(os.path.join(self.root, "var/lib/hpcbake/image-manifest.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], 5)
        self.assertEqual(doc["plan"], {"path": "/var/lib/hpcbake/plan.json", "sha256": self.plan_sha256})
        self.assertEqual(doc["size"], "Standard_ND4test_v1")
        self.assertEqual(doc["size_family"], "hpcbake verify test size")
        self.assertEqual(doc["distro"], "ubuntu-22.04")
        self.assertEqual(doc["kernel"]["next_boot"], NEXT_BOOT)
        self.assertEqual(doc["kernel"]["running"], RUNNING)
        self.assertTrue(doc["verify"]["passed"])
        self.assertEqual(doc["verify"]["boot_id"], BOOT)
        self.assertGreater(doc["verify"]["checks"]["pass"], 10)
        comps = {c["component"]: c for c in doc["components"]}
        self.assertEqual(comps["nvidia-fabricmanager"]["packages"],
                         [{"name": "nvidia-fabricmanager", "version": "580.126.16-1", "held": True}])
        self.assertEqual(comps["nvidia-cuda-driver"]["version"], self.driver_version)
        mods = {m["name"] for m in doc["modules"]}
        self.assertTrue({"nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"} <= mods, mods)
        for m in doc["modules"]:
            self.assertEqual(len(m["sha256"]), 64)
            self.assertTrue(m["vermagic"].startswith(NEXT_BOOT + " "))
        self.assertEqual(doc["cache"]["entries"], [{"sha256": "c" * 64, "size": 8}])
        self.assertEqual(os.listdir(os.path.join(self.root, "var/cache/hpcbake")), [])

    def test_json_and_deprovision_needs_the_real_machine(self):
        self.verified()
        r = self.seal("--check", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertTrue(doc["sealable"])
        self.assertFalse(doc["sealed"])
        self.assertEqual(doc["refusals"], [])
        r = self.seal("--deprovision")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--deprovision generalizes the machine hpcbake runs on", r.stderr)

    def test_deprovision_of_a_fixture_root_only_when_commands_are_recorded(self):
        # The test runner records commands instead of running them, so a --root tree may then
        # be "deprovisioned": the Packer test (tests/packer) seals its fixture machine this way.
        self.verified()
        rec = os.path.join(self.tmp, "commands.jsonl")
        # Even asked to, the test runner never runs waagent for real (only dkms and depmod may):
        # a stand-in `waagent` first on PATH would leave its marker if it ran.
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        marker = os.path.join(self.tmp, "waagent-ran")
        with open(os.path.join(bindir, "waagent"), "w") as f:
            f.write(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(os.path.join(bindir, "waagent"), 0o755)
        r = run("--root", self.root, "seal", "--deprovision",
                env={"HPCBAKE_MANIFESTS": self.manifests, "HPCBAKE_TEST_RUNNER": "record:" + rec,
                     "HPCBAKE_TEST_REAL_COMMANDS": "waagent", "PATH": bindir + ":" + os.environ["PATH"]})
        self.assertFalse(os.path.exists(marker), "HPCBAKE_TEST_REAL_COMMANDS=waagent ran the real waagent")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("seal: ran waagent -force -deprovision+user", r.stdout)
        with open(rec) as f:
            self.assertEqual([json.loads(line)["argv"] for line in f], [["waagent", "-force", "-deprovision+user"]])
        self.assertTrue(os.path.exists(os.path.join(self.root, "var/lib/hpcbake/image-manifest.json")))


class Refusals(SealBase):
    def refused(self, *ids, args=()):
        r = self.seal(*args)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("seal refused", r.stderr)
        self.assertIn("nothing was changed", r.stderr)
        for i in ids:
            self.assertIn(f"[{i}]", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, "var/lib/hpcbake/image-manifest.json")))
        return r

    def test_journal_incomplete(self):
        self.verified()
        self.journal("failed", {"driver:nvidia-cuda-driver": {"digest": "d", "status": "failed", "started_at": 1,
                                                             "finished_at": 2, "attempts": 1, "message": "exit 1"}})
        r = self.refused("journal.incomplete")
        self.assertIn("driver:nvidia-cuda-driver (failed)", r.stderr)

    def test_reboot_pending(self):
        self.verified()
        self.journal("reboot-required", {"reboot:nouveau": {"digest": "d", "status": "reboot-pending",
                                                           "started_at": 1, "finished_at": 2, "attempts": 1,
                                                           "boot_id": BOOT, "message": "nouveau is loaded"}})
        self.refused("reboot.pending")

    def test_verify_not_passed_in_this_boot(self):
        self.verified()
        self.write("proc/sys/kernel/random/boot_id", "11111111-2222-3333-4444-555555555555\n")
        r = self.refused("verify.other-boot")
        self.assertIn(BOOT, r.stderr)

    def test_verify_failed_is_recorded(self):
        r = self.verify(scenario={"FAKE_GPU_COUNT": "1"})
        self.assertEqual(r.returncode, 6)
        r = self.refused("verify.failed")
        self.assertIn("gpu.count", r.stderr)

    def test_verify_never_ran(self):
        self.refused("verify.missing")

    def test_module_missing_for_the_next_boot_kernel(self):
        self.verified()
        os.remove(os.path.join(self.root, "lib/modules", NEXT_BOOT, "updates/dkms/nvidia-uvm.ko"))
        r = self.refused("module.missing")
        self.assertIn(f"nvidia-uvm is not installed for the next-boot kernel {NEXT_BOOT}", r.stderr)

    def test_module_built_for_the_running_kernel(self):
        self.verified()
        d = os.path.join(self.root, "lib/modules", NEXT_BOOT, "updates/dkms")
        write_ko(os.path.join(d, "nvidia.ko"), "nvidia", RUNNING)
        self.refused("module.vermagic")

    def test_package_not_held(self):
        self.verified()
        self.write("var/lib/dpkg/status",
                   "Package: nvidia-fabricmanager\nStatus: install ok installed\nVersion: 580.126.16-1\n")
        r = self.refused("package.not-held")
        self.assertIn("apt-mark hold nvidia-fabricmanager", r.stderr)

    def test_secrets_in_state_cache_and_logs(self):
        self.verified()
        self.write("var/log/hpcbake/install.log",
                   f"ok\nGET https://acct.blob.core.windows.net/drivers/x.run?sv=2022-11-02&sig={SAS_SECRET}\n")
        self.write("var/lib/hpcbake/leftover.pem", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIsecretmaterial\n")
        self.write("var/cache/hpcbake/partial/abc.json", '{"Authorization": "Bearer eyJzZWNyZXQiOnRydWV9"}\n')
        self.write("var/lib/hpcbake/mirror.conf", "AccountName=a;AccountKey=c2VjcmV0YWNjb3VudGtleQ==\n")
        r = self.refused("secret.sas-token", "secret.private-key", "secret.authorization", "secret.account-key")
        self.assertIn("/var/log/hpcbake/install.log:2:", r.stderr)
        self.assertIn("/var/lib/hpcbake/leftover.pem:1:", r.stderr)
        self.assertIn("/var/cache/hpcbake/partial/abc.json:1:", r.stderr)
        self.assertIn("/var/lib/hpcbake/mirror.conf:1:", r.stderr)
        for secret in (SAS_SECRET, "MHcCAQEEI", "eyJzZWNyZXQi", "c2VjcmV0YWNjb3VudGtleQ"):
            self.assertNotIn(secret, r.stderr + r.stdout)

    def test_signing_key_refused_or_removed(self):
        self.verified()
        self.write("var/lib/hpcbake/signing/signing.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n")
        self.write("var/lib/hpcbake/signing/signing.der", "cert")
        r = self.refused("signing.private-key")
        self.assertIn("--remove-signing-key", r.stderr)
        r = self.seal("--remove-signing-key")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("removed the signing key /var/lib/hpcbake/signing/signing.key", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, "var/lib/hpcbake/signing/signing.key")))
        self.assertTrue(os.path.exists(os.path.join(self.root, "var/lib/hpcbake/signing/signing.der")))

    def test_every_reason_at_once_in_json(self):
        self.write("run/reboot-required", "")
        os.remove(os.path.join(self.root, "lib/modules", NEXT_BOOT, "updates/dkms/nvidia.ko"))
        self.write("var/log/hpcbake.log", "https://a/b?sig=abcdef\n")
        r = self.seal("--json")
        self.assertEqual(r.returncode, 3)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["sealable"])
        got = [x["id"] for x in doc["refusals"]]
        for i in ("reboot.pending", "verify.missing", "module.missing", "secret.sas-token"):
            self.assertIn(i, got)
        for x in doc["refusals"]:
            self.assertTrue(x["hint"], x)


SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "batch"))
import swagger_schema  # noqa: E402  (tests/batch/swagger_schema.py, the Batch pool examples' validator)

GALLERY_SPEC = os.path.join(SRC, "tests", "fixtures", "gallery", "compute-gallery-2025-03-03-image-version.json")
CERT = os.path.join(SRC, "tests", "fixtures", "mok-keys", "platform-db", "signing.der")  # made by hpcbake's generator
IMAGE = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-gallery/providers/Microsoft.Compute/"
STAGED = IMAGE + "galleries/hpcgallery/images/hpcbake-ubuntu-22.04-staging/versions/1.0.0"


class UefiDbBase(SealBase):
    """`seal --uefi-db-json`: the gallery image version body whose UEFI db holds the module-signing
    certificate, validated against the published GalleryRP 2025-03-03 schema (tests/fixtures/gallery/)."""

    def setUp(self):
        super().setUp()
        with open(GALLERY_SPEC) as f:
            self.spec = json.load(f)
        with open(CERT, "rb") as f:
            self.der = f.read()
        self.out = os.path.join(self.tmp, "uefi-db.json")
        # The body is written only when every module would load on the image's VMs (Secure Boot on,
        # CERT in db, which Ubuntu's kernel trusts for modules): the plan's modules are signed by it.
        if not shutil.which("openssl"):
            raise AssertionError("openssl is missing: scripts/deps installs it")
        self.db_key = os.path.join(SRC, "tests", "fixtures", "mok-keys", "platform-db", "signing.key")
        self.db_pem = os.path.join(self.tmp, "db.pem")
        subprocess.run(["openssl", "x509", "-inform", "DER", "-in", CERT, "-out", self.db_pem], check=True)
        for m in MODULES:
            sign_ko(os.path.join(self.root, "lib/modules", NEXT_BOOT, "updates/dkms", m + ".ko"), self.db_key,
                    self.db_pem)

    def body(self, *args, cert=CERT):
        r = self.seal("--check", "--uefi-db-json", self.out, "--cert", cert, "--source-id", STAGED,
                      "--location", "eastus", *args)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"wrote {self.out}", r.stdout)
        self.assertIn("api-version 2025-03-03", r.stdout)
        with open(self.out) as f:
            return json.load(f)

    def problems(self, body):
        return swagger_schema.validate(self.spec, body, "GalleryImageVersion")

    def write_bytes(self, rel, data):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


class UefiDb(UefiDbBase):

    def test_the_body_carries_the_certificate_and_validates_against_the_published_schema(self):
        self.verified()
        body = self.body("--target-region", "eastus", "--target-region", "westus3")
        self.assertEqual(self.problems(body), [])
        uefi = body["properties"]["securityProfile"]["uefiSettings"]
        self.assertEqual(uefi["signatureTemplateNames"], ["MicrosoftUefiCertificateAuthorityTemplate"])
        db = uefi["additionalSignatures"]["db"]
        self.assertEqual([k["type"] for k in db], ["x509"])
        self.assertEqual(base64.b64decode(db[0]["value"][0], validate=True), self.der)
        self.assertEqual(body["properties"]["storageProfile"], {"source": {"id": STAGED}})
        self.assertEqual([t["name"] for t in body["properties"]["publishingProfile"]["targetRegions"]],
                         ["eastus", "westus3"])
        self.assertEqual(body["location"], "eastus")

    def test_a_pem_certificate_and_the_default_one_give_the_same_db_entry(self):
        self.verified()
        pem = os.path.join(self.tmp, "signing.pem")
        b64 = base64.b64encode(self.der).decode()
        with open(pem, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\n" + "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64)) +
                    "\n-----END CERTIFICATE-----\n")
        from_pem = self.body(cert=pem)
        self.write_bytes("var/lib/hpcbake/signing/signing.der", self.der)  # the install's default key dir
        r = self.seal("--check", "--uefi-db-json", self.out, "--source-id", IMAGE + "virtualMachines/build",
                      "--location", "eastus")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            default = json.load(f)
        self.assertEqual(self.problems(default), [])
        self.assertEqual(default["properties"]["securityProfile"], from_pem["properties"]["securityProfile"])
        # A VM is captured through virtualMachineId; the regions default to the location.
        self.assertEqual(default["properties"]["storageProfile"],
                         {"source": {"virtualMachineId": IMAGE + "virtualMachines/build"}})
        self.assertEqual(default["properties"]["publishingProfile"], {"targetRegions": [{"name": "eastus"}]})

    def test_what_is_not_a_certificate_or_a_source_is_refused_and_nothing_is_written(self):
        self.verified()
        key = os.path.join(SRC, "tests", "fixtures", "mok-keys", "platform-db", "signing.key")
        cases = [
            (["--cert", key, "--source-id", STAGED, "--location", "eastus"], r"not a DER X\.509 certificate"),
            (["--cert", os.path.join(self.tmp, "missing.der"), "--source-id", STAGED, "--location", "eastus"],
             r"cannot read the certificate"),
            (["--cert", CERT, "--source-id", "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Storage/"
              "storageAccounts/s", "--location", "eastus"], r"--source-id .* is not the id of a managed image"),
            (["--cert", CERT, "--source-id", STAGED, "--location", "east/us"], r"--location .* is not a region"),
            (["--cert", CERT, "--source-id", STAGED, "--location", "eastus", "--target-region", "eastus",
              "--target-region", "EastUS"], r"--target-region 'EastUS' is given twice"),
            (["--cert", CERT, "--location", "eastus"], r"needs --source-id"),
        ]
        for args, pattern in cases:
            with self.subTest(args=args):
                r = self.seal("--check", "--uefi-db-json", self.out, *args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertRegex(r.stderr, pattern)
                self.assertIn("hint:", r.stderr)
                self.assertFalse(os.path.exists(self.out))
        # Without a key the install used, the default certificate is missing: said so, with the fix
        # (checked once seal has read the stored plan, so a machine seal refuses says that first).
        r = self.seal("--check", "--uefi-db-json", self.out, "--source-id", STAGED, "--location", "eastus")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("var/lib/hpcbake/signing/signing.der: cannot read the certificate", r.stderr)
        self.assertIn("--cert FILE", r.stderr)
        # The body's options alone, and the body with --deprovision, are usage errors.
        r = self.seal("--check", "--location", "eastus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("add --uefi-db-json FILE", r.stderr)
        r = self.seal("--deprovision", "--uefi-db-json", self.out, "--cert", CERT, "--source-id", STAGED,
                      "--location", "eastus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("seal --check --uefi-db-json", r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_the_default_certificate_is_the_one_the_stored_plan_signs_with(self):
        # An install with --key-dir /srv/keys: the certificate is signing.der there, not in the default
        # directory (which holds another one here, and must not be the one in the body).
        self.plan_sha256 = self.store_plan(key_dir=os.path.join(self.root, "srv/keys"))
        self.journal("complete")
        self.verified()
        self.write_bytes("srv/keys/signing.der", self.der)
        other = os.path.join(SRC, "tests", "fixtures", "mok-keys", "trust-mok", "signing.der")
        with open(other, "rb") as f:
            self.write_bytes("var/lib/hpcbake/signing/signing.der", f.read())
        r = self.seal("--check", "--uefi-db-json", self.out, "--source-id", STAGED, "--location", "eastus")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            db = json.load(f)["properties"]["securityProfile"]["uefiSettings"]["additionalSignatures"]["db"]
        self.assertEqual(base64.b64decode(db[0]["value"][0]), self.der)
        os.remove(os.path.join(self.root, "srv/keys/signing.der"))
        os.remove(self.out)
        r = self.seal("--check", "--uefi-db-json", self.out, "--source-id", STAGED, "--location", "eastus")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("srv/keys/signing.der: cannot read the certificate", r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_a_machine_seal_refuses_gets_no_body(self):
        r = self.seal("--check", "--json", "--uefi-db-json", self.out, "--cert", CERT, "--source-id", STAGED,
                      "--location", "eastus")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIsNone(json.loads(r.stdout)["uefi_db_json"])
        self.assertFalse(os.path.exists(self.out))
        self.verified()
        r = self.seal("--check", "--json", "--uefi-db-json", self.out, "--cert", CERT, "--source-id", STAGED,
                      "--location", "eastus")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["uefi_db_json"], self.out)
        self.assertTrue(os.path.exists(self.out))

    def test_the_schema_check_catches_what_azure_would_refuse(self):
        self.verified()
        good = self.body()

        def refused(mutate, pattern):
            b = copy.deepcopy(good)
            mutate(b)
            found = self.problems(b)
            self.assertTrue(any(re.search(pattern, p) for p in found), f"{pattern!r} not in {found}")

        uefi = lambda b: b["properties"]["securityProfile"]["uefiSettings"]  # noqa: E731
        refused(lambda b: uefi(b).update(additionalSignature=uefi(b).pop("additionalSignatures")),
                r"uefiSettings\.additionalSignature: unknown property \(did you mean 'additionalSignatures'\?\)")
        refused(lambda b: uefi(b)["additionalSignatures"]["db"][0].update(type="X509"),
                r"db\[0\]\.type: 'X509' is not one of \['sha256', 'x509'\]")
        refused(lambda b: uefi(b)["additionalSignatures"]["db"][0].update(value="MIIB"),
                r"db\[0\]\.value: expected array, got string")
        refused(lambda b: uefi(b)["additionalSignatures"].update(db=uefi(b)["additionalSignatures"]["db"][0]),
                r"additionalSignatures\.db: expected array, got object")
        refused(lambda b: uefi(b).update(signatureTemplateNames=["MicrosoftUefiCA"]),
                r"signatureTemplateNames\[0\]: 'MicrosoftUefiCA' is not one of")
        refused(lambda b: b.pop("location"), r"^\$: missing required property 'location'$")  # TrackedResource, via allOf
        refused(lambda b: b["properties"].pop("storageProfile"), r"missing required property 'storageProfile'")
        refused(lambda b: b["properties"]["storageProfile"]["source"].update(virtualMachineID="x"),
                r"source\.virtualMachineID: unknown property \(did you mean 'virtualMachineId'\?\)")
        refused(lambda b: b["properties"]["publishingProfile"]["targetRegions"][0].pop("name"),
                r"targetRegions\[0\]: missing required property 'name'")
        refused(lambda b: b["properties"].update(provisioningState="Succeeded"), r"provisioningState: read-only")
        refused(lambda b: b.update(id=STAGED), r"^\$\.id: read-only")  # Resource, two allOf levels down


class SecureBootOutOfTree(SealBase):
    """With Secure Boot on, every out-of-tree module of the next-boot kernel must be signed by a key
    the kernel trusts, not only the plan's DKMS modules: here DOCA-OFED's mlx5_ib, installed by a
    package under updates/, which the plan does not name."""
    MLX5 = f"/lib/modules/{NEXT_BOOT}/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko"

    def setUp(self):
        super().setUp()
        if not shutil.which("openssl"):
            raise AssertionError("openssl is missing: scripts/deps installs it")
        self.verified()
        # The kernel's own key signs its in-tree modules and the plan's DKMS modules.
        self.key, self.pem, _ = make_key(self.tmp, "Build time autogenerated kernel key")
        kdir = os.path.join(self.root, "lib/modules", NEXT_BOOT)
        for sub in ("kernel/fs/ext4/ext4.ko", "kernel/crypto/cryptd.ko"):
            path = os.path.join(kdir, sub)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_ko(path, os.path.basename(sub)[:-3], NEXT_BOOT, intree=True)
            sign_ko(path, self.key, self.pem)
        for m in MODULES:
            sign_ko(os.path.join(kdir, "updates/dkms", m + ".ko"), self.key, self.pem)
        # The package's module, unsigned, and the package's file list.
        self.mlx5 = os.path.join(self.root, self.MLX5[1:])
        os.makedirs(os.path.dirname(self.mlx5))
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        self.write("var/lib/dpkg/info/mlnx-ofed-kernel-modules:amd64.list", "/.\n/lib\n" + self.MLX5 + "\n")
        efivar = os.path.join(self.root, "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
        os.makedirs(os.path.dirname(efivar), exist_ok=True)
        with open(efivar, "wb") as f:
            f.write(b"\x06\x00\x00\x00\x01")

    def test_an_unsigned_package_module_in_updates_is_refused_by_name(self):
        r = self.seal("--check", "--json")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        refusals = [x for x in json.loads(r.stdout)["refusals"] if x["id"] == "module.secure-boot"]
        self.assertEqual(len(refusals), 1, refusals)
        self.assertIn(self.MLX5 + " (package mlnx-ofed-kernel-modules): out-of-tree module of the next-boot kernel, "
                      "unsigned", refusals[0]["message"])
        self.assertIn("sign-file sha256", refusals[0]["hint"])
        self.assertIn("UEFI db", refusals[0]["hint"])
        self.assertIn("MOK", refusals[0]["hint"])
        r = self.seal()
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, "var/lib/hpcbake/image-manifest.json")))

    def test_signed_by_a_trusted_key_it_passes_and_the_manifest_records_it(self):
        sign_ko(self.mlx5, self.key, self.pem)
        r = self.seal()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.root, "var/lib/hpcbake/image-manifest.json")) as f:
            doc = json.load(f)
        mods = {m["path"]: m for m in doc["out_of_tree_modules"]["modules"]}
        self.assertEqual(len(mods), len(MODULES) + 1, mods)
        m = mods[self.MLX5]
        self.assertEqual(m["signer"], "Build time autogenerated kernel key")
        self.assertRegex(m["serial"], "^[0-9a-f]+$")
        self.assertEqual(m["package"], "mlnx-ofed-kernel-modules")
        self.assertTrue(m["loads_with_secure_boot"])
        self.assertIn("the kernel's own key", m["secure_boot_trust"])

    def test_module_trust_shows_the_same_and_exits_6_until_it_is_trusted(self):
        env = {"HPCBAKE_MANIFESTS": self.manifests}
        r = run("--root", self.root, "module", "trust", "--json", env=env)
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["kernel"], NEXT_BOOT)
        self.assertTrue(doc["next_boot"])
        self.assertEqual(doc["secure_boot"], "enabled")
        self.assertEqual(doc["kernel_key"]["signer"], "Build time autogenerated kernel key")
        mods = {m["path"]: m for m in doc["modules"]}
        self.assertEqual(len(mods), len(MODULES) + 1, mods)
        self.assertEqual([p for p, m in mods.items() if not m["loads_with_secure_boot"]], [self.MLX5])
        self.assertEqual(mods[self.MLX5]["trust"], "unsigned")
        self.assertIsNone(mods[self.MLX5]["signer"])
        self.assertEqual(mods[self.MLX5]["package"], "mlnx-ofed-kernel-modules")
        r = run("--root", self.root, "module", "trust", env=env)
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        self.assertIn("REFUSED " + self.MLX5 + " (package mlnx-ofed-kernel-modules)", r.stdout)
        self.assertIn("1 of 6 would be refused with Secure Boot on", r.stdout)

        sign_ko(self.mlx5, self.key, self.pem)
        r = run("--root", self.root, "module", "trust", env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("0 of 6 would be refused", r.stdout)
        # Another kernel: its own modules; one with no module directory is refused (exit 3).
        r = run("--root", self.root, "module", "trust", "--kernel", RUNNING, "--json", env=env)
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)  # unsigned, and no in-tree key to trust
        self.assertEqual(len(json.loads(r.stdout)["modules"]), len(MODULES))
        r = run("--root", self.root, "module", "trust", "--kernel", "9.9.9-gone", env=env)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("/lib/modules/9.9.9-gone does not exist", r.stderr)


class UefiDbModules(UefiDbBase):
    """The db route builds on a VM with Secure Boot off (the Packer template's TrustedLaunchSupported
    image), so modules load while verify runs; the body is still written only when every out-of-tree
    module would load on the image's VMs, Secure Boot on: DOCA's mlx5_ib from NVIDIA's package,
    unsigned or signed by NVIDIA's key, would not."""
    MLX5 = SecureBootOutOfTree.MLX5

    def setUp(self):
        super().setUp()
        efivar = os.path.join(self.root, "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
        os.makedirs(os.path.dirname(efivar), exist_ok=True)
        with open(efivar, "wb") as f:
            f.write(b"\x06\x00\x00\x00\x00")  # Secure Boot off on the build VM
        self.verified()
        self.mlx5 = os.path.join(self.root, self.MLX5[1:])
        os.makedirs(os.path.dirname(self.mlx5))
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        self.write("var/lib/dpkg/info/mlnx-ofed-kernel-modules:amd64.list", "/.\n/lib\n" + self.MLX5 + "\n")

    def ask(self, cert=CERT):
        return self.seal("--check", "--json", "--uefi-db-json", self.out, "--cert", cert, "--source-id", STAGED,
                         "--location", "eastus")

    def refused(self, r):
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIsNone(json.loads(r.stdout)["uefi_db_json"])
        self.assertFalse(os.path.exists(self.out))
        return [x for x in json.loads(r.stdout)["refusals"] if x["id"] == "module.image-secure-boot"]

    def test_an_unsigned_or_vendor_signed_package_module_gets_no_body(self):
        refusals = self.refused(self.ask())
        self.assertEqual(len(refusals), 1, refusals)
        self.assertIn(self.MLX5 + " (package mlnx-ofed-kernel-modules): out-of-tree module of the next-boot kernel, "
                      "unsigned", refusals[0]["message"])
        self.assertIn("Secure Boot is off here", refusals[0]["message"])
        self.assertIn("--uefi-db-json", refusals[0]["message"])
        self.assertIn("sign-file sha256", refusals[0]["hint"])
        # Signed by the vendor's key, which neither the kernel nor the image's db trusts: refused, naming it.
        vkey, vpem, _ = make_key(self.tmp, "Mellanox Technologies signing key")
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        sign_ko(self.mlx5, vkey, vpem)
        refusals = self.refused(self.ask())
        self.assertEqual(len(refusals), 1, refusals)
        self.assertIn("signer 'Mellanox Technologies signing key'", refusals[0]["message"])
        # Without the body asked for, and a plan that signs nothing, Secure Boot off: recorded, not refused.
        r = self.seal("--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_plan_module_the_db_certificate_did_not_sign_gets_no_body(self):
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        sign_ko(self.mlx5, self.db_key, self.db_pem)
        nvidia = os.path.join(self.root, "lib/modules", NEXT_BOOT, "updates/dkms/nvidia.ko")
        write_ko(nvidia, "nvidia", NEXT_BOOT)
        refusals = self.refused(self.ask())
        self.assertEqual([x["message"].split(":")[0] for x in refusals],
                         [f"/lib/modules/{NEXT_BOOT}/updates/dkms/nvidia.ko"])
        self.assertIn("unsigned", refusals[0]["message"])

    def test_every_module_signed_by_the_db_certificate_gets_the_body(self):
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        sign_ko(self.mlx5, self.db_key, self.db_pem)
        r = self.ask()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["uefi_db_json"], self.out)
        with open(self.out) as f:
            self.assertEqual(self.problems(json.load(f)), [])
        # The same certificate is what the image's db holds: another one does not vouch for the modules.
        other = os.path.join(SRC, "tests", "fixtures", "mok-keys", "trust-mok", "signing.der")
        os.remove(self.out)
        r = self.ask(cert=other)
        self.assertEqual(len(self.refused(r)), len(MODULES) + 1)

    def test_a_plan_that_signs_modules_refuses_without_the_body_asked(self):
        # install --sign on with Secure Boot off: signing is not a precaution, the image is meant to
        # boot with Secure Boot on, so its modules are judged so even without --uefi-db-json.
        self.plan_sha256 = self.store_plan(extra=["--sign", "on"])
        self.journal("complete")
        self.verified()
        self.write_bytes("var/lib/hpcbake/signing/signing.der", self.der)
        r = self.seal("--check", "--json")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        refusals = [x for x in json.loads(r.stdout)["refusals"] if x["id"] == "module.image-secure-boot"]
        self.assertEqual(len(refusals), 1, refusals)
        self.assertIn(self.MLX5, refusals[0]["message"])
        self.assertIn("the plan signs modules: --sign on", refusals[0]["message"])
        write_ko(self.mlx5, "mlx5_ib", NEXT_BOOT)
        sign_ko(self.mlx5, self.db_key, self.db_pem)
        r = self.seal("--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
