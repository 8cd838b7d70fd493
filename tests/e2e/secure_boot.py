"""The Secure Boot guest test (docs/secure-boot.md): the e2e guest's root disk (image.sh) booted by
OVMF's Secure Boot firmware with Microsoft's keys enrolled (Debian's ovmf: OVMF_CODE_4M.secboot.fd,
OVMF_VARS_4M.ms.fd), through Debian's signed shim, grub and kernel, under TCG with SMM. One boot.

What is real: the firmware's signature checks (Microsoft's UEFI CA -> Debian's shim -> Debian's
grub and kernel), the kernel's lockdown and module signature checks, shim's MOK list as the kernel
reads it, mokutil, keyctl, and hpcbake's own install, module signing and seal. What the test sets
up: hpcbake's signing certificate is pre-seeded as a MOK in the firmware variables
(virt-fw-vars --add-mok, what MokManager writes after a user confirms `mokutil --import` at the
console), so no human types a password; install, module install and seal never ask for one.

The host side (here): fetches shim-signed, shim-helpers-amd64-signed and grub-efi-amd64-signed
(bookworm) and python3-virt-firmware (trixie) with tests/fixtures/debian-fetch (apt-verified,
cached), builds the fixture module on the host unsigned and signed by a key that is NOT enrolled
(for the kernel to refuse), makes the EFI system partition (a FAT image with mtools) and the
firmware variables, boots, reads /out back. The guest side: guest/secure-boot.sh.

Environment: as run_vm.py (HPCBAKE_BIN, HPCBAKE_BUILD_DIR, HPCBAKE_E2E_DIR, HPCBAKE_E2E_CACHE,
HPCBAKE_E2E_KERNEL, HPCBAKE_E2E_TIMEOUT, HPCBAKE_E2E_VERBOSE, HPCBAKE_E2E_DEB, HPCBAKE_E2E_IMAGE).
Exit code 77 (ctest SKIP_RETURN_CODE) when the machine cannot run it; the reason is printed."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import run_vm as e2e

OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"  # Microsoft's KEK and db, PK set: Secure Boot on
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"  # shim's vendor GUID: MokList's, and its owner
FETCH = os.path.join(e2e.SRC, "tests", "fixtures", "debian-fetch")
PACKAGES = ["shim-signed/bookworm", "shim-helpers-amd64-signed/bookworm", "grub-efi-amd64-signed/bookworm",
            "python3-virt-firmware/trixie"]
SIZE = "Standard_E2E_SecureBoot"
MODULE = e2e.FIXTURE.replace("-", "_")
CMDLINE = ("console=ttyS0 root=/dev/vda rw panic=-1 no_timer_check net.ifnames=0 mitigations=off quiet loglevel=4 "
           "systemd.show_status=1")


def log(msg):
    print(f"secure-boot: {msg}", file=sys.stderr, flush=True)


def prerequisites():
    reason = e2e.prerequisites()
    if reason:
        return reason
    for f, pkg in ((OVMF_CODE, "ovmf"), (OVMF_VARS, "ovmf")):
        if not os.path.exists(f):
            return f"{f} is missing (scripts/deps installs {pkg})"
    for tool, pkg in (("mcopy", "mtools"), ("mkfs.vfat", "dosfstools"), ("openssl", "openssl")):
        if not shutil.which(tool) and not os.path.exists(f"/sbin/{tool}"):
            return f"{tool} is missing (scripts/deps installs {pkg})"
    if os.geteuid() != 0:
        return "building the fixture module needs root (DKMS refuses otherwise)"
    return None


class SecureBootVm(e2e.Vm):
    def __init__(self):
        super().__init__()
        self.size = SIZE
        self.run = os.path.join(e2e.WORK, "run-secure-boot")
        self.console = os.path.join(self.run, "console.log")
        self.out = os.path.join(self.run, "out")

    # -- the data disk: the run_vm.py one, with a size whose only driver is the fixture module ----
    def stage_prebuilt(self, manifests, bundle_dir):
        # This guest builds its module in the guest (`module install`), under Secure Boot.
        self.prebuilt = ""
        return ""

    def stage_nvidia(self, dest):
        self.nvidia_missing = "not part of the Secure Boot test"

    def stage_manifests(self, manifests):
        comp = os.path.join(manifests, "components", "hpcbake-e2e-driver.yaml")
        with open(comp) as f:
            text = f.read()
        with open(comp, "w") as f:
            f.write(text.replace("  reboot: true\n", "  reboot: false\n"))
        with open(os.path.join(manifests, "sizes", "e2e_secureboot.yaml"), "w") as f:
            f.write(f"""schema: 1
