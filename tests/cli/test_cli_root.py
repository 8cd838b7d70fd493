"""What `--root` guarantees (docs/security.md, "What --root guarantees"): every verb run on a
fixture tree starts no program that would act on this machine, and writes nothing outside the tree.

Each verb that can act runs on a fixture machine (tests/fixtures/install/make-machine) with PATH
holding only stubs: one for every program any verb may run (the audit table of docs/security.md),
each appending its argv to a marker file. A program not stubbed cannot start at all (PATH holds
nothing else). Around the runs, this machine's /boot, /etc, /var and /lib/modules are snapshot
(path, size, mtime_ns, mode) and compared.
  - hpcbake-test with the recording runner (HPCBAKE_TEST_RUNNER=record:FILE): every command goes
    to the recording; the only program that starts is gpgv (it checks the files it is given, and
    runs for real by design, tests/seams/seams.cpp), and it is recorded too.
  - the shipped hpcbake, no hooks: a program starts only when exec/fixture_root.hpp allows it
    (confined to the tree by its argv, or a read-only probe); never update-initramfs, a package
    manager, systemctl restart, waagent. Issue 40 item 1: `nouveau disable --root R` ran the host's
    update-initramfs."""
import json
import os
import shutil
import stat
import tempfile
import unittest

from common import BIN, FIXTURES, TEST_BIN, run
from test_cli_install import FAKES, KERNEL, Fixture

MODULE = os.path.join(FIXTURES, "modules", "hpcbake-fixture")

# Every program a verb may run (src/: package managers, the distro's initramfs command from the
# manifests, services, the installer shell, DKMS, verify's probes, bundle create's gpgv), and the
# other names the same tools go by.
PROGRAMS = ("apt-get", "apt", "apt-mark", "dpkg", "dpkg-query", "dpkg-deb", "dnf", "tdnf", "yum", "rpm", "zypper",
            "update-initramfs", "dracut", "mkinitrd", "systemctl", "modprobe", "insmod", "rmmod", "depmod", "dkms",
            "mokutil", "waagent", "sh", "bash", "docker", "dcgmi", "nvidia-smi", "gpgv", "sign-file", "openssl",
            "kmod", "modinfo", "reboot")

# This machine's trees a verb could write through a mistake. Left out, each because other processes
# change it while the test runs, never hpcbake: /var/log (journald, syslog), /var/tmp (scratch of
# every program), /var/cache/* other than /var/cache/hpcbake (apt, ccache and the build caches of
# concurrent builds), /var/lib/systemd (timer stamps, the random seed), /var/lib/postgresql and
# /var/lib/containerd (running services' state), /var/spool and /var/mail (queues).
TOPS = ("/boot", "/etc", "/var", "/lib/modules")
VOLATILE = {"/var/log", "/var/tmp", "/var/lib/systemd", "/var/lib/postgresql", "/var/lib/containerd", "/var/spool",
            "/var/mail"}


def volatile():
    caches = {os.path.join("/var/cache", n) for n in os.listdir("/var/cache")} if os.path.isdir("/var/cache") else set()
    return VOLATILE | (caches - {"/var/cache/hpcbake"})


def snapshot():
    skip, found = volatile(), {}
    for top in TOPS:
        if not os.path.lexists(top):
            continue
        for d, dirs, files in os.walk(top):
            dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
            for p in [d] + [os.path.join(d, f) for f in files]:
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                size = None if stat.S_ISDIR(st.st_mode) else st.st_size
                found[p] = (size, st.st_mtime_ns, st.st_mode)
    return found


