"""The claims of docs/security.md that need the binary: commands that change the machine refuse to
run as anyone but root (unless --root names a fixture tree); they refuse manifests, recipes, state,
cache and lock directories that anyone but root (or the user running hpcbake) could change; test
hooks take effect only with --root; and SAS tokens in artifact and mirror URLs never reach the
output, the install log, the journal or anything else an install leaves behind.

The non-root tests run the binary as uid/gid 65534 through setpriv when the suite runs as root,
and as the current user otherwise."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from common import BIN, FIXTURES, HOOKS, RESUME_DROPIN, SRC, bin_for, host, run, copy_manifest_set
from test_cli_install import CAN_DKMS, FAKES, HEADERS, Fixture

sys.path.insert(0, os.path.join(SRC, "tests", "servers"))
from fault_server import FaultServer  # noqa: E402

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
PERMISSION = 9  # README "Exit codes": refused for safety
MODULE = os.path.join(FIXTURES, "modules", "hpcbake-fixture")
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'
WAAGENT = "# OS.EnableRDMA=y\n"


def setUpModule():
    # The trees below are made with the modes the tests give them, whatever umask ran the suite.
    os.umask(0o022)


def write(path, text, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)


def unprivileged(*args, env=None, cwd=None):
    """hpcbake as a user other than root: the current one, or uid/gid 65534 when the suite runs as root."""
    if not BIN:
        raise unittest.SkipTest("HPCBAKE_BIN is not set: run through ctest")
    if not IS_ROOT:
        return run(*args, env=env)
    if not shutil.which("setpriv"):
        raise unittest.SkipTest("SKIPPED: setpriv (util-linux) is needed to drop root for this test")
    full_env = {k: v for k, v in os.environ.items() if k != "HPCBAKE_IMDS_URL"}
    full_env["HPCBAKE_MANIFESTS"] = os.path.join(SRC, "manifests")
    full_env.update(env or {})
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", bin_for(full_env),
                           *args],
                          capture_output=True, text=True, env=full_env, timeout=60, stdin=subprocess.DEVNULL,
                          cwd=cwd or "/")


def chown_tree(path, uid):
    for d, dirs, files in os.walk(path):
        for n in [d] + [os.path.join(d, x) for x in dirs + files]:
            os.lchown(n, uid, uid)


class NotRoot(unittest.TestCase):
    """Commands that change this machine, run by someone other than root on the real machine."""

    CHANGING = [
        ("install", ["install", "--size", "Standard_HB120rs_v3", "--distro", "almalinux-8.10", "--yes"]),
        ("module install", ["module", "install", MODULE, "--name", "x", "--version", "1", "--module", "x",
                            "--sign", "off"]),
        ("nouveau disable", ["nouveau", "disable", "--distro", "debian-12"]),
        ("rdma enable", ["rdma", "enable"]),
        ("rdma disable", ["rdma", "disable"]),
        ("seal", ["seal"]),
    ]

    def test_commands_that_change_the_machine_refuse_with_what_to_do(self):
        for verb, args in self.CHANGING:
            with self.subTest(args=args):
                r = unprivileged(*args)
                self.assertEqual(r.returncode, PERMISSION, r.stdout + r.stderr)
                self.assertIn(f"hpcbake: error: {verb} changes this machine and must run as root (hpcbake runs as uid",
                              r.stderr)
                self.assertIn("hint: run it as root", r.stderr)
                self.assertIn("--root DIR", r.stderr)

    def test_seal_check_refuses_saying_it_only_reads(self):
        r = unprivileged("seal", "--check")
        self.assertEqual(r.returncode, PERMISSION, r.stdout + r.stderr)
        self.assertIn("hpcbake: error: seal --check changes nothing, but reads what only root may read", r.stderr)
        self.assertNotIn("changes this machine", r.stderr)
        self.assertIn("hint: run it as root", r.stderr)
        self.assertIn("--root DIR", r.stderr)

    def test_fetch_into_the_system_cache_refuses_and_names_cache(self):
        r = unprivileged("fetch", "--all")
        self.assertEqual(r.returncode, PERMISSION, r.stdout + r.stderr)
        self.assertIn("fetch writes the system cache /var/cache/hpcbake, which only root may change", r.stderr)
        self.assertIn("--cache DIR", r.stderr)

    def test_read_only_commands_still_work(self):
        tmp = tempfile.mkdtemp(prefix="hpcbake-sec-ro-")
        self.addCleanup(shutil.rmtree, tmp, True)
        root = os.path.join(tmp, "root")
        shutil.copytree(host("hb120rs_v3"), root, symlinks=True)
        if IS_ROOT:
            chown_tree(tmp, NOBODY)
        for args in (["plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04"],
                     ["--no-imds", "detect", "--json"], ["manifest", "lint"],
                     ["--root", root, "install", "--size", "Standard_HB120rs_v3", "--distro", "almalinux-8.10",
                      "--dry-run"]):
            with self.subTest(args=args):
                r = unprivileged(*args)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_fixture_tree_of_its_own_may_be_changed(self):
        tmp = tempfile.mkdtemp(prefix="hpcbake-sec-user-")
        self.addCleanup(shutil.rmtree, tmp, True)
        write(os.path.join(tmp, "etc", "os-release"), DEBIAN)
        write(os.path.join(tmp, "etc", "waagent.conf"), WAAGENT)
        if IS_ROOT:
            chown_tree(tmp, NOBODY)
        r = unprivileged("--root", tmp, "rdma", "enable")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(tmp, "etc", "waagent.conf")) as f:
            self.assertIn("OS.EnableRDMA=y\n", f.read().replace("# OS.EnableRDMA=y\n", ""))


class Untrusted(unittest.TestCase):
    """Paths others could change, refused before anything changes (as root, or as the tree's owner)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-sec-trust-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.root = os.path.join(self.tmp, "root")
        write(os.path.join(self.root, "etc", "os-release"), DEBIAN)
        write(os.path.join(self.root, "etc", "waagent.conf"), WAAGENT)
        self.manifests = os.path.join(self.tmp, "shared", "manifests")
        copy_manifest_set(self.manifests)

    def rdma_enable(self):
        return run("--root", self.root, "--manifests", self.manifests, "rdma", "enable", "--no-restart")

    def assert_refused(self, r, path, why, fix):
        self.assertEqual(r.returncode, PERMISSION, r.stdout + r.stderr)
        self.assertIn(f"{path} {why}", r.stderr)
        self.assertRegex(r.stderr, r"\(mode [0-7]{4}, owner uid \d+")
        self.assertIn(f"hint: whoever can change it decides what hpcbake runs as root. Run '{fix}'", r.stderr)

    def assert_waagent_untouched(self):
        with open(os.path.join(self.root, "etc", "waagent.conf")) as f:
            self.assertEqual(f.read(), WAAGENT, "nothing changed")

    def test_world_writable_manifest_directory(self):
        os.chmod(self.manifests, 0o777)
        r = self.rdma_enable()
        self.assert_refused(r, self.manifests, "is writable by group and others", f"chmod go-w {self.manifests}")
        self.assertIn(f"refusing the manifest directory {self.manifests}", r.stderr)
        self.assertIn("--manifests DIR", r.stderr)
        self.assert_waagent_untouched()
        os.chmod(self.manifests, 0o755)
        r = self.rdma_enable()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_group_writable_manifest_file(self):
        f = os.path.join(self.manifests, "distros", "debian-12.yaml")
        os.chmod(f, 0o664)
        r = self.rdma_enable()
        self.assert_refused(r, f, "is writable by its group", f"chmod go-w {f}")
        self.assert_waagent_untouched()

    def test_directory_above_writable_by_others_unless_sticky(self):
        parent = os.path.dirname(self.manifests)
        os.chmod(parent, 0o777)
        r = self.rdma_enable()
        self.assert_refused(r, parent, "is writable by group and others", f"chmod go-w {parent}")
        os.chmod(parent, 0o1777)  # like /tmp: nobody else can rename manifests/ away
        r = self.rdma_enable()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_owned_by_another_user(self):
        if not IS_ROOT:
            self.skipTest("SKIPPED: needs root to give the manifests to another user")
        f = os.path.join(self.manifests, "sizes")
        os.chown(f, NOBODY, NOBODY)
        r = self.rdma_enable()
        self.assert_refused(r, f, "is not owned by root", f"chown root {f}")
        self.assertIn(f"owner uid {NOBODY}", r.stderr)

    def test_nouveau_disable_checks_the_manifests(self):
        os.chmod(self.manifests, 0o757)
        root = os.path.join(self.tmp, "plain")
        shutil.copytree(host("plain"), root, symlinks=True)
        r = run("--root", root, "--manifests", self.manifests, "nouveau", "disable", "--distro", "debian-12")
        self.assert_refused(r, self.manifests, "is writable by others", f"chmod go-w {self.manifests}")
        self.assertFalse(os.path.exists(os.path.join(root, "etc", "modprobe.d")), "no blacklist written")

    def test_module_install_checks_the_driver_recipes(self):
        # The recipes are part of the manifest set: drivers/ beside --manifests.
        drivers = os.path.join(os.path.dirname(self.manifests), "drivers")
        os.chmod(os.path.join(drivers, "dkms", "dkms.conf.in"), 0o666)
        r = run("--root", self.root, "--manifests", self.manifests, "module", "install", MODULE, "--name", "x",
                "--version", "1", "--module", "x", "--kernel", "6.1.0-1-amd64", "--sign", "off",
                "--dkmstree", os.path.join(self.tmp, "dkms"))
        f = os.path.join(drivers, "dkms", "dkms.conf.in")
        self.assert_refused(r, f, "is writable by group and others", f"chmod go-w {f}")
        self.assertIn("refusing the driver recipe directory", r.stderr)
        self.assertIn("--manifests DIR", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "dkms")))

    def test_seal_checks_state_and_cache(self):
        state = os.path.join(self.root, "var", "lib", "hpcbake")
        os.makedirs(state)
        os.chmod(state, 0o777)
        r = run("--root", self.root, "seal", "--check")
        self.assert_refused(r, state, "is writable by group and others", f"chmod go-w {state}")
        self.assertIn("refusing the state directory", r.stderr)
        os.chmod(state, 0o755)
        entries = os.path.join(self.root, "var", "cache", "hpcbake", "sha256")
        os.makedirs(entries)
        os.chmod(entries, 0o775)
        r = run("--root", self.root, "seal", "--check")
        self.assert_refused(r, entries, "is writable by its group", f"chmod go-w {entries}")
        self.assertIn("refusing the artifact cache", r.stderr)

    def test_fetch_as_root_refuses_a_cache_others_can_write(self):
        if not IS_ROOT:
            self.skipTest("SKIPPED: fetch checks its cache only as root (a user's own --cache is theirs)")
        cache = os.path.join(self.tmp, "cache")
        os.makedirs(cache)
        os.chmod(cache, 0o777)
        r = run("fetch", "--all", "--cache", cache)
        self.assert_refused(r, cache, "is writable by group and others", f"chmod go-w {cache}")
        self.assertEqual(os.listdir(cache), [], "nothing was downloaded into it")


