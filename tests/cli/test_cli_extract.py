"""hpcbake extract against a malicious-archive corpus made here with Python's tarfile and
zipfile: each archive is refused with an error naming the entry, and nothing lands outside
the destination (nor in it: a refused archive leaves no destination and no temporary tree)."""
import io
import json
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

    def bomb(self, name="ratio-bomb.tgz", size=96 << 20):
        """A real file, then `size` zero bytes: gzip packs 96 MiB into about 100 KB (1000:1),
        far under the default byte limits (16 GiB in all, 8 GiB per entry)."""
        zeros = b"\0" * size

        def build(t):
            add_file(t, "readme.txt", b"a real file first\n")
            add_file(t, "zeros.img", zeros)
        return self.make_tar(name, build)

    def test_an_implausible_expansion_ratio_is_refused_by_default(self):
        bomb = self.bomb()
        self.assertLess(os.path.getsize(bomb), 1 << 20)
        r = self.assert_refused(bomb, "zeros.img", words="expands")
        self.assertIn("--max-ratio", r.stderr)
        self.assertEqual(r.returncode, 4, r.stderr)
        # The flag that the error names lets a trusted archive through.
        ok = self.extract(bomb, "--max-ratio", "0")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertEqual(os.path.getsize(os.path.join(self.work, "dest", "zeros.img")), 96 << 20)

    def test_a_small_file_of_zeros_is_no_bomb(self):
        # 8 MiB of zeros (8 KB compressed): under the ratio floor, extracted with the defaults.
        r = self.extract(self.bomb("zeros.tgz", 8 << 20))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_every_limit_error_names_the_flag_that_raises_it(self):
        small = self.bomb("limits.tgz", 4 << 20)
        # The ratio is judged past 64 MiB of output: 4 GiB of zeros in 4 MB, the bomb,
        # scaled down to 96 MiB in 100 KB, under the default byte limits.
        big = self.bomb()
        cases = [
            (small, ("--max-bytes", str(1 << 20)), "--max-bytes"),
            (small, ("--max-entry-bytes", str(1 << 20)), "--max-entry-bytes"),
            (small, ("--max-entries", "1"), "--max-entries"),
            (big, (), "--max-ratio"),
        ]
        for archive, flags, named in cases:
            with self.subTest(flags=flags, named=named):
                r = self.extract(archive, *flags)
                self.assertEqual(r.returncode, 4, r.stderr)
                self.assertIn(named, r.stderr)
                self.assertEqual(os.listdir(self.work), [])

    def test_help_names_every_limit_and_its_default(self):
        r = run("extract", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in ("--max-bytes", "--max-entry-bytes", "--max-entries", "--max-ratio"):
            self.assertIn(flag, r.stdout)
        for default in ("17179869184", "8589934592", "1000000", "100"):
            self.assertIn(default, r.stdout)

    def makeself(self, name, *flags):
        src = os.path.join(self.tmp, "payload")
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "setup.sh"), "w") as f:
            f.write("#!/bin/sh\necho installing\n")
        path = os.path.join(self.tmp, name)
        subprocess.run(["makeself", "--quiet", *flags, src, path, "test payload", "./setup.sh"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return path

    def test_makeself_says_which_checksums_it_verified(self):
        cases = [
            (("--nomd5", "--nocrc"), "no checksums", ("verified",)),
            (("--sha256", "--nomd5", "--nocrc"), "SHA-256 verified", ("MD5", "CRC")),
            ((), "MD5 and CRC verified", ("SHA-256",)),
        ]
        for flags, said, unsaid in cases:
            with self.subTest(flags=flags):
                shutil.rmtree(os.path.join(self.work, "dest"), ignore_errors=True)
                run_file = self.makeself("sums.run", *flags)
                r = self.extract(run_file)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(said, r.stdout)
                for word in unsaid:
                    self.assertNotIn(word, r.stdout)
                j = self.extract_json(run_file)
                self.assertEqual(j["checksums"], [w for w in ("SHA-256", "MD5", "CRC") if w in said])

    def extract_json(self, archive):
        shutil.rmtree(os.path.join(self.work, "dest"), ignore_errors=True)
        r = run("--json", "extract", archive, os.path.join(self.work, "dest"))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_a_bad_makeself_header_names_the_field_and_its_line(self):
        with open(self.makeself("good.run"), "rb") as f:
            good = f.read()
        lines = good.split(b"\n")

        def line_of(prefix):
            return next(i for i, l in enumerate(lines) if l.startswith(prefix)) + 1
        cases = [
            (b'skip="', b'skip="7x6"', "skip"),
            (b'filesizes="', b'filesizes="12 ab"', "filesizes"),
            (b'totalsize="', b'totalsize="1"', "totalsize"),
            (b'MD5="', b'MD5="0123 4567"', "MD5"),
        ]
        for prefix, replacement, field in cases:
            with self.subTest(field=field):
                n = line_of(prefix)
                bad = lines[:]
                bad[n - 1] = replacement
                path = os.path.join(self.tmp, f"bad-{field}.run")
                with open(path, "wb") as f:
                    f.write(b"\n".join(bad))
                r = self.extract(path)
                self.assertEqual(r.returncode, 4, r.stderr)
                self.assertNotIn("Unrecognized archive format", r.stderr)
                self.assertIn(f"{path}:{n}:", r.stderr)
                self.assertIn(field, r.stderr)
                self.assertEqual(os.listdir(self.work), [])


if __name__ == "__main__":
    unittest.main()
