"""`hpcbake verify --profile kubernetes`: a node ready for NVIDIA's device plugin
(src/verify/checks_kubernetes.cpp). On a copy of the ND H100 fixture root and the two-GPU test size
(Standard_ND4test_v1): containerd's config as hpcbake writes it for the kubernetes profile (the
default runtime nvidia, CDI enabled), the CDI spec the toolkit writes, and the device nodes (empty
files stand in for them). Each test breaks one of them and sees that check, and only it, fail."""
import os
import shutil
import tempfile
import unittest

from common import copy_manifest_set, run
from test_cli_verify import CDI_TWO_GPUS, VerifyBase

K8S_CHECKS = ["container.k8s.cdi_enabled", "container.k8s.cdi_gpus", "container.k8s.default_runtime",
              "container.k8s.devices"]


class KubernetesNode(VerifyBase):
    def ready(self):
        """What a baked node has: containerd configured by hpcbake (install's container-runtime step
        through `container configure --kubernetes`), the spec nvidia-cdi-refresh writes, the devices."""
        r = run("--root", self.root, "container", "configure", "--engine", "containerd", "--kubernetes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.write_spec("var/run/cdi", CDI_TWO_GPUS)
        for dev in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
            open(os.path.join(self.root, "dev", dev), "w").close()

    def write_spec(self, where, text):
        d = os.path.join(self.root, where)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "nvidia.yaml"), "w") as f:
            f.write(text)

    def config(self):
        return os.path.join(self.root, "etc", "containerd", "config.toml")

    def edit_config(self, old, new):
        with open(self.config()) as f:
            text = f.read()
        self.assertIn(old, text)
        with open(self.config(), "w") as f:
            f.write(text.replace(old, new))

    def k8s(self, doc):
        return {k: v for k, v in self.checks(doc).items() if k.startswith("container.k8s.")}

    def test_a_ready_node_passes(self):
        self.ready()
        doc, _ = self.verify_json("--profile", "kubernetes", expect_rc=0)
        c = self.k8s(doc)
        self.assertEqual(sorted(c), K8S_CHECKS)
        for cid, check in c.items():
            self.assertEqual(check["verdict"], "pass", check)
        self.assertIn("nvidia (/etc/containerd/config.toml", c["container.k8s.default_runtime"]["observed"])
        self.assertIn("2 GPUs named (/var/run/cdi/nvidia.yaml)", c["container.k8s.cdi_gpus"]["observed"])
        self.assertEqual(c["container.k8s.devices"]["observed"], "4 present")
        # Level 0 (the baked image, before the first boot): the config only.
        doc, _ = self.verify_json("--profile", "kubernetes", level="0", expect_rc=0)
        self.assertEqual(sorted(self.k8s(doc)), ["container.k8s.cdi_enabled", "container.k8s.default_runtime"])
        # The containers profile asks nothing of Kubernetes.
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.k8s(doc), {})

    def test_runc_the_default_runtime_fails(self):
        self.ready()
        self.edit_config('default_runtime_name = "nvidia"', 'default_runtime_name = "runc"')
        doc, _ = self.verify_json("--profile", "kubernetes")
        self.assertEqual(self.failed(doc), ["container.k8s.default_runtime"])
        c = self.checks(doc)["container.k8s.default_runtime"]
        self.assertTrue(c["observed"].startswith("runc "), c)
        self.assertIn("runtimeClassName: nvidia", c["hint"])
        self.assertIn("--set-as-default", c["hint"])

    def test_cdi_not_enabled_fails(self):
        self.ready()
        self.edit_config("enable_cdi = true", "enable_cdi = false")
        doc, _ = self.verify_json("--profile", "kubernetes")
        self.assertEqual(self.failed(doc), ["container.k8s.cdi_enabled"])
        self.assertIn("enable_cdi = false", self.checks(doc)["container.k8s.cdi_enabled"]["observed"])

    def test_no_containerd_config_fails_both(self):
        self.ready()
        os.remove(self.config())
        doc, _ = self.verify_json("--profile", "kubernetes")
        self.assertEqual(self.failed(doc), ["container.containerd.runtime", "container.k8s.cdi_enabled",
                                            "container.k8s.default_runtime"])
        self.assertIn("does not exist", self.checks(doc)["container.k8s.default_runtime"]["observed"])

    def test_a_spec_without_every_gpu_fails(self):
        self.ready()
        self.write_spec("var/run/cdi", CDI_TWO_GPUS.replace('- name: "1"', '- name: "x1"'))
        doc, _ = self.verify_json("--profile", "kubernetes")
        # container.cdi (the containers profile's count) sees it too.
        self.assertEqual(self.failed(doc), ["container.cdi", "container.k8s.cdi_gpus"])
        self.assertIn("missing 1", self.checks(doc)["container.k8s.cdi_gpus"]["observed"])
        self.assertIn("nvidia-cdi-refresh", self.checks(doc)["container.k8s.cdi_gpus"]["hint"])

    def test_no_spec_fails(self):
        self.ready()
        os.remove(os.path.join(self.root, "var", "run", "cdi", "nvidia.yaml"))
        doc, _ = self.verify_json("--profile", "kubernetes")
        self.assertEqual(self.failed(doc), ["container.cdi", "container.k8s.cdi_gpus"])
        self.assertIn("no nvidia.com/gpu spec in /etc/cdi or /var/run/cdi",
                      self.checks(doc)["container.k8s.cdi_gpus"]["observed"])

    def test_a_spec_in_etc_cdi_counts(self):
        self.ready()
        os.remove(os.path.join(self.root, "var", "run", "cdi", "nvidia.yaml"))
        self.write_spec("etc/cdi", CDI_TWO_GPUS)
        doc, _ = self.verify_json("--profile", "kubernetes", expect_rc=0)
        self.assertIn("/etc/cdi/nvidia.yaml", self.checks(doc)["container.k8s.cdi_gpus"]["observed"])

    def test_a_missing_device_node_fails(self):
        self.ready()
        os.remove(os.path.join(self.root, "dev", "nvidia-uvm"))
        os.remove(os.path.join(self.root, "dev", "nvidia1"))
        doc, _ = self.verify_json("--profile", "kubernetes")
        self.assertEqual(self.failed(doc), ["container.k8s.devices"])
        c = self.checks(doc)["container.k8s.devices"]
        self.assertEqual(c["observed"], "missing /dev/nvidia1, /dev/nvidia-uvm")
        self.assertIn("nvidia-modprobe", c["hint"])


class ProfileOption(unittest.TestCase):
    def test_kubernetes_needs_containerd(self):
        tmp = tempfile.mkdtemp(prefix="hpcbake-k8s-lint-")
        self.addCleanup(shutil.rmtree, tmp, True)
        manifests = os.path.join(tmp, "manifests")
        copy_manifest_set(manifests)
        path = os.path.join(manifests, "profiles", "kubernetes.yaml")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("container_engines: [containerd]", "container_engines: [docker]"))
        r = run("manifest", "lint", manifests)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"profiles/kubernetes\.yaml:\d+:\d+: .*kubernetes: true needs containerd in "
                                   r"container_engines")


if __name__ == "__main__":
    unittest.main()
