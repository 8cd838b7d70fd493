"""The plan is the contract: for the size x distro of every golden plan, `install` on a fixture
machine of that distro runs exactly the commands, writes exactly the files and enables exactly
the services that `plan --json` listed for that machine, and nothing else.

What is real: the planner, the journal and engine, the cache (every artifact is a stand-in file
pinned by its SHA-256 in a copy of the manifests, so nothing is downloaded), the config and
modules-load writes, waagent.conf. What is recorded, not run: every command
(HPCBAKE_TEST_RUNNER; no program runs for real). DKMS checks and the closing verify then fail
for GPU sizes (no module was built): the test compares what ran, step by step, with the plan.
"""
import functools
import glob
import hashlib
import http.server
import json
import os
import shutil
import tempfile
import threading
import unittest

import yaml

from common import run_json, FIXTURES, SRC, host, run

GOLDEN = os.path.join(SRC, "tests", "golden")
FAKES = os.environ.get("HPCBAKE_FAKES", "")


def os_release_dir(distro):
    for name in os.listdir(os.path.join(FIXTURES, "os-release")):
        if distro.startswith(name) or name.startswith(distro):
            return os.path.join(FIXTURES, "os-release", name)
    return None


TEST_KEY = "C607052566F81BB2813915641787F05C5250046E"  # tests/fixtures/openpgp/README.md