def changed(before, after):
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def inside(path, root):
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def option(argv, name):
    for i, a in enumerate(argv[1:], 1):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def may_start(argv, root):
    """Whether the shipped hpcbake may start argv under --root `root`: the rule of
    src/exec/fixture_root.hpp, written again from its header, not from its code."""
    prog, args = argv[0], argv[1:]
    if prog == "dkms":  # its install and remove run depmod on this machine unless --no-depmod
        return all(option(argv, o) and inside(option(argv, o), root)
                   for o in ("--dkmstree", "--sourcetree", "--installtree")) and (
                       args[:1] in (["add"], ["build"]) or "--no-depmod" in args)
    if prog == "depmod":
        base = option(argv, "-b") or option(argv, "--basedir")
        return bool(base) and inside(base, root)
    if prog == "rpm":
        return "-q" in args or "-qp" in args or bool(option(argv, "--root") and inside(option(argv, "--root"), root))
    if prog == "dpkg-deb":
        return args[:1] in (["--field"], ["-f"])
    if prog == "systemctl":
        return args[:1] in (["is-active"], ["is-enabled"])
    if prog == "dnf":
        return "versionlock" in args and "list" in args
    if prog == "docker":
        return args[:2] == ["image", "inspect"]
    if prog == "dcgmi":
        return args[:1] == ["diag"]
    if prog == "nvidia-smi":
        return args == []
    return prog in ("gpgv", "dpkg-query")


