"""hpcbake extract against a malicious-archive corpus made here with Python's tarfile and
zipfile: each archive is refused with an error naming the entry, and nothing lands outside
the destination (nor in it: a refused archive leaves no destination and no temporary tree)."""
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import unittest
import zipfile

from common import run


def add_file(t, name, data=b"x", mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    t.addfile(info, io.BytesIO(data))


def add_link(t, name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    t.addfile(info)


class Extract(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-extract-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.work = os.path.join(self.tmp, "work")  # the destination's parent: must stay clean
        os.makedirs(self.work)
        self.outside = os.path.join(self.tmp, "outside")  # what escapes would hit
        os.makedirs(self.outside)

    def make_tar(self, name, build, mode="w:gz"):
        path = os.path.join(self.tmp, name)
        with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as t:
            build(t)
        return path

    def extract(self, archive, *extra):
        return run("extract", archive, os.path.join(self.work, "dest"), *extra)

    def assert_refused(self, archive, entry, *extra, words=None):
        r = self.extract(archive, *extra)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn(entry, r.stderr)
        if words:
            self.assertIn(words, r.stderr)
        self.assertEqual(os.listdir(self.work), [], "a refused archive left something behind")
        self.assertEqual(os.listdir(self.outside), [], "something was written outside the destination")
        return r

    def test_a_good_archive_round_trips_in_every_format(self):
        def build(t):
            add_file(t, "pkg/bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
            add_file(t, "pkg/data.txt", b"hello\n" * 1000)
            add_link(t, "pkg/link", "data.txt")
        for mode, suffix in (("w", "tar"), ("w:gz", "tar.gz"), ("w:xz", "tar.xz"), ("w:bz2", "tar.bz2")):
            with self.subTest(fmt=suffix):
                shutil.rmtree(os.path.join(self.work, "dest"), ignore_errors=True)
                r = self.extract(self.make_tar(f"good.{suffix}", build, mode))
                self.assertEqual(r.returncode, 0, r.stderr)
                d = os.path.join(self.work, "dest", "pkg")
                self.assertEqual(open(os.path.join(d, "data.txt"), "rb").read(), b"hello\n" * 1000)
                self.assertTrue(os.stat(os.path.join(d, "bin", "tool")).st_mode & stat.S_IXUSR)
                self.assertEqual(os.readlink(os.path.join(d, "link")), "data.txt")
        # zstd through the zstd tool (Python has no zstd writer), and zip.
        shutil.rmtree(os.path.join(self.work, "dest"), ignore_errors=True)
        plain = self.make_tar("good-z.tar", build, "w")
        subprocess.run(["zstd", "-q", "-f", plain, "-o", plain + ".zst"], check=True)
        r = self.extract(plain + ".zst")
        self.assertEqual(r.returncode, 0, r.stderr)
        shutil.rmtree(os.path.join(self.work, "dest"), ignore_errors=True)
        zpath = os.path.join(self.tmp, "good.zip")
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("pkg/data.txt", b"zip\n" * 100)
        r = self.extract(zpath)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(open(os.path.join(self.work, "dest", "pkg", "data.txt"), "rb").read(), b"zip\n" * 100)

    def test_dot_dot_entry(self):
        self.assert_refused(self.make_tar("dotdot.tgz", lambda t: add_file(t, "../outside/evil")), "../outside/evil")

    def test_absolute_path(self):
        target = os.path.join(self.outside, "abs")
        self.assert_refused(self.make_tar("abs.tgz", lambda t: add_file(t, target)), target)

    def test_symlink_escape_then_write_through_it(self):
        def build(t):
            add_link(t, "esc", "../../outside")
            add_file(t, "esc/evil")
        self.assert_refused(self.make_tar("symesc.tgz", build), "esc")

    def test_absolute_symlink(self):
        self.assert_refused(self.make_tar("symabs.tgz", lambda t: add_link(t, "etc", "/etc")), "etc")

    def test_hardlink_escape(self):
        def build(t):
            add_link(t, "pw", "../../outside/secret", tarfile.LNKTYPE)
        open(os.path.join(self.outside, "secret"), "w").write("s")
        r = self.extract(self.make_tar("hardesc.tgz", build))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("pw", r.stderr)
        self.assertEqual(os.listdir(self.work), [])
        self.assertEqual(os.listdir(self.outside), ["secret"])

    def test_device_node(self):
        def build(t):
            info = tarfile.TarInfo("dev/sda")
            info.type = tarfile.CHRTYPE
            info.devmajor, info.devminor = 8, 0
            t.addfile(info)
        self.assert_refused(self.make_tar("dev.tgz", build), "dev/sda")

    def test_setuid_file(self):
        self.assert_refused(self.make_tar("suid.tgz", lambda t: add_file(t, "bin/su", b"x", 0o4755)), "bin/su")

    def test_size_bomb(self):
        # 64 MiB of zeros compress to about 64 KiB; the limit is 16 MiB.
        zeros = b"\0" * (64 << 20)
        r = self.assert_refused(self.make_tar("bomb.tgz", lambda t: add_file(t, "bomb.bin", zeros)), "bomb.bin",
                                "--max-bytes", str(16 << 20))
        self.assertLess(os.path.getsize(os.path.join(self.tmp, "bomb.tgz")), 1 << 20)

    def test_entry_count(self):
        def build(t):
            for i in range(2000):
                add_file(t, f"f/{i}", b"")
        r = self.extract(self.make_tar("many.tgz", build), "--max-entries", "1000")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("1000", r.stderr)
        self.assertEqual(os.listdir(self.work), [])

    def test_truncated_archive(self):
        good = self.make_tar("trunc.tgz", lambda t: add_file(t, "big.bin", os.urandom(1 << 20)))
        data = open(good, "rb").read()
        open(good, "wb").write(data[: len(data) // 2])
        r = self.extract(good)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("trunc.tgz", r.stderr)
        self.assertEqual(os.listdir(self.work), [])


if __name__ == "__main__":
    unittest.main()
