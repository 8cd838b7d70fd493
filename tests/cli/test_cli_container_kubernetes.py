"""The kubernetes profile against the real containerd from Debian's packages: `container configure
--kubernetes` and `install --profile kubernetes` write containerd's default runtime and CDI setting
as edits of the file, and containerd starts from it with nvidia as its CRI default runtime (its
CRI plugin refuses to load when the default names no runtime). Needs root and containerd
(scripts/deps installs it); skips, saying why, without them. The fixtures, daemons and install
machine are test_cli_container.py's."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import test_cli_container as tc
from common import run


def dump(cfg):
    d = subprocess.run(["containerd", "--config", cfg, "config", "dump"], capture_output=True, text=True)
    if d.returncode != 0:
        raise AssertionError(d.stderr)
    return d.stdout


class ConfigureKubernetes(unittest.TestCase):
    def setUp(self):
        tc.need("containerd", "ctr")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-containerd-k8s-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def check(self, original, name):
        root = os.path.join(self.tmp, name)
        cfg = os.path.join(root, "etc/containerd/config.toml")
        os.makedirs(os.path.dirname(cfg))
        if original is not None:
            with open(cfg, "w") as f:
                f.write(original)
        r = run("--root", root, "container", "configure", "--engine", "containerd", "--kubernetes")
        self.assertEqual(r.returncode, 0, r.stderr)
        text = tc.slurp(cfg)
        self.assertIn("enable_cdi = true", text)
        d = dump(cfg)
        self.assertIn('default_runtime_name = "nvidia"', d, name)
        self.assertIn(f'BinaryName = "{tc.BINARY}"', d)
        # containerd 1.6 (Debian 12's) has no CDI in its CRI plugin: it ignores enable_cdi and
        # leaves it out of the dump; a containerd that knows it must read it as true.
        if "enable_cdi" in d:
            self.assertIn("enable_cdi = true", d)
        sock, c = tc.start_containerd(self, os.path.join(self.tmp, name + "-daemon"), cfg)
        self.assertEqual(tc.cri_status(self, sock), "ok", f"{name}: the CRI plugin did not load:\n" +
                         tc.slurp(c.log)[-3000:])
        c.stop()
        # Configured twice: nothing changes.
        r = run("--root", root, "container", "configure", "--engine", "containerd", "--kubernetes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(tc.slurp(cfg), text)

    def test_debian_shipped_config(self):
        self.check(tc.slurp(os.path.join(tc.REF, "containerd-config.toml.debian-1.6.20")), "debian")

    def test_full_default_config(self):
        # `containerd config default` sets default_runtime_name = "runc": replaced in place.
        self.check(tc.slurp(os.path.join(tc.REF, "containerd-config-default.toml.1.6.20")), "default")

    def test_no_config(self):
        self.check(None, "none")

    def test_a_default_naming_no_runtime_breaks_the_cri_plugin(self):
        # Why the default runtime's table is always written: containerd's CRI plugin does not load
        # when default_runtime_name names a runtime the file does not define (what the checks rely on).
        cfg = os.path.join(self.tmp, "broken.toml")
        with open(cfg, "w") as f:
            f.write('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                    '  default_runtime_name = "nvidia"\n')
        sock, c = tc.start_containerd(self, os.path.join(self.tmp, "broken-daemon"), cfg)
        self.assertNotEqual(tc.cri_status(self, sock), "ok")
        c.stop()


class InstallKubernetes(tc.InstallContainersTest):
    """`install --profile kubernetes` on test_cli_container.py's fixture machine: containerd only,
    its default runtime nvidia and CDI enabled, the closing verify's container.k8s checks passing
    at level 0, and the real containerd starting from the file."""

    test_install_configures_both_engines_and_they_start_with_the_runtime = None  # the parent's own

    def setUp(self):
        super().setUp()
        p = os.path.join(self.manifests, "profiles", "kubernetes.yaml")
        text = tc.slurp(p).replace("best_effort: [nvidia-dcgm]\n", "")
        with open(p, "w") as f:
            f.write(text)

    def install(self):
        return run("--root", self.root, "--manifests", self.manifests, "install", "--size", self.SIZE, "--distro",
                   "debian-12", "--profile", "kubernetes", "--cache", os.path.join(self.tmp, "cache"), "--yes",
                   "--verify-level", "0", env=self.env, timeout=300)

    def test_install_makes_nvidia_containerd_default_with_cdi(self):
        r = self.install()
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)  # the driver's packages: reboot to load them
        argv = self.recorded()
        self.assertIn(["systemctl", "try-restart", "containerd.service"], argv)
        self.assertNotIn(["systemctl", "try-restart", "docker.service"], argv)
        toml = os.path.join(self.root, "etc/containerd/config.toml")
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/docker/daemon.json")))
        with open(os.path.join(self.root, "proc/sys/kernel/random/boot_id"), "w") as f:
            f.write("boot-2\n")
        r = self.install()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = json.loads(tc.slurp(os.path.join(self.root, "var/lib/hpcbake/verify-install.json")))
        verdicts = {c["id"]: c["verdict"] for c in report["checks"]}
        for cid in ("container.containerd.runtime", "container.k8s.default_runtime", "container.k8s.cdi_enabled"):
            self.assertEqual(verdicts.get(cid), "pass", verdicts)
        self.assertIn('default_runtime_name = "nvidia"', dump(toml))
        sock, c = tc.start_containerd(self, os.path.join(self.tmp, "containerd"), toml)
        self.assertEqual(tc.cri_status(self, sock), "ok", tc.slurp(c.log)[-3000:])
        c.stop()


if __name__ == "__main__":
    unittest.main()
