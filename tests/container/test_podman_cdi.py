"""A container that really runs (issue 45 item 4; docs/containers.md, "A container that runs here").

Debian's podman 4.3 starts a container from a local image built offline (a root file system of
Debian's libc6, `podman import`ed: no registry) with `--device nvidia.com/gpu=all`. The GPUs reach
it only through the CDI spec at the path hpcbake's plan names for the containers profile
(/var/run/cdi/nvidia.yaml, written on a real VM by the toolkit's nvidia-cdi-refresh units). Here
nvidia-ctk cannot run (no driver), so `cdi_spec()` below stands in for it: device nodes made with
mknod (195,N; /dev/nvidiactl, /dev/nvidia-uvm) under a temporary directory, hpcbake's fake
libnvidia-ml.so.1 (tests/fakes) and the probe (tests/container/nvml_probe.cpp) mounted where
nvidia-ctk mounts the driver's library and nvidia-smi, and FAKE_GPU_COUNT from the size. The probe
inside calls NVML and prints nvidia-smi -L's lines; the test asserts the count the size promises,
and that `hpcbake verify --container-image` (src/verify/checks_container_run.cpp) sees the same.

RDMA (issue 45 item 3): the InfiniBand devices reach the container through the spec hpcbake itself
writes. In the namespace a copy of the ND H100 fixture's /sys/class/infiniband (8 InfiniBand HCAs
and the Ethernet VF mlx5_an0), with the infiniband_verbs and infiniband_mad classes the RDMA stack
adds, is bound over /sys/class, and a tmpfs over /dev/infiniband holds real character devices made
with mknod at the kernel's numbers (RDMA_NODES below). `hpcbake --root / container cdi --rdma` reads
them and writes /var/run/cdi/hpcbake-rdma.yaml, unedited, where podman reads it; `podman run --device
hpcbake/rdma=all --device nvidia.com/gpu=all` then lists the container's /dev/infiniband with the
probe (`--ls`: the image has no ls) and the test asserts one verbs node per InfiniBand port the plan's
verify step expects (ib_ports) and rdma_cm; one HCA asked for, one HCA's nodes; no spec, no device. verify --level 1
reads the same spec and sysfs (container.rdma.cdi_hcas, container.rdma.cdi_nodes pass). This
machine has no /dev/infiniband: /dev gets an overlay (upper layer in the test's directory) so that
the directory can be made inside the namespace only; where /dev/infiniband exists, the tmpfs hides it.

Nothing outside the test's directories and the cache is touched: podman and verify run in a private
mount namespace with fresh tmpfs on /run (the spec goes to /run/cdi there, podman's run root) and
on /var/lib (verify's record). Podman's storage (vfs) is a cache keyed by the image's content,
$HPCBAKE_PODMAN_CACHE (default /var/cache/hpcbake-build/podman).

This machine's needs, not an image's (the containers.conf below): cgroups v1 and v2 mixed without
systemd (crun refuses "hybrid mode": runc with the cgroupfs manager; elsewhere crun, with or without
cgroups, whichever first runs a plain container), no CAP_SYS_RESOURCE (podman's default rlimits of
1048576 open files cannot be set: 1024), no network backend (netns none).

Exit 77 (ctest: skipped): not root, no podman, no unshare, or no libc6 .deb (scripts/deps)."""
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

