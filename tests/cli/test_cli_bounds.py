"""docs/security.md, "Bounds": a host file larger than its kind allows is refused by name, never read
whole (issue 40 item 8); a value read from the host is quoted as a short excerpt (item 9); a
manifest string holding a NUL is refused at file:line:column (item 10); a manifest that is a link
out of the manifest tree is refused unread, and no line of the file it points to is echoed (item 4).

Every input is made at run time: sparse files (ftruncate: no disk), a 2 MB ID=, YAML "\\0" escapes,
a link to a file of shadow-like lines."""
import os
import re
import resource
import shutil
import subprocess
import tempfile
import unittest

from common import _env, bin_for, copy_manifest_set, edit_once, host, run

THREE_GIB = 3 << 30
SECRET = "root:$6$s4ltS4LT$h4shH4SHh4sh:19000:0:99999:7:::\nalice:$y$j9T$SALTsalt$HASHhash: 19000\n"
SECRET_BITS = ("s4lt", "h4sh", "SALT", "HASH", "alice", "root:$")


def run_limited(*args, limit=1 << 30):
    """hpcbake with its address space capped (RLIMIT_AS, set in the child): reading a 3 GiB file
    whole cannot succeed under it, so passing proves the read is bounded."""
    full = _env(None)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([bin_for(full), *args], capture_output=True, text=True, env=full, timeout=60,
                          stdin=subprocess.DEVNULL, preexec_fn=cap)


class Bounds(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-bounds-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.root = os.path.join(self.tmp, "root")
        shutil.copytree(host("hb120rs_v3"), self.root, symlinks=True)

    def sparse(self, rel, size=THREE_GIB):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        with open(path, "wb") as f:
            f.truncate(size)
        return path

    def test_a_3_gib_os_release_is_refused_by_name_under_a_1_gib_address_space(self):
        path = self.sparse("etc/os-release")
        named = f"{path} is 3.0 GiB; an os-release file is at most 64.0 KiB: refusing to read it"
        r = run_limited("--root", self.root, "plan", "--size", "Standard_HB120rs_v3")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn(named, r.stderr)
        self.assertNotIn("bad_alloc", r.stderr)
        r = run_limited("--root", self.root, "detect")
        self.assertIn(named, r.stdout + r.stderr)
        self.assertNotIn("bad_alloc", r.stderr)

    def test_a_3_gib_waagent_conf_and_proc_modules_are_named_by_detect(self):
        conf = self.sparse("etc/waagent.conf")
        mods = self.sparse("proc/modules")
        r = run_limited("--root", self.root, "detect")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout + r.stderr
        self.assertIn(f"{conf} is 3.0 GiB; a configuration file is at most 1.0 MiB", out)
        self.assertIn(f"{mods} is 3.0 GiB; /proc/modules is at most 16.0 MiB", out)

    def test_a_2_mb_id_is_cut_in_the_one_line_error(self):
        # 2 MB: the os-release is past its bound, refused by name; 50 kB: read, and the ID quoted cut.
        for size, needle, said in ((2_000_000, "refusing to read it", "is 1.9 MiB; an os-release file"),
                                   (50_000, "has no manifest", "\u2026 (50000 bytes)")):
            with open(os.path.join(self.root, "etc/os-release"), "w") as f:
                f.write("ID=" + "x" * size + "\nVERSION_ID=1\n")
            r = run("--root", self.root, "plan", "--size", "Standard_HB120rs_v3")
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr[:400])
            line = next(ln for ln in r.stderr.splitlines() if needle in ln)
            self.assertLess(len(line.encode()), 300, line[:400])
            self.assertIn(said, line)
            self.assertNotIn("x" * 100, r.stdout + r.stderr)


class ManifestStrings(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-bounds-m-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.dir = os.path.join(self.tmp, "manifests")
        copy_manifest_set(self.dir)

    def edit(self, rel, old, new):
        edit_once(self, os.path.join(self.dir, rel), old, new)

    def test_a_nul_in_a_url_or_a_package_name_is_refused_at_its_line(self):
        url = "https://us.download.nvidia.com/tesla/580.126.20/NVIDIA-Linux-x86_64-580.126.20.run"
        self.edit("components/nvidia-cuda-driver.yaml", f"- {url}\n", f'- "{url}\\0.evil"\n')
        self.edit("distros/debian-12.yaml", "[build-essential, dkms]", '[build-essential, "dkms\\0x"]')
        r = run("manifest", "lint", "--manifests", self.dir)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        out = r.stdout + r.stderr
        self.assertRegex(out, r"nvidia-cuda-driver\.yaml:\d+:\d+: 'variants\[\d+\]\.artifacts\[0\]\.urls\[0\]' "
                              r"holds the control character \\x00")
        self.assertRegex(out, r"debian-12\.yaml:11:\d+: 'build_packages\[1\]' holds the control character \\x00")
        for verb in (["plan", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04"],
                     ["fetch", "--size", "Standard_ND96isr_H100_v5", "--distro", "ubuntu-22.04", "--cache",
                      os.path.join(self.tmp, "cache")]):
            r = run("--manifests", self.dir, *verb)
            self.assertEqual(r.returncode, 2, verb + [r.stdout, r.stderr])
            self.assertIn("holds the control character \\x00", r.stderr)

    def test_a_manifest_linked_to_a_secret_outside_the_tree_is_refused_unread(self):
        secret = os.path.join(self.tmp, "shadow")
        with open(secret, "w") as f:
            f.write(SECRET)
        os.chmod(secret, 0o600)
        link = os.path.join(self.dir, "sizes", "x.yaml")
        os.symlink(secret, link)
        for args in (["manifest", "lint", "--manifests", self.dir],
                     ["--manifests", self.dir, "plan", "--size", "Standard_ND96isr_H100_v5", "--distro",
                      "ubuntu-22.04"]):
            r = run(*args)
            self.assertNotEqual(r.returncode, 0, args)
            out = r.stdout + r.stderr
            self.assertIn(f"{link}: is a symbolic link to {secret}, outside the tree", out)
            for bit in SECRET_BITS:
                self.assertNotIn(bit, out, args)


if __name__ == "__main__":
    unittest.main()
