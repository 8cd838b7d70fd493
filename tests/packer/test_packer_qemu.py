#!/usr/bin/env python3
"""A real `packer build` of packer/hpcbake.pkr.hcl with Packer 1.6.6's qemu builder: the e2e
guest image (Debian 12, tests/e2e/image.sh) booted under TCG, the template's own build block run
over SSH, and hpcbake's own reboot in the middle of it.

The template is packer/hpcbake.pkr.hcl with only its azure-arm source swapped for a qemu one and
its `packer {}` block left out (required_plugins, which 1.6.6 predates): packer_template.py says
exactly what is adapted. The variables are the example's plus the test's; remote_dir keeps its
default, /var/lib/hpcbake-payload. What runs in the guest, in order, is what runs on Azure:

  1. the package step downloads this build's release tarball (cmake --install --strip, laid out
     as scripts/release lays it out) from an HTTP server of the test's on 127.0.0.1, reached from
     the guest through QEMU's user network (guestfwd: the guest is otherwise cut off, restrict=on),
     under a URL with a SAS-shaped query string; sha256sum -c; unpacks it into /opt/hpcbake;
  2. install --reboot=auto with the payload's offline bundle: the packages (all in the image), a
     fixture DKMS module (tests/fixtures/modules/hpcbake-fixture as a makeself .run, reboot: true)
     built by the guest's DKMS for its kernel, then hpcbake writes its resume unit and reboots the
     VM for real (systemctl reboot): Packer sees the session drop (expect_disconnect) or exit 7;
  3. after reboot_wait, Packer reconnects; hpcbake's resume unit has already finished the
     install in the new boot, the second install (--reboot=auto) finds it done and the third
     (--reboot=never) finds nothing to do: both run the step script from the payload directory,
     and the bundle is still there;
  4. verify --junit, downloaded by the file provisioner; seal deletes the payload directory, then
     seal --deprovision (the real waagent's deprovision) writes the image manifest;
  5. Packer powers the VM off (shutdown_command) and leaves a qcow2 overlay on the cached image.

The test fails unless the build exits 0, the payload was there in the second boot (the guest
lists it on the console; Debian empties /tmp at boot, which the guest shows too), seal ran, and
the disk Packer left holds /var/lib/hpcbake/image-manifest.json from this boot's verify and no
payload directory. The guest image lacks sshd and curl, which marketplace images have: the data
disk brings Debian's openssh-server, curl and what they depend on (resolved against the image's
own dpkg status, taken from /var/cache/apt/archives or `apt-get download`, kept in
$HPCBAKE_BUILD_CACHE/packer-qemu/debs), installed with dpkg in the first boot by
tests/packer/qemu-guest.sh, which also brings up virtio_net. The cached image is only ever a
backing file (use_backing_file), so it is never written.

Exit 77 (ctest: skipped) with a SKIPPED line when it cannot run: not root, packer, QEMU,
e2fsprogs, makeself or cmake missing, no kernel to boot, no guest image and none can be built, or
the .debs for sshd cannot be had. Environment: as tests/e2e/run_vm.py (HPCBAKE_BIN,
HPCBAKE_BUILD_DIR, HPCBAKE_E2E_CACHE: default $HPCBAKE_BUILD_CACHE/e2e, the image scripts/test
shares), HPCBAKE_PACKER_QEMU_DIR (work directory, kept: console.log, packer.log; default
HPCBAKE_E2E_DIR/packer-qemu), HPCBAKE_PACKER_QEMU_TIMEOUT (seconds for packer build, default 900),
HPCBAKE_PACKER_QEMU_BREAK=payload (the guest deletes the payload directory early in its second
boot, as /tmp would be emptied: the build and this test must fail).
"""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import packer_template  # noqa: E402
from test_packer_null import RELEASE, SAS, ReleaseServer, build_dir, hcl_string, tail  # noqa: E402

