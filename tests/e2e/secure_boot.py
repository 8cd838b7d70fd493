"""The Secure Boot guest test (docs/secure-boot.md): the e2e guest's root disk (image.sh) booted by
OVMF's Secure Boot firmware with Microsoft's keys enrolled (Debian's ovmf: OVMF_CODE_4M.secboot.fd,
OVMF_VARS_4M.ms.fd), through Debian's signed shim, grub and kernel, under TCG with SMM. One boot.

What is real: the firmware's signature checks (Microsoft's UEFI CA -> Debian's shim -> Debian's
grub and kernel), the kernel's lockdown and module signature checks, shim's MOK list as the kernel
reads it, mokutil, keyctl, and hpcbake's own install, module signing and seal. What the test sets
up: hpcbake's signing certificate is pre-seeded as a MOK in the firmware variables
(virt-fw-vars --add-mok, what MokManager writes after a user confirms `mokutil --import` at the
console), so no human types a password; install, module install and seal never ask for one.

Two boots, as a bake has them. Boot 1: the firmware, shim and kernel checks, then `install` of a GPU +
InfiniBand test size (Standard_E2E_SecureBoot: e2e_softroce.yaml's, renamed) whose NVIDIA driver and
DOCA-OFED come from run_vm.py's signed stand-in repository as DKMS packages (nvidia-dkms-open, and
here also mlnx-ofed-kernel-dkms, which doca-ofed depends on), built in the guest by DKMS and signed
with hpcbake's enrolled key, plus the fixture driver's .run; install reboots. Boot 2: every
stand-in module loads (modprobe; no taint E), seal --check passes; then a third stand-in package
(knem-modules: a module built on the host and signed by no one, as a vendor's precompiled-modules
package ships it) goes in, and seal refuses naming it before capturing anything; then seal.

The host side (here): fetches shim-signed, shim-helpers-amd64-signed and grub-efi-amd64-signed
(bookworm) and python3-virt-firmware (trixie) with tests/fixtures/debian-fetch (apt-verified,
cached), builds the fixture module on the host unsigned and signed by a key that is NOT enrolled
(for the kernel to refuse), makes the EFI system partition (a FAT image with mtools) and the
firmware variables, boots, reads /out back. The guest side: guest/secure-boot.sh.

Environment: as run_vm.py (HPCBAKE_BIN, HPCBAKE_BUILD_DIR, HPCBAKE_E2E_DIR, HPCBAKE_E2E_CACHE,
HPCBAKE_E2E_KERNEL, HPCBAKE_E2E_TIMEOUT (here 900 s by default), HPCBAKE_E2E_VERBOSE, HPCBAKE_E2E_DEB,
HPCBAKE_E2E_IMAGE).
Exit code 77 (ctest SKIP_RETURN_CODE) when the machine cannot run it; the reason is printed."""
import glob
import json
import os
import re
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
BOOTS = 2
# Both boots: three DKMS builds in the guest under TCG take most of it (555 s in all on a loaded
# 2-core machine, 2026-11-28), more than run_vm.py's 600 s default leaves room for.
e2e.TIMEOUT = int(os.environ.get("HPCBAKE_E2E_TIMEOUT", "900"))
MODULE = e2e.FIXTURE.replace("-", "_")
# DOCA-OFED's kernel part as a DKMS package: mlnx-ofed-kernel-dkms ("DKMS support for mlnx-ofed kernel
# modules"), DKMS name mlnx-ofed-kernel, installing mlx_compat.ko to updates/dkms (dkms uninstall
# output and MLNX_OFED package lists in public build logs; find_string "mlnx-ofed-kernel-dkms",
# "mlx_compat.ko"). The stand-in builds only mlx_compat, a module Debian's kernel does not have: a
# stand-in ib_core or mlx5_core in updates/ would displace the guest's own RDMA stack (soft-RoCE).
DOCA_DKMS = ("mlnx-ofed-kernel-dkms", "mlnx-ofed-kernel", ("mlx_compat",))
# The module no one signs: a precompiled-modules package (as MLNX_OFED's knem-modules and
# mlnx-ofed-kernel-modules ship modules built for one kernel), installed after the bake.
UNSIGNED_PACKAGE, UNSIGNED_MODULE = "knem-modules", "knem"
# Every module the bake installs and the next boot may load: the NVIDIA driver's, DOCA-OFED's, the fixture's.
BAKED_MODULES = (*e2e.NVIDIA_MODULES, *DOCA_DKMS[2], MODULE)
SIGNER = "hpcbake module signing key"
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
        self.profile = "default"  # what secure-boot.sh installs: the modules' signatures, not the userspace
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
        # The GPU + InfiniBand size of e2e/vm (two stand-in H100s, one soft-RoCE port, the CUDA
        # driver's open flavour, the fixture driver), under its own name.
        with open(os.path.join(manifests, "sizes", "e2e_softroce.yaml")) as f:
            size = e2e.yaml.safe_load(f)
        size.update(size=SIZE, family="hpcbake e2e (QEMU guest, OVMF Secure Boot, soft-RoCE, stand-in GPUs)",
                    source="tests/e2e/secure_boot.py (docs/secure-boot.md): e2e_softroce.yaml's size under "
                           "OVMF_CODE_4M.secboot.fd with Microsoft's keys",
                    notes="Test only: the Secure Boot VM's size. Its NVIDIA driver and DOCA-OFED are DKMS stand-ins "
                          "from the e2e repository, its fixture driver a .run: install must sign every module with "
                          "the enrolled key for the kernel to load it.")
        with open(os.path.join(manifests, "sizes", "e2e_secureboot.yaml"), "w") as f:
            e2e.yaml.safe_dump(size, f, sort_keys=False)

    def standin_packages(self):
        """e2e/vm's stand-ins, DOCA-OFED's kernel part as a DKMS package beside the NVIDIA driver's,
        and the precompiled-modules package no one signs."""
        pkgs = super().standin_packages()
        doca = next(p for p in pkgs if p["name"] == "doca-ofed")
        doca["depends"] += f", {DOCA_DKMS[0]}"
        pkgs.append(self.dkms_standin(DOCA_DKMS[0], DOCA_DKMS[1], e2e.DOCA_VERSION, DOCA_DKMS[2], "NVIDIA DOCA-OFED"))
        # knem.ko built here for the guest's kernel by `hpcbake module install --sign off` from
        # dkms_standin's sources.
        src = os.path.join(self.run, "knem-src")
        for path, text in self.dkms_standin(UNSIGNED_PACKAGE, UNSIGNED_MODULE, "1.0", (UNSIGNED_MODULE,),
                                            "NVIDIA DOCA-OFED")["files"].items():
            if not path.endswith("dkms.conf"):
                os.makedirs(src, exist_ok=True)
                with open(os.path.join(src, os.path.basename(path)), "w") as f:
                    f.write(text)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=self.run) as tmp:
            ko = self.build_module(tmp, "knem", src, UNSIGNED_MODULE, UNSIGNED_MODULE, ["--sign", "off"])
            kept = os.path.join(self.run, f"{UNSIGNED_MODULE}.ko")
            shutil.copy(ko, kept)
        self.timings["host_unsigned_module_build_s"] = round(time.monotonic() - t0, 1)
        shutil.rmtree(src)
        pkgs.append(dict(name=UNSIGNED_PACKAGE, version=f"{e2e.DOCA_VERSION}-1", arch="amd64",
                         files={f"lib/modules/{self.kernel}/updates/{UNSIGNED_MODULE}.ko": ("file", kept)},
                         postinst=f"#!/bin/sh\nset -e\ndepmod -a {self.kernel}\n"))
        return pkgs

    def build_module(self, tmp, label, src, name, module, sign):
        """A module built on the host for the guest's kernel by `hpcbake module install`."""
        d = os.path.join(tmp, label)
        os.makedirs(os.path.join(d, "inst", self.kernel))
        p = subprocess.run([e2e.BIN, "module", "install", src, "--name", name, "--version", "1.0",
                            "--module", module, "--kernel", self.kernel, "--dkmstree", f"{d}/dkms",
                            "--sourcetree", f"{d}/src", "--installtree", f"{d}/inst", "--no-depmod", *sign],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
        if p.returncode != 0:
            raise AssertionError(f"hpcbake module install ({label}) failed ({p.returncode}):\n{p.stderr[-3000:]}")
        kos = glob.glob(os.path.join(d, "inst", self.kernel, "updates", "dkms", f"{module}.ko*"))
        if len(kos) != 1:
            raise AssertionError(f"module install ({label}) made {kos}")
        return kos[0]

    def build_fixture(self, tmp, label, sign):
        """The fixture module built on the host for the guest's kernel by `hpcbake module install`."""
        src = os.path.join(e2e.SRC, "tests", "fixtures", "modules", e2e.FIXTURE)
        return self.build_module(tmp, label, src, e2e.FIXTURE, MODULE, sign)

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
        self.mok_ids = self.key_ids(self.mok_der)
        return (f"MODE=secure-boot\nSB_MODULES='{' '.join(BAKED_MODULES)}'\nUNSIGNED_PACKAGE={UNSIGNED_PACKAGE}\n"
                f"UNSIGNED_MODULE={UNSIGNED_MODULE}\n")

    @staticmethod
    def key_ids(der):
        """The enrolled certificate's serial number and subject key identifier, as lower-case hex
        without colons: what `modinfo -F sig_key` names (sign-file signs with issuer and serial by
        default, with the key identifier when asked)."""
        def field(*args):
            out = subprocess.run(["openssl", "x509", "-inform", "der", "-in", der, "-noout", *args],
                                 capture_output=True, text=True, check=True).stdout
            return out.split("=", 1)[1] if args[0] == "-serial" else out.splitlines()[-1]
        return {re.sub(r"[^0-9a-f]", "", field(*a).lower()).lstrip("0")
                for a in (["-serial"], ["-ext", "subjectKeyIdentifier"])}

    def read_back(self):
        super().read_back()
        # The guest powers off after boot 1 on purpose when install queued no reboot (out/stopped
        # says why): each test then says what it misses, not only that the second boot is missing.
        if self.problem and self.problem.startswith("the guest powered off in boot 1") and self.text("stopped"):
            self.problem = None

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
        vm.run_all(boots=BOOTS)
        cls.vm = vm

    def step(self, name, boot=None):
        """As GuestAssertions.step, saying why a boot-2 step never ran when boot 1 stopped early."""
        stopped = self.vm.text("stopped").strip()
        if stopped and not self.vm.problem and name not in self.vm.steps():
            self.fail_loudly(f"step {name} never ran: the guest powered off after boot 1, because {stopped}")
        return super().step(name, boot)

    def test_00_vm_powered_off_after_two_boots(self):
        vm = self.vm
        if vm.problem:
            self.fail_loudly(vm.problem)
        if vm.text("error"):
            self.fail_loudly(vm.text("error"))
        if vm.text("stopped"):
            self.fail_loudly(f"the guest powered off after boot 1, because {vm.text('stopped').strip()}")
        self.assertTrue(vm.text("done"), "the guest did not finish its second boot\n" + vm.console_tail())
        for b in range(1, BOOTS + 1):
            rec = json.loads(vm.text(f"boot-{b}.json") or "{}")
            self.assertEqual(rec.get("kernel"), vm.kernel, rec)

    def test_01_booted_through_shim_and_grub_with_secure_boot(self):
        with open(self.vm.console, errors="replace") as f:
            console = f.read()
        # OVMF started shim from the ESP (the default loader path), shim verified grub, grub booted the
        # kernel (shim's protocol verifies it); the kernel's own view is test_02's. Both boots.
        self.assertRegex(console, r'BdsDxe: starting Boot\d+ "UEFI Non-Block Boot Device"')
        for b in range(1, BOOTS + 1):
            if f"QEMU started for boot {b} =====" not in console:
                self.assertGreater(b, 1, "no boot on the console")
                continue   # test_00 says why there was no boot b
            boot = console.split(f"QEMU started for boot {b} =====")[-1].split("QEMU started for boot")[0]
            self.assertIn("Welcome to GRUB!", boot, f"boot {b}")
            self.assertIn("Booting `hpcbake e2e (Secure Boot)'", boot, f"boot {b}")

    def test_02_firmware_shim_and_kernel_agree(self):
        self.step("sb-state", boot=1)
        out = self.vm.text("steps/sb-state.out")
        log("sb-state: " + out.replace("\n", " | ")[:1500])
        self.assertIn("SecureBoot enabled", out)
        self.assertIn("[integrity]", out)   # lockdown, as Debian's kernel sets it under Secure Boot
        self.assertIn("Kernel is locked down from EFI Secure Boot", out)
        self.assertIn("MokListTrustedRT:  06 00 00 00 01", out)  # shim trusts MOKs for the kernel
        enrolled = out.split("--- mokutil --list-enrolled")[1].split("--- dmesg")[0]
        self.assertIn(f"CN={SIGNER}", enrolled)
        # The kernel took the MOK from shim's configuration table onto its machine keyring, which it
        # checks module signatures against.
        self.assertIn("Loading X.509 certificate: UEFI:MokListRT", out)
        machine = out.split("--- keyctl list %:.machine")[1].split("--- keyctl list %:.builtin_trusted_keys")[0]
        self.assertRegex(machine, rf"asymmetric: {SIGNER}: [0-9a-f]{{40}}")

    def test_03_detect_reads_secure_boot_from_efivars(self):
        self.step("detect", boot=1)
        d = self.json_of("detect")
        self.assertEqual(d["secure_boot"]["state"], "enabled", d["secure_boot"])
        self.assertIn("/sys/firmware/efi/efivars/SecureBoot-", d["secure_boot"]["source"])

    def refused(self, name, signer):
        self.step(name, boot=1)
        out = self.vm.text(f"steps/{name}.out")
        log(f"{name}: " + out.replace("\n", " | ")[:800])
        self.assertIn(f"signer={signer}\n", out)
        self.assertRegex(out, r"insmod rc=1: .*(Key was rejected by service|Operation not permitted|"
                              r"Required key not available)")
        return out

    def test_04_unsigned_module_refused(self):
        self.refused("insmod-unsigned", "")

    def test_05_module_signed_by_a_key_not_enrolled_refused(self):
        self.refused("insmod-other-key", SIGNER)

    def test_06_sign_off_refused_with_secure_boot_on(self):
        self.step("sign-off-refused", boot=1)
        err = self.vm.text("steps/sign-off-refused.err")
        self.assertIn("Secure Boot", err)

    def test_07_plan_resolves_with_secure_boot_on_and_signs_with_hpcbakes_key(self):
        # The NVIDIA driver and DOCA-OFED from the signed repository, with Secure Boot on: the
        # plan resolves (today's refusal: "signing repository-built modules with hpcbake's key is
        # not supported yet") and signs with the key whose certificate the firmware's MokList holds.
        self.step("plan", boot=1)
        plan = self.json_of("plan")
        self.assertTrue(plan["signing"]["enabled"], plan["signing"])
        self.assertEqual(plan["signing"]["key"], "/var/lib/hpcbake/signing/signing.key", plan["signing"])
        steps = {st["id"]: st for st in plan["steps"]}
        for want in ("repository:e2e-standin", "driver:doca-ofed", "driver:nvidia-cuda-driver",
                     "driver:hpcbake-e2e-driver", "reboot:modules", "verify"):
            self.assertIn(want, steps, sorted(steps))

    def test_08_install_signs_never_prompts_and_reboots(self):
        s = self.step("install", boot=1)
        log(f"install took {s['seconds']} s")
        out = self.vm.text("steps/install.out") + self.vm.text("steps/install.err")
        self.assertIn("install_rc=7", out)
        j = json.loads(self.vm.text("state-boot-1.json"))
        self.assertEqual(j["state"], "reboot-required", j)

    def test_09_resume_completes_the_install_after_the_reboot(self):
        self.step("resume-ran", boot=2)
        j = json.loads(self.vm.text("state-boot-2.json"))
        self.assertEqual(j["state"], "complete", j)
        self.assertTrue(all(st["status"] == "done" for st in j["steps"].values()), j["steps"])

    def modules(self):
        """steps/modules.out's `module NAME: key=value ...` lines, by name."""
        out = {}
        for line in self.vm.text("steps/modules.out").splitlines():
            m = re.match(r"module (\S+): (.*)$", line)
            if m:
                out[m.group(1)] = dict(re.findall(r"(\w+)=(\S*)", m.group(2)))
        return out

    def test_10_every_baked_module_is_built_signed_by_hpcbake_and_loads(self):
        s = self.step("modules", boot=2)
        out = self.vm.text("steps/modules.out")
        log(f"modules ({s['seconds']} s): " + out.replace("\n", " | ")[:2500])
        mods = self.modules()
        for name in BAKED_MODULES:
            self.assertIn(name, mods, f"no line for {name}:\n{out}")
            m = mods[name]
            # DKMS installed it (the repository's -dkms packages and the fixture .run) for this kernel.
            self.assertRegex(m["path"], rf"^/lib/modules/{re.escape(self.vm.kernel)}/updates/dkms/"
                                        rf"{re.escape(name)}\.ko", name)
            # hpcbake's key, the one the firmware's MokList holds, signed it (modinfo's signer and key id).
            self.assertEqual(m["signer"].replace("_", " "), SIGNER, f"{name}: {m}")  # spaces written as _
            self.assertIn(re.sub(r"[^0-9a-f]", "", m["sig_key"].lower()).lstrip("0"), self.vm.mok_ids, f"{name}: {m}")
            # The kernel accepted it.
            self.assertEqual((m["modprobe_rc"], m["loaded"]), ("0", "yes"), f"{name}: {m}")
        # nvidia-peermem loaded at boot (the plan's modules-load file), under Secure Boot.
        self.assertIn("loaded at boot: nvidia_peermem", out)
        # Taint E (8192): no unsigned or unverifiable module was loaded.
        tainted = int(re.search(r"^tainted=(\d+)$", out, re.M).group(1))
        self.assertEqual(tainted & 8192, 0, f"tainted={tainted}")

    def test_11_seal_check_passes(self):
        self.step("seal-check", boot=2)
        rep = self.json_of("seal-check")
        self.assertFalse(rep.get("refusals"), rep)

    def test_12_seal_refuses_the_fixture_module_unsigned(self):
        self.step("seal-unsigned", boot=2)
        rep = json.loads(self.vm.text("seal-unsigned.json"))
        ko = f"/lib/modules/{self.vm.kernel}/updates/dkms/{MODULE}.ko"
        named = [r for r in rep.get("refusals", []) if r["id"] == "module.secure-boot" and ko in r["message"]]
        self.assertTrue(named, f"no module.secure-boot refusal names {ko}: {rep}")
        log(f"seal refusal: {named[0]}")
        self.assertIn("unsigned", named[0]["message"])

    def test_13_seal_refuses_a_package_module_no_one_signed_before_capture(self):
        s = self.step("seal-unsigned-package", boot=2)
        out = self.vm.text("steps/seal-unsigned-package.out")
        log(f"seal-unsigned-package ({s['seconds']} s): " + out.replace("\n", " | ")[:1500])
        ko = f"/lib/modules/{self.vm.kernel}/updates/{UNSIGNED_MODULE}.ko"
        self.assertIn(f"package={UNSIGNED_PACKAGE} {e2e.DOCA_VERSION}-1 install ok installed", out)
        self.assertIn(f"path={ko}\nsigner=\n", out)
        # The kernel refuses it: what seal must find before the image is captured.
        self.assertRegex(out, r"modprobe rc=1: .*(Key was rejected by service|Operation not permitted|"
                              r"Required key not available)")
        for name in ("seal-unsigned-package-check", "seal-unsigned-package-seal"):
            rep = json.loads(self.vm.text(f"{name}.json") or "{}")
            named = [r for r in rep.get("refusals", [])
                     if r["id"].startswith("module.") and UNSIGNED_MODULE in r.get("message", "")]
            self.assertTrue(named, f"{name}: no module refusal names {UNSIGNED_MODULE} ({ko}): {rep}")
            log(f"{name}: {named[0]}")
        self.assertIn("seal --check rc=3", out)  # refused (docs/manual.md, seal)
        # seal itself refused before doing anything: no image manifest, the signing key still there.
        self.assertIn("seal rc=3", out)
        self.assertIn("image-manifest=absent", out)
        self.assertIn("signing-key=kept", out)

    def test_14_seal_accepts_the_enrolled_signatures(self):
        self.step("seal", boot=2)
        m = json.loads(self.vm.text("image-manifest.json"))
        # The plan's own DKMS modules (`modules`), and every out-of-tree module of the next-boot
        # kernel (`out_of_tree_modules`: nvidia-peermem, which the driver's package builds beside
        # the plan's four, and DOCA's mlx_compat too), each trusted through the enrolled MOK.
        trust = {x["name"].replace("-", "_"): x.get("secure_boot_trust", "") for x in m["modules"]}
        oot = {x["name"].replace("-", "_"): x.get("secure_boot_trust", "")
               for x in m["out_of_tree_modules"]["modules"]}
        log(f"image manifest modules: {trust}; out of tree: {oot}")
        for name in (MODULE, "nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm"):
            self.assertIn(name, trust, m["modules"])
        for name in (MODULE, *(n.replace("-", "_") for n in e2e.NVIDIA_MODULES), "mlx_compat"):
            self.assertIn(name, oot, m["out_of_tree_modules"])
        self.assertNotIn("knem", oot, "the unsigned package was purged before this seal")
        for name, why in {**trust, **oot}.items():
            self.assertIn("enrolled as a MOK", why, name)

    def test_15_no_failed_units(self):
        for b in range(1, BOOTS + 1):
            rec = json.loads(self.vm.text(f"boot-{b}.json") or "{}")
            if rec.get("failed_units", "").strip():
                self.fail_loudly(f"boot {b}: failed systemd units: {rec['failed_units']}")


if __name__ == "__main__":
    e2e.main(__name__)