class InstallTrust(unittest.TestCase):
    """install on a make-machine fixture (commands recorded): refusals happen before anything runs."""

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-sec-install-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.fx = Fixture(self.tmp)

    def test_state_lock_and_cache_directories(self):
        journal = os.path.join(self.fx.root, "var", "lib", "hpcbake", "state.json")
        for rel in ("root/var/lib/hpcbake", "root/run/hpcbake", "cache/sha256"):
            with self.subTest(rel=rel):
                d = os.path.join(self.tmp, rel)
                os.makedirs(d, exist_ok=True)
                os.chmod(d, 0o777)
                r = self.fx.install()
                self.assertEqual(r.returncode, PERMISSION, r.stdout + r.stderr)
                self.assertIn(f"{d} is writable by group and others", r.stderr)
                self.assertIn(f"chmod go-w {d}", r.stderr)
                self.assertEqual(self.fx.recorded(), [], "no command ran")
                self.assertFalse(os.path.exists(journal), "no journal written")
                os.chmod(d, 0o755)
        r = self.fx.install()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The recorder does record when the checks pass: the empty lists above meant "refused".
        self.assertTrue(self.fx.recorded(), "the accepted install recorded no command")

    def test_what_install_creates_is_never_writable_by_others_whatever_the_umask(self):
        env = {**os.environ, **self.fx.env()}
        env["HPCBAKE_MANIFESTS"] = self.fx.manifests
        args = [bin_for(env), "--root", self.fx.root, "--manifests", self.fx.manifests, "install", "--size",
                "Standard_Test2_v1",
                "--distro", "debian-12", "--cache", self.fx.cache, "--yes"]
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                           preexec_fn=lambda: os.umask(0))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for rel in ("var/lib/hpcbake", "var/lib/hpcbake/state.json", "var/log/hpcbake", "var/log/hpcbake/install.log",
                    "run/hpcbake"):
            mode = os.stat(os.path.join(self.fx.root, rel)).st_mode
            self.assertEqual(mode & 0o022, 0, f"{rel}: mode {mode & 0o7777:04o}")
        # So a second run is not refused by its own checks.
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                           preexec_fn=lambda: os.umask(0))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("nothing to do", r.stdout)


