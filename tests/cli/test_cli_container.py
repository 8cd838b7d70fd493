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

from common import FIXTURES, drop_userspace, run

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


def start_containerd(test, work, config):
    """containerd from `config`, its root, state and socket under `work`, stopped when the test ends.
    Returns its socket once its API lists the CRI plugin (the plugins have loaded)."""
    os.makedirs(work, exist_ok=True)
    sock = os.path.join(work, "c.sock")
    d = Daemon(["containerd", "--config", config, "--root", os.path.join(work, "root"),
                "--state", os.path.join(work, "state"), "--address", sock], os.path.join(work, "log"))
    test.addCleanup(d.stop)
    wait_for(sock, d.proc, d.log)
    # The socket can be there before the API answers: wait until `ctr plugins ls` lists the CRI
    # plugin, which it does once the plugin's init has returned (ok, or error: cri_status tells).
    end = time.monotonic() + 60
    while True:
        p = plugins_ls(sock)
        if p.returncode == 0 and cri_rows(p.stdout):
            return sock, d
        if d.proc.poll() is not None:
            raise AssertionError(f"containerd exited {d.proc.returncode}:\n{slurp(d.log)[-3000:]}")
        if time.monotonic() > end:
            raise AssertionError(f"`ctr plugins ls` did not list the CRI plugin in 60 s (exit {p.returncode}):\n"
                                 f"{p.stdout}{p.stderr}\ncontainerd's log:\n{slurp(d.log)[-3000:]}")
        time.sleep(0.2)


def plugins_ls(sock):
    return subprocess.run(["ctr", "--address", sock, "plugins", "ls"], capture_output=True, text=True, timeout=60)


def cri_rows(text):
    return [line.split() for line in text.splitlines() if " cri " in f" {line} "]


def cri_status(test, sock):
    """The CRI plugin's status as `ctr plugins ls` prints it ("ok", "error")."""
    out = plugins_ls(sock)
    test.assertEqual(out.returncode, 0, out.stderr)
    rows = cri_rows(out.stdout)
    test.assertEqual(len(rows), 1, out.stdout)
    return rows[0][-1]


def docker_client():
    """The client packaged with the dockerd the tests start (Debian's docker.io puts both in /usr/bin
    or /usr/sbin's neighbour), not another one earlier on PATH: a machine may carry a newer client
    alone (seen: Docker 28's in /usr/local/bin beside Debian's 20.10 engine)."""
    dockerd = os.path.realpath(shutil.which("dockerd"))
    for d in (os.path.dirname(dockerd), "/usr/bin"):
        if os.access(os.path.join(d, "docker"), os.X_OK):
            return os.path.join(d, "docker")
    return "docker"