SRC = packer_template.SRC
BIN = os.environ.get("HPCBAKE_BIN", "")
BUILD_CACHE = os.environ.get("HPCBAKE_BUILD_CACHE", "/var/cache/hpcbake-build")
E2E_CACHE = os.environ.get("HPCBAKE_E2E_CACHE") or os.path.join(BUILD_CACHE, "e2e")
WORK = os.path.abspath(os.environ.get("HPCBAKE_PACKER_QEMU_DIR")
                       or os.path.join(os.environ.get("HPCBAKE_E2E_DIR", "e2e-work"), "packer-qemu"))
TIMEOUT = int(os.environ.get("HPCBAKE_PACKER_QEMU_TIMEOUT", "900"))
# Fault injection: "payload" deletes the payload directory early in the second boot, as a /tmp
# emptied at boot would. The build, and this test, must then fail.
BREAK = os.environ.get("HPCBAKE_PACKER_QEMU_BREAK", "")
SIZE = "Standard_PackerQemu_v1"
REMOTE = "/var/lib/hpcbake-payload"   # the template's default remote_dir
GUEST_HTTP = "10.0.2.100"             # the release server, as the guest sees it (guestfwd)
SSH_DEBS = ("openssh-server", "curl")  # what the guest lacks that a marketplace image has