BIN = os.environ.get("HPCBAKE_BIN", "")
FAKES = os.environ.get("HPCBAKE_FAKES", "")
SRC = os.environ.get("HPCBAKE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROBE = os.environ.get("HPCBAKE_NVML_PROBE", "")
DEBS = os.environ.get("HPCBAKE_PODMAN_DEBS", "/var/cache/hpcbake-deps/podman-image")
CACHE = os.environ.get("HPCBAKE_PODMAN_CACHE",
                       os.path.join(os.environ.get("HPCBAKE_BUILD_CACHE", "/var/cache/hpcbake-build"), "podman"))
SIZE = "Standard_ND96isr_H100_v5"
# Bump when the way the image is made changes: part of the image's content key.
RECIPE = "hpcbake-probe 1: dpkg-deb -x libc6; tar --sort=name --mtime=@0 --owner=0 --group=0"
LIB_IN_CONTAINER = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
FIXTURE_HOST = os.path.join(SRC, "tests", "fixtures", "hosts", "nd96isr_h100_v5")
RDMA_SPEC = "/var/run/cdi/hpcbake-rdma.yaml"  # container/cdi_rdma.hpp kRdmaCdiSpec
# The kernel's InfiniBand device numbers: uverbsN 231,192+N (IB_UVERBS_MAJOR, IB_UVERBS_BASE_MINOR:
# gregkh/linux@0598914a950ddfa694f410e482453cdbb9265515 drivers/infiniband/core/uverbs_main.c),
# umadN 231,N and issmN 231,64+N (IB_UMAD_MAJOR, IB_UMAD_MINOR_BASE, IB_ISSM_MINOR_BASE =
# IB_UMAD_NUM_FIXED_MINOR: gregkh/linux@1371ef6b1ecf3676b8942f5dfb3634fb0648128e
# drivers/infiniband/core/user_mad.c); rdma_cm is a misc device (major 10) with MISC_DYNAMIC_MINOR
# (gregkh/linux@20061e63af1691d1342412f14de59d4bd709226d drivers/infiniband/core/ucma.c), so its
# minor is whatever the kernel hands out: 58 stands in for one. All mode 0666, as the kernel's are.
RDMA_NODES = {"uverbs": (231, 192), "umad": (231, 0), "issm": (231, 64)}
RDMA_CM = (10, 58)

# containers.conf: what this machine needs and an image does not. The first of ENGINE_SETTINGS under
# which a plain container runs (ld.so --version, no CDI) is used for every test.
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
{cgroups}
[engine]
cgroup_manager = "cgroupfs"
runtime = "{runtime}"
events_logger = "file"
"""
ENGINE_SETTINGS = [
    {"runtime": "runc", "cgroups": ""},  # this machine: cgroups v1 and v2 mixed, no systemd
    {"runtime": "crun", "cgroups": ""},  # cgroup v2 only
    {"runtime": "crun", "cgroups": 'cgroups = "disabled"'},  # no writable cgroup file system
]


def why_skip():
    if not BIN or not FAKES or not PROBE:
        return "HPCBAKE_BIN, HPCBAKE_FAKES or HPCBAKE_NVML_PROBE is not set: run through ctest"
    if os.uname().machine != "x86_64":
        return f"the image's library paths are x86_64's, this is {os.uname().machine}"
    if os.geteuid() != 0:
        return "not root: podman's root mode, mknod and a private mount namespace need root"
    for tool in ("podman", "unshare", "dpkg-deb", "tar"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/deps installs podman)"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"no private mount namespace here (unshare --mount: {r.stderr.strip()}): podman needs one too"
    if not libc6_deb():
        return f"no libc6 .deb at this machine's version in {DEBS} (scripts/deps downloads it)"
    return None


def libc6_deb():
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libc6"], capture_output=True,
                             text=True).stdout.strip()
    found = glob.glob(os.path.join(DEBS, f"libc6_{version.replace(':', '%3a')}_*.deb"))
    return found[0] if found else None


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plan_facts():
    """What hpcbake's plan for the containers profile promises: the GPU count verify expects and
    the CDI spec the nvidia-cdi-refresh units it enables write (the path podman must read)."""
    env = dict(os.environ, HPCBAKE_MANIFESTS=os.path.join(SRC, "manifests"))
    r = subprocess.run([BIN, "plan", "--size", SIZE, "--distro", "debian-12", "--profile", "containers", "--json"],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    plan = json.loads(r.stdout)
    verify = next(s for s in plan["steps"] if s["kind"] == "verify")
    refresh = next(s for s in plan["steps"] if s["id"] == "service:nvidia-cdi-refresh.service")
    spec = re.search(r"(/\S+/cdi/\S+\.yaml)", refresh["title"])
    if not spec:
        raise AssertionError(f"the plan's refresh step names no spec: {refresh['title']}")
    checks = verify["detail"]["checks"]
    return checks["gpu_count"], spec.group(1), checks["ib_ports"]


class PodmanCdi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpus, cls.spec_path, cls.ib_ports = plan_facts()
        cls.tmp = tempfile.mkdtemp(prefix="hpcbake-podman-")
        cls.dev = os.path.join(cls.tmp, "dev")
        os.makedirs(cls.dev)
        for i in range(cls.gpus):
            os.mknod(os.path.join(cls.dev, f"nvidia{i}"), 0o600 | 0o020000, os.makedev(195, i))
        os.mknod(os.path.join(cls.dev, "nvidiactl"), 0o600 | 0o020000, os.makedev(195, 255))
        os.mknod(os.path.join(cls.dev, "nvidia-uvm"), 0o600 | 0o020000, os.makedev(511, 0))
        os.makedirs(os.path.join(CACHE, "storage"), exist_ok=True)
        with open(os.path.join(cls.tmp, "storage.conf"), "w") as f:
            f.write(f'[storage]\ndriver = "vfs"\ngraphroot = "{CACHE}/storage"\nrunroot = "/run/hpcbake-podman"\n')
        cls.write_conf(ENGINE_SETTINGS[0])
        cls.hcas = cls.rdma_layout()
        cls.image = cls.build_image()
        cls.choose_engine_settings()

    @classmethod
    def write_conf(cls, settings):
        with open(os.path.join(cls.tmp, "containers.conf"), "w") as f:
            f.write(CONTAINERS_CONF.format(**settings))

    @classmethod
    def choose_engine_settings(cls):
        tried = []
        for settings in ENGINE_SETTINGS:
            cls.write_conf(settings)
            r = cls.in_namespace(["podman", "run", "--rm", cls.image, "/lib64/ld-linux-x86-64.so.2", "--version"])
            if r.returncode == 0:
                print(f"podman runs containers here with {settings}", file=sys.stderr)
                return
            tried.append(f"{settings}: {r.stderr.strip()}")
        raise AssertionError("podman runs no container on this machine (no CDI involved):\n" + "\n".join(tried))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    @classmethod
    def in_namespace(cls, argv, spec=None, spec_path=None, env=None, timeout=180, rdma=False, before=None):
        """argv in a private mount namespace: tmpfs on /run and /var/lib, the spec (if any) at
        spec_path (default: the plan's), podman pointed at the test's containers.conf and storage.
        rdma: the fake HCAs' sysfs and device nodes (rdma_setup); before: commands (argv lists) run
        first, each of which must succeed, their output on stderr."""
        setup = "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib"
        if rdma:
            setup += " && " + cls.rdma_setup()
        for cmd in before or []:
            setup += " && " + shlex.join(cmd) + " >&2"
        if spec is not None:
            staged = os.path.join(cls.tmp, "spec.yaml")
            with open(staged, "w") as f:
                f.write(spec)
            dest = spec_path or cls.spec_path
            setup += f' && mkdir -p "{os.path.dirname(dest)}" && cp "{staged}" "{dest}"'
        full = dict(os.environ, CONTAINERS_CONF=os.path.join(cls.tmp, "containers.conf"),
                    CONTAINERS_STORAGE_CONF=os.path.join(cls.tmp, "storage.conf"), **(env or {}))
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               setup + ' && exec "$@"', "sh", *argv],
                              capture_output=True, text=True, env=full, timeout=timeout)

    @classmethod
    def build_image(cls):
        """localhost/hpcbake-probe:<key>, key = the recipe and the libc6 .deb's sha256: imported
        once into the cached storage, reused while neither changes."""
        deb = libc6_deb()
        key = hashlib.sha256(f"{RECIPE}\n{sha256_file(deb)}\n".encode()).hexdigest()[:16]
        tag = f"localhost/hpcbake-probe:{key}"
        if cls.in_namespace(["podman", "image", "exists", tag]).returncode == 0:
            return tag
        rootfs = os.path.join(cls.tmp, "rootfs")
        subprocess.run(["dpkg-deb", "-x", deb, rootfs], check=True)
        tar = os.path.join(cls.tmp, "rootfs.tar")
        subprocess.run(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
                        "-C", rootfs, "-cf", tar, "."], check=True)
        r = cls.in_namespace(["podman", "import", tar, tag])
        if r.returncode != 0:
            raise AssertionError(f"podman import: {r.stderr}")
        shutil.rmtree(rootfs, True)
        os.unlink(tar)
        return tag

    def cdi_spec(self, gpus=None, fake_count=None, library=True):
        """The stand-in for `nvidia-ctk cdi generate`: kind nvidia.com/gpu, a device per GPU index and
        `all`, the control nodes, NVML's library and nvidia-smi as read-only bind mounts. `gpus`: how
        many GPUs it names (fewer: a spec made on another VM)."""
        gpus = self.gpus if gpus is None else gpus

        def node(name):
            return {"path": f"/dev/{name}", "hostPath": os.path.join(self.dev, name)}

        gpu_nodes = [node(f"nvidia{i}") for i in range(gpus)]
        mounts = [{"hostPath": PROBE, "containerPath": "/usr/bin/nvidia-smi", "options": ["ro", "nosuid", "nodev", "bind"]}]
        if library:
            mounts.append({"hostPath": os.path.join(FAKES, "libnvidia-ml.so.1"), "containerPath": LIB_IN_CONTAINER,
                           "options": ["ro", "nosuid", "nodev", "bind"]})
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "nvidia.com/gpu",
            "devices": [{"name": str(i), "containerEdits": {"deviceNodes": gpu_nodes[i:i + 1]}} for i in range(gpus)] +
                       [{"name": "all", "containerEdits": {"deviceNodes": gpu_nodes}}],
            "containerEdits": {
                "env": [f"FAKE_GPU_COUNT={self.gpus if fake_count is None else fake_count}"],
                "deviceNodes": [node("nvidiactl"), node("nvidia-uvm")],
                "mounts": mounts,
            },
        }
        return "# stand-in for nvidia-ctk cdi generate (tests/container/test_podman_cdi.py)\n" + json.dumps(spec, indent=2)

    def podman_run(self, spec, spec_path=None):
        return self.in_namespace(["podman", "run", "--rm", "--device", "nvidia.com/gpu=all", self.image,
                                  "nvidia-smi", "-L"], spec=spec, spec_path=spec_path)

    def gpu_lines(self, out):
        return [line for line in out.splitlines() if line.startswith("GPU ")]

    def test_the_container_sees_the_size_gpus(self):
        self.assertEqual(self.spec_path, "/var/run/cdi/nvidia.yaml")
        self.assertEqual(self.gpus, 8)  # nd96isr_h100_v5: gpu.count
        t0 = time.monotonic()
        r = self.podman_run(self.cdi_spec())
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = self.gpu_lines(r.stdout)
        self.assertEqual(len(lines), self.gpus, r.stdout)
        self.assertEqual(lines[7], "GPU 7: Fake H100 80GB HBM3 (UUID: GPU-8a7c2f5e-0000-0000-0000-000000000007)")
        self.assertIn(f"NVML reports {self.gpus} GPUs", r.stderr)
        print(f"podman run: {time.monotonic() - t0:.1f} s", file=sys.stderr)

    def test_no_spec_no_gpus(self):
        r = self.podman_run(None)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("nvidia.com/gpu=all", r.stderr)

    def test_a_spec_where_podman_does_not_read_is_not_used(self):
        r = self.podman_run(self.cdi_spec(), spec_path="/run/cdi-elsewhere/nvidia.yaml")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("nvidia.com/gpu=all", r.stderr)

    def test_a_spec_without_the_library_fails_in_the_container(self):
        r = self.podman_run(self.cdi_spec(library=False))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("libnvidia-ml.so.1", r.stderr)
        self.assertEqual(self.gpu_lines(r.stdout), [])

    def test_a_spec_naming_fewer_gpus_fails_in_the_container(self):
        r = self.podman_run(self.cdi_spec(gpus=2))
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertEqual(len(self.gpu_lines(r.stdout)), 2, r.stdout)
        self.assertIn("/dev/nvidia2 is not character device 195,2", r.stderr)

    def verify(self, spec, image=None):
        env = {"LD_LIBRARY_PATH": FAKES, "FAKE_GPU_COUNT": str(self.gpus),
               "HPCBAKE_MANIFESTS": os.path.join(SRC, "manifests")}
        r = self.in_namespace([BIN, "--root", "/", "verify", "--size", SIZE, "--profile", "containers", "--level", "1",
                               "--gpu-bw-mib", "4", "--container-image", image or self.image, "--json"],
                              spec=spec, env=env)
        self.assertIn(r.returncode, (0, 6), r.stderr)  # this machine fails other checks (no driver, no HCA)
        return {c["id"]: c for c in json.loads(r.stdout)["checks"]}

    def test_verify_runs_the_image_through_cdi(self):
        c = self.verify(self.cdi_spec())
        self.assertEqual(c["container.podman.gpus"]["verdict"], "pass", c["container.podman.gpus"])
        self.assertEqual(c["container.podman.gpus"]["observed"], f"{self.gpus} (nvidia-smi -L in {self.image})")
        # verify's own reading of the spec is the file podman read.
        self.assertEqual(c["container.cdi"]["verdict"], "pass", c["container.cdi"])
        self.assertIn(f"({self.spec_path})", c["container.cdi"]["observed"])

    def test_verify_fails_when_the_container_sees_fewer_gpus(self):
        c = self.verify(self.cdi_spec(fake_count=self.gpus - 2))
        p = c["container.podman.gpus"]
        self.assertEqual(p["verdict"], "fail", p)
        self.assertEqual(p["observed"], f"{self.gpus - 2} (nvidia-smi -L in {self.image})")
        self.assertIn("nvidia-ctk cdi list", p["hint"])

    def test_verify_fails_without_the_spec(self):
        c = self.verify(None)
        p = c["container.podman.gpus"]
        self.assertEqual(p["verdict"], "fail", p)
        self.assertIn("nvidia.com/gpu=all", p["observed"])
        self.assertIn("/var/run/cdi/nvidia.yaml", p["hint"])
        self.assertEqual(c["container.cdi"]["verdict"], "fail")

    def test_verify_never_pulls(self):
        c = self.verify(self.cdi_spec(), image="localhost/hpcbake-probe:absent")
        p = c["container.podman.gpus"]
        self.assertEqual(p["verdict"], "skip", p)
        self.assertIn("not in podman's local storage (verify never pulls)", p["observed"])

    @classmethod
    def rdma_layout(cls):
        """The fixture's /sys/class/infiniband with the classes the RDMA stack adds on a booted VM:
        infiniband_verbs/uverbsN and infiniband_mad/{umad,issm}N, each `ibdev` naming its HCA. The
        InfiniBand HCAs in name order get uverbs0.., the Ethernet VF (mlx5_an0) the next verbs node
        and no MAD nodes (it must be left out of the spec). Returns the InfiniBand HCAs."""
        cls.sysclass = os.path.join(cls.tmp, "sysclass")
        src = os.path.join(FIXTURE_HOST, "sys", "class", "infiniband")
        shutil.copytree(src, os.path.join(cls.sysclass, "infiniband"), symlinks=True)
        ib, other = [], []
        for hca in sorted(os.listdir(src)):
            with open(os.path.join(src, hca, "ports", "1", "link_layer")) as f:
                (ib if f.read().strip() == "InfiniBand" else other).append(hca)
        cls.rdma_nodes = []

        def node(cls_name, kind, n, hca):
            d = os.path.join(cls.sysclass, cls_name, f"{kind}{n}")
            os.makedirs(d)
            with open(os.path.join(d, "ibdev"), "w") as f:
                f.write(hca + "\n")
            major, base = RDMA_NODES[kind]
            cls.rdma_nodes.append((f"{kind}{n}", major, base + n))

        for n, hca in enumerate(ib + other):
            node("infiniband_verbs", "uverbs", n, hca)
        for n, hca in enumerate(ib):
            node("infiniband_mad", "umad", n, hca)
            node("infiniband_mad", "issm", n, hca)
        cls.rdma_nodes.append(("rdma_cm", *RDMA_CM))
        return ib

    @classmethod
    def rdma_setup(cls):
        """Shell for the namespace: the fake classes over /sys/class; /dev/infiniband a tmpfs of real
        device nodes. Without a /dev/infiniband here, /dev first gets an overlay (upper layer in the
        test's directory, /dev/pts and /dev/shm bound back) so the directory exists only inside."""
        t = cls.tmp
        for d in ("olddev", "devup", "devwork"):
            os.makedirs(os.path.join(t, d), exist_ok=True)
        overlay = (f"mount --rbind /dev {t}/olddev && mount -t overlay overlay "
                   f"-o lowerdir=/dev,upperdir={t}/devup,workdir={t}/devwork /dev && "
                   f"mount --rbind {t}/olddev/pts /dev/pts && mount --rbind {t}/olddev/shm /dev/shm && "
                   "mkdir -p /dev/infiniband")
        nodes = " && ".join(f"mknod -m 666 /dev/infiniband/{name} c {major} {minor}"
                            for name, major, minor in cls.rdma_nodes)
        return (f"{{ [ -d /dev/infiniband ] || {{ {overlay}; }}; }} && "
                "mount -t tmpfs -o mode=755 tmpfs /dev/infiniband && " + nodes +
                f" && mount --bind {t}/sysclass /sys/class")

    def rdma_run(self, devices, write_spec=True, then=None):
        """`hpcbake container cdi --rdma` (unless write_spec is false), then podman with the GPU spec
        and `devices` (after the commands `then`), the probe listing the container's /dev/infiniband and /dev (the probe is
        in the container as nvidia-smi only through the GPU spec: ask for nvidia.com/gpu too)."""
        cls = type(self)
        if not hasattr(cls, "rdma_ok"):  # the namespace's fake /dev/infiniband: mounts this kernel may refuse
            r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", cls.rdma_setup()],
                               capture_output=True, text=True)
            cls.rdma_ok = (r.returncode == 0, r.stderr.strip())
        if not cls.rdma_ok[0]:
            self.skipTest(f"the fake /dev/infiniband cannot be made in a mount namespace here: {cls.rdma_ok[1]}")
        argv = ["podman", "run", "--rm"]
        for d in devices:
            argv += ["--device", d]
        argv += [self.image, "nvidia-smi", "--ls", "/dev/infiniband", "/dev"]
        before = ([[BIN, "--root", "/", "container", "cdi", "--rdma"]] if write_spec else []) + (then or [])
        return self.in_namespace(argv, spec=self.cdi_spec(), rdma=True, before=before)

    def listed(self, out, prefix):
        """{name: "c MAJOR:MINOR"} of the probe's lines for entries of `prefix` (a directory)."""
        found = {}
        for line in out.splitlines():
            path, _, kind = line.partition(" ")
            if os.path.dirname(path) == prefix:
                found[os.path.basename(path)] = kind
        return found

    def test_the_container_sees_the_hcas_through_hpcbakes_spec(self):
        self.assertEqual(self.ib_ports, 8)  # nd96isr_h100_v5: infiniband.ports
        self.assertEqual(len(self.hcas), self.ib_ports)
        t0 = time.monotonic()
        r = self.rdma_run(["hpcbake/rdma=all", "nvidia.com/gpu=all"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # hpcbake's own account of what it wrote (stderr: the command ran before podman).
        self.assertIn(f"{RDMA_SPEC} names {self.ib_ports} HCAs", r.stderr)
        self.assertIn("left out mlx5_an0: link layer Ethernet, not InfiniBand", r.stderr)
        ib = self.listed(r.stdout, "/dev/infiniband")
        verbs = sorted(n for n in ib if n.startswith("uverbs"))
        self.assertEqual(len(verbs), self.ib_ports, r.stdout)
        for n in range(self.ib_ports):
            self.assertEqual(ib[f"uverbs{n}"], f"c 231:{192 + n}")
            self.assertEqual(ib[f"umad{n}"], f"c 231:{n}")
            self.assertEqual(ib[f"issm{n}"], f"c 231:{64 + n}")
        self.assertEqual(ib["rdma_cm"], f"c {RDMA_CM[0]}:{RDMA_CM[1]}")
        self.assertNotIn(f"uverbs{self.ib_ports}", ib)  # mlx5_an0's, on the host only
        self.assertEqual(len(ib), 3 * self.ib_ports + 1, r.stdout)
        gpus = [n for n in self.listed(r.stdout, "/dev") if re.fullmatch(r"nvidia\d+", n)]
        self.assertEqual(len(gpus), self.gpus, r.stdout)
        print(f"cdi --rdma and podman run: {time.monotonic() - t0:.1f} s", file=sys.stderr)

    def test_one_hca_asked_for_one_hca_seen(self):
        r = self.rdma_run([f"hpcbake/rdma={self.hcas[0]}", "nvidia.com/gpu=all"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ib = self.listed(r.stdout, "/dev/infiniband")
        self.assertEqual(sorted(ib), ["issm0", "rdma_cm", "umad0", "uverbs0"], r.stdout)

    def test_without_hpcbakes_spec_podman_refuses_the_rdma_device(self):
        r = self.rdma_run(["hpcbake/rdma=all", "nvidia.com/gpu=all"], write_spec=False)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("hpcbake/rdma=all", r.stderr)

    def test_a_node_gone_since_the_spec_was_written_stops_the_container(self):
        # What container.rdma.cdi_nodes's hint says (a container asking for a missing node fails
        # to start), shown with the real engine: the spec is hpcbake's, uverbs3 then disappears.
        r = self.rdma_run(["hpcbake/rdma=all", "nvidia.com/gpu=all"], then=[["rm", "/dev/infiniband/uverbs3"]])
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("CDI", r.stderr)
        self.assertIn("/dev/infiniband/uverbs3", r.stderr)
        self.assertEqual(self.listed(r.stdout, "/dev/infiniband"), {})

    def test_verify_reads_the_rdma_spec_podman_used(self):
        env = {"LD_LIBRARY_PATH": FAKES, "FAKE_GPU_COUNT": str(self.gpus),
               "HPCBAKE_MANIFESTS": os.path.join(SRC, "manifests")}
        r = self.in_namespace([BIN, "--root", "/", "verify", "--size", SIZE, "--profile", "containers", "--level", "1",
                               "--gpu-bw-mib", "4", "--json"], env=env, rdma=True,
                              before=[[BIN, "--root", "/", "container", "cdi", "--rdma"]])
        self.assertIn(r.returncode, (0, 6), r.stderr)  # this machine fails other checks (no driver)
        c = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        hcas = c["container.rdma.cdi_hcas"]
        self.assertEqual(hcas["verdict"], "pass", hcas)
        self.assertTrue(hcas["observed"].startswith(f"{self.ib_ports} ports on {self.ib_ports} HCAs"), hcas)
        nodes = c["container.rdma.cdi_nodes"]
        self.assertEqual(nodes["verdict"], "pass", nodes)
        self.assertEqual(nodes["observed"], f"{3 * self.ib_ports + 1} present")


if __name__ == "__main__":
    reason = why_skip()
    if reason:
        print(f"SKIP: {reason}")
        sys.exit(77)
    unittest.main(verbosity=2)