def standin_archive(name, data):
    """A tar (compressed as the name says: .tbz/.tar.bz2, .tar.gz/.tgz, .tar.xz) holding one
    folder with `data` in it, for an artifact that a userspace unpack step extracts."""
    import io
    import tarfile
    mode = "w"
    for ends, m in ((".tbz", "w:bz2"), (".tar.bz2", "w:bz2"), (".tar.gz", "w:gz"), (".tgz", "w:gz"),
                    (".tar.xz", "w:xz")):
        if name.endswith(ends):
            mode = m
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        info = tarfile.TarInfo("standin/README")
        info.size, info.mtime = len(data), 1700000000
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Machine:
    """A fixture machine for one golden case, with the manifest set's artifacts replaced by
    stand-ins pinned in a copy of the manifests and already in the cache."""

    def __init__(self, tmp, golden):
        self.tmp = tmp
        self.size, self.distro = golden["size"], golden["distro"]
        # The plan's profile, named on every verb (the default one needs no flag).
        self.profile = [] if golden.get("profile") in (None, "default") else ["--profile", golden["profile"]]
        self.root = os.path.join(tmp, "root")
        hosts = {"ubuntu-22.04": "nd96isr_h100_v5", "almalinux-8.10": "hb120rs_v3", "ubuntu-24.04": "nv36ads_a10_v5"}
        base = hosts.get(self.distro, "plain")
        shutil.copytree(host(base), self.root, symlinks=True)
        if base == "plain" and self.distro != "debian-12":
            src = os_release_dir(self.distro)
            with open(os.path.join(src, "os-release") if os.path.isdir(src) else src, "rb") as f:
                data = f.read()
            os.remove(os.path.join(self.root, "etc", "os-release"))
            with open(os.path.join(self.root, "etc", "os-release"), "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(self.root, "proc/sys/kernel/random"), exist_ok=True)
        with open(os.path.join(self.root, "proc/sys/kernel/random/boot_id"), "w") as f:
            f.write("boot-1\n")
        conf = os.path.join(self.root, "etc", "waagent.conf")
        if not os.path.exists(conf):  # 'plain' has no agent: give it the ND fixture's config
            shutil.copy(os.path.join(host("nd96isr_h100_v5"), "etc", "waagent.conf"), conf)
        os.chmod(conf, 0o644)  # the host fixtures keep theirs read-only; install edits it
        self.manifests = os.path.join(tmp, "manifests")
        shutil.copytree(os.path.join(SRC, "manifests"), self.manifests)
        shutil.copytree(os.path.join(SRC, "drivers"), os.path.join(tmp, "drivers"))
        self.cache = os.path.join(tmp, "cache")
        os.makedirs(os.path.join(self.cache, "sha256"))
        for path in glob.glob(os.path.join(self.manifests, "components", "*.yaml")):
            with open(path) as f:
                doc = yaml.safe_load(f)
            for v in doc.get("variants", []):
                unpacked = (v.get("unpack") or {}).get("artifact")
                for a in v.get("artifacts", []):
                    data = ("stand-in for " + a["name"] + "\n").encode()
                    if a["name"] == unpacked:  # a userspace unpack extracts it: an archive of its kind
                        data = standin_archive(a["name"], data)
                    sha = hashlib.sha256(data).hexdigest()
                    a["sha256"], a["size"] = sha, len(data)
                    with open(os.path.join(self.cache, "sha256", sha), "wb") as f:
                        f.write(data)
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
        # Repositories: their keys come from a loopback server, the test key pinned in their place
        # (a stand-in: the vendor's key cannot be fetched here).
        self.key_dir = os.path.join(tmp, "keys")
        shutil.copytree(os.path.join(FIXTURES, "openpgp"), self.key_dir)
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=self.key_dir)
        handler.log_message = lambda *a, **k: None
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        for path in glob.glob(os.path.join(self.manifests, "repositories", "*.yaml")):
            with open(path) as f:
                doc = yaml.safe_load(f)
            for v in doc.get("variants", []):
                v["key"]["urls"] = [f"http://127.0.0.1:{self.server.server_address[1]}/test-key.asc"]
                v["key"]["fingerprint"] = TEST_KEY
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
        if any(s["kind"] == "repository" for s in golden["steps"]):
            # With Secure Boot on (or unknown), hpcbake builds the repository's DKMS packages' modules
            # itself from /usr/src, which the recorded (never run) apt-get does not fill: bake these with
            # Secure Boot off (the variable's 4 attribute bytes, then 0).
            for sb in glob.glob(os.path.join(self.root, "sys/firmware/efi/efivars/SecureBoot-*")):
                with open(sb, "wb") as f:
                    f.write(bytes([6, 0, 0, 0, 0]))
        self.commands = os.path.join(tmp, "commands.jsonl")

    def env(self):
        e = {"HPCBAKE_TEST_RUNNER": "record:" + self.commands, "LD_LIBRARY_PATH": FAKES,
             "FAKE_IB_PORTS": "mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB", "SOURCE_DATE_EPOCH": "1700000000"}
        for k in os.environ:
            if k.startswith("AZ_BATCH_"):
                e[k] = ""
        return e

    def edit_repositories(self, edit, name="*"):
        """Applies edit(variant) to every variant of repositories/<name>.yaml in the manifest copy."""
        for path in glob.glob(os.path.join(self.manifests, "repositories", name + ".yaml")):
            with open(path) as f:
                doc = yaml.safe_load(f)
            for v in doc["variants"]:
                edit(v)
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)

    def hb(self, *args):
        return run("--root", self.root, "--manifests", self.manifests, "--no-imds", *args, "--size", self.size,
                   "--distro", self.distro, *self.profile, env=self.env(), timeout=120)

    def install_through_reboots(self, *args):
        """install, again after each reboot it asks for (a new boot id each time), with the headers
        of the fixture's kernels already in place; the last result."""
        modules = os.path.join(self.root, "lib/modules")
        for k in os.listdir(modules):
            os.makedirs(os.path.join(modules, k, "build"), exist_ok=True)
        r = None
        for boot in range(2, 6):
            r = self.hb("install", "--yes", "--cache", self.cache, "--verify-level", "0", *args)
            if r.returncode != 7:
                break
            with open(os.path.join(self.root, "proc/sys/kernel/random/boot_id"), "w") as f:
                f.write(f"boot-{boot}\n")
        return r

    def recorded(self):
        if not os.path.exists(self.commands):
            return []
        with open(self.commands) as f:
            return [json.loads(line)["argv"] for line in f]