class InstallUnderRoot(unittest.TestCase):
    """install on a make-machine fixture whose directories and files are symlinks that, followed on
    this machine, would lead out of --root: inside the root they resolve inside it, so the install
    writes its twins there and nothing outside."""

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-sec-escape-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.fx = Fixture(self.tmp)

    def snapshot(self, top):
        found = {}
        for d, dirs, files in os.walk(top):
            for n in dirs + files:
                p = os.path.join(d, n)
                if os.path.isdir(p):
                    found[os.path.relpath(p, top)] = None
                else:
                    with open(p, "rb") as f:
                        found[os.path.relpath(p, top)] = f.read()
        return found

    def test_links_out_of_the_root_are_followed_inside_it(self):
        root = self.fx.root
        outside = os.path.join(self.tmp, "outside")
        conf = os.path.join(root, "etc", "waagent.conf")
        with open(conf, "rb") as f:
            original = f.read()
        for base in (outside, root + outside):  # this machine's copy, and its twin inside the root
            for d in ("log", "run", "etc"):
                os.makedirs(os.path.join(base, d))
            with open(os.path.join(base, "etc", "waagent.conf"), "wb") as f:
                f.write(original)
        os.remove(conf)
        os.symlink(os.path.join(outside, "etc", "waagent.conf"), conf)  # absolute
        shutil.rmtree(os.path.join(root, "var", "log"), ignore_errors=True)
        os.makedirs(os.path.join(root, "var"), exist_ok=True)
        os.symlink(os.path.join(outside, "log"), os.path.join(root, "var", "log"))
        os.symlink("../" * 32 + outside.lstrip("/") + "/run", os.path.join(root, "run"))  # relative, climbing
        before = self.snapshot(outside)
        for walk in ("0", "1"):
            with self.subTest(resolver="walk" if walk == "1" else "openat2"):
                r = self.fx.install(env={"HPCBAKE_TEST_ROOTFS_WALK": walk})
                self.assertEqual(self.snapshot(outside), before, "nothing written outside the root")
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                twin = root + outside
                with open(os.path.join(twin, "etc", "waagent.conf"), "rb") as f:
                    self.assertIn(b"\nOS.EnableRDMA=y\n", f.read())
                self.assertTrue(os.path.isfile(os.path.join(twin, "log", "hpcbake", "install.log")))
                self.assertTrue(os.path.isdir(os.path.join(twin, "run", "hpcbake")))
                self.assertTrue(os.path.islink(conf))


