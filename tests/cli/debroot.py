"""Real Debian roots for the package-manager and release tests: debootstrap --variant=minbase
from this machine's own mirror, built once and cached outside the clone
(/var/cache/hpcbake-build/debroot/<suite>-<arch>-<key>, the key hashing this file and the mirror),
then used through a throwaway overlay per test, so a test installs packages for real (apt-get,
dpkg, maintainer scripts) and the cached root stays clean.

The default is bookworm on this machine's architecture. A foreign architecture (arm64 here) is
debootstrap's first stage only: every package unpacked, none configured (its maintainer scripts
would need the foreign CPU); DebRoot.run() then starts programs through qemu-user-static, which
it copies into the overlay.

DebRoot.run(*argv) runs argv chrooted into the overlay, in a private mount namespace (unshare
-m): nothing is mounted on the host. Needs root and debootstrap (scripts/deps installs it).
"""
import hashlib
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("HPCBAKE_DEBROOT_CACHE", "/var/cache/hpcbake-build/debroot")


def mirror():
    for path in ("/etc/apt/sources.list.d/debian.sources",):
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line.startswith("URIs:"):
                        return line.split()[1]
    with open("/etc/apt/sources.list") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] == "deb":
                return next(p for p in parts[1:] if "://" in p)
    raise RuntimeError("no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list")