def expected_effects(plan, cache, attempted, root):
    """What the plan says each attempted step runs (argv lists), writes (path -> content) and
    enables (units), with artifact references resolved to their cache paths."""
    shas = {s["detail"]["name"]: s["detail"]["sha256"] for s in plan["steps"] if s["kind"] == "artifact"}

    def resolve(argv):
        out = []
        for a in argv:
            if a.startswith("{artifact:") and a.endswith("}"):
                out.append(os.path.join(cache, "sha256", shas[a[len("{artifact:"):-1]]))
            else:
                out.append(a)
        return out

    commands, files, packages, units = [], {}, [], []
    for s in plan["steps"]:
        if s["id"] not in attempted:
            continue
        d, kind = s["detail"], s["kind"]
        if kind == "command":
            commands.append(resolve(d["argv"]))
        elif kind == "run-installer":
            commands += [resolve(c["argv"]) for c in d["commands"]]
        elif kind == "build":  # a userspace build: its argv in order (recorded, never run)
            commands += [resolve(c) for c in d["commands"]]
        elif kind == "git-source":  # the clone beside dest, the pinned checkout, HEAD read back
            fresh = os.path.join(root, d["dest"].lstrip("/")) + ".hpcbake-new"
            commands += [["git", "clone", "--quiet", "--no-checkout", d["url"], fresh],
                         ["git", "-C", fresh, "checkout", "--quiet", "--detach", d["commit"]],
                         ["git", "-C", fresh, "rev-parse", "HEAD^{commit}"]]
        elif kind == "service":
            commands.append(d["argv"])
            units.append(d["unit"])
        elif kind in ("config", "modules-load"):
            files[d["path"]] = d["content"]
        elif kind == "repository":
            files[d["source_path"]] = d["source"]
        elif kind == "packages":
            for f in d["files"]:  # a .deb through dpkg; an rpm through dnf, by a .rpm link to the cache entry
                if d["manager"] == "apt":
                    commands.append(["dpkg", "-i", os.path.join(cache, "sha256", shas[f])])
                else:
                    packages.append(os.path.join(root, "var/lib/hpcbake/work/rpms", f))
            packages += d["packages"]
    return commands, files, packages, units


# Commands a step may run besides the plan's own argv: the package manager's plumbing (lock
# waits, index refresh, header installs, holds), the agent restart, a container engine's restart
# once its config names the runtime (a profile with container_engines) and reading a package's name.
def plumbing(argv):
    joined = " ".join(argv[:2])
    return argv[0] in ("apt-get", "apt-mark", "dnf", "tdnf", "dpkg-query", "dpkg-deb") or joined in (
        "systemctl is-active", "systemctl restart", "systemctl try-restart") or argv[:2] == ["rpm", "-qp"] or argv[:2] == ["rpm", "-q"]


