"""Golden `plan --json` outputs for size x distro pairs, and the unsupported ones.

Set UPDATE_GOLDEN=1 to rewrite the files after an intended change; review the diff.
"""
import json
import os
import unittest

from common import FIXTURES, GOLDEN, SRC, host, run, run_json

# name: (args before the verb, plan args)
CASES = {
    "nd96isr_h100_v5-ubuntu-22.04-host": (["--root", host("nd96isr_h100_v5")],
                                          ["--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04"]),
    "nd96isr_h100_v5-almalinux-9": ([], ["--size", "standard_nd96isr_h100_v5", "--distro", "almalinux-9"]),
    "hb120rs_v3-almalinux-8.10-host": (["--root", host("hb120rs_v3")],
                                       ["--size", "Standard_HB120rs_v3", "--distro", "almalinux-8.10"]),
    # A GRID size (vGPU 20, the branch Azure publishes for NCv6) on the Ubuntu 24.04 fixture host.
    "nc24lds_xl_rtxpro6000bse_v6-ubuntu-24.04-host": (["--root", host("nv36ads_a10_v5")],
                                                      ["--size", "Standard_NC24lds_xl_RTXPRO6000BSE_v6", "--distro",
                                                       "ubuntu-24.04"]),
    "nc24ads_a100_v4-rhel-8.10": ([], ["--size", "Standard_NC24ads_A100_v4", "--distro", "rhel-8.10"]),
    # The plain fixture host is Debian 12: without --root this plan would read the test
    # machine's own kernels, which change with every linux-headers update.
    "hb176rs_v4-debian-12": (["--root", host("plain")], ["--size", "Standard_HB176rs_v4", "--distro", "debian-12"]),
    "nd96asr_v4-ubuntu-24.04": ([], ["--size", "Standard_ND96asr_v4", "--distro", "ubuntu-24.04"]),
    # Arm64 (Grace): the sbsa repository, DOCA for arm64, IMEX instead of Fabric Manager.
    "nd128isr_ndr_gb200_v6-ubuntu-24.04": ([], ["--size", "Standard_ND128isr_NDR_GB200_v6", "--distro",
                                                "ubuntu-24.04"]),
    # Azure Linux 3.0: tdnf, dracut, the distribution's InfiniBand stack, the pinned .run driver.
    "nd96isr_h100_v5-azurelinux-3.0": ([], ["--size", "Standard_ND96isr_H100_v5", "--distro", "azurelinux-3.0"]),
    "hb176rs_v4-azurelinux-3.0": ([], ["--size", "Standard_HB176rs_v4", "--distro", "azurelinux-3.0"]),
    # AMD GPUs: the InfiniBand part and the agent only, saying the GPU driver is out of scope.
    "nd96isr_mi300x_v5-ubuntu-22.04": ([], ["--size", "Standard_ND96isr_MI300X_v5", "--distro", "ubuntu-22.04"]),
    # The containers profile: the toolkit, the engines, the runtime in both configs, CDI refresh.
    "nd96isr_h100_v5-ubuntu-24.04-containers": ([], ["--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-24.04",
                                                     "--profile", "containers"]),
    # The containers profile on EL: NVIDIA's rpm repository trusted through its signed repomd.xml.
    "nd96isr_h100_v5-almalinux-9-containers": ([], ["--size", "Standard_ND96isr_H100_v5", "--distro", "almalinux-9",
                                                    "--profile", "containers"]),
    # The kubernetes profile: containerd only, its default runtime nvidia and CDI enabled.
    "nd96isr_h100_v5-ubuntu-24.04-kubernetes": ([], ["--size", "Standard_ND96isr_H100_v5", "--distro",
                                                     "ubuntu-24.04", "--profile", "kubernetes"]),
    # rdma_os (docs/userspace.md): the RDMA limits, sysctl and device names, the ND H100 v5 topology
    # file and /etc/nccl.conf (ai); the same OS settings without NCCL files on a CPU size (hpc).
    "nd96isr_h100_v5-ubuntu-22.04-ai": ([], ["--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04",
                                             "--profile", "ai"]),
    "hb176rs_v4-ubuntu-22.04-hpc": ([], ["--size", "Standard_HB176rs_v4", "--distro", "ubuntu-22.04", "--profile",
                                         "hpc"]),
    # Modules must be signed (as under Secure Boot): Canonical's signed precompiled driver, no key, no DKMS.
    "nc40ads_h100_v5-ubuntu-24.04-canonical": ([], ["--size", "Standard_NC40ads_H100_v5", "--distro", "ubuntu-24.04",
                                                    "--sign", "on"]),
}