class TestHooks(unittest.TestCase):
    def test_refused_on_the_real_machine(self):
        tmp = tempfile.mkdtemp(prefix="hpcbake-sec-hooks-")
        self.addCleanup(shutil.rmtree, tmp, True)
        record = os.path.join(tmp, "commands.jsonl")
        r = run("install", "--size", "Standard_HB120rs_v3", "--distro", "almalinux-8.10", "--yes",
                env={"HPCBAKE_TEST_RUNNER": "record:" + record})
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("HPCBAKE_TEST_RUNNER is set: test hooks", r.stderr)
        self.assertIn("only with --root on a fixture tree", r.stderr)
        self.assertIn("hint: unset HPCBAKE_TEST_RUNNER", r.stderr)
        self.assertFalse(os.path.exists(record))
        for var in HOOKS:
            with self.subTest(var=var):
                r = run("--no-imds", "detect", env={var: "1"})
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(f"{var} is set", r.stderr)
                # Empty means unset, as everywhere hpcbake reads them.
                r = run("--no-imds", "detect", env={var: ""})
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = run("--root", "/", "--no-imds", "detect", env={"HPCBAKE_TEST_CRASH_POINT": "x"})
        self.assertEqual(r.returncode, 2, "--root / is the real machine")

    def test_the_shipped_binary_has_none(self):
        # The hooks exist only in hpcbake-test (tests/seams/): to the shipped binary the variables
        # mean nothing, so it neither refuses them nor acts on them. tests/release checks that
        # the packaged binaries do not even name them.
        if not BIN:
            self.skipTest("HPCBAKE_BIN is not set: run through ctest")
        env = {k: v for k, v in os.environ.items() if k != "HPCBAKE_IMDS_URL"}
        env.update({var: "1" for var in HOOKS})
        r = subprocess.run([BIN, "--no-imds", "detect"], capture_output=True, text=True, env=env, timeout=60,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("is set", r.stderr)
        self.assertNotEqual(run("--no-imds", "detect", env=env).returncode, 0, "while hpcbake-test refuses them")


class SasTokens(unittest.TestCase):
    """An install whose artifact URL and mirror carry SAS tokens: the token is in no output or file."""

    SECRETS = ("c2FzLWluLW1hbmlmZXN0", "c2FzLWluLW1pcnJvcg", "c2FzLWRvd25sb2FkZWQ")

    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-sec-sas-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.fx = Fixture(os.path.join(self.tmp, "fx"))
        shutil.rmtree(self.fx.cache)  # nothing cached: the artifact is downloaded
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        self.name = "hpcbake-fixture-1.0.run"
        shutil.copy(os.path.join(self.fx.tmp, self.name), self.data)
        self.server = FaultServer(self.data).start()
        self.addCleanup(self.server.stop)

    def point_at(self, url):
        path = os.path.join(self.fx.manifests, "components", "hpcbake-fixture.yaml")
        with open(path) as f:
            text = f.read()
        old = f'urls: ["http://127.0.0.1:9/{self.name}"]'
        self.assertIn(old, text)
        with open(path, "w") as f:
            f.write(text.replace(old, f'urls: ["{url}"]'))

    def assert_nowhere(self, r, *secrets):
        for s in secrets:
            self.assertNotIn(s, r.stdout + r.stderr)
        files = [self.fx.commands] if os.path.exists(self.fx.commands) else []
        for base in (self.fx.root, self.fx.cache):
            for d, _, names in os.walk(base):  # links (the kernel headers) are not followed
                files += [os.path.join(d, n) for n in names if not os.path.islink(os.path.join(d, n))]
        self.assertTrue(files)
        for p in files:
            with open(p, "rb") as f:
                data = f.read()
            for s in secrets:
                self.assertNotIn(s.encode(), data, p)
        self.assertTrue(os.path.exists(os.path.join(self.fx.root, "var/log/hpcbake/install.log")))
        self.assertTrue(os.path.exists(os.path.join(self.fx.root, "var/lib/hpcbake/state.json")))

    def test_a_failed_download_names_the_url_without_its_token(self):
        sas = "sv=2022-11-02&sr=b&sp=r&sig="
        self.point_at(self.server.url("404", self.name) + "?" + sas + self.SECRETS[0])
        mirror = f"http://127.0.0.1:{self.server.port}/f/404?{sas}{self.SECRETS[1]}"
        r = self.fx.install("Standard_Test1_v1", "--mirror", mirror)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn(self.server.url("404", self.name), r.stderr, "the URL is named, without its query")
        step = self.fx.journal()["steps"]
        self.assertEqual(step[f"artifact:{self.name}"]["status"], "failed")
        for secret in self.SECRETS[:2]:
            self.assertTrue(any(secret in e["path"] for e in self.server.log), f"the token was sent: {self.server.log}")
        self.assert_nowhere(r, *self.SECRETS[:2])

    def test_a_download_with_a_token_leaves_no_trace_of_it(self):
        self.point_at(self.server.url("ok", self.name) + "?sv=2022-11-02&sig=" + self.SECRETS[2])
        # DKMS is recorded, not run: the install stops after the download, which is what matters here.
        r = self.fx.install("Standard_Test1_v1", env={"HPCBAKE_TEST_REAL_COMMANDS": ""})
        step = self.fx.journal()["steps"]
        self.assertEqual(step[f"artifact:{self.name}"]["status"], "done", r.stdout + r.stderr)
        self.assertTrue(any(self.SECRETS[2] in e["path"] for e in self.server.log), "the token was sent")
        self.assert_nowhere(r, self.SECRETS[2])

    def test_the_resume_unit_holds_no_token(self):
        # The unit file and the stored plan stay in the image (seal only disables the unit): no --mirror in them.
        if not CAN_DKMS:
            self.skipTest(f"needs root, dkms, makeself and {HEADERS} for the real DKMS build (SKIPPED, not passed)")
        fx = Fixture(os.path.join(self.tmp, "reboot"))  # its cache holds the artifact: the mirror is never asked
        secret = "c2FzLWluLXJlc3VtZQ"
        r = fx.install("Standard_Test3_v1", "--resume-unit", "--mirror", f"http://127.0.0.1:9/m?sv=2022&sig={secret}")
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        with open(os.path.join(fx.root, RESUME_DROPIN)) as f:
            unit = f.read()
        self.assertIn('"install" "--resume"', unit)
        self.assertNotIn(secret, unit)
        self.assertNotIn("--mirror", unit)
        with open(os.path.join(fx.root, "var/lib/hpcbake/plan.json")) as f:
            self.assertNotIn(secret, f.read(), "the stored plan keeps no mirror")
        self.fx = fx
        self.assert_nowhere(r, secret)


if __name__ == "__main__":
    unittest.main()