class PlanIsTheContract(unittest.TestCase):
    def setUp(self):
        if not FAKES:
            self.skipTest("HPCBAKE_FAKES is not set: run through ctest")

    def test_a_bundle_cannot_stand_in_for_a_repository_it_does_not_carry(self):
        """bundle create carries the network repositories a plan uses (cli/repo_apt and
        cli/repo_dnf make such bundles); a repository on the machine's disk whose key is only on
        the network is refused rather than write a bundle an offline node could not finish. And
        install --bundle with a bundle that carries no copy of a repository the plan needs (made
        with --all) refuses before any step runs."""
        with open(os.path.join(GOLDEN, "plan-nd96isr_h100_v5-ubuntu-22.04-host.json")) as f:
            golden = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            m = Machine(tmp, golden)
            m.server.shutdown()
            m.edit_repositories(lambda v: v.update(uri="file:///srv/mirror/cuda/"), "nvidia-cuda")
            out = os.path.join(tmp, "b.tar")
            r = m.hb("bundle", "create", out, "--cache", m.cache)
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("trusts nvidia-cuda (its key, http://127.0.0.1:", r.stderr)
            self.assertIn("file:///PATH", r.stderr)
            self.assertFalse(os.path.exists(out), "no bundle is written")
        with open(os.path.join(GOLDEN, "plan-nd96isr_h100_v5-ubuntu-22.04-host.json")) as f:
            golden = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            m = Machine(tmp, golden)
            m.server.shutdown()
            out = os.path.join(tmp, "all.tar")
            r = run("--manifests", m.manifests, "bundle", "create", out, "--all", "--cache", m.cache)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = m.hb("install", "--yes", "--bundle", out, "--cache", m.cache)
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("installs packages from nvidia-cuda (https://developer.download.nvidia.com/", r.stderr)
            self.assertIn("which the bundle does not carry", r.stderr)
            self.assertEqual(m.recorded(), [], "nothing ran")
            self.assertFalse(os.path.exists(os.path.join(m.root, "var/lib/hpcbake/state.json")), "no journal")

    def test_a_key_on_the_machines_disk_is_read_under_root_and_must_be_a_small_regular_file(self):
        with open(os.path.join(GOLDEN, "plan-nd96isr_h100_v5-ubuntu-22.04-host.json")) as f:
            golden = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            m = Machine(tmp, golden)
            m.server.shutdown()
            m.edit_repositories(lambda v: v["key"].update(urls=["file:///srv/keys/cuda.asc"]), "nvidia-cuda")
            keys = os.path.join(m.root, "srv", "keys")
            os.makedirs(keys)
            os.mkfifo(os.path.join(keys, "cuda.asc"))  # a FIFO: refused, never waited on
            for k in os.listdir(os.path.join(m.root, "lib/modules")):  # the headers the plan installs
                os.makedirs(os.path.join(m.root, "lib/modules", k, "build"), exist_ok=True)
            r = m.hb("install", "--yes", "--cache", m.cache, "--verify-level", "0")
            self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
            self.assertIn("file:///srv/keys/cuda.asc", r.stderr)
            self.assertIn("not a regular file", r.stderr)
            self.assertIn("(or the file:/// path under --root)", r.stderr)
            os.remove(os.path.join(keys, "cuda.asc"))
            shutil.copy(os.path.join(FIXTURES, "openpgp", "test-key.asc"), os.path.join(keys, "cuda.asc"))
            r = m.hb("install", "--yes", "--cache", m.cache, "--verify-level", "0")
            self.assertIn(r.returncode, (0, 5, 6, 7), r.stdout + r.stderr)
            self.assertIn("done     repository:nvidia-cuda", r.stdout)
            with open(os.path.join(m.root, "usr/share/keyrings/hpcbake-nvidia-cuda.gpg"), "rb") as f, \
                    open(os.path.join(FIXTURES, "openpgp", "test-key.gpg"), "rb") as want:
                self.assertEqual(f.read(), want.read(), "the key read from the machine's disk, as binary packets")

    def test_every_golden_plan_runs_exactly_as_planned(self):
        for path in sorted(glob.glob(os.path.join(GOLDEN, "plan-*.json"))):
            with open(path) as f:
                golden = json.load(f)
            with self.subTest(golden=os.path.basename(path)):
                tmp = tempfile.mkdtemp(prefix="hpcbake-contract-")
                m = None
                try:
                    m = Machine(tmp, golden)
                    self.check_one(m)
                finally:
                    if m:
                        m.server.shutdown()
                    shutil.rmtree(tmp, ignore_errors=True)

    def test_rdma_os_files_are_installed_as_azure_sets_them(self):
        """A fixture install of ND96isr_H100_v5 with the ai profile and of HB176rs_v4 with the hpc
        profile (Ubuntu 22.04) writes the limits, the systemd drop-ins, the sysctl file and the udev
        rules, enables the naming services; ND also gets Azure's topology file, byte for byte, and the
        /etc/nccl.conf naming it (docs/userspace.md)."""
        topo = open(os.path.join(SRC, "manifests", "files", "nccl", "ndv5-topo.xml")).read()
        for name, nd in (("nd96isr_h100_v5-ubuntu-22.04-ai", True), ("hb176rs_v4-ubuntu-22.04-hpc", False)):
            with self.subTest(golden=name):
                with open(os.path.join(GOLDEN, f"plan-{name}.json")) as f:
                    golden = json.load(f)
                tmp = tempfile.mkdtemp(prefix="hpcbake-rdma-os-")
                m = None
                try:
                    m = Machine(tmp, golden)
                    self.check_one(m)

                    def read(path):
                        with open(os.path.join(m.root, path.lstrip("/"))) as f:
                            return f.read()
                    limits = read("/etc/security/limits.d/90-hpcbake-rdma.conf")
                    for line in ("*               soft    memlock         unlimited",
                                 "*               hard    memlock         unlimited",
                                 "*               soft    nofile          1048576",
                                 "*               hard    nofile          1048576"):
                        self.assertIn(line + "\n", limits)
                    for d in ("system.conf.d", "user.conf.d"):
                        self.assertIn("[Manager]\nDefaultLimitMEMLOCK=infinity\n",
                                      read(f"/etc/systemd/{d}/90-hpcbake-rdma.conf"))
                    self.assertIn("vm.zone_reclaim_mode = 1\n", read("/etc/sysctl.d/90-hpcbake-rdma.conf"))
                    self.assertIn('PROGRAM="rdma_rename %k NAME_KERNEL"',
                                  read("/etc/udev/rules.d/60-rdma-persistent-naming.rules"))
                    self.assertEqual(read("/etc/udev/rules.d/99-issm.rules"), 'KERNEL=="issm*", NAME="infiniband/%k"\n')
                    script = os.path.join(m.root, "usr/sbin/azure_persistent_rdma_naming.sh")
                    self.assertEqual(os.stat(script).st_mode & 0o777, 0o755)
                    enabled = [a[-1] for a in m.recorded() if a[:3] == ["systemctl", "enable", "--now"]]
                    self.assertIn("azure_persistent_rdma_naming.service", enabled)
                    self.assertIn("azure_persistent_rdma_naming_monitor.service", enabled)
                    self.assertIn(["udevadm", "control", "--reload-rules"], m.recorded())
                    nccl = os.path.join(m.root, "etc/nccl.conf")
                    if nd:
                        self.assertEqual(read("/opt/microsoft/ndv5/topo.xml"), topo)
                        self.assertEqual(read("/etc/nccl.conf"), "NCCL_IB_PCI_RELAXED_ORDERING=1\n"
                                         "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\nNCCL_IGNORE_CPU_AFFINITY=1\n")
                    else:
                        self.assertFalse(os.path.exists(nccl), "a CPU size gets no NCCL configuration")
                finally:
                    if m:
                        m.server.shutdown()
                    shutil.rmtree(tmp, ignore_errors=True)

    def check_one(self, m):
        r = m.hb("plan", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        plan = json.loads(r.stdout)
        self.assertTrue(plan["kernels"], "the plan is made for this machine: its kernels are known")
        for k in plan["kernels"]:  # headers "installed", so the module steps run (recorded)
            os.makedirs(os.path.join(m.root, "lib/modules", k, "build"), exist_ok=True)
        r = m.hb("install", "--yes", "--cache", m.cache, "--verify-level", "0")
        runs = 1
        for boot in range(2, 5):  # a reboot the plan asked for (nouveau loaded): a new boot, then resume
            if r.returncode != 7:
                break
            runs += 1
            with open(os.path.join(m.root, "proc/sys/kernel/random/boot_id"), "w") as f:
                f.write(f"boot-{boot}\n")
            r = m.hb("install", "--yes", "--cache", m.cache, "--verify-level", "0")
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        with open(os.path.join(m.root, "var/lib/hpcbake/state.json")) as f:
            journal = json.load(f)
        attempted = {k for k, v in journal["steps"].items() if v["status"] in ("done", "failed", "reboot_pending")}
        self.assertLessEqual(set(journal["steps"]), {s["id"] for s in plan["steps"]}, "install ran the plan it printed")
        self.assertEqual(journal["size"], plan["size"])
        commands, files, packages, units = expected_effects(plan, m.cache, attempted, m.root)
        kinds = {s["kind"] for s in plan["steps"] if s["id"] in attempted}
        if any(s["kind"] == "run-installer" for s in plan["steps"]):
            failed = {k: v.get("message") for k, v in journal["steps"].items() if v["status"] == "failed"}
            self.assertIn("run-installer", kinds, f"the driver step ran (recorded); failed: {failed}")
            self.assertIn("service", kinds, "and the services after it")
        recorded = m.recorded()
        own = [a for a in recorded if not plumbing(a)]
        self.assertEqual(sorted(map(tuple, own)), sorted(map(tuple, commands)),
                         "the commands install ran are exactly the plan's")
        installed = [p for a in recorded if a[:1] in (["apt-get"], ["dnf"], ["tdnf"]) and "install" in a
                     for p in a[a.index("install") + 1:] if not p.startswith("-")]
        for p in packages:
            self.assertIn(p, installed, f"package {p} of the plan went through the package manager")
        shas = {s["detail"]["name"]: s["detail"]["sha256"] for s in plan["steps"] if s["kind"] == "artifact"}
        for s in plan["steps"]:  # dnf was given the verified cache entry itself, under its .rpm name
            if s["kind"] == "packages" and s["detail"]["manager"] in ("dnf", "tdnf") and s["id"] in attempted:
                for f in s["detail"]["files"]:
                    self.assertEqual(os.path.realpath(os.path.join(m.root, "var/lib/hpcbake/work/rpms", f)),
                                     os.path.realpath(os.path.join(m.cache, "sha256", shas[f])))
        for path, content in files.items():
            with open(os.path.join(m.root, path.lstrip("/"))) as f:
                self.assertEqual(f.read(), content, path)
        for s in plan["steps"]:  # each repository's key: the pinned key, nothing else (apt: binary, rpm: armored)
            if s["kind"] == "repository":
                self.assertIn(s["id"], attempted, "the repository step ran")
                want = "test-key.gpg" if s["detail"]["manager"] == "apt" else "test-key.asc"
                with open(os.path.join(m.root, s["detail"]["key_path"].lstrip("/")), "rb") as f, \
                        open(os.path.join(FIXTURES, "openpgp", want), "rb") as w:
                    self.assertEqual(f.read(), w.read(), s["detail"]["key_path"])
        enabled = [a[-1] for a in recorded if a[:2] == ["systemctl", "enable"]]
        self.assertEqual(sorted(enabled), sorted(units), "exactly the plan's services are enabled")
        # The package index is refreshed once in the run before the first install, then once per
        # change of the sources (a repository, or a repository package), not once per step that
        # asks: at least once, at most once more than the changes.
        ran = [s for s in plan["steps"] if s["id"] in attempted]
        asks = [s for s in ran if (s["kind"] == "packages" and s["detail"]["refresh"]) or s["kind"] == "canonical-driver"]
        changes = len([s for s in ran if s["kind"] == "repository"]) + len(
            [s for s in ran if s["kind"] == "packages" and s["detail"]["files"]])
        refreshes = [a for a in recorded if a[:2] == ["apt-get", "update"] or "makecache" in a]
        # Each install process knows only its own refreshes: a run resumed after the reboot may
        # refresh once more (which steps ran before the reboot depends on the workers' order).
        if asks:
            self.assertGreaterEqual(len(refreshes), 1, "a step asked for a refresh")
            self.assertLessEqual(len(refreshes), min(changes + runs, len(asks)),
                                 f"{len(asks)} steps asked for a refresh after {changes} change(s) of the sources "
                                 f"in {runs} install run(s)")


class CommandLineHabits(unittest.TestCase):
    """A bare `hpcbake` and `hpcbake help VERB` print help; a mistyped verb or option gets the
    closest name, said in words, with the help to read (exit 2)."""

    def test_bare_and_help_verb(self):
        r = run()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Usage: hpcbake", r.stdout)
        r = run("help", "plan")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--size", r.stdout)
        r = run("help", "cache", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("list verified artifacts", r.stdout)
        r = run("help", "plna")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'plna' (did you mean plan?)", r.stderr)

    def test_did_you_mean(self):
        for args, want, hint in (
                (["plna"], "unknown command 'plna' for hpcbake (did you mean plan?)", "hpcbake help'"),
                (["cache", "lst"], "unknown command 'lst' for hpcbake cache (did you mean list?)", "hpcbake help cache'"),
                (["plan", "--szie", "x"], "unknown option '--szie' for hpcbake plan (did you mean --size?)",
                 "hpcbake help plan'"),
                (["cache", "--cach", "x", "list"], "unknown option '--cach' for hpcbake cache list (did you mean --cache?)",
                 "hpcbake help cache list'"),
                (["module"], "hpcbake module needs a command: install", "hpcbake help module'")):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(want, r.stderr)
                self.assertIn(hint, r.stderr)

    def test_global_options_anywhere_on_the_line(self):
        before = run("--no-imds", "--json", "plan", "--size", "ND96isr_H100_v5", "--distro", "ubuntu-22.04")
        after = run("plan", "--size", "ND96isr_H100_v5", "--distro", "ubuntu-22.04", "--no-imds", "--json")
        self.assertEqual(before.returncode, 0, before.stderr)
        self.assertEqual(after.returncode, 0, after.stderr)
        self.assertEqual(json.loads(before.stdout), json.loads(after.stdout))
        with tempfile.TemporaryDirectory() as cache:
            r = run("cache", "list", "--cache", cache, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["artifacts"], [])

    def test_json_on_verbs_that_printed_only_text(self):
        lint = run("manifest", "lint", "--json")
        self.assertEqual(lint.returncode, 0, lint.stderr)
        doc = json.loads(lint.stdout)
        self.assertTrue(doc["clean"])
        self.assertGreater(doc["counts"]["sizes"], 70)
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "manifests")
            shutil.copytree(os.path.join(SRC, "manifests"), bad)
            with open(os.path.join(bad, "sizes", "nd96isr_h100_v5.yaml"), "a") as f:
                f.write("unknown_key: 1\n")
            r = run("manifest", "lint", bad, "--json")
            self.assertEqual(r.returncode, 2)
            doc = json.loads(r.stdout)
            self.assertFalse(doc["clean"])
            self.assertTrue(any("unknown_key" in p for p in doc["problems"]), doc["problems"])

    def test_help_reads_as_words(self):
        r = run("help", "fetch", env={"COLUMNS": "100"})
        self.assertIn("-j,--parallel N", r.stdout)
        self.assertIn("(1-64, default 4)", r.stdout)
        self.assertIn("Usage: hpcbake fetch [OPTIONS]", r.stdout)
        self.assertNotIn("INT:INT", r.stdout)
        self.assertIn("Global options (anywhere on the line)", r.stdout)

    def test_matrix_with_secure_boot_on_gives_each_pair_its_signing_route_and_a_markdown_table(self):
        on = json.loads(run("manifest", "matrix", "--sign", "on", "--json", timeout=300).stdout)
        auto = json.loads(run("manifest", "matrix", "--json", timeout=300).stdout)
        self.assertEqual(on["sign"], "on")
        pairs = {(p["size"], p["distro"]): p for p in on["pairs"]}
        # The flagship sizes on Ubuntu plan under Secure Boot (before issue 41 they were refused: a
        # repository's driver could not be signed). With GPUDirect RDMA (ND) hpcbake builds and signs
        # the driver's modules with its key; without it Canonical's signed precompiled modules need none.
        for size, route in (("Standard_ND96isr_H100_v5", "hpcbake-key"), ("Standard_NC24ads_A100_v4", "canonical-signed"),
                            ("Standard_NC40ads_H100_v5", "canonical-signed")):
            for distro in ("ubuntu-22.04", "ubuntu-24.04"):
                self.assertEqual(pairs[(size, distro)]["result"], "planned", pairs[(size, distro)])
                self.assertEqual(pairs[(size, distro)]["route"], route, (size, distro))
        # Signing refuses no pair that plans without it; a pair that builds no module signs nothing.
        self.assertEqual(on["refused"], auto["refused"])
        self.assertIn("none", {p.get("route") for p in on["pairs"]})
        md = run("manifest", "matrix", "--sign", "on", "--markdown", timeout=300).stdout
        rows = [line for line in md.splitlines() if line.startswith("| Standard_")]
        self.assertEqual(len(rows), len({p["size"] for p in on["pairs"]}))
        distros = sorted({p["distro"] for p in on["pairs"]})
        self.assertTrue(all(row.count("|") == len(distros) + 2 for row in rows), rows[:2])
        nd = next(row for row in rows if row.startswith("| Standard_ND96isr_H100_v5 |"))
        self.assertEqual(nd.split("|")[2 + distros.index("ubuntu-24.04")].strip(), "hpcbake-key")
        refused = [c for row in rows for c in row.split("|") if c.strip().startswith("refused [")]
        self.assertEqual(len(refused), on["refused"])
        self.assertIn("\n1. ", md)

    def test_plan_prints_the_download_total_for_every_gpu_size(self):
        sizes = {s["size"] for s in run_json("sizes", "--json")["sizes"] if s["gpu"]}
        matrix = run("manifest", "matrix", "--json")
        pairs = {}
        for p in json.loads(matrix.stdout)["pairs"]:
            if p["size"] in sizes and p["result"] == "planned":
                pairs.setdefault(p["size"], p["distro"])
        # The 6 M60 NV sizes and the 6 NVadsA10 v5 sizes are refused everywhere: no GRID build of the
        # branches Azure publishes for them has a published checksum.
        self.assertGreaterEqual(len(pairs), 35)
        for size, distro in sorted(pairs.items()):
            with self.subTest(size=size, distro=distro):
                r = run("--no-imds", "plan", "--size", size, "--distro", distro)
                self.assertEqual(r.returncode, 0, r.stderr)
                line = [x for x in r.stdout.splitlines() if x.startswith("  download: ")]
                self.assertEqual(len(line), 1, r.stdout)
                self.assertRegex(line[0], r"^  download: \d+ artifacts?")

    def test_text_fits_columns_and_pipes_keep_whole_lines(self):
        plan = ("--no-imds", "plan", "--size", "ND96isr_H100_v5", "--distro", "ubuntu-22.04")
        for args in (plan, ("--no-imds", "detect"), ("sizes",), ("manifest", "matrix"), ("help", "install")):
            for width in (40, 80, 200):
                with self.subTest(args=args, width=width):
                    r = run(*args, env={"COLUMNS": str(width)})
                    for line in r.stdout.splitlines():
                        # Only a single word longer than the line (a URL) may stay longer.
                        if len(line) >= width:
                            self.assertEqual(len(line.split()), 1, f"{line!r} is {len(line)} columns")
        piped = run(*plan)  # no COLUMNS and not a terminal: nothing is wrapped
        self.assertTrue(any(len(line) > 120 for line in piped.stdout.splitlines()))


class UsageConflicts(unittest.TestCase):
    """Issue 46 item 6: what a person types is taken as they mean it, and a contradiction is refused
    naming both sides (exit 2), never resolved silently."""

    FLAGSHIP = ["--size", "ND96isr_H100_v5", "--distro", "ubuntu-24.04"]

    def test_version_as_people_type_it(self):
        want = run("--version")
        self.assertEqual(want.returncode, 0, want.stderr)
        self.assertTrue(want.stdout.startswith("hpcbake "), want.stdout)
        for args in (["-V"], ["version"]):
            r = run(*args)
            self.assertEqual((r.returncode, r.stdout), (0, want.stdout), args)

    def test_conflicting_options_are_refused_naming_both(self):
        for args, words in ((["-q", "-v", "sizes"], ["--quiet", "--verbose", "cannot be given together"]),
                            (["install", "--dry-run", *self.FLAGSHIP, "--reboot", "auto", "--reboot", "exit"],
                             ["--reboot was given more than once"]),
                            (["fetch", "--all", "--size", "ND96isr_H100_v5", "--distro", "ubuntu-24.04"],
                             ["--all", "--size, --distro", "cannot be given together"])):
            with self.subTest(args=args):
                with tempfile.TemporaryDirectory() as cache:
                    r = run(*args, "--cache", cache) if args[0] == "fetch" else run(*args)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    for w in words:
                        self.assertIn(w, r.stderr)
                    if args[0] == "fetch":
                        self.assertEqual(os.listdir(cache), [], "nothing downloaded")

    def test_one_exit_code_for_every_kind_of_unknown_name(self):
        for flag, value, words in (("--size", "ND96isr_H100_v9", "did you mean Standard_ND96isr_H100_v5"),
                                   ("--distro", "centos-7", "unsupported distro 'centos-7'"),
                                   ("--profile", "contaners", "unknown profile 'contaners' (did you mean containers?)")):
            args = dict(zip(self.FLAGSHIP[::2], self.FLAGSHIP[1::2]))
            args[flag] = value
            r = run("plan", *[x for kv in args.items() for x in kv])
            with self.subTest(flag=flag):
                self.assertEqual(r.returncode, 3, r.stderr)
                self.assertIn(words, r.stderr)

    def test_a_major_version_names_its_only_minor(self):
        for alias, exact in (("almalinux-8", "almalinux-8.10"), ("Rocky-8", "rocky-8.10"), ("rhel-8", "rhel-8.10")):
            p = run_json("--json", "plan", "--size", "HB120rs_v3", "--distro", alias)
            self.assertEqual(p["distro"], exact, alias)
        self.assertEqual(run_json("--json", "plan", "--size", "HB120rs_v3", "--distro", "ubuntu-24")["distro"],
                         "ubuntu-24.04")
        r = run("plan", "--size", "HB120rs_v3", "--distro", "ubuntu-2")  # a prefix is not a version
        self.assertEqual(r.returncode, 3, r.stderr)

    def test_sizes_matches_whole_numbers(self):
        listed = run("--json", "sizes", "a10")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        names = [s["size"] for s in json.loads(listed.stdout)["sizes"]]
        self.assertTrue(names and all("_A10_" in n for n in names), names)
        a100 = json.loads(run("--json", "sizes", "a100").stdout)["sizes"]
        self.assertTrue(a100 and all(s["gpu"]["model"] == "A100" for s in a100), a100)
        a100 = [s["size"] for s in a100]
        self.assertFalse(set(names) & set(a100))

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run hpcbake as another user (su nobody)")
    def test_seal_check_as_a_user_does_not_say_it_changes_the_machine(self):
        from common import BIN, _env
        import subprocess
        r = subprocess.run(["su", "nobody", "-s", "/bin/sh", "-c", f"{BIN} seal --check"], capture_output=True,
                           text=True, env=_env(None), timeout=60)
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertIn("seal --check changes nothing", r.stderr)
        self.assertNotIn("changes this machine", r.stderr)


if __name__ == "__main__":
    unittest.main()