# name: (plan args, exit code, text the error must contain)
UNSUPPORTED = {
    "arm64-size-on-x86-distro": (["--size", "Standard_ND128isr_NDR_GB200_v6", "--distro", "ubuntu-22.04"], 3,
                                 "runs on aarch64 CPUs, and ubuntu-22.04"),
    # Azure Linux builds the toolkit into its own repositories, which no manifest pins yet.
    "containers-on-azurelinux": (["--size", "Standard_ND96isr_H100_v5", "--distro", "azurelinux-3.0", "--profile",
                                  "containers"], 3, "Azure Linux builds the toolkit into its own base repository at 1.17.8"),
    "unknown-profile": (["--size", "Standard_HB120rs_v3", "--distro", "debian-12", "--profile", "gpu"], 3,
                        "unknown profile 'gpu'"),
    "a10-on-debian": (["--size", "Standard_NV36ads_A10_v5", "--distro", "debian-12"], 3,
                      "pins none for debian-12"),
    # Issue 40, item 15: NVadsA10 v5 takes the GRID branches Azure publishes for it (17..18), never
    # 595.58.03 (vGPU 20); no build of those has a published checksum, so it is refused with why.
    "a10-grid-branch": (["--size", "Standard_NV36ads_A10_v5", "--distro", "ubuntu-24.04"], 3,
                        "needs a GRID driver in branch 17..18"),
    # M60's newest GRID driver (535.161.08) has no published checksum: refused with why.
    "m60-unverifiable": (["--size", "Standard_NV12s_v3", "--distro", "ubuntu-22.04"], 3, "no published SHA-256"),
    "grid-on-cuda-size": (["--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04", "--driver", "grid"], 3,
                          "ruled out"),
    "unknown-size": (["--size", "Standard_ND96isr_H100_v9", "--distro", "ubuntu-22.04"], 3,
                     "did you mean Standard_ND96isr_H100_v5"),
    "unknown-distro": (["--size", "Standard_HB120rs_v3", "--distro", "centos-7"], 3, "supported distros:"),
    "canonical-off-ubuntu": (["--size", "Standard_NC40ads_H100_v5", "--distro", "almalinux-9", "--driver-source",
                              "canonical"], 3, "names no precompiled signed NVIDIA modules"),
    "bad-driver-flag": (["--size", "Standard_HB120rs_v3", "--distro", "debian-12", "--driver", "rocm"], 2,
                        "usage error"),
}