def dockerd_info(test, work, config):
    """dockerd from `config` (its data, exec root and socket under `work`, no networking set up),
    stopped when the test ends: `docker info` as JSON once it answers."""
    os.makedirs(work, exist_ok=True)
    sock = os.path.join(work, "d.sock")
    d = Daemon(["dockerd", "--config-file", config, "--data-root", os.path.join(work, "data"),
                "--exec-root", os.path.join(work, "exec"), "--pidfile", os.path.join(work, "pid"),
                "-H", f"unix://{sock}", "--bridge=none", "--iptables=false", "--ip6tables=false"],
               os.path.join(work, "log"))
    test.addCleanup(d.stop)
    wait_for(sock, d.proc, d.log, 90)
    for _ in range(100):
        p = subprocess.run([docker_client(), "-H", f"unix://{sock}", "info", "--format", "{{json .}}"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            return json.loads(p.stdout)
        time.sleep(0.3)
    test.fail("docker info never answered:\n" + slurp(d.log)[-3000:])


class ContainerdTest(unittest.TestCase):
    def setUp(self):
        need("containerd", "ctr")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-containerd-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)

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
        sock, d = start_containerd(self, os.path.join(self.tmp, "daemon"), cfg)
        self.assertEqual(cri_status(self, sock), "ok", f"{name}: the CRI plugin did not load:\n" + slurp(d.log)[-3000:])
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
        info = dockerd_info(self, os.path.join(self.tmp, "daemon"), cfg)
        self.assertEqual(info["Runtimes"]["nvidia"]["path"], BINARY)
        self.assertIn("runc", info["Runtimes"])
        self.assertEqual(info["Driver"], "vfs")
        self.assertIn("hpcbake-test=1", info["Labels"])
        st = run("--root", root, "container", "status", "--engine", "docker")
        self.assertEqual(st.returncode, 0, st.stdout + st.stderr)


if __name__ == "__main__":
    unittest.main()


TEST_KEY = os.path.join(FIXTURES, "openpgp", "test-key.asc")
TEST_FPR = "C607052566F81BB2813915641787F05C5250046E"  # tests/fixtures/openpgp/README.md


class InstallContainersTest(unittest.TestCase):
    """`install --profile containers` of an NVIDIA GPU size on a fixture machine
    (tests/fixtures/install/make-machine): package-manager and systemctl commands recorded, not
    run (HPCBAKE_TEST_RUNNER); the vendor repositories replaced by a file:/// repository trusted
    through the test key, the driver's modules faked as .ko files (as its packages would leave
    them). Then the real dockerd and containerd start from the configs the install wrote."""

    SIZE = "Standard_Test5_v1"

    def setUp(self):
        need("containerd", "ctr", "dockerd", "docker")
        from common import SRC
        from kofile import write_ko
        fakes = os.environ.get("HPCBAKE_FAKES", "")
        if not fakes:
            raise unittest.SkipTest("HPCBAKE_FAKES is not set: run through ctest")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-install-containers-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        subprocess.run([os.path.join(SRC, "tests", "fixtures", "install", "make-machine"), self.tmp], check=True,
                       capture_output=True)
        self.root = os.path.join(self.tmp, "root")
        self.manifests = os.path.join(self.tmp, "manifests")
        kernel = slurp(os.path.join(self.root, "proc/sys/kernel/osrelease")).strip()
        d = os.path.join(self.root, "lib/modules", kernel, "updates/dkms")
        os.makedirs(d, exist_ok=True)
        for m in ("nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"):
            write_ko(os.path.join(d, m + ".ko"), m, kernel)
        repo = os.path.join(self.root, "srv/fixture-repo")
        os.makedirs(repo)
        shutil.copy(TEST_KEY, os.path.join(repo, "key.asc"))
        # A debian-12 GPU size and the vendor repositories it needs, on the machine's own disk.
        with open(os.path.join(self.manifests, "sizes", "test5_v1.yaml"), "w") as f:
            f.write('schema: 1\nsize: "Standard_Test5_v1"\nfamily: "hpcbake container test size"\n'
                    'source: "tests/cli/test_cli_container.py"\n'
                    'gpu:\n  vendor: nvidia\n  model: T4\n  count: 1\n'
                    'driver:\n  kind: cuda\n  module_flavour: open\n')
        for rid, desc in (("nvidia-cuda", "fixture CUDA repository"),
                          ("nvidia-container-toolkit", "fixture container toolkit repository")):
            with open(os.path.join(self.manifests, "repositories", rid + ".yaml"), "w") as f:
                f.write(f'schema: 1\nrepository: {rid}\ndescription: {desc}\nsource: tests/cli/test_cli_container.py\n'
                        f'variants:\n  - distros: ["debian-12"]\n    uri: file:///srv/fixture-repo/\n    suite: /\n'
                        f'    key:\n      urls: ["file:///srv/fixture-repo/key.asc"]\n'
                        f'      fingerprint: "{TEST_FPR}"\n      source: tests/fixtures/openpgp/README.md\n')
        with open(os.path.join(self.manifests, "components", "nvidia-cuda-driver.yaml"), "w") as f:
            f.write('schema: 1\ncomponent: nvidia-cuda-driver\nkind: nvidia-driver\ndescription: fixture driver\n'
                    'source: tests/cli/test_cli_container.py\nvariants:\n  - distros: ["debian-12"]\n'
                    '    version: "1.0"\n    repository: nvidia-cuda\n    packages: ["nvidia-driver-pinning-1.0"]\n')
        for comp in ("nvidia-dcgm", "nvidia-imex", "nvidia-cuda-toolkit", "nvidia-fabricmanager", "nvidia-peermem"):
            os.remove(os.path.join(self.manifests, "components", comp + ".yaml"))
        drop_userspace(self.manifests)  # MPI, NCCL and tools: the fixture repositories serve none of them
        for prof in ("default", "ai"):
            p = os.path.join(self.manifests, "profiles", prof + ".yaml")
            text = slurp(p).replace("best_effort: [nvidia-dcgm]\n", "").replace(", nvidia-cuda-toolkit", "")
            with open(p, "w") as f:
                f.write(text)
        p = os.path.join(self.manifests, "profiles", "containers.yaml")
        text = slurp(p).replace("best_effort: [nvidia-dcgm]\n", "")
        with open(p, "w") as f:
            f.write(text)
        # The shipped toolkit pin (its packages and version), for debian-12 only.
        p = os.path.join(self.manifests, "components", "nvidia-container-toolkit.yaml")
        text = slurp(p)
        first = text.index("  - distros:")
        second = text.index("  - distros:", first + 1)
        with open(p, "w") as f:
            f.write(text[:first] + '  - distros: ["debian-12"]\n' + text[text.index("\n", first) + 1:second])
        self.env = {"HPCBAKE_TEST_RUNNER": "record:" + os.path.join(self.tmp, "commands.jsonl"),
                    "HPCBAKE_TEST_REAL_COMMANDS": "dkms,depmod", "LD_LIBRARY_PATH": fakes,
                    "FAKE_GPU_COUNT": "1", "FAKE_DRIVER_VERSION": "1.0", "SOURCE_DATE_EPOCH": "1700000000"}

    def install(self):
        return run("--root", self.root, "--manifests", self.manifests, "install", "--size", self.SIZE, "--distro",
                   "debian-12", "--profile", "containers", "--cache", os.path.join(self.tmp, "cache"), "--yes",
                   "--verify-level", "0", env=self.env, timeout=300)

    def recorded(self):
        with open(os.path.join(self.tmp, "commands.jsonl")) as f:
            return [json.loads(line)["argv"] for line in f]

    def test_install_configures_both_engines_and_they_start_with_the_runtime(self):
        r = self.install()
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)  # the driver's packages: reboot to load them
        argv = self.recorded()
        installs = [" ".join(a) for a in argv if a[:2] == ["apt-get", "install"] or "install" in a[:4]]
        self.assertTrue(any("nvidia-container-toolkit=1.20.0-1" in a for a in installs), installs)
        self.assertTrue(any("docker.io" in a and "containerd" in a for a in installs), installs)
        self.assertIn(["systemctl", "enable", "nvidia-cdi-refresh.path"], argv)
        self.assertIn(["systemctl", "enable", "nvidia-cdi-refresh.service"], argv)
        # The engines' restarts are recorded, not run (the one fixture-root rule: exec::may_act_on_machine).
        self.assertIn(["systemctl", "try-restart", "docker.service"], argv)
        self.assertIn(["systemctl", "try-restart", "containerd.service"], argv)
        daemon = os.path.join(self.root, "etc/docker/daemon.json")
        toml = os.path.join(self.root, "etc/containerd/config.toml")
        self.assertEqual(json.loads(slurp(daemon))["runtimes"]["nvidia"]["path"], BINARY)
        # After the reboot the closing verify passes at level 0, the runtime checks included.
        with open(os.path.join(self.root, "proc/sys/kernel/random/boot_id"), "w") as f:
            f.write("boot-2\n")
        r = self.install()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = json.loads(slurp(os.path.join(self.root, "var/lib/hpcbake/verify-install.json")))
        verdicts = {c["id"]: c["verdict"] for c in report["checks"]}
        self.assertEqual(verdicts.get("container.docker.runtime"), "pass", verdicts)
        self.assertEqual(verdicts.get("container.containerd.runtime"), "pass", verdicts)
        # The real engines read what the install wrote.
        sock, c = start_containerd(self, os.path.join(self.tmp, "containerd"), toml)
        self.assertEqual(cri_status(self, sock), "ok", slurp(c.log)[-3000:])
        dump = subprocess.run(["containerd", "--config", toml, "config", "dump"], capture_output=True, text=True)
        self.assertIn(f'BinaryName = "{BINARY}"', dump.stdout)
        c.stop()
        info = dockerd_info(self, os.path.join(self.tmp, "dockerd"), daemon)
        self.assertEqual(info["Runtimes"]["nvidia"]["path"], BINARY)