class RootGuarantee(unittest.TestCase):
    def setUp(self):
        if not FAKES or not TEST_BIN or not BIN:
            self.skipTest("HPCBAKE_FAKES, HPCBAKE_BIN and HPCBAKE_TEST_BIN are set by ctest: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-root-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.fx = Fixture(self.tmp)
        self.stubs = os.path.join(self.tmp, "stubs")
        self.marker = os.path.join(self.tmp, "started")
        os.makedirs(self.stubs)
        for prog in PROGRAMS:
            path = os.path.join(self.stubs, prog)
            with open(path, "w") as f:
                f.write("#!/bin/sh\n{ printf '%s' \"${0##*/}\"; for a in \"$@\"; do printf '\\t%s' \"$a\"; done; "
                        f"echo; }} >> '{self.marker}'\n")
            os.chmod(path, 0o755)

    def started(self):
        if not os.path.exists(self.marker):
            return []
        with open(self.marker) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]

    def verbs(self):
        """(name, args, extra env) of every verb that can act, in an order that lets each do its work:
        an install stopped by a failed command and resumed, then the verbs that change a machine, then
        verify, seal and the downloads."""
        fx, r, m = self.fx, self.fx.root, self.fx.manifests
        common = ["--root", r, "--manifests", m]
        return [
            ("install", fx.install_args("Standard_Test2_v1"), {"HPCBAKE_TEST_FAIL_COMMANDS": "apt-get"}),
            ("install --resume", ["--root", r, "install", "--resume"], {}),
            ("module install", [*common, "module", "install", MODULE, "--name", "hpcbake-fixture", "--version", "1.0",
                                "--module", "hpcbake_fixture", "--kernel", KERNEL, "--sign", "off"], {}),
            ("nouveau disable", [*common, "nouveau", "disable", "--distro", "debian-12", "--kernel", KERNEL], {}),
            ("nouveau disable --force-initramfs", [*common, "nouveau", "disable", "--distro", "debian-12", "--kernel",
                                                   KERNEL, "--force-initramfs"], {}),
            ("rdma disable", [*common, "rdma", "disable"], {}),
            ("rdma enable", [*common, "rdma", "enable"], {}),
            ("container configure", [*common, "container", "configure"], {}),
            ("verify", [*common, "--no-imds", "verify"], {}),
            ("seal --check", [*common, "seal", "--check"], {}),
            ("seal --deprovision", [*common, "seal", "--deprovision"], {}),
            ("seal", [*common, "seal"], {}),
            ("fetch", [*common, "fetch", "--size", "Standard_Test1_v1", "--distro", "debian-12", "--cache", fx.cache],
             {}),
            ("bundle create", [*common, "bundle", "create", "--size", "Standard_Test1_v1", "--distro", "debian-12",
                               "--cache", fx.cache, os.path.join(self.tmp, "bundle.tar")], {}),
            ("bundle modules", [*common, "bundle", "modules", "--size", "Standard_Test1_v1", "--distro", "debian-12",
                                "--kernel", KERNEL, "--sign", "off", "--cache", fx.cache,
                                os.path.join(self.tmp, "modules.tar")], {}),
        ]

    def run_all(self, recorded):
        before = snapshot()
        outcomes = {}
        for name, args, extra in self.verbs():
            env = {"PATH": self.stubs, "LD_LIBRARY_PATH": FAKES, "SOURCE_DATE_EPOCH": "1700000000"}
            if recorded:
                env.update(self.fx.env(**extra))
                env["HPCBAKE_TEST_REAL_COMMANDS"] = ""  # everything recorded: DKMS too
                env["PATH"] = self.stubs
            r = run(*args, env=env, timeout=120)
            outcomes[name] = r.returncode
            with self.subTest(verb=name):
                self.assertNotIn("internal error", r.stderr, r.stdout + r.stderr)
                self.assertGreaterEqual(r.returncode, 0, f"{name} was killed by a signal")
        self.assertEqual(changed(before, snapshot()), [], "nothing outside the tree was written")
        return outcomes

    def test_recorded_every_verb_starts_nothing_outside_the_recording_and_writes_only_the_tree(self):
        outcomes = self.run_all(recorded=True)
        recorded = {os.path.basename(a[0]) for a in self.fx.recorded()}
        started = self.started()
        for argv in started:
            self.assertEqual(argv[0], "gpgv", f"{argv} started: only gpgv runs for real under the recording")
            self.assertIn(argv[0], recorded)
        # The verbs did act: their machine commands are in the recording, none of them started.
        for prog in ("apt-get", "systemctl", "update-initramfs", "dkms"):
            self.assertIn(prog, recorded, f"no verb recorded {prog}: outcomes {outcomes}")
        self.assertEqual(outcomes["install --resume"], 0, outcomes)
        self.assertEqual(outcomes["nouveau disable --force-initramfs"], 0, outcomes)

    def test_shipped_every_verb_starts_only_what_the_tree_confines(self):
        outcomes = self.run_all(recorded=False)
        for argv in self.started():
            self.assertTrue(may_start(argv, self.fx.root), f"the shipped hpcbake started {argv} under --root")
        self.assertEqual(outcomes["install"], 9, "apt-get is refused: exit 9")
        self.assertEqual(outcomes["nouveau disable --force-initramfs"], 9, outcomes)

    def test_shipped_nouveau_disable_does_not_run_update_initramfs_and_says_so(self):
        # The reproduction: this machine's kernel release in the tree, a stub update-initramfs
        # first on PATH (the rest of PATH as it is).
        root = self.fx.root
        env = {"PATH": self.stubs + os.pathsep + os.environ.get("PATH", "")}
        r = run("--root", root, "--manifests", self.fx.manifests, "nouveau", "disable", "--distro", "debian-12",
                "--kernel", KERNEL, env=env)
        self.assertEqual(r.returncode, 9, r.stdout + r.stderr)
        self.assertIn(f"did not run `update-initramfs -u -k {KERNEL}`: --root {root} is not /", r.stderr)
        self.assertIn("this machine's /boot", r.stderr)
        self.assertIn(f"hint: run it inside the tree (chroot {root} update-initramfs -u -k {KERNEL})", r.stderr)
        self.assertEqual(self.started(), [], "update-initramfs did not start")
        self.assertFalse(os.path.exists(os.path.join(root, "etc/modprobe.d/blacklist-nouveau.conf")),
                         "nothing half done: the blacklist waits for the rebuild it needs")
        # --json says the same, on stderr, with the same exit.
        j = run("--root", root, "--manifests", self.fx.manifests, "--json", "nouveau", "disable", "--distro",
                "debian-12", "--kernel", KERNEL, env=env)
        self.assertEqual(j.returncode, 9, j.stdout + j.stderr)
        self.assertEqual(self.started(), [])


if __name__ == "__main__":
    unittest.main()
