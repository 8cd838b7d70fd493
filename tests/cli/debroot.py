"""A real Debian 12 root for the package-manager tests: debootstrap --variant=minbase of bookworm
from this machine's own mirror, built once and cached outside the clone
(/var/cache/hpcbake-build/debroot/bookworm-<key>, the key hashing this file and the mirror), then
used through a throwaway overlay per test, so a test installs packages for real (apt-get, dpkg,
maintainer scripts) and the cached root stays clean.

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


def cached_root():
    """The cached root, built on first use (a minute or two; its .debs kept beside it)."""
    m = mirror()
    with open(__file__, "rb") as f:
        key = hashlib.sha256(f.read() + m.encode()).hexdigest()[:16]
    root = os.path.join(CACHE, f"bookworm-{key}")
    if os.path.exists(os.path.join(root, ".hpcbake-complete")):
        return root
    os.makedirs(CACHE, exist_ok=True)
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    debs = os.path.join(CACHE, "debs")
    os.makedirs(debs, exist_ok=True)
    p = subprocess.run(["debootstrap", "--variant=minbase", f"--cache-dir={debs}", "--include=ca-certificates",
                        "bookworm", tmp, m], capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"debootstrap failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    # Only the test's repositories: the root's own sources point at the mirror, which the tests
    # never use (every install resolves from the signed test repository alone).
    with open(os.path.join(tmp, "etc/apt/sources.list"), "w"):
        pass
    lists = os.path.join(tmp, "var/lib/apt/lists")
    for f in os.listdir(lists):  # the mirror's indexes: a test's apt sees only its own repository's
        if os.path.isfile(os.path.join(lists, f)) and f != "lock":
            os.remove(os.path.join(lists, f))
    for f in os.listdir(os.path.join(tmp, "var/cache/apt/archives")):
        if f.endswith(".deb"):
            os.remove(os.path.join(tmp, "var/cache/apt/archives", f))
    with open(os.path.join(tmp, ".hpcbake-complete"), "w") as f:
        f.write(m + "\n")
    os.rename(tmp, root)
    for old in os.listdir(CACHE):  # roots of other keys are dead weight
        if old.startswith("bookworm-") and old != os.path.basename(root):
            shutil.rmtree(os.path.join(CACHE, old), ignore_errors=True)
    return root


class DebRoot:
    """One test's overlay on the cached root: put() files in, run() commands chrooted."""

    def __init__(self, work):
        self.lower = cached_root()
        self.upper = os.path.join(work, "debroot-upper")
        self.scratch = os.path.join(work, "debroot-work")
        self.mnt = os.path.join(work, "debroot-mnt")
        for d in (self.upper, self.scratch, self.mnt):
            os.makedirs(d, exist_ok=True)

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
                               self.lower, self.upper, self.scratch, self.mnt, *argv],
                              capture_output=True, text=True, timeout=timeout, env=env)