size: "{SIZE}"
family: "hpcbake e2e (QEMU guest, OVMF Secure Boot)"
source: "tests/e2e/secure_boot.py (docs/secure-boot.md): the e2e guest under OVMF_CODE_4M.secboot.fd with Microsoft's keys"
cpu:
  sockets: 1
  cores: 2
memory_mb: 1900
checks: {{}}
dkms_modules: [hpcbake-e2e-driver]
notes: >-
  Test only: the Secure Boot VM's size, no GPU and no InfiniBand; its one driver is the fixture
  module, which install must sign with the enrolled key for the kernel to load it.
""")

    def build_fixture(self, tmp, label, sign):
        """The fixture module built on the host for the guest's kernel by `hpcbake module install`."""
        src = os.path.join(e2e.SRC, "tests", "fixtures", "modules", e2e.FIXTURE)
        d = os.path.join(tmp, label)
        os.makedirs(os.path.join(d, "inst", self.kernel))
        p = subprocess.run([e2e.BIN, "module", "install", src, "--name", e2e.FIXTURE, "--version", "1.0",
                            "--module", MODULE, "--kernel", self.kernel, "--dkmstree", f"{d}/dkms",
                            "--sourcetree", f"{d}/src", "--installtree", f"{d}/inst", "--no-depmod", *sign],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
        if p.returncode != 0:
            raise AssertionError(f"hpcbake module install ({label}) failed ({p.returncode}):\n{p.stderr[-3000:]}")
        kos = glob.glob(os.path.join(d, "inst", self.kernel, "updates", "dkms", f"{MODULE}.ko*"))
        if len(kos) != 1:
            raise AssertionError(f"module install ({label}) made {kos}")
        return kos[0]

    def stage_more(self, stage, manifests):
        sb = os.path.join(stage, "sb")
        shutil.copytree(os.path.join(e2e.SRC, "tests", "fixtures", "modules", e2e.FIXTURE), os.path.join(sb, "src"))
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=self.run) as tmp:
            # The key the firmware's MokList will hold: hpcbake's own generator makes it (RSA 3072,
            # module-signing EKU), as `hpcbake install` does on a VM the first time.
            enrolled = self.build_fixture(tmp, "enrolled", ["--sign", "on", "--key-dir", os.path.join(sb, "keys")])
            os.makedirs(os.path.join(sb, "enrolled"))
            shutil.copy(enrolled, os.path.join(sb, "enrolled"))
            for label, sign in (("unsigned", ["--sign", "off"]),
                                ("other-key", ["--sign", "on", "--key-dir", os.path.join(tmp, "other-keys")])):
                os.makedirs(os.path.join(sb, label))
                shutil.copy(self.build_fixture(tmp, label, sign), os.path.join(sb, label))
        self.timings["host_module_builds_s"] = round(time.monotonic() - t0, 1)
        self.mok_der = os.path.join(self.run, "mok.der")
        shutil.copy(os.path.join(sb, "keys", "signing.der"), self.mok_der)
        return "MODE=secure-boot\n"

    # -- the firmware side: the ESP and the variables --------------------------------------------
    def stage_firmware(self):
        r = subprocess.run([FETCH, "secure-boot", *PACKAGES], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise AssertionError(f"tests/fixtures/debian-fetch secure-boot failed:\n{r.stderr}")
        debs = r.stdout.strip().splitlines()[-1]
        root = os.path.join(debs, "root")
        with open(os.path.join(debs, "packages.txt")) as f:
            self.packages = f.read().split()
        log("packages: " + " ".join(self.packages))
        # The EFI system partition, a whole-disk FAT file system (OVMF reads it as removable media):
        # shim as the default loader, grub and MokManager beside it (shim loads them from its own
        # directory), grub.cfg where Debian's signed grub looks ($prefix = /EFI/debian), the kernel
        # (Debian's build of the guest's kernel, signed by Debian) and the guest's initramfs.
        self.esp = os.path.join(self.run, "esp.img")
        subprocess.run(["truncate", "-s", "64M", self.esp], check=True)
        subprocess.run(["mkfs.vfat", "-n", "HPCBAKE-ESP", self.esp], check=True, capture_output=True)
        env = dict(os.environ, MTOOLS_SKIP_CHECK="1")

        def m(*args):
            subprocess.run(list(args), check=True, capture_output=True, env=env)
        m("mmd", "-i", self.esp, "::/EFI", "::/EFI/BOOT", "::/EFI/debian")
        for src, dst in (("usr/lib/shim/shimx64.efi.signed", "EFI/BOOT/BOOTX64.EFI"),
                         ("usr/lib/shim/mmx64.efi.signed", "EFI/BOOT/mmx64.efi"),
                         ("usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "EFI/BOOT/grubx64.efi")):
            m("mcopy", "-i", self.esp, os.path.join(root, src), f"::/{dst}")
        cfg = os.path.join(self.run, "grub.cfg")
        with open(cfg, "w") as f:
            f.write(f"set timeout=0\nset default=0\nmenuentry 'hpcbake e2e (Secure Boot)' {{\n"
                    f"  linux /vmlinuz {CMDLINE}\n  initrd /initrd.img\n}}\n")
        m("mcopy", "-i", self.esp, cfg, "::/EFI/debian/grub.cfg")
        m("mcopy", "-i", self.esp, f"/boot/vmlinuz-{self.kernel}", "::/vmlinuz")
        m("mcopy", "-i", self.esp, self.image[:-len(".img")] + ".initrd", "::/initrd.img")
        # The variables: Microsoft's keys (Debian's OVMF_VARS_4M.ms.fd) plus hpcbake's certificate in
        # MokList, shim's boot-services variable, which shim mirrors to MokListRT for the kernel.
        pem = os.path.join(self.run, "mok.pem")
        subprocess.run(["openssl", "x509", "-inform", "der", "-in", self.mok_der, "-out", pem], check=True)
        self.vars = os.path.join(self.run, "OVMF_VARS.fd")
        py = os.path.join(root, "usr", "lib", "python3", "dist-packages")
        p = subprocess.run(["/usr/bin/python3", os.path.join(root, "usr", "bin", "virt-fw-vars"), "-i", OVMF_VARS,
                            "-o", self.vars, "--add-mok", SHIM_GUID, pem],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=py))
        if p.returncode != 0:
            raise AssertionError(f"virt-fw-vars failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")

    def qemu_command(self):
        self.overlay = os.path.join(self.run, "root-overlay.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", self.image, "-F", "raw", self.overlay],
                       check=True, capture_output=True)
        # SMM is what makes the variable store tamper-proof for the OS: the secboot build of OVMF
        # requires it (q35, smm=on, the flash marked secure). It works under TCG.
        return ["qemu-system-x86_64", "-machine", "q35,smm=on", "-accel", "tcg,thread=multi", "-cpu", "qemu64",
                "-smp", "2", "-m", "2048", "-global", "driver=cfi.pflash01,property=secure,value=on",
                "-drive", f"if=pflash,format=raw,unit=0,file={OVMF_CODE},readonly=on",
                "-drive", f"if=pflash,format=raw,unit=1,file={self.vars}",
                "-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio", "-monitor", "none",
                "-nic", "none", "-no-reboot",
                "-drive", f"file={self.overlay},format=qcow2,if=virtio",
                "-drive", f"file={self.data},format=raw,if=virtio",
                "-drive", f"file={self.esp},format=raw,if=virtio"]


class SecureBootGuest(e2e.GuestAssertions):
    vm = None

    @classmethod
    def setUpClass(cls):
        reason = prerequisites()
        if reason:
            raise unittest.SkipTest(reason)
        vm = SecureBootVm()
        log(f"kernel {vm.kernel}, work directory {e2e.WORK}")
        vm.run_all(boots=1)
        cls.vm = vm

    def test_00_vm_powered_off_after_one_boot(self):
        vm = self.vm
        if vm.problem:
            self.fail_loudly(vm.problem)
        if vm.text("error"):
            self.fail_loudly(vm.text("error"))
        self.assertTrue(vm.text("done"), "the guest did not finish its boot\n" + vm.console_tail())
        rec = json.loads(vm.text("boot-1.json") or "{}")
        self.assertEqual(rec.get("kernel"), vm.kernel, rec)

    def test_01_booted_through_shim_and_grub_with_secure_boot(self):
        with open(self.vm.console, errors="replace") as f:
            console = f.read()
        # OVMF started shim from the ESP (the default loader path), shim verified grub, grub booted the
        # kernel (shim's protocol verifies it); the kernel's own view is test_02's.
        self.assertRegex(console, r'BdsDxe: starting Boot\d+ "UEFI Non-Block Boot Device"')
        self.assertIn("Welcome to GRUB!", console)
        self.assertIn("Booting `hpcbake e2e (Secure Boot)'", console)

    def test_02_firmware_shim_and_kernel_agree(self):
        self.step("sb-state")
        out = self.vm.text("steps/sb-state.out")
        log("sb-state: " + out.replace("\n", " | ")[:1500])
        self.assertIn("SecureBoot enabled", out)
        self.assertIn("[integrity]", out)   # lockdown, as Debian's kernel sets it under Secure Boot
        self.assertIn("Kernel is locked down from EFI Secure Boot", out)
        self.assertIn("MokListTrustedRT:  06 00 00 00 01", out)  # shim trusts MOKs for the kernel
        enrolled = out.split("--- mokutil --list-enrolled")[1].split("--- dmesg")[0]
        self.assertIn("CN=hpcbake module signing key", enrolled)
        # The kernel took the MOK from shim's configuration table onto its machine keyring, which it
        # checks module signatures against.
        self.assertIn("Loading X.509 certificate: UEFI:MokListRT", out)
        machine = out.split("--- keyctl list %:.machine")[1].split("--- keyctl list %:.builtin_trusted_keys")[0]
        self.assertRegex(machine, r"asymmetric: hpcbake module signing key: [0-9a-f]{40}")

    def test_03_detect_reads_secure_boot_from_efivars(self):
        self.step("detect")
        d = self.json_of("detect")
        self.assertEqual(d["secure_boot"]["state"], "enabled", d["secure_boot"])
        self.assertIn("/sys/firmware/efi/efivars/SecureBoot-", d["secure_boot"]["source"])

    def refused(self, name, signer):
        self.step(name)
        out = self.vm.text(f"steps/{name}.out")
        log(f"{name}: " + out.replace("\n", " | ")[:800])
        self.assertIn(f"signer={signer}\n", out)
        self.assertRegex(out, r"insmod rc=1: .*(Key was rejected by service|Operation not permitted|"
                              r"Required key not available)")
        return out

    def test_04_unsigned_module_refused(self):
        self.refused("insmod-unsigned", "")

    def test_05_module_signed_by_a_key_not_enrolled_refused(self):
        self.refused("insmod-other-key", "hpcbake module signing key")

    def test_06_sign_off_refused_with_secure_boot_on(self):
        self.step("sign-off-refused")
        err = self.vm.text("steps/sign-off-refused.err")
        self.assertIn("Secure Boot", err)

    def test_07_install_signs_and_never_prompts(self):
        s = self.step("install")
        log(f"install took {s['seconds']} s")
        out = self.vm.text("steps/install.out") + self.vm.text("steps/install.err")
        self.assertIn("install_rc=0", out)

    def test_08_the_signed_module_loads(self):
        self.step("modprobe")
        out = self.vm.text("steps/modprobe.out")
        log("modprobe: " + out.replace("\n", " | ")[:800])
        self.assertIn(f"path=/lib/modules/{self.vm.kernel}/updates/dkms/{MODULE}.ko", out)
        self.assertIn("signer=hpcbake module signing key", out)
        self.assertRegex(out, rf"\n{MODULE} \d+ 0 - Live ")

    def test_09_seal_refuses_an_unsigned_module(self):
        self.step("seal-unsigned")
        rep = json.loads(self.vm.text("seal-unsigned.json"))
        ids = [r["id"] for r in rep.get("refusals", [])]
        self.assertIn("module.secure-boot", ids, rep)
        msg = next(r for r in rep["refusals"] if r["id"] == "module.secure-boot")
        log(f"seal refusal: {msg}")
        self.assertIn("unsigned", msg["message"])

    def test_10_seal_accepts_the_enrolled_signature(self):
        self.step("seal-check")
        self.step("seal")
        m = json.loads(self.vm.text("image-manifest.json"))
        mods = [x for x in m["modules"] if x["name"] == e2e.FIXTURE or x["name"] == MODULE]
        self.assertTrue(mods, m["modules"])
        self.assertIn("enrolled as a MOK", mods[0]["secure_boot_trust"])

    def test_12_no_failed_units(self):
        rec = json.loads(self.vm.text("boot-1.json") or "{}")
        if rec.get("failed_units", "").strip():
            self.fail_loudly(f"failed systemd units: {rec['failed_units']}")


if __name__ == "__main__":
    e2e.main(__name__)
