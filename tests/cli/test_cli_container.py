"""`hpcbake container configure` against the real engines from Debian's packages: after the edit,
dockerd and containerd start from the edited files and list the nvidia runtime, and every other
setting of the file still takes effect. Needs root and the docker.io/containerd packages
(scripts/deps installs them); skips, saying why, without them."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from common import FIXTURES, run

REF = os.path.join(FIXTURES, "reference")
BINARY = "/usr/bin/nvidia-container-runtime"


def slurp(path):
    with open(path) as f:
        return f.read()


def need(*tools):
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root: the engines run as root")
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        raise unittest.SkipTest(f"{', '.join(missing)} not installed (scripts/deps installs docker.io and containerd)")


def wait_for(path, proc, log, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}:\n{slurp(log)[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{path} did not appear in {seconds} s:\n{slurp(log)[-3000:]}")


class Daemon:
    """A daemon in the background, stopped (and its children with it) at the end."""

    def __init__(self, argv, log):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


class ContainerdTest(unittest.TestCase):
    def setUp(self):
        need("containerd", "ctr")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-containerd-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def start(self, config):
        sock = os.path.join(self.tmp, "c.sock")
        d = Daemon(["containerd", "--config", config, "--root", os.path.join(self.tmp, "root"),
                    "--state", os.path.join(self.tmp, "state"), "--address", sock], os.path.join(self.tmp, "log"))
        self.addCleanup(d.stop)
        wait_for(sock, d.proc, d.log)
        time.sleep(1)  # plugins load after the socket is up
        return sock, d

    def cri_status(self, sock):
        out = subprocess.run(["ctr", "--address", sock, "plugins", "ls"], capture_output=True, text=True, check=True)
        rows = [line.split() for line in out.stdout.splitlines() if " cri " in f" {line} "]
        self.assertEqual(len(rows), 1, out.stdout)
        return rows[0][-1]

    def check_config(self, original, name):
        root = os.path.join(self.tmp, "fixture")
        cfg = os.path.join(root, "etc/containerd/config.toml")
        os.makedirs(os.path.dirname(cfg))
        if original is not None:
            with open(cfg, "w") as f:
                f.write(original)
        r = run("--root", root, "container", "configure", "--engine", "containerd")
        self.assertEqual(r.returncode, 0, r.stderr)
        text = slurp(cfg)
        if original is not None:
            self.assertTrue(text.startswith(original), f"{name}: the original bytes moved")
        dump = subprocess.run(["containerd", "--config", cfg, "config", "dump"], capture_output=True, text=True)
        self.assertEqual(dump.returncode, 0, dump.stderr)
        self.assertIn('containerd.runtimes.nvidia.options]', dump.stdout)
        self.assertIn(f'BinaryName = "{BINARY}"', dump.stdout)
        sock, d = self.start(cfg)
        self.assertEqual(self.cri_status(sock), "ok", f"{name}: the CRI plugin did not load:\n" + slurp(d.log)[-3000:])
        d.stop()
        shutil.rmtree(root)

    def test_debian_shipped_config(self):
        self.check_config(slurp(os.path.join(REF, "containerd-config.toml.debian-1.6.20")), "Debian's config")

    def test_full_default_config(self):
        self.check_config(slurp(os.path.join(REF, "containerd-config-default.toml.1.6.20")), "config default")

    def test_no_config(self):
        self.check_config(None, "no config")

    def test_status_fails_clearly_without_the_runtime(self):
        root = os.path.join(self.tmp, "fixture")
        os.makedirs(os.path.join(root, "etc/containerd"))
        shutil.copy(os.path.join(REF, "containerd-config.toml.debian-1.6.20"), os.path.join(root, "etc/containerd/config.toml"))
        r = run("--root", root, "container", "status", "--engine", "containerd")
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        self.assertIn("names no nvidia runtime", r.stdout)


class DockerTest(unittest.TestCase):
    def setUp(self):
        need("dockerd", "docker", "containerd")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-docker-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_dockerd_lists_the_runtime_and_keeps_the_other_settings(self):
        root = os.path.join(self.tmp, "fixture")
        cfg = os.path.join(root, "etc/docker/daemon.json")
        os.makedirs(os.path.dirname(cfg))
        original = '{\n  "labels": ["hpcbake-test=1"],\n  "storage-driver": "vfs",\n  "log-level": "warn"\n}\n'
        with open(cfg, "w") as f:
            f.write(original)
        r = run("--root", root, "container", "configure", "--engine", "docker")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(slurp(cfg + ".hpcbake-orig"), original)
        sock = os.path.join(self.tmp, "d.sock")
        d = Daemon(["dockerd", "--config-file", cfg, "--data-root", os.path.join(self.tmp, "data"),
                    "--exec-root", os.path.join(self.tmp, "exec"), "--pidfile", os.path.join(self.tmp, "pid"),
                    "-H", f"unix://{sock}", "--bridge=none", "--iptables=false", "--ip6tables=false"],
                   os.path.join(self.tmp, "log"))
        self.addCleanup(d.stop)
        wait_for(sock, d.proc, d.log, 90)
        info = None
        for _ in range(100):
            p = subprocess.run(["docker", "-H", f"unix://{sock}", "info", "--format", "{{json .}}"],
                               capture_output=True, text=True)
            if p.returncode == 0:
                info = json.loads(p.stdout)
                break
            time.sleep(0.3)
        self.assertIsNotNone(info, slurp(d.log)[-3000:])
        self.assertEqual(info["Runtimes"]["nvidia"]["path"], BINARY)
        self.assertIn("runc", info["Runtimes"])
        self.assertEqual(info["Driver"], "vfs")
        self.assertIn("hpcbake-test=1", info["Labels"])
        st = run("--root", root, "container", "status", "--engine", "docker")
        self.assertEqual(st.returncode, 0, st.stdout + st.stderr)


if __name__ == "__main__":
    unittest.main()
