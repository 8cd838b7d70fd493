"""RDMA in containers on an InfiniBand size (src/container/cdi_rdma.cpp,
src/verify/checks_container_rdma.cpp): `hpcbake container cdi --rdma` writes the HCAs' CDI spec,
`container configure --rdma` gives Docker's containers an unlimited memlock, and verify's container
level checks both.

The root is a copy of the ND H100 fixture (hosts/nd96isr_h100_v5) extended with what the RDMA stack
makes on a booted VM: /sys/class/infiniband_verbs/uverbsN/ibdev and /sys/class/infiniband_mad/
{umad,issm}N/ibdev naming each HCA, and /dev/infiniband/{uverbsN,umadN,issmN,rdma_cm} (empty files
stand in for the device nodes). The verify tests run the two-port test size (Standard_ND4test_v1),
so the fixture keeps mlx5_ib0 and mlx5_ib1 and the Ethernet VF mlx5_an0 (which gets uverbs2 and
must be left out). The spec is validated against CDI's published JSON schema
(tests/fixtures/cdi, cncf-tags/container-device-interface@05ae4b5)."""
import json
import os
import shutil
import unittest

import yaml

from common import FIXTURES, run
from test_cli_verify import CDI_TWO_GPUS, VerifyBase

SPEC = os.path.join("var", "run", "cdi", "hpcbake-rdma.yaml")
RDMA_CHECKS = ["container.rdma.cdi_hcas", "container.rdma.cdi_nodes", "container.rdma.docker_memlock"]


def cdi_validator():
    """A validator for CDI's schema.json, its defs.json reference resolved from the fixture
    directory; None (with why) when python3-jsonschema is missing (scripts/deps installs it)."""
    try:
        import jsonschema
    except ImportError as e:
        return None, f"python3-jsonschema is not installed ({e}): scripts/deps installs it"
    d = os.path.join(FIXTURES, "cdi")
    with open(os.path.join(d, "schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(d, "defs.json")) as f:
        defs = json.load(f)
    try:  # jsonschema >= 4.18: the referencing library
        from referencing import Registry, Resource
        registry = Registry().with_resource("defs.json", Resource.from_contents(
            defs, default_specification=__import__("referencing.jsonschema").jsonschema.DRAFT7))
        return jsonschema.Draft7Validator(schema, registry=registry), None
    except ImportError:  # Debian 12's 4.10
        resolver = jsonschema.RefResolver(base_uri="", referrer=schema, store={"defs.json": defs})
        return jsonschema.Draft7Validator(schema, resolver=resolver), None


def extend_root(root):
    """The RDMA stack's sysfs classes and device nodes, for the HCAs the test size keeps."""
    for i in range(2, 8):
        shutil.rmtree(os.path.join(root, "sys", "class", "infiniband", f"mlx5_ib{i}"))
    devs = os.path.join(root, "dev", "infiniband")
    os.makedirs(devs)

    def attr(cls, dev, hca):
        d = os.path.join(root, "sys", "class", cls, dev)
        os.makedirs(d)
        with open(os.path.join(d, "ibdev"), "w") as f:
            f.write(hca + "\n")
        open(os.path.join(devs, dev), "w").close()

    for n, hca in enumerate(["mlx5_ib0", "mlx5_ib1", "mlx5_an0"]):
        attr("infiniband_verbs", f"uverbs{n}", hca)
    for n, hca in enumerate(["mlx5_ib0", "mlx5_ib1"]):
        attr("infiniband_mad", f"umad{n}", hca)
        attr("infiniband_mad", f"issm{n}", hca)
    open(os.path.join(devs, "rdma_cm"), "w").close()


class CdiCommand(VerifyBase):
    def setUp(self):
        super().setUp()
        extend_root(self.root)

    def spec(self):
        with open(os.path.join(self.root, SPEC)) as f:
            return f.read()

    def test_dry_run_prints_the_spec_and_writes_nothing(self):
        r = run("--root", self.root, "container", "cdi", "--rdma", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('kind: "hpcbake/rdma"', r.stdout)
        self.assertIn("container: left out mlx5_an0: link layer Ethernet, not InfiniBand", r.stdout)
        self.assertIn("would name 2 HCAs (mlx5_ib0, mlx5_ib1)", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.root, SPEC)))

    def test_the_spec_is_valid_cdi_and_names_each_hca(self):
        r = run("--root", self.root, "container", "cdi", "--rdma")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("/var/run/cdi/hpcbake-rdma.yaml names 2 HCAs (mlx5_ib0, mlx5_ib1) as hpcbake/rdma=NAME", r.stdout)
        doc = yaml.safe_load(self.spec())
        validator, why = cdi_validator()
        if validator is None:
            self.skipTest(why)
        errors = [e.message for e in validator.iter_errors(doc)]
        self.assertEqual(errors, [])
        # A broken copy is refused by the same schema: the validation is real.
        bad = dict(doc)
        del bad["devices"][0]["containerEdits"]
        self.assertTrue(list(validator.iter_errors(bad)))
        self.assertEqual([d["name"] for d in doc["devices"]], ["mlx5_ib0", "mlx5_ib1", "all"])
        self.assertEqual(doc["containerEdits"]["deviceNodes"], [{"path": "/dev/infiniband/rdma_cm"}])
        self.assertEqual([n["path"] for n in doc["devices"][1]["containerEdits"]["deviceNodes"]],
                         ["/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/issm1"])
        # Again: nothing changes. --json says the same.
        r = run("--root", self.root, "--json", "container", "cdi", "--rdma")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertFalse(j["changed"])
        self.assertEqual([h["name"] for h in j["hcas"]], ["mlx5_ib0", "mlx5_ib1"])
        self.assertEqual(j["spec"], self.spec())

    def test_no_hca_fails_and_removes_a_stale_spec(self):
        self.assertEqual(run("--root", self.root, "container", "cdi", "--rdma").returncode, 0)
        shutil.rmtree(os.path.join(self.root, "sys", "class", "infiniband"))
        r = run("--root", self.root, "container", "cdi", "--rdma")
        self.assertEqual(r.returncode, 6, r.stdout + r.stderr)
        self.assertIn("no InfiniBand HCA", r.stderr)
        self.assertIn("/var/run/cdi/hpcbake-rdma.yaml removed", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, SPEC)))

    def test_without_rdma_is_a_usage_error(self):
        r = run("--root", self.root, "container", "cdi")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--rdma", r.stderr)