def log(msg):
    print(f"packer-qemu: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)


def missing_prerequisite():
    if os.geteuid() != 0:
        return "needs root: it builds the guest's data disk as root's and the image when none is cached"
    if not BIN or not os.access(BIN, os.X_OK):
        return "HPCBAKE_BIN is not set to a built hpcbake: run it through ctest (ctest -R packer/qemu)"
    if not build_dir():
        return f"no CMake build tree above {BIN}: the release tarball is made from it with cmake --install"
    for tool, package in (("packer", "packer"), ("qemu-system-x86_64", "qemu-system-x86"), ("qemu-img", "qemu-utils"),
                          ("mkfs.ext4", "e2fsprogs"), ("debugfs", "e2fsprogs"), ("makeself", "makeself"),
                          ("cmake", "cmake"), ("ssh-keygen", "openssh-client"), ("apt-get", "apt"),
                          ("modinfo", "kmod")):
        if not shutil.which(tool) and not os.path.exists(f"/sbin/{tool}"):
            return f"{tool} is not installed (Debian package {package}; scripts/deps installs it)"
    import run_vm  # noqa: E402  (the e2e test's kernel choice and image build)
    if not run_vm.pick_kernel():
        return "no /boot/vmlinuz-*-amd64 with its initrd to boot (scripts/deps installs linux-image-amd64)"
    return None


class Guest:
    """Everything the build needs, made once: the image, the data disk, the payload, the release,
    the template and its variables; then the build and what it left."""

    def __init__(self):
        import run_vm
        self.vm = run_vm.Vm()
        self.vm.cache = os.path.abspath(E2E_CACHE)
        self.kernel = self.vm.kernel
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        self.console = os.path.join(WORK, "console.log")
        self.packer_log = os.path.join(WORK, "packer.log")
        self.timings = {}

    # -- the guest image: the e2e test's, built by image.sh or taken from its cache ------------------
    def image(self):
        t0 = time.monotonic()
        self.vm.build_image()   # raises SkipTest when image.sh cannot build here
        self.image_path = self.vm.image
        self.stem = self.image_path[:-len(".img")]
        self.timings["image_s"] = round(time.monotonic() - t0, 1)

    # -- sshd and curl for the guest: Debian's .debs, resolved against the image's own packages ------
    def debs(self, dest):
        status = os.path.join(WORK, "guest-dpkg-status")
        with open(status, "w") as f:
            r = subprocess.run(["debugfs", "-R", "cat /var/lib/dpkg/status", self.image_path], stdout=f,
                               stderr=subprocess.PIPE, text=True)
        if r.returncode != 0 or os.path.getsize(status) == 0:
            raise AssertionError(f"cannot read the guest's dpkg status from {self.image_path}: {r.stderr}")
        r = run(["apt-get", "-s", "-o", f"Dir::State::status={status}", "-o", "Debug::NoLocking=1",
                 "-o", "APT::Install-Recommends=0", "install", *SSH_DEBS])
        wanted = re.findall(r"^Inst (\S+) \((\S+) ", r.stdout, re.M)
        if r.returncode != 0 or not any(p == "openssh-server" for p, _ in wanted):
            raise unittest.SkipTest(f"apt-get cannot resolve {' '.join(SSH_DEBS)} against the guest's packages "
                                    f"(run apt-get update): {r.stderr.strip()[-300:]}")
        cache = os.path.join(BUILD_CACHE, "packer-qemu", "debs")
        os.makedirs(cache, exist_ok=True)
        os.makedirs(dest)
        for pkg, version in wanted:
            quoted = version.replace(":", "%3a")
            found = glob.glob(os.path.join(cache, f"{pkg}_{quoted}_*.deb")) or \
                glob.glob(f"/var/cache/apt/archives/{pkg}_{quoted}_*.deb")
            if not found:
                r = run(["apt-get", "download", f"{pkg}={version}"], cwd=cache, timeout=300)
                found = glob.glob(os.path.join(cache, f"{pkg}_{quoted}_*.deb"))
                if r.returncode != 0 or not found:
                    raise unittest.SkipTest(f"cannot download {pkg}={version} for the guest's sshd: {r.stderr.strip()[-300:]}")
            shutil.copy(found[0], dest)
        self.guest_debs = [p for p, _ in wanted]

    # -- the data disk: /e2e in the guest -----------------------------------------------------------
    def data_disk(self):
        stage = os.path.join(WORK, "stage")
        os.makedirs(os.path.join(stage, "guest"))
        shutil.copy(os.path.join(HERE, "qemu-guest.sh"), os.path.join(stage, "guest", "guest.sh"))
        os.chmod(os.path.join(stage, "guest", "guest.sh"), 0o755)
        with open(os.path.join(stage, "guest", "payload-dir"), "w") as f:
            f.write(REMOTE + "\n")
        with open(os.path.join(stage, "guest", "break"), "w") as f:
            f.write(BREAK + "\n")
        self.debs(os.path.join(stage, "debs"))
        # Throwaway keys: the client's for Packer, the host keys so the postinst makes none.
        ssh = os.path.join(stage, "ssh")
        os.makedirs(ssh)
        self.client_key = os.path.join(WORK, "client_ed25519")
        keys = [(self.client_key, "ed25519")] + [(os.path.join(ssh, f"ssh_host_{t}_key"), t)
                                                  for t in ("ed25519", "ecdsa", "rsa")]
        for path, kind in keys:
            subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "hpcbake-packer-qemu", "-f", path],
                           check=True, stdin=subprocess.DEVNULL)
        shutil.copy(self.client_key + ".pub", os.path.join(ssh, "authorized_keys"))
        # virtio_net and what it needs, from the host's package of the guest's kernel.
        os.makedirs(os.path.join(stage, "net"))
        for mod in ("failover", "net_failover", "virtio_net"):
            path = run(["modinfo", "-k", self.kernel, "-n", mod], check=True).stdout.strip()
            shutil.copy(path, os.path.join(stage, "net"))
        # The manifests: the project's, the test size and the fixture module pinned to this run's .run.
        manifests = os.path.join(stage, "share", "manifests")
        shutil.copytree(os.path.join(SRC, "manifests"), manifests)
        shutil.copytree(os.path.join(SRC, "drivers"), os.path.join(stage, "share", "drivers"))
        run_file = os.path.join(WORK, "hpcbake-fixture-1.0.run")
        subprocess.run(["makeself", "--quiet", "--nox11", "--sha256", os.path.join(SRC, "tests", "fixtures", "modules",
                                                                                  "hpcbake-fixture"),
                        run_file, "hpcbake fixture module", "true"], check=True, capture_output=True)
        with open(run_file, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(manifests, "components", "hpcbake-packer-fixture.yaml"), "w") as f:
            f.write(f"""schema: 1
component: hpcbake-packer-fixture
kind: dkms-module
description: the fixture kernel module (tests/fixtures/modules/hpcbake-fixture) as a makeself .run
source: tests/packer/test_packer_qemu.py (generated for each run)
dkms:
  name: hpcbake-fixture
  modules: [hpcbake_fixture]
  reboot: true
variants:
  - distros: ["debian-12"]
    version: "1.0"
    artifacts:
      - name: hpcbake-fixture-1.0.run
        # Never fetched: the guest installs it from the payload's bundle.
        urls: ["http://127.0.0.1:9/hpcbake-fixture-1.0.run"]
        sha256: "{sha}"
        size: {os.path.getsize(run_file)}
""")
        with open(os.path.join(manifests, "sizes", "packerqemu_v1.yaml"), "w") as f:
            f.write(f"""schema: 1
size: "{SIZE}"
family: "hpcbake Packer qemu test size"
source: "tests/packer/test_packer_qemu.py: one DKMS module that asks for a reboot, no GPU, no InfiniBand"
dkms_modules: [hpcbake-packer-fixture]
""")
        # The payload: the offline bundle, made as a user makes one.
        self.payload = os.path.join(WORK, "payload")
        os.makedirs(self.payload)
        cache = os.path.join(WORK, "fetch-cache")
        os.makedirs(os.path.join(cache, "sha256"))
        shutil.move(run_file, os.path.join(cache, "sha256", sha))
        r = run([BIN, "--no-imds", "--manifests", manifests, "bundle", "create", os.path.join(self.payload, "bundle.tar"),
                 "--size", SIZE, "--distro", "debian-12", "--cache", cache])
        if r.returncode != 0:
            raise AssertionError(f"hpcbake bundle create failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        shutil.rmtree(cache)
        for d, _, files in os.walk(stage):   # root's, writable by root alone (hpcbake checks)
            os.chmod(d, 0o755)
            for n in files:
                p = os.path.join(d, n)
                os.chmod(p, 0o600 if n.endswith("_key") else (0o755 if os.access(p, os.X_OK) else 0o644))
        size_mb = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(stage) for n in ns) // 2**20 + 64
        self.data = os.path.join(WORK, "data.img")
        subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "hpcbake-e2e-data", "-d", stage, self.data, f"{size_mb}M"],
                       check=True, capture_output=True)
        shutil.rmtree(stage)

    # -- the template: the build block as it is, a qemu source -----------------------------------
    def template(self):
        self.output = os.path.join(WORK, "output")
        stem = self.stem
        disk_mb = os.path.getsize(self.image_path) // 2**20
        append = ("console=ttyS0 root=/dev/vda rw panic=-1 no_timer_check net.ifnames=0 mitigations=off quiet "
                  "loglevel=4 systemd.show_status=1")
        args = [
            # TCG: /dev/kvm on these machines has no hardware virtualisation behind it.
            ["-accel", "tcg,thread=multi"], ["-cpu", "qemu64"],
            ["-display", "none"], ["-vnc", "none"], ["-serial", f"file:{self.console}"],
            # The kernel's PVH entry and image.sh's busybox initramfs, as run_vm.py boots it.
            ["-kernel", f"{stem}.vmlinux"], ["-initrd", f"{stem}.initrd"], ["-append", append],
            # The data disk, in a PCI slot after the root disk's (the initramfs mounts /dev/vda).
            ["-blockdev", f"driver=raw,node-name=hpcbakedata,file.driver=file,file.filename={self.data}"],
            ["-device", "virtio-blk-pci,drive=hpcbakedata,addr=0x10"],
            # QEMU's user network, cut off from everything (restrict=on) but Packer's SSH and the
            # release server.
            ["-netdev", "user,id=user.0,restrict=on,hostfwd=tcp:127.0.0.1:{{ .SSHHostPort }}-:22,"
                        f"guestfwd=tcp:{GUEST_HTTP}:80-tcp:127.0.0.1:{self.release.port}"],
        ]
        qemuargs = ",\n".join("    [" + ", ".join(hcl_string(a) for a in row) + "]" for row in args)
        source = f'''source "qemu" "hpcbake" {{
  iso_url          = {hcl_string(self.image_path)}
  iso_checksum     = "none"
  disk_image       = true
  use_backing_file = true
  qemu_img_args {{
    create = ["-F", "raw"]
  }}
  format           = "qcow2"
  disk_size        = "{disk_mb}M"
  skip_resize_disk = true
  skip_compaction  = true
  output_directory = {hcl_string(self.output)}
  vm_name          = "root.qcow2"
  accelerator      = "none"
  headless         = true
  disable_vnc      = true
  memory           = 2048
  cpus             = 2
  disk_interface   = "virtio"
  net_device       = "virtio-net"
  qemuargs = [
{qemuargs}
  ]
  communicator         = "ssh"
  ssh_username         = "root"
  ssh_private_key_file = {hcl_string(self.client_key)}
  ssh_timeout          = "10m"
  shutdown_command     = "systemctl poweroff"
  shutdown_timeout     = "3m"
}}
'''
        self.dir = os.path.join(WORK, "packer")
        os.makedirs(self.dir)
        os.symlink(os.path.join(SRC, "packer", "scripts"), os.path.join(self.dir, "scripts"))
        text = packer_template.with_source(packer_template.with_sizes(packer_template.for_packer_1_6(packer_template.read()), [SIZE]), source,
                                           "source.qemu.hpcbake")
        with open(os.path.join(self.dir, "hpcbake.pkr.hcl"), "w") as f:
            f.write(text)
        self.junit = os.path.join(WORK, "hpcbake-verify.xml")
        self.url = f"http://{GUEST_HTTP}/{self.release.name}?{SAS}"
        # build_vm_size = size: the guest's (fake) hardware is verified in the bake, as on the target.
        variables = {"distro": "debian-12", "size": SIZE, "build_vm_size": SIZE, "payload_dir": self.payload,
                     "junit_out": self.junit,
                     "reboot_wait": "20s", "hpcbake_release_url": self.url,
                     "hpcbake_release_sha256": self.release.sums_line}
        self.var_file = os.path.join(WORK, "test.pkrvars.hcl")
        with open(self.var_file, "w") as f:
            for k, v in variables.items():
                f.write(f"{k} = {hcl_string(v)}\n")
            # The data disk's manifests (the test size); no metadata service under QEMU.
            f.write('hpcbake_env = ["HPCBAKE_ARGS=--no-imds --manifests /e2e/share/manifests"]\n')

    def build(self):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": WORK, "PACKER_CONFIG_DIR": WORK,
               "PACKER_CACHE_DIR": os.path.join(WORK, "packer_cache"), "TMPDIR": WORK, "CHECKPOINT_DISABLE": "1",
               "PACKER_LOG": "1", "PACKER_LOG_PATH": self.packer_log}
        t0 = time.monotonic()
        try:
            self.result = subprocess.run(["packer", "build", "-color=false", "-var-file", packer_template.EXAMPLE,
                                          "-var-file", self.var_file, "hpcbake.pkr.hcl"], cwd=self.dir, env=env,
                                         capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
            self.result = subprocess.CompletedProcess(e.cmd, -9, out, "")
            log(f"packer build ran past {TIMEOUT} s (HPCBAKE_PACKER_QEMU_TIMEOUT)")
        self.timings["packer_build_s"] = round(time.monotonic() - t0, 1)
        self.out = self.result.stdout + self.result.stderr
        with open(os.path.join(WORK, "packer-output.txt"), "w") as f:
            f.write(self.out)
        log(f"packer build exited {self.result.returncode} after {self.timings['packer_build_s']} s")

    def read_disk(self):
        """The disk Packer left (a qcow2 overlay on the cached image), as a raw copy debugfs reads."""
        self.disk = None
        overlay = os.path.join(self.output, "root.qcow2")
        if not os.path.exists(overlay):
            return
        raw = os.path.join(WORK, "final.raw")
        t0 = time.monotonic()
        subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", overlay, raw], check=True, capture_output=True)
        self.timings["convert_s"] = round(time.monotonic() - t0, 1)
        self.disk = raw

    def disk_cat(self, path):
        r = run(["debugfs", "-R", f"cat {path}", self.disk])
        return r.stdout if r.returncode == 0 and "File not found" not in r.stderr else None

    def disk_exists(self, path):
        r = run(["debugfs", "-R", f"stat {path}", self.disk])
        return "File not found" not in r.stderr and r.returncode == 0 and "Inode:" in r.stdout

    def everything(self):
        t0 = time.monotonic()
        self.image()
        self.release = ReleaseServer(WORK)
        self.release.port = self.release.httpd.server_address[1]
        self.data_disk()
        self.template()
        self.timings["staging_s"] = round(time.monotonic() - t0 - self.timings["image_s"], 1)
        try:
            self.build()
        finally:
            self.release.stop()
        self.read_disk()
        self.timings["total_s"] = round(time.monotonic() - t0, 1)
        with open(os.path.join(WORK, "timings.json"), "w") as f:
            json.dump(self.timings, f, indent=1)
        log(f"timings: {json.dumps(self.timings)}; logs in {WORK}")

    def markers(self):
        """PACKER-QEMU lines of the console: [(boot, {key: value})] in order."""
        try:
            with open(self.console, errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        out = []
        for m in re.finditer(r"PACKER-QEMU boot=(\d+) (.*)", text):
            fields = dict(re.findall(r"(\S+?)=(\S*(?: (?!\S+=)\S+)*)", m.group(2)))
            out.append((int(m.group(1)), fields))
        return out

    def marker(self, boot, key):
        for b, fields in self.markers():
            if b == boot and key in fields:
                return fields[key]
        return None


class PackerQemuBuild(unittest.TestCase):
    guest = None

    @classmethod
    def setUpClass(cls):
        reason = missing_prerequisite()
        if reason:
            raise unittest.SkipTest(reason)
        g = Guest()
        cls.guest = g
        g.everything()

    @classmethod
    def tearDownClass(cls):
        # The raw copy of the disk (1 GB) goes; the overlay Packer left, the console and the logs stay.
        if cls.guest and getattr(cls.guest, "disk", None):
            os.remove(cls.guest.disk)

    def explain(self, what):
        g = self.guest
        self.fail(f"{what}\n==== packer output (tail) ====\n{g.out[-6000:]}\n==== packer log (tail) ====\n"
                  f"{tail(g.packer_log, 40)}\n==== guest console (tail) ====\n{tail(g.console, 60)}")

    def test_00_packer_build_exits_0(self):
        g = self.guest
        if g.result.returncode != 0:
            self.explain(f"packer build exited {g.result.returncode}")
        self.assertIn("Build 'qemu.hpcbake' finished", g.out)

    def test_01_the_release_was_downloaded_checked_and_unpacked(self):
        g = self.guest
        self.assertEqual(g.release.requests, [f"GET /{g.release.name}?{SAS} HTTP/1.1"])
        self.assertIn(f"+ curl -o {REMOTE}/hpcbake-release.tar.gz {g.url.split('?')[0]}\n", g.out)
        self.assertIn(f"{REMOTE}/hpcbake-release.tar.gz: OK", g.out)
        self.assertIn("+ /opt/hpcbake/bin/hpcbake --version", g.out)
        self.assertNotIn("sig=", g.out, "the SAS token must not be printed")
        with open(g.packer_log, errors="replace") as f:
            self.assertNotIn("TEST%2BSAS", f.read())

    def test_02_hpcbake_rebooted_the_vm_and_packer_reconnected(self):
        g = self.guest
        boots = [b for b, fields in g.markers() if "start" in fields or "uptime" in fields]
        self.assertEqual(sorted(set(boots)), [1, 2], f"the guest's boots: {g.markers()}")
        ids = [g.marker(1, "boot_id"), g.marker(2, "boot_id")]
        self.assertTrue(all(ids) and ids[0] != ids[1], ids)
        install = (f"+ /opt/hpcbake/bin/hpcbake --no-imds --manifests /e2e/share/manifests install --size {SIZE} "
                   f"--profile default --yes --lock-timeout 3600 --bundle {REMOTE}/bundle.tar")
        self.assertEqual(g.out.count(install + " --reboot=auto"), 2, "the first install and the resume")
        self.assertEqual(g.out.count(install + " --reboot=never"), 1)
        # The first install ended with the reboot: the session dropped, or hpcbake said 7 first.
        with open(g.packer_log, errors="replace") as f:
            plog = f.read()
        first = g.out[g.out.index(install + " --reboot=auto"):g.out.index(install + " --reboot=auto", g.out.index(install) + 1)]
        self.assertTrue("Remote command exited without exit status or exit signal" in plog or "exited 7" in first,
                        f"the first install did not end with hpcbake's reboot:\n{first[-3000:]}")
        self.assertIn("rebooting now", first)

    def test_03_the_payload_survived_the_reboot(self):
        g = self.guest
        listing = g.marker(2, "payload")
        self.assertIsNotNone(listing, f"no payload listing from boot 2: {g.markers()}")
        for name in ("hpcbake-step.sh", "bundle.tar"):
            self.assertIn(name, listing.split(), f"{REMOTE} in boot 2 holds: {listing!r}")
        # ... where /tmp did not: the guest empties it at boot, as Ubuntu does.
        self.assertEqual(g.marker(2, "tmp-mark"), "gone")
        # hpcbake's resume unit finished the install in the new boot (it logged there, and ended
        # well), and the later installs saw it done.
        self.assertGreater(int(g.marker(2, "hpcbake-resume-lines") or 0), 0, "the resume unit did not run in boot 2")
        self.assertEqual(g.marker(2, "hpcbake-resume"), "success/0")
        with open(g.console, errors="replace") as f:
            self.assertIn("resumed after the reboot it asked for", f.read())
        after = g.out[g.out.index("--reboot=never"):]
        self.assertIn("nothing to do", after)

    def test_04_verify_report_came_back(self):
        g = self.guest
        self.assertIn(f"verify --size {SIZE} --profile default --junit {REMOTE}/hpcbake-verify.xml", g.out)
        self.assertTrue(os.path.exists(g.junit), "the file provisioner did not download the report")
        suites = ET.parse(g.junit).getroot()
        self.assertEqual(suites.get("failures"), "0")
        self.assertGreater(int(suites.get("tests")), 0)

    def test_05_seal_ran_after_the_payload_was_deleted(self):
        g = self.guest
        rm = g.out.find(f"+ rm -rf {REMOTE}\n")
        seal = g.out.find("+ /opt/hpcbake/bin/hpcbake --no-imds --manifests /e2e/share/manifests seal --deprovision")
        self.assertTrue(0 <= rm < seal, "the seal step deletes the payload, then runs seal")
        self.assertIn("seal: ran waagent -force -deprovision+user", g.out)

    def test_06_the_disk_packer_left_is_sealed_and_holds_no_payload(self):
        g = self.guest
        if not g.disk:
            self.explain("packer left no disk")
        manifest = g.disk_cat("/var/lib/hpcbake/image-manifest.json")
        self.assertIsNotNone(manifest, "no /var/lib/hpcbake/image-manifest.json on the disk")
        m = json.loads(manifest)
        self.assertEqual(m["size"], SIZE)
        self.assertTrue(m["verify"]["passed"])
        self.assertEqual(m["verify"]["boot_id"], g.marker(2, "boot_id"), "seal used this boot's verify")
        self.assertIn("hpcbake_fixture", {x["name"] for x in m["modules"]})
        self.assertFalse(g.disk_exists(REMOTE), f"{REMOTE} is still in the image")
        self.assertTrue(g.disk_exists("/opt/hpcbake/bin/hpcbake"))
        self.assertTrue(g.disk_exists(f"/lib/modules/{g.kernel}/updates/dkms/hpcbake_fixture.ko"))
        state = json.loads(g.disk_cat("/var/lib/hpcbake/state.json") or "{}")
        self.assertEqual(state.get("state"), "complete", state)


if __name__ == "__main__":
    import run_vm

    run_vm.main(module=__name__)  # a skip in setUpClass exits 77 (ctest: skipped), never 0
