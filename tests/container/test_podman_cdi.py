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
    return verify["detail"]["checks"]["gpu_count"], spec.group(1)


class PodmanCdi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpus, cls.spec_path = plan_facts()
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
    def in_namespace(cls, argv, spec=None, spec_path=None, env=None, timeout=180):
        """argv in a private mount namespace: tmpfs on /run and /var/lib, the spec (if any) at
        spec_path (default: the plan's), podman pointed at the test's containers.conf and storage."""
        setup = "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib"
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


if __name__ == "__main__":
    reason = why_skip()
    if reason:
        print(f"SKIP: {reason}")
        sys.exit(77)
    unittest.main(verbosity=2)