class RdmaContainerNode(VerifyBase):
    def setUp(self):
        super().setUp()
        extend_root(self.root)

    def ready(self, rdma=True):
        """What the containers profile leaves on an InfiniBand node: both engines configured (with
        Docker's memlock), the GPUs' spec, and the HCAs' spec of this boot."""
        args = ["--root", self.root, "container", "configure", "--no-restart"] + (["--rdma"] if rdma else [])
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        d = os.path.join(self.root, "var", "run", "cdi")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "nvidia.yaml"), "w") as f:
            f.write(CDI_TWO_GPUS)
        r = run("--root", self.root, "container", "cdi", "--rdma")
        self.assertEqual(r.returncode, 0, r.stderr)

    def rdma(self, doc):
        return {k: v for k, v in self.checks(doc).items() if k.startswith("container.rdma.")}

    def test_a_ready_node_passes(self):
        self.ready()
        doc, _ = self.verify_json("--profile", "containers", expect_rc=0)
        c = self.rdma(doc)
        self.assertEqual(sorted(c), RDMA_CHECKS)
        for check in c.values():
            self.assertEqual(check["verdict"], "pass", check)
        self.assertIn("2 ports on 2 HCAs (mlx5_ib0, mlx5_ib1), kind hpcbake/rdma", c["container.rdma.cdi_hcas"]["observed"])
        self.assertEqual(c["container.rdma.cdi_nodes"]["observed"], "7 present")
        self.assertEqual(c["container.rdma.cdi_hcas"]["source"], "sizes/nd4test_v1.yaml infiniband.ports")
        # Level 0 (the baked image): Docker's file only.
        doc, _ = self.verify_json("--profile", "containers", level="0", expect_rc=0)
        self.assertEqual(sorted(self.rdma(doc)), ["container.rdma.docker_memlock"])
        # Without the containers profile, nothing of it is asked.
        doc, _ = self.verify_json(expect_rc=0)
        self.assertEqual(self.rdma(doc), {})

    def test_docker_without_the_memlock_default_fails(self):
        self.ready(rdma=False)
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.rdma.docker_memlock"])
        c = self.checks(doc)["container.rdma.docker_memlock"]
        self.assertIn("no default-ulimits.memlock in /etc/docker/daemon.json", c["observed"])
        self.assertIn("container configure --engine docker --rdma", c["hint"])
        self.assertIn("--ulimit memlock=-1", c["hint"])

    def test_a_spec_naming_fewer_hcas_fails(self):
        self.ready()
        # The spec of a boot where mlx5_ib1 had not come up (its verbs node missing then).
        os.remove(os.path.join(self.root, "dev", "infiniband", "uverbs1"))
        self.assertEqual(run("--root", self.root, "container", "cdi", "--rdma").returncode, 0)
        open(os.path.join(self.root, "dev", "infiniband", "uverbs1"), "w").close()
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.rdma.cdi_hcas"])
        c = self.checks(doc)["container.rdma.cdi_hcas"]
        self.assertIn("1 ports on 1 HCAs (mlx5_ib0)", c["observed"])
        self.assertIn("hpcbake container cdi --rdma", c["hint"])

    def test_a_missing_device_node_fails(self):
        self.ready()
        os.remove(os.path.join(self.root, "dev", "infiniband", "rdma_cm"))
        os.remove(os.path.join(self.root, "dev", "infiniband", "umad1"))
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.rdma.cdi_nodes"])
        c = self.checks(doc)["container.rdma.cdi_nodes"]
        self.assertEqual(c["observed"], "missing /dev/infiniband/rdma_cm, /dev/infiniband/umad1")
        self.assertIn("ib_uverbs", c["hint"])

    def test_no_spec_fails(self):
        self.ready()
        os.remove(os.path.join(self.root, SPEC))
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.rdma.cdi_hcas", "container.rdma.cdi_nodes"])
        self.assertIn("/var/run/cdi/hpcbake-rdma.yaml does not exist",
                      self.checks(doc)["container.rdma.cdi_hcas"]["observed"])

    def test_verify_boot_rewrites_the_spec_from_this_boot(self):
        """The image was baked without the HCAs (or on another VM): verify --boot, the boot unit's
        command, writes the booted VM's spec before checking it."""
        self.ready()
        with open(os.path.join(self.root, SPEC), "w") as f:
            f.write(self.stale_spec())
        doc, _ = self.verify_json("--profile", "containers")
        self.assertEqual(self.failed(doc), ["container.rdma.cdi_hcas", "container.rdma.cdi_nodes"])
        r = self.verify("--boot", "--json", "--profile", "containers")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        c = self.rdma(json.loads(r.stdout))
        self.assertEqual(c["container.rdma.cdi_hcas"]["verdict"], "pass", c)
        self.assertIn("; rewritten now", c["container.rdma.cdi_hcas"]["observed"])
        self.assertEqual(c["container.rdma.cdi_nodes"]["verdict"], "pass", c)
        self.assertIn('- name: "mlx5_ib1"', self.read_spec())

    def stale_spec(self):
        """A spec from a VM with other HCAs (mlx5_0, which this one does not have)."""
        return ('cdiVersion: "0.5.0"\nkind: "hpcbake/rdma"\ndevices:\n- name: "mlx5_0"\n  containerEdits:\n'
                '    deviceNodes:\n    - path: "/dev/infiniband/uverbs9"\n- name: "all"\n  containerEdits:\n'
                '    deviceNodes:\n    - path: "/dev/infiniband/uverbs9"\n')

    def read_spec(self):
        with open(os.path.join(self.root, SPEC)) as f:
            return f.read()


if __name__ == "__main__":
    unittest.main()
