"""module install and extract against the real thing: Debian's DKMS building the fixture
module against the installed linux-headers (generic and cloud kernels), the kernel's
sign-file, modinfo from kmod, and .run archives made by Debian's makeself.

Everything DKMS writes goes to per-test trees (--dkmstree/--sourcetree/--installtree,
--no-depmod): the machine's /var/lib/dkms, /usr/src and /lib/modules are not touched."""
import glob
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

from common import FIXTURES, host, run

MODULES = os.path.join(FIXTURES, "modules")


def kernels_with_headers():
    return sorted(os.path.basename(os.path.dirname(b)) for b in glob.glob("/lib/modules/*/build") if os.path.isdir(b))


def modinfo(field, ko):
    return subprocess.run(["modinfo", "-F", field, ko], capture_output=True, text=True, check=True).stdout.strip()


class ModuleInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("SKIPPED: DKMS builds need root (dkms refuses otherwise); run the suite as root")
        for tool in ("dkms", "modinfo", "makeself"):
            if not shutil.which(tool):
                raise AssertionError(f"{tool} is missing: scripts/deps installs it (dkms kmod makeself)")
        cls.kernels = kernels_with_headers()
        if not cls.kernels:
            raise AssertionError("no /lib/modules/*/build: scripts/deps installs linux-headers-amd64 and linux-headers-cloud-amd64")
        if len(cls.kernels) < 2:
            print(f"note: only one kernel with headers here ({cls.kernels[0]}); building for it alone")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-module-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        for k in self.kernels:
            os.makedirs(os.path.join(self.tmp, "inst", k))
        self.dkms_keys_before = sorted(glob.glob("/var/lib/dkms/mok.*"))

    def tearDown(self):
        # hpcbake never lets DKMS generate its own key in the system tree.
        self.assertEqual(sorted(glob.glob("/var/lib/dkms/mok.*")), self.dkms_keys_before)

    def trees(self):
        t = self.tmp
        return ["--dkmstree", f"{t}/dkms", "--sourcetree", f"{t}/src", "--installtree", f"{t}/inst", "--no-depmod"]

    def install(self, source, *extra, name="hpcbake-fixture", module="hpcbake_fixture", kernels=None):
        ks = []
        for k in kernels or self.kernels:
            ks += ["--kernel", k]
        return run("module", "install", source, "--name", name, "--version", "1.0", "--module", module, *ks,
                   *self.trees(), *extra, timeout=300)

    def test_builds_signs_and_installs_for_every_kernel(self):
        r = self.install(os.path.join(MODULES, "hpcbake-fixture"), "--sign", "on", "--key-dir", f"{self.tmp}/keys")
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        for k in self.kernels:
            ko = os.path.join(self.tmp, "inst", k, "updates", "dkms", "hpcbake_fixture.ko")
            self.assertTrue(os.path.isfile(ko), ko)
            # Checked independently of hpcbake's libkmod reading: modinfo from kmod.
            self.assertEqual(modinfo("signer", ko), "hpcbake module signing key")
            self.assertEqual(modinfo("vermagic", ko).split()[0], k)
            self.assertIn(f"{k}", r.stdout)
        key = os.path.join(self.tmp, "keys", "signing.key")
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.dirname(key)).st_mode & 0o777, 0o700)
        # The exported certificate is DER and matches the key (openssl checks the modulus).
        der = os.path.join(self.tmp, "keys", "signing.der")
        cert_mod = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", der, "-noout", "-modulus"],
                                  capture_output=True, text=True, check=True).stdout
        key_mod = subprocess.run(["openssl", "rsa", "-in", key, "-noout", "-modulus"],
                                 capture_output=True, text=True, check=True).stdout
        self.assertEqual(cert_mod, key_mod)
        self.assertIn(der, r.stdout)

    def test_unsigned_when_signing_is_off_and_secure_boot_is_off(self):
        r = self.install(os.path.join(MODULES, "hpcbake-fixture"), "--sign", "off", kernels=self.kernels[:1])
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        ko = os.path.join(self.tmp, "inst", self.kernels[0], "updates", "dkms", "hpcbake_fixture.ko")
        self.assertEqual(modinfo("signer", ko), "")

    def make_run(self, corrupt=False):
        payload = os.path.join(self.tmp, "payload")
        shutil.copytree(os.path.join(MODULES, "hpcbake-fixture"), os.path.join(payload, "kernel"))
        run_file = os.path.join(self.tmp, "fixture-driver.run")
        subprocess.run(["makeself", "--quiet", "--sha256", payload, run_file, "hpcbake fixture driver", "./true"],
                       check=True, capture_output=True)
        if corrupt:
            data = bytearray(open(run_file, "rb").read())
            data[-100] ^= 0xFF  # inside the compressed payload
            open(run_file, "wb").write(bytes(data))
        return run_file

    def test_from_a_makeself_run_file_like_nvidia_ships(self):
        r = self.install(self.make_run(), "--subdir", "kernel", "--sign", "off", kernels=self.kernels[:1])
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "src", "hpcbake-fixture-1.0", "hpcbake_fixture.c")))
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "src", "hpcbake-fixture-1.0", "dkms.conf")))

    def test_a_corrupted_run_file_is_refused_and_nothing_is_registered(self):
        r = self.install(self.make_run(corrupt=True), "--subdir", "kernel", "--sign", "off", kernels=self.kernels[:1])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("fixture-driver.run", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "src", "hpcbake-fixture-1.0")))

    def test_from_a_tarball_with_one_top_level_directory(self):
        tgz = os.path.join(self.tmp, "fixture-1.0.tar.gz")
        with tarfile.open(tgz, "w:gz") as t:
            t.add(os.path.join(MODULES, "hpcbake-fixture"), arcname="hpcbake-fixture-1.0")
        r = self.install(tgz, "--sign", "off", kernels=self.kernels[:1])
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)

    def test_a_build_failure_shows_the_make_log_tail(self):
        r = self.install(os.path.join(MODULES, "hpcbake-broken"), "--sign", "off", name="hpcbake-broken",
                         module="hpcbake_broken", kernels=self.kernels[:1])
        self.assertEqual(r.returncode, 5, r.stderr)
        # The log is kept beside the test's DKMS tree (not in the host's /var/log), and the failed
        # build is rolled back: nothing registered, no sources left.
        log = os.path.join(self.tmp, "dkms.hpcbake-logs", f"hpcbake-broken-1.0-{self.kernels[0]}.make.log")
        self.assertIn(log, r.stderr)
        self.assertTrue(os.path.isfile(log))
        self.assertRegex(r.stderr, r"first error: \S+hpcbake_broken\.c:6:16: error: implicit declaration of function "
                                   r".hpcbake_this_symbol_does_not_exist.")
        self.assertIn("build failed", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "dkms", "hpcbake-broken", "1.0")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "src", "hpcbake-broken-1.0")))

    def test_missing_headers_say_which_package(self):
        r = self.install(os.path.join(MODULES, "hpcbake-fixture"), "--sign", "off", kernels=["6.1.0-999-amd64"])
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("no kernel headers for 6.1.0-999-amd64", r.stderr)
        self.assertIn("linux-headers-6.1.0-999-amd64", r.stderr)

    def test_install_headers_reports_the_exact_apt_command_and_its_output(self):
        # Real apt-get, asked for a headers package no mirror has: it changes nothing.
        r = self.install(os.path.join(MODULES, "hpcbake-fixture"), "--sign", "off", "--install-headers",
                         "--distro", "debian-12", kernels=["6.1.0-999-amd64"])
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("apt-get install -y -q --no-install-recommends", r.stderr)
        self.assertIn("linux-headers-6.1.0-999-amd64 exited with 100", r.stderr)
        self.assertIn("Unable to locate package linux-headers-6.1.0-999-amd64", r.stderr)

    def test_build_exclusive_skip_is_an_error_for_a_target_kernel(self):
        r = self.install(os.path.join(MODULES, "hpcbake-fixture"), "--sign", "off",
                         "--directive", 'BUILD_EXCLUSIVE_KERNEL="^4\\."', kernels=self.kernels[:1])
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("BUILD_EXCLUSIVE", r.stderr)


class SecureBootPolicy(unittest.TestCase):
    def test_secure_boot_on_and_signing_off_is_refused_before_building(self):
        # The NVadsA10 v5 fixture host has Secure Boot enabled in its efivars.
        r = run("--root", host("nv36ads_a10_v5"), "module", "install", os.path.join(MODULES, "hpcbake-fixture"),
                "--name", "x", "--version", "1", "--module", "x", "--kernel", "6.1.0-1-amd64", "--sign", "off")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("Secure Boot is enabled", r.stderr)
        self.assertIn("signing is off", r.stderr)

    def test_plan_refuses_secure_boot_with_signing_off_and_notes_it_otherwise(self):
        args = ["--root", host("nv36ads_a10_v5"), "--no-imds", "plan", "--size", "Standard_NC24lds_xl_RTXPRO6000BSE_v6"]
        r = run(*args, "--sign", "off")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("Secure Boot is enabled on this host", r.stderr)
        self.assertIn("hint:", r.stderr)
        ok = run(*args)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("Secure Boot is enabled", ok.stdout)


if __name__ == "__main__":
    unittest.main()