def why_not():
    """The reason this machine cannot make the root, or None."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot, overlay mounts)"
    for tool in ("debootstrap", "unshare", "chroot"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is missing (scripts/deps installs it)"
    return None


NATIVE_ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
QEMU = {"arm64": "qemu-aarch64-static", "amd64": "qemu-x86_64-static"}


def finish_foreign(tmp, debs):
    """What debootstrap's second stage would leave that the tests read, done from this machine:
    the second stage runs every maintainer script, which needs the foreign CPU for each program
    it starts (no binfmt_misc is assumed). Every package it would install is unpacked, and
    ca-certificates' postinst is done by this machine's update-ca-certificates (the package is
    Architecture: all) on the root's own certificates, so /etc/ssl/certs/ca-certificates.crt is the
    bundle the root would have."""
    with open(os.path.join(tmp, "debootstrap", "debpaths")) as f:
        paths = [line.split()[1] for line in f if line.strip()]
    for deb in paths:
        local = os.path.join(debs, os.path.basename(deb))
        subprocess.run(["dpkg-deb", "-x", local if os.path.exists(local) else tmp + deb, tmp], check=True)
    mozilla = os.path.join(tmp, "usr/share/ca-certificates/mozilla")
    with open(os.path.join(tmp, "etc/ca-certificates.conf"), "w") as f:  # what its postinst writes
        f.writelines(f"mozilla/{c}\n" for c in sorted(os.listdir(mozilla)) if c.endswith(".crt"))
    os.makedirs(os.path.join(tmp, "etc/ssl/certs"), exist_ok=True)
    os.makedirs(os.path.join(tmp, "usr/local/share/ca-certificates"), exist_ok=True)
    empty_hooks = os.path.join(tmp, "debootstrap", "no-hooks")
    os.makedirs(empty_hooks, exist_ok=True)
    subprocess.run(["update-ca-certificates", "--certsconf", os.path.join(tmp, "etc/ca-certificates.conf"),
                    "--certsdir", os.path.join(tmp, "usr/share/ca-certificates"),
                    "--localcertsdir", os.path.join(tmp, "usr/local/share/ca-certificates"),
                    "--etccertsdir", os.path.join(tmp, "etc/ssl/certs"), "--hooksdir", empty_hooks],
                   check=True, capture_output=True)
    certs = os.path.join(tmp, "etc/ssl/certs")
    for link in os.listdir(certs):  # it links to the certificates by this machine's path to them
        target = os.readlink(os.path.join(certs, link)) if os.path.islink(os.path.join(certs, link)) else ""
        if target.startswith(tmp + "/"):
            os.remove(os.path.join(certs, link))
            os.symlink(target[len(tmp):], os.path.join(certs, link))
    bundle = os.path.join(certs, "ca-certificates.crt")
    if not os.path.getsize(bundle):
        raise RuntimeError(f"update-ca-certificates left {bundle} empty")


def cached_root(suite="bookworm", arch=NATIVE_ARCH):
    """The cached root, built on first use (a minute or two; its .debs kept beside it)."""
    m = mirror()
    with open(__file__, "rb") as f:
        key = hashlib.sha256(f.read() + m.encode()).hexdigest()[:16]
    name = f"{suite}-{arch}"
    root = os.path.join(CACHE, f"{name}-{key}")
    if os.path.exists(os.path.join(root, ".hpcbake-complete")):
        return root
    os.makedirs(CACHE, exist_ok=True)
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    debs = os.path.join(CACHE, f"debs-{name}")
    os.makedirs(debs, exist_ok=True)
    foreign = ["--foreign"] if arch != NATIVE_ARCH else []
    p = subprocess.run(["debootstrap", "--variant=minbase", f"--arch={arch}", *foreign, f"--cache-dir={debs}",
                        "--include=ca-certificates", suite, tmp, m], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"debootstrap {suite} {arch} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    if foreign:
        finish_foreign(tmp, debs)
    # Only the test's repositories: the root's own sources point at the mirror, which the tests
    # never use (every install resolves from the signed test repository alone).
    with open(os.path.join(tmp, "etc/apt/sources.list"), "w"):
        pass
    for d in ("var/lib/apt/lists", "var/cache/apt/archives", "debootstrap"):  # the mirror's indexes, the .debs
        top = os.path.join(tmp, d)
        for f in os.listdir(top) if os.path.isdir(top) else []:
            if (f.endswith(".deb") or d == "var/lib/apt/lists") and os.path.isfile(os.path.join(top, f)) and f != "lock":
                os.remove(os.path.join(top, f))
    with open(os.path.join(tmp, ".hpcbake-complete"), "w") as f:
        f.write(m + "\n")
    os.rename(tmp, root)
    for old in os.listdir(CACHE):  # roots of other keys are dead weight
        if old.startswith(f"{name}-") and old != os.path.basename(root) and not old.startswith("debs-"):
            shutil.rmtree(os.path.join(CACHE, old), ignore_errors=True)
    return root


class DebRoot:
    """One test's overlay on the cached root: put() files in, run() commands chrooted."""

    def __init__(self, work, suite="bookworm", arch=NATIVE_ARCH):
        self.lower = cached_root(suite, arch)
        self.arch = arch
        tag = "" if (suite, arch) == ("bookworm", NATIVE_ARCH) else f"-{suite}-{arch}"
        self.upper = os.path.join(work, f"debroot-upper{tag}")
        self.scratch = os.path.join(work, f"debroot-work{tag}")
        self.mnt = os.path.join(work, f"debroot-mnt{tag}")
        for d in (self.upper, self.scratch, self.mnt):
            os.makedirs(d, exist_ok=True)
        self.emulator = []
        if arch != NATIVE_ARCH:  # no binfmt_misc is assumed: the emulator runs the program itself
            qemu = shutil.which(QEMU[arch])
            if not qemu:
                raise RuntimeError(f"{QEMU[arch]} is missing (scripts/deps installs qemu-user-static)")
            self.put(f"/usr/libexec/hpcbake-test/{QEMU[arch]}", open(qemu, "rb").read(), 0o755)
            self.emulator = [f"/usr/libexec/hpcbake-test/{QEMU[arch]}"]

    def path(self, p):
        """Where a file put into the root lands (the overlay's upper layer)."""
        return os.path.join(self.upper, p.lstrip("/"))

    def put(self, p, data, mode=0o644):
        dst = self.path(p)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.chmod(dst, mode)

    def put_tree(self, src, p):
        shutil.copytree(src, self.path(p), dirs_exist_ok=True)

    def run(self, *argv, timeout=300):
        script = ('mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && '
                  'mount -t proc proc "$4/proc" && mount -t tmpfs tmpfs "$4/tmp" && m="$4" && shift 4 && '
                  'exec chroot "$m" "$@"')
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "debroot",
                               self.lower, self.upper, self.scratch, self.mnt, *self.emulator, *argv],
                              capture_output=True, text=True, timeout=timeout, env=env)
