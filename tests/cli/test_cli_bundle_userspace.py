"""`bundle create` for the ai profile carries everything an offline node needs of its userspace,
and `install --bundle` uses only that: no network, no source repository.

The manifest copy's ai profile (a fixture machine for Standard_ND96isr_H100_v5 on Ubuntu 22.04,
tests/cli/test_cli_contract.py's Machine: the driver layer's artifacts stand-ins in its cache)
keeps its driver-layer components and gains three small userspace TEST components, one per way a
userspace component gets its bytes:

- bundle-tar-test: a verified artifact (a real tar.gz made here, served over HTTPS by a loopback
  nginx) unpacked into its prefix, with an environment module;
- bundle-git-test: a git source at a pinned commit of a file:/// repository made here, the
  commit BEFORE the branch's tip (so the bundle must carry the pin, not whatever the tip is),
  with build commands (recorded, not run);
- bundle-pkg-test: packages from NVIDIA's CUDA repository (repository: nvidia-cuda, as NCCL's
  libnccl2 comes), here a STAND-IN package in a signed flat apt repository made for the test.

Every network repository of the plan (nvidia-cuda, nvidia-container-toolkit) is such a signed
stand-in repository (empty packages with the vendor's names, "stand-in" in their descriptions),
served by the same nginx. The node then installs with --bundle under --root with the server
stopped, every URL pointing at a closed port, an empty cache and the git repository moved away;
git runs for real there (HPCBAKE_TEST_REAL_COMMANDS=git), every other machine command is recorded.
A bundle whose git file has one byte flipped is refused by that file's name before any checkout.
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import yaml

from common import TestSigner, run, start_https_nginx, stop_https_nginx, tamper_bundle
from test_cli_contract import Machine

TOOLS = ["gpg", "gpgv", "apt-ftparchive", "dpkg-deb", "openssl", "nginx", "git"]
MISSING = [t for t in TOOLS if not shutil.which(t) and not os.path.exists("/usr/sbin/" + t)]
GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "plan-nd96isr_h100_v5-ubuntu-22.04-ai.json")
BUNDLE_ENV = {"SOURCE_DATE_EPOCH": "1700000000", "HPCBAKE_TEST_RUNNER": ""}  # bundle create runs gpgv, git for real
TAR_PREFIX = "/opt/bundle-tar-test-1.0"
GIT_DEST = "/var/lib/hpcbake/build/bundle-git-test"
PKG = "hpcbake-test-nccl"  # the stand-in of a package from NVIDIA's CUDA repository (as libnccl2)
PKG_VERSION = "1.0-1"
HELLO = b"#!/bin/sh\necho bundle-tar-test\n"
OFFLINE = "https://127.0.0.1:9"  # nothing listens there


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def git(*argv, cwd=None):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@test.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@test.invalid", HOME=cwd or "/nonexistent")
    return subprocess.run(["git", *argv], check=True, capture_output=True, text=True, cwd=cwd, env=env).stdout.strip()


def standins(plan):
    """{repository: [(name, version, depends, files)]}: what the plan asks of each repository, as in
    tests/cli/test_cli_bundle_arch.py (one architecture here, amd64)."""
    out = {}
    for s in plan["steps"]:
        d = s["detail"]
        repo = d.get("repository") if isinstance(d, dict) else None
        if not repo or not d.get("packages"):
            continue
        for p in d["packages"]:
            name, _, version = p.partition("=")
            comp = d.get("version", "")
            v = version or (comp if "-" in comp else comp + "-1")
            if name.startswith("nvidia-driver-pinning-"):
                prefs = f"Package: nvidia-open libnvidia-compute\nPin: version {v}\nPin-Priority: 1000\n"
                out.setdefault(repo, []).append((name, v, "all", "",
                                                 {"etc/apt/preferences.d/nvidia-driver-pinning.pref": prefs}))
            elif name == "nvidia-open":
                out.setdefault(repo, []).append((name, v, "amd64", f"libnvidia-compute (= {v})", {}))
                out.setdefault(repo, []).append(("libnvidia-compute", v, "amd64", "", {}))
            else:
                out.setdefault(repo, []).append((name, v, "amd64", "", {}))
    return out


@unittest.skipIf(MISSING, f"SKIPPED: missing {', '.join(MISSING)} (scripts/deps installs them)")
class BundleUserspace(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_https_nginx(cls, "hpcbake-bundle-userspace-")
        cls.signer = TestSigner(cls.tmp, "hpcbake stand-in repository <repo@test.invalid>", "ed25519")
        cls.www = os.path.join(cls.tmp, "www")
        with open(os.path.join(cls.www, "key.asc"), "w") as f:
            f.write(cls.signer.gpg("--armor", "--export", cls.signer.fpr).stdout)
        cls.base = f"https://127.0.0.1:{cls.port}"
        cls.ca = os.path.join(cls.tmp, "ca.pem")
        # The artifact: a real tarball with one directory level (strip: 1).
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            info = tarfile.TarInfo("bundle-tar-test-1.0/bin/hello")
            info.size, info.mode = len(HELLO), 0o755
            t.addfile(info, io.BytesIO(HELLO))
        cls.tarball = buf.getvalue()
        with open(os.path.join(cls.www, "bundle-tar-test-1.0.tar.gz"), "wb") as f:
            f.write(cls.tarball)
        for d in (cls.tmp, cls.www):
            os.chmod(d, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.signer.close()
        stop_https_nginx(cls)

    def setUp(self):
        with open(GOLDEN) as f:
            golden = json.load(f)
        self.work = tempfile.mkdtemp(prefix="hpcbake-bundle-userspace-")
        os.chmod(self.work, 0o755)
        self.m = Machine(self.work, golden)
        self.m.server.shutdown()  # its plain-HTTP key server is not used here
        plain_env = self.m.env
        self.m.env = lambda: dict(plain_env(), HPCBAKE_TEST_REAL_COMMANDS="git")
        self.make_source()
        self.add_components()
        plan = self.hb_json("plan")
        self.make_repositories(plan)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def hb_json(self, *args):
        r = self.m.hb(*args, "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return json.loads(r.stdout)

    def make_source(self):
        """A git repository with two commits: the pin is the first, the branch's tip the second."""
        self.src = os.path.join(self.work, "src-repo")
        os.makedirs(self.src)
        git("init", "-q", "-b", "main", cwd=self.src)
        with open(os.path.join(self.src, "Makefile"), "w") as f:
            f.write("all:\n\ttrue\n")
        git("add", "Makefile", cwd=self.src)
        git("commit", "-q", "-m", "the pinned commit", cwd=self.src)
        self.pin = git("rev-parse", "HEAD", cwd=self.src)
        with open(os.path.join(self.src, "later"), "w") as f:
            f.write("after the pin\n")
        git("add", "later", cwd=self.src)
        git("commit", "-q", "-m", "after the pin", cwd=self.src)
        self.tip = git("rev-parse", "HEAD", cwd=self.src)
        self.assertNotEqual(self.pin, self.tip)

    def add_components(self):
        comps = os.path.join(self.m.manifests, "components")
        variant = {"distros": ["ubuntu-22.04"], "arch": ["x86_64"], "version": "1.0"}
        docs = {
            "bundle-tar-test": dict(variant, prefix=TAR_PREFIX, artifacts=[{
                "name": "bundle-tar-test-1.0.tar.gz", "urls": [self.base + "/bundle-tar-test-1.0.tar.gz"],
                "sha256": hashlib.sha256(self.tarball).hexdigest(), "size": len(self.tarball)}],
                unpack={"artifact": "bundle-tar-test-1.0.tar.gz", "to": TAR_PREFIX, "strip": 1},
                modulefile="#%Module1.0\nprepend-path PATH {prefix}/bin\n"),
            "bundle-git-test": dict(variant, prefix="/opt/bundle-git-test", git={
                "url": "file://" + self.src, "commit": self.pin, "to": GIT_DEST},
                build={"dir": GIT_DEST, "commands": [["make", "PREFIX={prefix}"]], "creates": "{prefix}/bin/x"}),
            "bundle-pkg-test": dict(variant, prefix="/usr", repository="nvidia-cuda",
                                    packages=[f"{PKG}={PKG_VERSION}"]),
        }
        for cid, v in docs.items():
            doc = {"schema": 1, "component": cid, "kind": "userspace",
                   "description": "hpcbake test component (tests/cli/test_cli_bundle_userspace.py)",
                   "source": "made by the test"}
            if cid == "bundle-tar-test":
                doc["module"] = "test/bundle-tar-test"
            doc["variants"] = [v]
            with open(os.path.join(comps, cid + ".yaml"), "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
        # The ai profile of the copy: its components that are not userspace ones (those are other
        # tests' business, with real tarballs), and the three test components.
        path = os.path.join(self.m.manifests, "profiles", "ai.yaml")
        with open(path) as f:
            prof = yaml.safe_load(f)

        def not_userspace(c):
            with open(os.path.join(comps, c + ".yaml")) as f:
                return yaml.safe_load(f).get("kind") != "userspace"
        prof["components"] = [c for c in prof.get("components", []) if not_userspace(c)] + list(docs)
        prof["best_effort"] = [c for c in prof.get("best_effort", []) if not_userspace(c)]
        with open(path, "w") as f:
            yaml.safe_dump(prof, f, sort_keys=False)
        for other in os.listdir(comps):  # the shipped userspace components: not in this profile
            if other.endswith(".yaml") and other[:-5] not in docs and not not_userspace(other[:-5]):
                os.remove(os.path.join(comps, other))
        # The other profiles that name them go too (this copy plans the ai profile only).
        for name in os.listdir(os.path.join(self.m.manifests, "profiles")):
            ppath = os.path.join(self.m.manifests, "profiles", name)
            with open(ppath) as f:
                other = yaml.safe_load(f)
            names = other.get("components", []) + other.get("best_effort", [])
            if any(not os.path.exists(os.path.join(comps, c + ".yaml")) for c in names):
                os.remove(ppath)

    def make_repositories(self, plan):
        """A signed flat stand-in repository per network repository of the plan, at www/<id>/."""
        wants = standins(plan)
        wants.setdefault("nvidia-cuda", []).append((PKG, PKG_VERSION, "amd64", "", {}))
        for repo, debs in wants.items():
            d = os.path.join(self.work, "www", repo)  # copied under nginx's root below
            os.makedirs(d)
            for name, version, arch, depends, files in debs:
                pkg = os.path.join(self.work, "pkg", repo, name)
                if os.path.exists(pkg):
                    continue
                os.makedirs(os.path.join(pkg, "DEBIAN"))
                for path, text in files.items():
                    os.makedirs(os.path.join(pkg, os.path.dirname(path)), exist_ok=True)
                    with open(os.path.join(pkg, path), "w") as f:
                        f.write(text)
                with open(os.path.join(pkg, "DEBIAN", "control"), "w") as f:
                    f.write(f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
                            + (f"Depends: {depends}\n" if depends else "")
                            + "Maintainer: hpcbake tests <tests@test.invalid>\n"
                            f"Description: hpcbake test STAND-IN for {name}\n")
                sh("dpkg-deb", "--root-owner-group", "--build", "-Zgzip", pkg,
                   os.path.join(d, f"{name}_{version.split(':')[-1]}_{arch}.deb"))
            with open(os.path.join(d, "Packages"), "w") as f:
                f.write(sh("apt-ftparchive", "packages", ".", cwd=d).stdout)
            with open(os.path.join(d, "Packages"), "rb") as f, gzip.open(os.path.join(d, "Packages.gz"), "wb") as g:
                g.write(f.read())
            with open(os.path.join(d, "Release"), "w") as f:
                f.write(sh("apt-ftparchive", "release", ".", cwd=d).stdout)
            self.signer.gpg("--yes", "--clearsign", "-o", os.path.join(d, "InRelease"), os.path.join(d, "Release"))
            served = os.path.join(self.www, repo)
            shutil.rmtree(served, ignore_errors=True)
            shutil.copytree(d, served)
            self.m.edit_repositories(lambda v, repo=repo: v.update(uri=f"{self.base}/{repo}/", key=dict(
                v["key"], urls=[self.base + "/key.asc"], fingerprint=self.signer.fpr)), repo)
        self.repos = sorted(wants)

    def make_bundle(self):
        bundle = os.path.join(self.work, "ai.tar")
        r = run("--manifests", self.m.manifests, "--no-imds", "bundle", "create", bundle, "--size", self.m.size,
                "--distro", self.m.distro, *self.m.profile, "--cache", self.m.cache, "--ca-file", self.ca,
                env=BUNDLE_ENV, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with tarfile.open(bundle) as tf:
            index = json.load(tf.extractfile("index.json"))
        return bundle, index, r

    def go_offline(self):
        """The node: an empty cache, every URL at a closed port (the git source's too: the bundle's
        git file is found by the pinned commit), the git repository gone."""
        self.m.cache = os.path.join(self.work, "node-cache")
        os.makedirs(self.m.cache)
        for repo in self.repos:
            self.m.edit_repositories(lambda v: v.update(uri=f"{OFFLINE}/{repo}/", key=dict(
                v["key"], urls=[OFFLINE + "/key.asc"])), repo)
        for cid, edit in (("bundle-tar-test", lambda v: v["artifacts"][0].update(urls=[OFFLINE + "/t.tar.gz"])),
                          ("bundle-git-test", lambda v: v["git"].update(url=OFFLINE + "/src-repo.git"))):
            path = os.path.join(self.m.manifests, "components", cid + ".yaml")
            with open(path) as f:
                doc = yaml.safe_load(f)
            edit(doc["variants"][0])
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)
        os.rename(self.src, self.src + ".away")

    def test_the_bundle_carries_the_userspace_and_the_node_installs_it_offline(self):
        bundle, index, made = self.make_bundle()
        with tarfile.open(bundle) as tf:
            members = set(tf.getnames())
            gits = index["git_sources"]
            self.assertEqual([(g["component"], g["commit"]) for g in gits], [("bundle-git-test", self.pin)])
            g = gits[0]
            self.assertEqual(g["name"], f"git/bundle-git-test-{self.pin}.bundle")
            data = tf.extractfile("artifacts/" + g["sha256"]).read()
        self.assertEqual((hashlib.sha256(data).hexdigest(), len(data)), (g["sha256"], g["size"]))
        self.assertIn(f"bundle-git-test: git bundle of file://{self.src} at {self.pin}", made.stdout)
        # The git file holds the one ref at the pin, and the pin's history only (not the tip).
        gfile = os.path.join(self.work, "carried.bundle")
        with open(gfile, "wb") as f:
            f.write(data)
        self.assertEqual(git("bundle", "list-heads", gfile, cwd=self.work), f"{self.pin} refs/heads/hpcbake-pin")
        # The artifact and the repository package are carried as well.
        tar_sha = hashlib.sha256(self.tarball).hexdigest()
        self.assertIn({"name": "bundle-tar-test-1.0.tar.gz", "sha256": tar_sha, "size": len(self.tarball)},
                      index["artifacts"])
        self.assertIn("artifacts/" + tar_sha, members)
        repos = {x["id"]: x for x in index["repositories"]}
        self.assertEqual(sorted(repos), self.repos)
        self.assertIn(f"{PKG}={PKG_VERSION}", repos["nvidia-cuda"]["packages"])
        debs = {f["path"]: f["sha256"] for f in repos["nvidia-cuda"]["files"]}
        self.assertIn(f"{PKG}_{PKG_VERSION}_amd64.deb", debs)
        for r in repos.values():
            for f in r["files"]:
                self.assertIn("artifacts/" + f["sha256"], members)

        self.go_offline()
        r = self.m.install_through_reboots("--bundle", bundle)
        self.assertIn(r.returncode, (0, 5, 6), r.stdout + r.stderr)
        with open(os.path.join(self.m.root, "var/lib/hpcbake/state.json")) as f:
            journal = json.load(f)["steps"]
        with open(os.path.join(self.m.root, "var/lib/hpcbake/plan.json")) as f:
            stored = json.load(f)["plan"]
        userspace = [s for s in stored["steps"] if s["kind"] in ("unpack", "git-source", "build")
                     or s["id"] in ("config:module-bundle-tar-test", "packages:bundle-pkg-test",
                                    "repository:nvidia-cuda", "artifact:bundle-tar-test-1.0.tar.gz")]
        self.assertEqual(len(userspace), 7, [s["id"] for s in userspace])
        for s in userspace:
            self.assertEqual(journal.get(s["id"], {}).get("status"), "done", (s["id"], r.stdout + r.stderr))
        # The plan says where the source came from.
        gs = next(s for s in stored["steps"] if s["kind"] == "git-source")
        self.assertEqual(gs["detail"]["bundle"], {"file": g["name"], "sha256": g["sha256"], "size": g["size"]})
        self.assertIn("from the git bundle in the bundle", r.stdout + r.stderr)
        # The tarball, unpacked; its module.
        with open(os.path.join(self.m.root, TAR_PREFIX.lstrip("/"), "bin/hello"), "rb") as f:
            self.assertEqual(f.read(), HELLO)
        with open(os.path.join(self.m.root, "usr/share/modules/modulefiles/test/bundle-tar-test")) as f:
            self.assertIn(f"prepend-path PATH {TAR_PREFIX}/bin", f.read())
        # The checkout: HEAD is the pin, and the tip never reached the node.
        dest = os.path.join(self.m.root, GIT_DEST.lstrip("/"))
        self.assertEqual(git("rev-parse", "HEAD", cwd=dest), self.pin)
        self.assertTrue(os.path.exists(os.path.join(dest, "Makefile")))
        self.assertFalse(os.path.exists(os.path.join(dest, "later")))
        self.assertNotEqual(subprocess.run(["git", "cat-file", "-e", self.tip], cwd=dest).returncode, 0)
        # The commands: git cloned the cache's copy, not the URL; the package from the bundle's copy.
        argvs = self.m.recorded()
        clones = [a for a in argvs if a[:2] == ["git", "clone"]]
        self.assertEqual(len(clones), 1, clones)
        self.assertEqual(clones[0][4], os.path.join(self.m.cache, "sha256", g["sha256"]))
        self.assertIn(["make", "PREFIX=/opt/bundle-git-test"], argvs)
        self.assertTrue([a for a in argvs if a[:1] == ["apt-get"] and f"{PKG}={PKG_VERSION}" in a], argvs)
        with open(os.path.join(self.m.root, "etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources")) as f:
            self.assertIn("URIs: file:///var/lib/hpcbake/repos/nvidia-cuda/\n", f.read())
        mirror = os.path.join(self.m.root, "var/lib/hpcbake/repos/nvidia-cuda", f"{PKG}_{PKG_VERSION}_amd64.deb")
        with open(mirror, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), debs[f"{PKG}_{PKG_VERSION}_amd64.deb"])

    def test_a_tampered_git_file_is_refused_by_name(self):
        bundle, index, _ = self.make_bundle()
        g = index["git_sources"][0]
        tampered = os.path.join(self.work, "tampered.tar")
        tamper_bundle(bundle, "artifacts/" + g["sha256"], tampered)
        self.go_offline()
        r = self.m.install_through_reboots("--bundle", tampered)
        # 4 (a download or verification failure), or 5 where the fixture's DKMS checks fail first in
        # the plan (the recorded apt-get builds no nvidia module), as in the other bundle tests.
        self.assertIn(r.returncode, (4, 5), r.stdout + r.stderr)
        with open(os.path.join(self.m.root, "var/lib/hpcbake/state.json")) as f:
            journal = json.load(f)["steps"]
        self.assertEqual(journal["git-source:bundle-git-test"]["status"], "failed")
        self.assertNotIn("build:bundle-git-test", journal)
        self.assertIn(f"git-source:bundle-git-test: {g['name']} in bundle", r.stderr)
        self.assertIn("tampered or corrupt", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.m.root, GIT_DEST.lstrip("/"))))
        self.assertFalse([a for a in self.m.recorded() if a[:2] == ["git", "clone"]])

    def test_an_offline_install_from_a_bundle_without_the_git_source_is_refused_up_front(self):
        bundle, _, _ = self.make_bundle()
        stripped = os.path.join(self.work, "old.tar")  # as a bundle made before git sources were carried
        with tarfile.open(bundle) as src, tarfile.open(stripped, "w") as dst:
            for m in src.getmembers():
                data = src.extractfile(m).read() if m.isfile() else None
                if m.name == "index.json":
                    index = json.loads(data)
                    del index["git_sources"]
                    data = json.dumps(index).encode()
                    m.size = len(data)
                dst.addfile(m, io.BytesIO(data) if data is not None else None)
        self.go_offline()
        r = self.m.install_through_reboots("--bundle", stripped)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"clones the git source of bundle-git-test ({OFFLINE}/src-repo.git at {self.pin})", r.stderr)
        self.assertIn("which the bundle does not carry", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.m.root, "var/lib/hpcbake/state.json")))


if __name__ == "__main__":
    unittest.main()