class GoldenPlans(unittest.TestCase):
    def test_golden_plans(self):
        for name, (pre, args) in CASES.items():
            with self.subTest(name=name):
                r = run(*pre, "plan", *args, "--json")
                self.assertEqual(r.returncode, 0, r.stderr)
                # Host plans name files under --root; the checkout's own location is no part of the plan.
                actual = json.loads(r.stdout.replace(FIXTURES, "@FIXTURES@"))
                path = os.path.join(GOLDEN, f"plan-{name}.json")
                if os.environ.get("UPDATE_GOLDEN"):
                    with open(path, "w") as f:
                        f.write(json.dumps(actual, indent=2, sort_keys=True) + "\n")
                with open(path) as f:
                    expected = json.load(f)
                self.assertEqual(expected, actual, f"plan {name} differs from {path}")

    def test_unsupported_combinations(self):
        for name, (args, code, text) in UNSUPPORTED.items():
            with self.subTest(name=name):
                r = run("plan", *args, "--json")
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertEqual(r.stdout, "", "nothing on stdout when the plan is refused")
                self.assertIn(text, r.stderr)
                self.assertIn("hint:" if code == 3 else "error", r.stderr)

    def test_host_plan_targets_running_and_next_boot_kernels(self):
        r = run("--root", host("nd96isr_h100_v5"), "plan", "--size", "Standard_ND96isr_H100_v5", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        plan = json.loads(r.stdout)
        self.assertEqual(plan["distro"], "ubuntu-22.04")  # from the fixture's os-release
        self.assertEqual(plan["kernels"], ["6.5.0-1025-azure", "6.8.0-1015-azure"])
        ids = [s["id"] for s in plan["steps"]]
        self.assertIn("dkms:nvidia:6.8.0-1015-azure", ids)
        self.assertIn("initramfs:6.8.0-1015-azure", ids)

    def test_human_table(self):
        r = run("plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "almalinux-9")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Plan for Standard_ND96isr_H100_v5 (ND H100 v5) on AlmaLinux 9", r.stdout)
        self.assertIn("sha256  a055dbeae72438f20335b41929a060148c82c69d2147c0d922660e8c5a265eb1", r.stdout)
        self.assertIn("install Fabric Manager 580.126.20 and hold it (dnf versionlock add)", r.stdout)

    def test_plan_without_size_off_azure_is_a_usage_error(self):
        r = run("--root", host("plain"), "plan")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("pass --size", r.stderr)


if __name__ == "__main__":
    unittest.main()


class SizesAndNames(unittest.TestCase):
    """Sizes in every spelling Azure uses, distros in any case, "did you mean", `hpcbake sizes`."""

    def test_every_spelling_of_a_size_plans_the_same(self):
        want = run_json("plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04", "--json")
        for spelling in ("ND96isr_H100_v5", "nd96isr_h100_v5", "STANDARD_ND96ISR_H100_V5"):
            for distro in ("ubuntu-22.04", "Ubuntu-22.04"):
                got = run_json("plan", "--size", spelling, "--distro", distro, "--json")
                self.assertEqual(got, want, f"{spelling} on {distro}")

    def test_did_you_mean_and_where_to_look(self):
        r = run("plan", "--size", "nd96isr_h100_v4", "--distro", "ubuntu-22.04")
        self.assertEqual(r.returncode, 3)
        self.assertIn("unknown VM size 'nd96isr_h100_v4' (did you mean Standard_ND96isr_H100_v5", r.stderr)
        self.assertIn("`hpcbake sizes`", r.stderr)
        self.assertLess(len(r.stderr), 400, r.stderr)  # no wall of every size
        r = run("plan", "--size", "Standard_HB120rs_v3", "--distro", "ubuntu-22.4")
        self.assertEqual(r.returncode, 3)
        self.assertIn("unsupported distro 'ubuntu-22.4' (did you mean ubuntu-22.04", r.stderr)
        r = run("plan", "--size", "Standard_Q1", "--distro", "ubuntu-22.04")
        self.assertNotIn("did you mean", r.stderr)

    def test_sizes_lists_filters_and_speaks_json(self):
        r = run("sizes")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["SIZE", "GPUS", "INFINIBAND", "DRIVER", "ARCH", "PROFILES"])
        total = len(os.listdir(os.path.join(SRC, "manifests", "sizes")))
        self.assertEqual(lines[-1], f"{total} of {total} sizes")
        row = next(line for line in lines if line.startswith("Standard_ND96isr_H100_v5 "))
        self.assertRegex(row, r"8 x H100\s+8 x 400 Gb/s\s+cuda\s+x86_64\s+\S*\bhpc\b")
        h100 = run_json("sizes", "h100", "--json")
        names = [s["size"] for s in h100["sizes"]]
        self.assertIn("Standard_ND96isr_H100_v5", names)
        self.assertTrue(all("H100" in n for n in names), names)
        self.assertEqual(h100["count"], len(names))
        nd = next(s for s in h100["sizes"] if s["size"] == "Standard_ND96isr_H100_v5")
        self.assertEqual(nd["gpu"], {"vendor": "nvidia", "model": "H100", "count": 8, "fabric_manager": True})
        self.assertEqual(nd["infiniband"], {"ports": 8, "rate_gbps": 400})
        cpu = run_json("sizes", "--gpu", "none", "--ib", "--json")["sizes"]
        self.assertTrue(cpu and all(s["gpu"] is None and s["infiniband"] for s in cpu))
        self.assertIn("Standard_HB120rs_v3", [s["size"] for s in cpu])
        r = run("sizes", "--gpu", "Z9000")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no size matches with GPU Z9000", r.stderr)
