"""Packaging and the files around it: the .deb (and .rpm) CPack builds, the bash completion,
the Packer template (real `packer validate` and `packer console` with Debian's packer 1.6.6,
adapted as tests/packer/packer_template.py says) and its step script, and the Batch pool example.
tests/packer runs the template's build block with a real `packer build` (null and qemu builders)."""
import atexit
import glob
import gzip
import hashlib
import json
import os
import re
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

from common import BIN, SRC, help_commands, help_of, help_options

BUILD = os.environ.get("HPCBAKE_BUILD_DIR", "")
COMPLETION = os.path.join(SRC, "packaging", "completion", "hpcbake.bash")
PACKER_DIR = os.path.join(SRC, "packer")
sys.path.insert(0, os.path.join(SRC, "tests", "packer"))
import packer_template  # noqa: E402  (the template as the tests run it with Packer 1.6.6)

EXAMPLE = packer_template.EXAMPLE
STEP_SCRIPT = packer_template.STEP_SCRIPT
# A SHA256SUMS line for validate (the example's is a placeholder that validate refuses).
SHA_LINE = "0123456789abcdef" * 4 + "  hpcbake-1.2.3-linux-x86_64.tar.gz"

_packages = {}


def static_build():
    """Whether the packaged binary is the portable release (scripts/static-deps' static libraries:
    scripts/test's build-test), which needs only glibc, or a build against Debian's shared
    libraries: read from the binary's own NEEDED entries, so the packages' dependencies are checked
    against what the binary really loads."""
    exe = os.path.join(BUILD, "src", "hpcbake")
    out = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True, check=True).stdout
    return "libcurl" not in out


def fake_release(tmp, arch=None):
    """A release tarball laid out as scripts/release makes one (one top directory,
    hpcbake-VERSION-linux-ARCH), whose stand-in bin/hpcbake prints its argv (then $FAKE_STDOUT, if
    set; then writes a stand-in report to $FAKE_WRITE, if set) and exits with $FAKE_EXIT. Returns its
    path and SHA-256."""
    name = f"hpcbake-9.9.9-linux-{arch or platform.machine()}"
    exe = os.path.join(tmp, "stage", name, "bin", "hpcbake")
    os.makedirs(os.path.dirname(exe))
    with open(exe, "w") as f:
        f.write('#!/bin/sh\necho "argv: $*"\nif [ -n "${FAKE_STDOUT:-}" ]; then printf \'%s\\n\' "$FAKE_STDOUT"; fi\n'
                'if [ -n "${FAKE_WRITE:-}" ]; then echo "<testsuites/>" > "$FAKE_WRITE"; fi\n'
                'exit ${FAKE_EXIT:-0}\n')
    os.chmod(exe, 0o775)  # group-writable in the tarball: it must be unpacked 0755 (umask 022)
    path = os.path.join(tmp, f"{name}.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(os.path.dirname(os.path.dirname(exe)), arcname=name)
    with open(path, "rb") as f:
        return path, hashlib.sha256(f.read()).hexdigest()


def build_package(generator):
    """Runs CPack once per generator into a scratch directory; returns the package path."""
    if generator in _packages:
        return _packages[generator]
    if not BUILD or not os.path.exists(os.path.join(BUILD, "CPackConfig.cmake")):
        raise unittest.SkipTest("HPCBAKE_BUILD_DIR has no CPackConfig.cmake: run through ctest")
    out = tempfile.mkdtemp(prefix=f"hpcbake-cpack-{generator.lower()}-")
    atexit.register(shutil.rmtree, out, True)
    r = subprocess.run(["cpack", "-G", generator, "-B", out, "--config", os.path.join(BUILD, "CPackConfig.cmake")],
                       capture_output=True, text=True, timeout=500)
    if r.returncode != 0:
        raise AssertionError(f"cpack -G {generator} failed:\n{r.stdout}\n{r.stderr}")
    ext = {"DEB": "deb", "RPM": "rpm"}[generator]
    found = glob.glob(os.path.join(out, f"*.{ext}"))
    if len(found) != 1:
        raise AssertionError(f"cpack -G {generator} made {found} in {out}")
    _packages[generator] = found[0]
    return found[0]


def completions(line, with_bash_completion=False):
    """What bash completes for `line` (the word under the cursor is the last one)."""
    words = line.split(" ")
    prelude = ""
    if with_bash_completion:
        prelude = "source /usr/share/bash-completion/bash_completion\n"
    quoted = " ".join(repr(w) if w else "''" for w in words)
    script = (f"{prelude}source {COMPLETION}\n"
              f"COMP_WORDS=({quoted})\n"
              f"COMP_CWORD={len(words) - 1}\nCOMP_LINE={line!r}\nCOMP_POINT=${{#COMP_LINE}}\n"
              "_hpcbake hpcbake \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    # The script asks the binary (`hpcbake __complete`), found on PATH as a user's would be.
    env = dict(os.environ, PATH=os.path.dirname(BIN) + os.pathsep + os.environ.get("PATH", "")) if BIN else None
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=30,
                       env=env)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return [w for w in r.stdout.split("\n") if w]


class Completion(unittest.TestCase):
    def test_loads_and_completes_verbs(self):
        r = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source {COMPLETION} && complete -p hpcbake"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("complete -F _hpcbake hpcbake", r.stdout)
        self.assertEqual(completions("hpcbake se"), ["seal"])
        self.assertIn("verify", completions("hpcbake "))
        self.assertIn("install", completions("hpcbake "))
        self.assertEqual(completions("hpcbake --root /tmp ve"), ["verify"])
        self.assertIn("--deprovision", completions("hpcbake seal --"))
        self.assertEqual(completions("hpcbake install --reboot a"), ["auto"])
        self.assertEqual(completions("hpcbake rdma st"), ["status"])

    def test_with_bash_completion_loaded(self):
        if not os.path.exists("/usr/share/bash-completion/bash_completion"):
            self.skipTest("bash-completion is not installed (scripts/deps installs it)")
        self.assertEqual(completions("hpcbake se", with_bash_completion=True), ["seal"])
        self.assertIn("--junit", completions("hpcbake verify --j", with_bash_completion=True))

    def test_every_command_and_option_of_the_binary_is_completed(self):
        """Each command `hpcbake help` lists, and each option its help lists, as bash completes them."""
        commands, options = help_commands, help_options
        top = commands(help_of())
        self.assertIn("seal", top)
        self.assertEqual(sorted(top), sorted(completions("hpcbake ")))
        checked = 0
        for verb in top:
            subs = commands(help_of(verb)) or [None]
            for sub in subs:
                path = [verb] + ([sub] if sub else [])
                if sub:
                    self.assertIn(sub, completions("hpcbake " + verb + " "))
                offered = completions("hpcbake " + " ".join(path) + " --")
                for opt in options(help_of(*path)):
                    self.assertIn(opt, offered, f"hpcbake {' '.join(path)}")
                    checked += 1
                for glob in ("--root", "--json", "--quiet", "--no-imds"):
                    self.assertIn(glob, offered, "global options complete after every command")
        self.assertGreater(checked, 80)

    def test_values_sizes_distros_and_profiles(self):
        # bash splits "--reboot=a" at the "=" (COMP_WORDBREAKS): the words are --reboot, =, a.
        self.assertEqual(completions("hpcbake install --reboot = "), ["exit", "auto", "never"])
        self.assertEqual(completions("hpcbake install --reboot = a"), ["auto"])
        # Without "=" in COMP_WORDBREAKS it is one word, completed whole.
        self.assertEqual(completions("hpcbake install --reboot="), ["--reboot=exit", "--reboot=auto", "--reboot=never"])
        self.assertEqual(completions("hpcbake plan --sign o"), ["on", "off"])
        self.assertIn("Standard_ND96isr_H100_v5", completions("hpcbake plan --size Standard_ND96"))
        self.assertIn("ND96isr_H100_v5", completions("hpcbake plan --size ND96"))
        self.assertIn("ubuntu-22.04", completions("hpcbake --no-imds plan --distro ub"))
        self.assertIn("containers", completions("hpcbake install --profile c"))
        # A positional or a free value: nothing from the binary, so bash completes file names.
        self.assertEqual(completions("hpcbake extract /nonexistent-dir-for-test/"), [])


class Packer(unittest.TestCase):
    """packer/hpcbake.pkr.hcl with Debian's packer 1.6.6: `packer validate` (the adaptations for
    1.6.6 are packer_template.py's, each checked), `packer console` for what the variables make of
    the source's arguments, and the build block's shape. tests/packer runs the build block for real."""

    def setUp(self):
        self.packer = shutil.which("packer")
        if not self.packer:
            self.skipTest("packer is not installed (scripts/deps installs Debian's packer 1.6.6)")
        self.tmp = tempfile.mkdtemp(prefix="hpcbake-packer-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.env = dict(os.environ, CHECKPOINT_DISABLE="1", HOME=self.tmp, PACKER_CONFIG_DIR=self.tmp)
        self.text = packer_template.read()
        self.payload = os.path.join(self.tmp, "payload")
        os.makedirs(self.payload)
        # The template as 1.6.6's built-in azure-arm builder takes it, beside packer/scripts.
        self.dir = os.path.join(self.tmp, "packer")
        os.makedirs(self.dir)
        os.symlink(os.path.join(PACKER_DIR, "scripts"), os.path.join(self.dir, "scripts"))
        self.azure = os.path.join(self.dir, "hpcbake.pkr.hcl")
        with open(self.azure, "w") as f:
            f.write(packer_template.azure_for_packer_1_6(self.text))

    def packer_run(self, *args, stdin=None):
        return subprocess.run([self.packer, *args], capture_output=True, text=True, timeout=120, env=self.env,
                              cwd=self.dir, input=stdin)

    def validate(self, *args):
        return self.packer_run("validate", "-var-file", EXAMPLE, "-var", f"payload_dir={self.payload}",
                               "-var", f"hpcbake_release_sha256={SHA_LINE}", *args, self.azure)

    def console(self, expression, *args):
        """What `packer console` evaluates EXPRESSION to with the example's variables and ARGS."""
        r = self.packer_run("console", "-var-file", EXAMPLE, "-var", f"payload_dir={self.payload}",
                            "-var", f"hpcbake_release_sha256={SHA_LINE}", *args, self.azure, stdin=expression + "\n")
        self.assertEqual(r.returncode, 0, f"packer console {args} <<< {expression}:\n{r.stdout}{r.stderr}")
        return r.stdout.strip()

    def test_one_template_with_the_azure_plugin_required(self):
        self.assertEqual(sorted(os.path.basename(t) for t in glob.glob(os.path.join(PACKER_DIR, "*.pkr.hcl"))),
                         ["hpcbake.pkr.hcl"])
        start, end = packer_template.block(self.text, "packer {")
        block = self.text[start:end]
        self.assertIn('required_version = ">= 1.7.0"', block, "required_plugins needs Packer 1.7.0")
        self.assertRegex(block, r'azure = \{\n\s+source = "github.com/hashicorp/azure"\n(\s+#[^\n]*\n)*'
                                r'\s+version = ">= 2\.0\.5"\n')
        # As 1.6.6 has it: the packer block refused as it is, accepted with it left out.
        with open(os.path.join(self.dir, "as-is.pkr.hcl"), "w") as f:
            f.write(self.text)
        r = self.packer_run("validate", "-syntax-only", "as-is.pkr.hcl")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('Blocks of type "required_plugins" are not expected here', r.stdout + r.stderr)
        os.remove(os.path.join(self.dir, "as-is.pkr.hcl"))
        r = self.packer_run("validate", "-syntax-only", self.azure)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Syntax-only check passed", r.stdout)

    def test_full_validate_offline_for_every_distro_with_the_example_variables(self):
        # Full validation prepares the azure-arm builder and every provisioner without calling
        # Azure: it needs the required variables and an existing payload directory.
        distros = sorted(os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(SRC, "manifests", "distros", "*.yaml")))
        for distro in distros:
            with self.subTest(distro=distro):
                image = json.loads(self.console("jsonencode(local.image)", "-var", f"distro={distro}"))
                extra = []
                if not image["sku"]:   # no marketplace image named for it: the user names one
                    self.assertIn(distro, ("rhel-9", "debian-12"))
                    r = self.validate("-var", f"distro={distro}")
                    self.assertNotEqual(r.returncode, 0)
                    self.assertIn("An image_sku must be specified", r.stdout + r.stderr)
                    extra = ["-var", "image_publisher=P", "-var", "image_offer=O", "-var", "image_sku=S"]
                for security in ("Standard", "TrustedLaunch", "TrustedLaunchSupported"):
                    r = self.validate("-var", f"distro={distro}", "-var", f"security_type={security}", *extra)
                    self.assertEqual(r.returncode, 0, f"{distro} {security}:\n{r.stdout}{r.stderr}")

    def test_validate_refuses_what_would_fail_on_azure(self):
        cases = [
            (["-var", "hpcbake_release_sha256=FILL IN"], "hpcbake_release_sha256 must be the tarball's SHA-256"),
            (["-var", "hpcbake_release_url=ftp://x/y"], "hpcbake_release_url must be an https://"),
            (["-var", "remote_dir=/tmp/hpcbake-payload"], "remote_dir must be an absolute directory"),
            (["-var", "remote_dir=/run/hpcbake"], "remote_dir must be an absolute directory"),
            (["-var", "remote_dir=payload"], "remote_dir must be an absolute directory"),
            (["-var", "distro=fedora-40"], "The distro must be one of hpcbake's"),
            (["-var", "security_type=ConfidentialVM"], "security_type must be Standard, TrustedLaunch or TrustedLaunchSupported"),
            (["-var", "gallery_image_version=1.0"], "gallery_image_version must be Major.Minor.Patch"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = self.validate(*args)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(message, r.stdout + r.stderr)
        # The example as shipped: its SHA-256 is a placeholder, refused until filled in.
        r = self.packer_run("validate", "-var-file", EXAMPLE, "-var", f"payload_dir={self.payload}", self.azure)
        self.assertIn("hpcbake_release_sha256 must be the tarball's SHA-256", r.stdout + r.stderr)
        r = self.packer_run("validate", self.azure)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('Unset variable "gallery_name"', r.stdout + r.stderr)

    def test_build_vm_size_apart_from_size_validates_and_defers_the_hardware_verdict(self):
        """`packer validate` (the issue's "Done when") with build_vm_size other than size, with the
        two equal, and refusing malformed sizes; then what each gives the source and the steps
        (packer console evaluates the template's own expressions)."""
        src = packer_template.source_block(self.text)
        vm_size = re.search(r"\n  vm_size += ([^\n]+)\n", src).group(1)
        exclude = re.search(r"\n  shared_gallery_image_version_exclude_from_latest += ([^\n]+)\n", src).group(1)
        aarch64 = ["-var", "hpcbake_release_url=https://a.blob.core.windows.net/h/hpcbake-1.2.3-linux-aarch64.tar.gz?sig=X",
                   "-var", "size=Standard_ND128isr_NDR_GB200_v6"]

        def env(*args):
            return dict(e.split("=", 1) for e in json.loads(self.console("jsonencode(local.env)", *args)))

        cases = [  # variables, the build VM's size, hardware checks, excluded from latest
            ([], "Standard_D8s_v5", "deferred", "true"),                       # the defaults: bake elsewhere
            (["-var", "build_vm_size=Standard_D16s_v5"], "Standard_D16s_v5", "deferred", "true"),
            (aarch64, "Standard_D8ps_v6", "deferred", "true"),                 # an aarch64 release
            (["-var", "build_vm_size=Standard_ND96isr_H100_v5"], "Standard_ND96isr_H100_v5", "", "false"),  # as before
            (["-var", "size=Standard_NC24ads_A100_v4", "-var", "build_vm_size=Standard_NC24ads_A100_v4"],
             "Standard_NC24ads_A100_v4", "", "false"),
            (["-var", "build_vm_size=Standard_nd96isr_h100_v5"], "Standard_nd96isr_h100_v5", "", "false"),  # case aside
        ]
        for args, build, hardware, excluded in cases:
            with self.subTest(args=args):
                for security in ("Standard", "TrustedLaunch", "TrustedLaunchSupported"):
                    r = self.validate(*args, "-var", f"security_type={security}")
                    self.assertEqual(r.returncode, 0, f"{args} {security}:\n{r.stdout}{r.stderr}")
                self.assertEqual(self.console(vm_size, *args), build)
                self.assertEqual(self.console(exclude, *args), excluded)
                e = env(*args)
                self.assertEqual(e["HPCBAKE_HARDWARE_CHECKS"], hardware)
                self.assertEqual(e["HPCBAKE_SIZE"], self.console("var.size", *args), "hpcbake installs for the target")
                tags = json.loads(self.console("jsonencode(local.tags)", *args))
                self.assertEqual((tags["size"], tags["build_vm_size"], tags["hardware"]),
                                 (e["HPCBAKE_SIZE"], build, "deferred" if hardware else "verified"))
        self.assertEqual(self.console("var.size"), "Standard_ND96isr_H100_v5")
        self.assertEqual(self.console("var.build_vm_size"), "", "empty: the general-purpose size of the release's architecture")
        for args, message in (
                (["-var", "size=ND96isr_H100_v5"], "The size must be one of hpcbake's VM sizes"),
                (["-var", "size=Standard ND96isr_H100_v5"], "The size must be one of hpcbake's VM sizes"),
                (["-var", "build_vm_size=D8s_v5"], "The build_vm_size must be an Azure VM size name"),
                (["-var", "build_vm_size=Standard_D8s_v5;rm"], "The build_vm_size must be an Azure VM size name"),
                # The old name would otherwise be ignored (a variable file's unknown name is only a
                # warning), and the image baked for the default size.
                (["-var", "vm_size=Standard_NC24ads_A100_v4"], "The vm_size variable is gone: set size")):
            with self.subTest(args=args):
                r = self.validate(*args)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(message, " ".join((r.stdout + r.stderr).split()))
        old = os.path.join(self.tmp, "old.pkrvars.hcl")
        with open(old, "w") as f:
            f.write('vm_size = "Standard_NC24ads_A100_v4"\n')
        r = self.validate("-var-file", old)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("The vm_size variable is gone", " ".join((r.stdout + r.stderr).split()))

    def test_profile_and_size_are_validated_like_distro(self):
        """A typo in profile or size stops `packer validate`, not the install on the billed VM: each
        variable takes exactly hpcbake's ids (manifests/profiles, manifests/sizes)."""
        profiles = sorted(os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(SRC, "manifests", "profiles", "*.yaml")))
        allowed = re.search(r'variable "profile" \{.*?contains\(\[(.*?)\], var\.profile\)', self.text, re.S).group(1)
        self.assertEqual(sorted(re.findall(r'"([^"]+)"', allowed)), profiles, "the profile variable takes manifests/profiles")
        sizes = []
        for p in glob.glob(os.path.join(SRC, "manifests", "sizes", "*.yaml")):
            with open(p) as f:
                sizes.append(re.search(r'^size: "([^"]+)"$', f.read(), re.M).group(1))
        listed = re.search(r'variable "size" \{.*?contains\(\[for s in \[(.*?)\] : lower\(s\)\], lower\(var\.size\)\)',
                           self.text, re.S).group(1)
        self.assertEqual(sorted(re.findall(r'"([^"]+)"', listed)), sorted(sizes), "the size variable takes manifests/sizes")
        for profile in profiles:
            r = self.validate("-var", f"profile={profile}")
            self.assertEqual(r.returncode, 0, f"{profile}:\n{r.stdout}{r.stderr}")
        for size in ("Standard_NC24ads_A100_v4", "Standard_nd96isr_h100_v5", "Standard_HB176rs_v4"):
            r = self.validate("-var", f"size={size}", "-var", f"build_vm_size={size}")
            self.assertEqual(r.returncode, 0, f"{size}:\n{r.stdout}{r.stderr}")
        for args, message in (
                (["-var", "profile=defualt"], "The profile must be one of hpcbake's: ai, containers, default, hpc, kubernetes, minimal"),
                (["-var", "profile=Default"], "The profile must be one of hpcbake's"),
                (["-var", "profile="], "The profile must be one of hpcbake's"),
                (["-var", "size=Standard_ND96isr_H100_v6"], "The size must be one of hpcbake's VM sizes"),
                (["-var", "size=Standard_D8s_v5"], "The size must be one of hpcbake's VM sizes")):
            with self.subTest(args=args):
                r = self.validate(*args)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(message, " ".join((r.stdout + r.stderr).split()))
        # The fixture sizes of the packer/null and packer/qemu builds are added by the tests alone.
        with open(self.azure, "w") as f:
            f.write(packer_template.with_sizes(packer_template.azure_for_packer_1_6(self.text), ["Standard_Test3_v1"]))
        self.assertEqual(self.validate("-var", "size=Standard_Test3_v1", "-var", "build_vm_size=Standard_Test3_v1").returncode, 0)

    def test_network_resource_group_identity_spot_and_disk_variables(self):
        """The azure-arm builder's own options for subscriptions that forbid public IPs and
        resource-group creation: unset by default (the source as before), passed through when set,
        and malformed values refused by `packer validate`."""
        src = packer_template.source_block(self.text)
        args = {}
        for arg in ("location", "build_resource_group_name", "os_disk_size_gb", "virtual_network_name",
                    "virtual_network_subnet_name", "virtual_network_resource_group_name",
                    "user_assigned_managed_identities"):
            m = re.search(rf"\n  {arg} += ([^\n]+)\n", src)
            self.assertIsNotNone(m, f"the azure-arm source does not set {arg}")
            args[arg] = m.group(1)
        spot = re.search(r'\n  dynamic "spot" \{\n    for_each = ([^\n]+)\n', src)
        self.assertIsNotNone(spot, "the azure-arm source has a dynamic spot block")
        self.assertIn("eviction_policy = spot.value.eviction_policy", src)
        self.assertIn("max_price       = spot.value.max_price", src)
        for name in ("virtual_network_name", "virtual_network_subnet_name", "virtual_network_resource_group_name",
                     "build_resource_group_name", "user_assigned_managed_identities", "spot", "os_disk_size_gb"):
            self.assertIn(name, packer_template.variables(self.text), f"variable {name}")
        # The defaults: what the source had before these variables (location, a 64 GB disk, the
        # builder's own network and resource group, no identity, on-demand).
        defaults = {a: self.console(e) for a, e in args.items()}
        self.assertEqual(defaults, {"location": "eastus", "build_resource_group_name": "null", "os_disk_size_gb": "64",
                                    "virtual_network_name": "null", "virtual_network_subnet_name": "null",
                                    "virtual_network_resource_group_name": "null",
                                    "user_assigned_managed_identities": "[]"})
        self.assertEqual(self.console(f"jsonencode({spot.group(1)})"), "[]")
        identity = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-id/providers/"
                    "Microsoft.ManagedIdentity/userAssignedIdentities/hpcbake-build")
        chosen = ["-var", "build_resource_group_name=rg-build", "-var", "virtual_network_name=vnet-hpc",
                  "-var", "virtual_network_subnet_name=snet-build", "-var", "virtual_network_resource_group_name=rg-net",
                  "-var", f'user_assigned_managed_identities=["{identity}"]', "-var", "os_disk_size_gb=256",
                  "-var", 'spot={eviction_policy="Deallocate", max_price=-1}']
        for security in ("Standard", "TrustedLaunch", "TrustedLaunchSupported"):
            r = self.validate(*chosen, "-var", f"security_type={security}")
            self.assertEqual(r.returncode, 0, f"{security}:\n{r.stdout}{r.stderr}")
        # location: null (jsonencode refuses a null in 1.6.6's console, which prints it as null).
        self.assertEqual(self.console(args.pop("location"), *chosen), "null",
                         "the builder refuses location with an existing resource group")
        got = {a: self.console(f"jsonencode({e})", *chosen) for a, e in args.items()}
        self.assertEqual({a: json.loads(v) for a, v in got.items()}, {
            "build_resource_group_name": "rg-build", "os_disk_size_gb": 256, "virtual_network_name": "vnet-hpc",
            "virtual_network_subnet_name": "snet-build", "virtual_network_resource_group_name": "rg-net",
            "user_assigned_managed_identities": [identity]})
        self.assertEqual(json.loads(self.console(f"jsonencode({spot.group(1)})", *chosen)),
                         [{"eviction_policy": "Deallocate", "max_price": -1}])
        # location still names the regions and the UEFI db body's location.
        self.assertEqual(self.console("jsonencode(local.replication_regions)", *chosen), '["eastus"]')
        # 1.6.6's built-in builder refuses both together, which is why the source passes one.
        with open(self.azure) as f:
            adapted = f.read()
        with open(self.azure, "w") as f:
            f.write(adapted.replace('var.build_resource_group_name == "" ? var.location : null', "var.location", 1))
        r = self.validate(*chosen[:2])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Specify either a location to create the resource group in or an existing build_resource_group_name",
                      r.stdout + r.stderr)
        with open(self.azure, "w") as f:
            f.write(adapted)
        for args_, message in (
                (["-var", 'spot={eviction_policy="delete", max_price=-1}'], "The spot eviction_policy must be Delete or Deallocate"),
                (["-var", 'spot={eviction_policy="Delete", max_price=0}'], "max_price -1 (up to the on-demand price) or a price above 0"),
                (["-var", 'user_assigned_managed_identities=["hpcbake-build"]'], "must be a full resource ID"),
                (["-var", "os_disk_size_gb=0"], "The os_disk_size_gb must be a whole number of GB, 1 or more"),
                (["-var", "os_disk_size_gb=64.5"], "The os_disk_size_gb must be a whole number of GB, 1 or more"),
                (["-var", "virtual_network_subnet_name=/subscriptions/x/resourceGroups/rg/providers/Microsoft.Network/"
                          "virtualNetworks/v/subnets/s"], "must be the subnet's name, not its resource ID")):
            with self.subTest(args=args_):
                r = self.validate(*args_)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(message, " ".join((r.stdout + r.stderr).split()))

    def test_the_guides_bundle_step_matches_the_template_and_works_for_a_normal_user(self):
        """packer/README.md, step 4: `bundle create` with the template's size, distro and profile
        and a cache of the user's own. Without --cache it writes the system cache, which only root
        may change: exit 9 for anyone else (issue 46). Run here as a normal user (nobody, when the
        test runs as root), with downloads refused at once by a dead proxy: it gets past the cache
        to the downloads (exit 4), and exits 9 without --cache."""
        with open(os.path.join(PACKER_DIR, "README.md")) as f:
            readme = f.read()
        m = re.search(r"\n   (hpcbake bundle create [^\n]*?)\\\n\s+([^\n#]*?)\s+# optional\n", readme)
        self.assertIsNotNone(m, "step 4 has the bundle create line")
        argv = shlex.split(m.group(1) + " " + m.group(2))
        opts = dict(zip(argv[4::2], argv[5::2]))
        self.assertEqual(argv[3], "payload/bundle.tar", "into the payload directory the template uploads")
        self.assertEqual(opts["--size"], self.console("var.size"))
        self.assertEqual(opts["--distro"], self.console("var.distro"))
        self.assertEqual(opts["--profile"], self.console("var.profile"))
        self.assertEqual(opts["--cache"], "~/.cache/hpcbake")
        if not BIN:
            self.skipTest("HPCBAKE_BIN is not set: run through ctest")
        user = []
        home = tempfile.mkdtemp(prefix="hpcbake-bundle-user-")
        self.addCleanup(shutil.rmtree, home, True)
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                self.skipTest("setpriv is missing (util-linux): needed to run the guide's line as a normal user")
            os.chown(home, 65534, 65534)
            user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        os.makedirs(os.path.join(home, "payload"))
        if user:
            os.chown(os.path.join(home, "payload"), 65534, 65534)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "http_proxy": "http://127.0.0.1:9",
               "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": ""}

        def bundle(args):
            args = [home + a[1:] if a.startswith("~/") else a for a in args]  # the shell's ~, the user's home
            return subprocess.run([*user, BIN, "--no-imds", *args[1:]], capture_output=True, text=True, timeout=300,
                                  cwd=home, env=env)

        r = bundle(argv)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 9, out)
        self.assertNotIn("only root may change", out)
        self.assertEqual(r.returncode, 4, f"past the cache, at the downloads the dead proxy refuses:\n{out}")
        self.assertTrue(os.path.isdir(os.path.join(home, ".cache", "hpcbake")), "the user's own cache")
        if user:
            without = argv[:argv.index("--cache")]
            r = bundle(without)
            self.assertEqual(r.returncode, 9, r.stdout + r.stderr)
            self.assertIn("writes the system cache /var/cache/hpcbake, which only root may change", r.stderr)
            self.assertIn("pass --cache DIR", r.stderr)

    def test_the_example_sets_exactly_the_required_variables(self):
        self.assertEqual(packer_template.assigned(EXAMPLE), packer_template.required_variables(self.text))
        # ... and the gallery names the README's steps create.
        with open(os.path.join(PACKER_DIR, "README.md")) as f:
            readme = f.read()
        with open(EXAMPLE) as f:
            example = dict(re.findall(r'^(\w+)\s*=\s*"([^"]*)"', f.read(), re.M))
        for var, flag in (("gallery_resource_group", "-g"), ("gallery_name", "-r"), ("gallery_image_name", "-i")):
            self.assertIn(f" {flag} {example[var]}", readme, f"README.md must create {var} = {example[var]}")
        self.assertIn(f"az group create -n {example['gallery_resource_group']}", readme)
        # The image definition is named for the distro the example builds (the default).
        self.assertEqual(example["gallery_image_name"], "hpcbake-" + self.console("var.distro"))

    def test_distros_and_their_marketplace_images(self):
        ids = sorted(os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(SRC, "manifests", "distros", "*.yaml")))
        allowed = re.search(r'variable "distro" \{.*?contains\(\[(.*?)\], var\.distro\)', self.text, re.S).group(1)
        self.assertEqual(sorted(re.findall(r'"([^"]+)"', allowed)), ids, "the distro variable takes manifests/distros")
        # The map and what the variables make of it (packer console evaluates the template's locals).
        expected = {"ubuntu-22.04": ("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2"),
                    "ubuntu-24.04": ("Canonical", "ubuntu-24_04-lts", "server"),
                    "almalinux-9": ("almalinux", "almalinux-x86_64", "9-gen2"),
                    "rocky-9": ("resf", "rockylinux-x86_64", "9-base")}
        for distro, urn in expected.items():
            image = json.loads(self.console("jsonencode(local.image)", "-var", f"distro={distro}"))
            self.assertEqual((image["publisher"], image["offer"], image["sku"]), urn)
        plan = json.loads(self.console("jsonencode(local.plan)", "-var", "distro=rocky-9"))
        self.assertEqual(plan, {"name": "9-base", "product": "rockylinux-x86_64", "publisher": "resf"})
        self.assertEqual(json.loads(self.console("jsonencode(local.plan)"))["name"], "")
        image = json.loads(self.console("jsonencode(local.image)", "-var", "image_publisher=Canonical", "-var",
                                        "image_offer=ubuntu-24_04-lts", "-var", "image_sku=server-arm64"))
        self.assertEqual(image["sku"], "server-arm64", "image_* override the distro's image")
        src = packer_template.source_block(self.text)
        for arg, expr in (("image_publisher", "local.image.publisher"), ("image_offer", "local.image.offer"),
                          ("image_sku", "local.image.sku")):
            self.assertRegex(src, rf"\n  {arg} += {re.escape(expr)}\n")
        self.assertIn("for_each = local.plan.name == \"\" ? [] : [local.plan]", src)

    def test_trusted_launch_variables_reach_the_source(self):
        src = packer_template.source_block(self.text)
        exprs = {}
        for arg in packer_template.TRUSTED_LAUNCH_ARGS:
            m = re.search(rf"\n  {arg} += ([^\n]+)\n", src)
            self.assertIsNotNone(m, f"the azure-arm source does not set {arg}")
            exprs[arg] = m.group(1)
        # Each argument's own expression, evaluated by packer console with the variables a user
        # sets (null: the argument is not set, a Standard VM).
        for args, want in (
                ([], ("null", "false", "false")),
                (["-var", "security_type=TrustedLaunch"], ("TrustedLaunch", "true", "true")),
                (["-var", "security_type=TrustedLaunch", "-var", "secure_boot_enabled=false"], ("TrustedLaunch", "false", "true")),
                (["-var", "security_type=TrustedLaunch", "-var", "vtpm_enabled=false"], ("TrustedLaunch", "true", "false")),
                (["-var", "security_type=Standard", "-var", "secure_boot_enabled=true"], ("null", "false", "false")),
                # The UEFI db route builds on a standard Gen2 VM: Secure Boot off while verify runs.
                (["-var", "security_type=TrustedLaunchSupported"], ("null", "false", "false"))):
            with self.subTest(args=args):
                got = tuple(self.console(exprs[a], *args) for a in packer_template.TRUSTED_LAUNCH_ARGS)
                self.assertEqual(got, want)
        # The settings each route gives every step (packer console evaluates local.env).
        def env(*args):
            return dict(e.split("=", 1) for e in json.loads(self.console("jsonencode(local.env)", *args)))

        standard, tl = env(), env("-var", "security_type=TrustedLaunch")
        db = env("-var", "security_type=TrustedLaunchSupported", "-var", 'replication_regions=["eastus","westus3"]')
        self.assertEqual((standard["HPCBAKE_SECURE_BOOT"], tl["HPCBAKE_SECURE_BOOT"], db["HPCBAKE_SECURE_BOOT"]),
                         ("off", "", "off"))
        self.assertEqual((standard["HPCBAKE_SIGN"], tl["HPCBAKE_SIGN"], db["HPCBAKE_SIGN"]), ("", "", "on"))
        self.assertEqual((standard["HPCBAKE_UEFI_DB_ARGS"], tl["HPCBAKE_UEFI_DB_ARGS"]), ("", ""))
        self.assertEqual(db["HPCBAKE_UEFI_DB_ARGS"],
                         "--remove-signing-key --source-id /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
                         "rg-hpcbake-gallery/providers/Microsoft.Compute/galleries/hpcbakegallery/images/"
                         "hpcbake-ubuntu-22.04/versions/1.0.0 --location eastus "
                         "--target-region eastus --target-region westus3")
        self.assertEqual(env("-var", "security_type=TrustedLaunchSupported")["HPCBAKE_UEFI_DB_ARGS"].split(" --")[-1],
                         "target-region eastus", "the regions default to location")
        self.assertEqual((standard["HPCBAKE_SEAL_ARGS"], db["HPCBAKE_SEAL_ARGS"]),
                         ("--deprovision", "--deprovision --remove-signing-key"))
        self.assertEqual(self.console("local.uefi_db_json"), "hpcbake-uefi-db-ubuntu-22.04.json")
        # The download after the uefi-db step: the body on that route, the verify report again otherwise.
        provs = packer_template.build_provisioners(self.text)
        download = [b for k, b in provs if k == "file" and 'direction   = "download"' in b][1]
        for args, want in (([], ("/var/lib/hpcbake-payload/hpcbake-verify.xml", "hpcbake-verify-ubuntu-22.04.xml")),
                           (["-var", "security_type=TrustedLaunchSupported"],
                            ("/var/lib/hpcbake-payload/hpcbake-uefi-db.json", "hpcbake-uefi-db-ubuntu-22.04.json"))):
            got = tuple(self.console(re.search(rf"\n\s*{k} += ([^\n]+)", download).group(1), *args)
                        for k in ("source", "destination"))
            self.assertEqual(got, want)
        # Straight to the gallery: the plugin refuses Secure Boot and a vTPM with a managed image.
        self.assertNotIn("managed_image_name", src)
        self.assertIn("shared_image_gallery_destination {", src)

    def test_every_hpcbake_step_has_its_exit_codes_and_the_order_is_install_resume_verify_seal(self):
        provs = packer_template.build_provisioners(self.text)
        steps = []
        for kind, body in provs:
            m = re.search(r'inline +?= \["sh \$\{local\.step\} ([^"]+)"\]', body)
            if kind == "shell" and m:
                codes = re.search(r"valid_exit_codes += \[([0-9, ]*)\]", body)
                self.assertIsNotNone(codes, f"the step {m.group(1)!r} has no valid_exit_codes")
                steps.append((m.group(1), [int(c) for c in codes.group(1).split(",")],
                              "expect_disconnect = true" in body, body))
            elif kind == "file" and 'direction   = "download"' in body:
                steps.append(("download", None, False, body))
        self.assertEqual([(s[0], s[1], s[2]) for s in steps], [
            ("package", [0], False),
            ("install --reboot=auto", [0, 7], True),     # hpcbake reboots the VM: 7, or no status at all
            ("install --reboot=auto", [0, 7], True),     # the resume, which may reboot once more
            ("install --reboot=never", [0], False),      # 7 (a reboot still due) fails the build here
            ("verify", [0], False),                      # 0 once the report is written, whatever verify found
            ("download", None, False),                   # the report, so it comes back from a failed verify too
            ("verify-status", [0], False),               # verify's own status: 6 (a failed check) fails the build here
            ("uefi-db", [0], False),                     # seal --check, and the UEFI db body on that route
            ("download", None, False),
            ("seal", [0], False)])
        self.assertIn("pause_before      = var.reboot_wait", steps[2][3])
        self.assertIn("pause_before     = var.reboot_wait", steps[3][3])
        self.assertEqual(provs[-1][0], "shell")
        self.assertIn("${local.step} seal", provs[-1][1], "seal (its deprovision) is the last provisioner")
        self.assertIn("skip_clean       = true", provs[-1][1])
        self.assertIn('default     = "--deprovision"', packer_template.variables(self.text)["seal_args"])
        with open(STEP_SCRIPT) as f:
            script = f.read()
        self.assertIn('verify --size "$size" --profile "$profile" --junit "$junit"', script)

    def test_the_payload_lives_where_a_reboot_keeps_it_and_is_deleted_before_the_deprovision(self):
        self.assertEqual(self.console("var.remote_dir"), "/var/lib/hpcbake-payload")
        start, end = packer_template.block(self.text, "build {")
        build = self.text[start:end]
        self.assertNotRegex(build, r"/tmp|/run/|/dev/shm", "every path on the VM is under remote_dir or hpcbake_dir")
        for kind, body in packer_template.build_provisioners(self.text):
            for path in re.findall(r'(?:destination|source) += ("?[^\n]+)', body):
                if "payload_dir" in path or "path.root" in path or "junit_out" in path:
                    continue
                self.assertTrue("var.remote_dir" in path or "local.step" in path, f"{kind}: {path}")
        # The seal step deletes the payload directory before it runs seal (and so the deprovision).
        with open(STEP_SCRIPT) as f:
            script = f.read()
        seal = script[script.index("\nseal)\n"):]
        self.assertLess(seal.index('run rm -rf "$dir"'), seal.index("seal $verdict ${HPCBAKE_SEAL_ARGS:-}"))

    def release(self, arch):
        """The stand-in release's file:// URL (with a query string, as a SAS token has) and its
        SHA256SUMS line."""
        path, digest = fake_release(self.tmp, arch)
        return f"file://{path}?sv=2022-11-02&sig=SECRET", f"{digest}  {os.path.basename(path)}"

    def test_step_script_unpacks_the_verified_release_and_passes_settings_and_the_exit_status_through(self):
        payload = os.path.join(self.tmp, "var-lib", "hpcbake-payload")
        os.makedirs(payload)
        open(os.path.join(payload, "bundle.tar"), "w").close()
        home = os.path.join(self.tmp, "opt", "hpcbake")
        exe = os.path.join(home, "bin", "hpcbake")
        url, line = self.release(platform.machine())
        env = dict(os.environ, HPCBAKE_PAYLOAD=payload, HPCBAKE_DIR=home, HPCBAKE_LINK="", HPCBAKE_SIZE="Standard_X_v1",
                   HPCBAKE_JUNIT="/tmp/j.xml", HPCBAKE_SEAL_ARGS="--deprovision",
                   HPCBAKE_ARGS="--root /r --manifests /m", HPCBAKE_INSTALL_ARGS="--distro debian-12 --cache /c")

        def step(*args, shell="sh", **extra):
            return subprocess.run([shell, STEP_SCRIPT, *args], capture_output=True, text=True, timeout=30,
                                  env=dict(env, **extra))

        # Before the package step there is nothing to run.
        r = step("install")
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{exe} is missing: the package step unpacks the release there first", r.stderr)
        # A wrong digest, a digest that is not one, a release for another machine: nothing unpacked.
        r = step("package", HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256="f" * 64)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn(f"expected {'f' * 64}, got {line.split()[0]}; nothing was unpacked", r.stderr)
        r = step("package", HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256="abc")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
        other_url, other_line = self.release(other)
        r = step("package", HPCBAKE_RELEASE_URL=other_url, HPCBAKE_RELEASE_SHA256=other_line)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn(f"is the release for {other}, and this VM is {platform.machine()}", r.stderr)
        self.assertFalse(os.path.exists(home))
        self.assertFalse(os.path.exists(os.path.join(payload, "hpcbake-release.tar.gz")))
        # The release, with its SHA256SUMS line (sh is dash on Debian and Ubuntu, bash on AlmaLinux).
        for shell in ("sh", "bash"):
            r = step("package", shell=shell, HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256=line)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(f"{payload}/hpcbake-release.tar.gz: OK", r.stdout)
            self.assertIn(f"+ {exe} --version", r.stdout)
            self.assertNotIn("SECRET", r.stdout + r.stderr)
            self.assertEqual(os.stat(exe).st_mode & 0o777, 0o755)
        for shell in ("sh", "bash"):
            r = step("install", "--reboot=auto", shell=shell, FAKE_EXIT="7")
            self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
            self.assertIn(f"argv: --root /r --manifests /m install --size Standard_X_v1 --profile default --yes --lock-timeout 3600 "
                          f"--bundle {payload}/bundle.tar --distro debian-12 --cache /c --reboot=auto", r.stdout)
            self.assertIn(f"hpcbake-step: install: {exe} exited 7", r.stderr)
        # The UEFI db route: install signs every module, the uefi-db step writes the body with seal --check.
        r = step("install", "--reboot=never", HPCBAKE_SIGN="on")
        self.assertIn(f"--bundle {payload}/bundle.tar --sign on --distro debian-12", r.stdout)
        r = step("uefi-db")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("argv:", r.stdout, "no body asked for: nothing runs")
        self.assertIn("uefi-db: nothing to do", r.stdout)
        r = step("uefi-db", HPCBAKE_UEFI_DB_ARGS="--source-id ID --location eastus --target-region eastus")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"argv: --root /r --manifests /m seal --check --uefi-db-json {payload}/hpcbake-uefi-db.json "
                      "--source-id ID --location eastus --target-region eastus", r.stdout)
        r = step("uefi-db", HPCBAKE_UEFI_DB_ARGS="--source-id ID --location eastus", FAKE_EXIT="3")
        self.assertEqual(r.returncode, 3, "seal refusing fails the step")
        # A build VM that must have Secure Boot off and booted with it on stops at the package step.
        for state, rc in (("enabled", 3), ("disabled", 0), ("not-uefi", 0)):
            detect = '{"secure_boot": {"setup_mode": false, "source": "/sys/firmware/efi", "state": "%s"}}' % state
            r = step("package", HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256=line, HPCBAKE_SECURE_BOOT="off",
                     FAKE_STDOUT=detect)
            self.assertEqual(r.returncode, rc, f"{state}: {r.stdout}{r.stderr}")
            self.assertIn(f"hpcbake-step: Secure Boot: {state}", r.stdout)
            if rc:
                self.assertIn("TrustedLaunchByDefaultPreview", r.stderr)
                self.assertIn('security_type = "TrustedLaunch"', r.stderr)
        r = step("package", HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256=line)
        self.assertNotIn("detect", r.stdout, "no check when the template does not ask for one (TrustedLaunch)")
        r = step("verify", FAKE_EXIT="6")
        self.assertEqual(r.returncode, 6, "no report written: nothing to download, the step fails at once")
        self.assertIn("argv: --root /r --manifests /m verify --size Standard_X_v1 --profile default --junit /tmp/j.xml", r.stdout)
        # A report written: the step records verify's status beside it and exits 0, so that the
        # template's download runs; verify-status then exits with that status.
        junit = os.path.join(payload, "hpcbake-verify.xml")
        status = os.path.join(payload, "hpcbake-verify.status")
        for code in (6, 0, 8):
            with self.subTest(verify_exit=code):
                r = step("verify", HPCBAKE_JUNIT=junit, FAKE_WRITE=junit, FAKE_EXIT=str(code))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertTrue(os.path.exists(junit))
                with open(status) as f:
                    self.assertEqual(f.read(), f"{code}\n")
                if code:
                    self.assertIn(f"the verify-status step then fails the build with exit {code}", r.stderr)
                r = step("verify-status", HPCBAKE_JUNIT=junit)
                self.assertEqual(r.returncode, code, r.stdout + r.stderr)
                self.assertIn(f"verify exited {code}" if code else "verify passed", r.stdout + r.stderr)
        # A report and status of an earlier run never stand for this one.
        r = step("verify", HPCBAKE_JUNIT=junit, FAKE_EXIT="2")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(junit) or os.path.exists(status))
        r = step("verify-status", HPCBAKE_JUNIT=junit)
        self.assertEqual(r.returncode, 2)
        self.assertIn("hpcbake-verify.status is missing: the verify step runs first", r.stderr)
        # seal deletes the payload directory first, and refuses one it must not delete.
        for bad in ("/", "/var", "/var/", "/var//", "//var/x", "/var/.", "relative/dir", f"{self.tmp}/../x",
                    os.path.dirname(home)):
            r = step("seal", HPCBAKE_PAYLOAD=bad)
            self.assertEqual(r.returncode, 2, f"{bad}: {r.stdout}{r.stderr}")
            self.assertNotIn("argv:", r.stdout)
        self.assertTrue(os.path.exists(exe))
        r = step("seal")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"+ rm -rf {payload}\n+ {exe} --root /r --manifests /m seal --deprovision\n", r.stdout)
        self.assertIn("argv: --root /r --manifests /m seal --deprovision", r.stdout)
        self.assertFalse(os.path.exists(payload), "the payload (bundle, script, report) stays out of the image")
        r = step("install", HPCBAKE_SIZE="")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HPCBAKE_SIZE is not set", r.stderr)
        r = step("bake")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown step 'bake'", r.stderr)

    def test_step_script_defers_the_hardware_checks_when_the_build_vm_is_not_the_target(self):
        """HPCBAKE_HARDWARE_CHECKS=deferred (build_vm_size other than size): install and verify get
        --hardware-checks deferred, seal and the uefi-db step's seal --check get --verify deferred;
        empty: the command lines of a bake on the target itself, none of these options."""
        payload = os.path.join(self.tmp, "var-lib", "hpcbake-payload")
        os.makedirs(payload)
        home = os.path.join(self.tmp, "opt", "hpcbake")
        url, line = self.release(platform.machine())
        env = dict(os.environ, HPCBAKE_PAYLOAD=payload, HPCBAKE_DIR=home, HPCBAKE_LINK="",
                   HPCBAKE_SIZE="Standard_ND96isr_H100_v5", HPCBAKE_JUNIT="/tmp/j.xml", HPCBAKE_SEAL_ARGS="--deprovision")

        def step(*args, shell="sh", **extra):
            return subprocess.run([shell, STEP_SCRIPT, *args], capture_output=True, text=True, timeout=30,
                                  env=dict(env, **extra))

        r = step("package", HPCBAKE_RELEASE_URL=url, HPCBAKE_RELEASE_SHA256=line)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for shell in ("sh", "bash"):
            for checks, hardware, verdict in (("deferred", " --hardware-checks deferred", " --verify deferred"),
                                              ("", "", "")):
                with self.subTest(shell=shell, checks=checks):
                    r = step("install", "--reboot=auto", shell=shell, HPCBAKE_HARDWARE_CHECKS=checks)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    self.assertIn("argv: install --size Standard_ND96isr_H100_v5 --profile default --yes --lock-timeout 3600"
                                  f"{hardware} --reboot=auto\n", r.stdout)
                    r = step("verify", shell=shell, HPCBAKE_HARDWARE_CHECKS=checks, FAKE_EXIT="6")
                    self.assertEqual(r.returncode, 6, "a failed check that could run here fails the build")
                    self.assertIn("argv: verify --size Standard_ND96isr_H100_v5 --profile default --junit /tmp/j.xml"
                                  f"{hardware}\n", r.stdout)
                    r = step("uefi-db", shell=shell, HPCBAKE_HARDWARE_CHECKS=checks, HPCBAKE_UEFI_DB_ARGS="--source-id ID")
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    self.assertIn(f"argv: seal --check --uefi-db-json {payload}/hpcbake-uefi-db.json{verdict} --source-id ID\n",
                                  r.stdout)
        r = step("install", HPCBAKE_HARDWARE_CHECKS="now")
        self.assertEqual(r.returncode, 2)
        self.assertIn("HPCBAKE_HARDWARE_CHECKS must be deferred or empty (it is 'now')", r.stderr)
        self.assertNotIn("argv:", r.stdout)
        r = step("seal", HPCBAKE_HARDWARE_CHECKS="deferred")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("argv: seal --verify deferred --deprovision\n", r.stdout)
        self.assertFalse(os.path.exists(payload))

    def test_the_guide_names_the_commands(self):
        with open(os.path.join(PACKER_DIR, "README.md")) as f:
            readme = f.read()
        for cmd in ("packer init packer", "packer validate -var-file=my.pkrvars.hcl packer",
                    "packer build -var-file=my.pkrvars.hcl packer", "--features SecurityType=TrustedLaunch",
                    "--features SecurityType=TrustedLaunchSupported", "az rest --method put",
                    "api-version=2025-03-03", "--body @hpcbake-uefi-db-ubuntu-22.04.json",
                    "sh packer/prove-image.sh -g ", "## Bake on any size, prove on the target",
                    "Standard_D8s_v5", "Standard_D8ps_v6"):
            self.assertIn(cmd, readme)


class BatchExample(unittest.TestCase):
    def task_sandbox(self):
        """A scratch directory with the start task's working directory (holding a stand-in release
        as Batch's resource file) and the directory that stands for /opt."""
        tmp = tempfile.mkdtemp(prefix="hpcbake-batch-")
        self.addCleanup(shutil.rmtree, tmp, True)
        wd, opt = os.path.join(tmp, "wd"), os.path.join(tmp, "opt")
        os.makedirs(wd)
        path, digest = fake_release(tmp)
        shutil.copy(path, os.path.join(wd, "hpcbake.tar.gz"))
        return tmp, wd, opt, digest

    def test_pool_json(self):
        with open(os.path.join(SRC, "examples", "batch-pool.json")) as f:
            doc = json.load(f)
        st = doc["startTask"]
        # The release tarball arrives as a resource file (httpUrl, with filePath naming the file).
        self.assertEqual(len(st["resourceFiles"]), 1)
        self.assertEqual(set(st["resourceFiles"][0]), {"httpUrl", "filePath"})
        self.assertRegex(st["resourceFiles"][0]["httpUrl"], r"^https://.*/hpcbake-VERSION-linux-x86_64\.tar\.gz\?")
        self.assertEqual(st["resourceFiles"][0]["filePath"], "hpcbake.tar.gz")
        self.assertLess(st["commandLine"].index("sha256sum -c"), st["commandLine"].index("tar -x"))
        self.assertEqual(st["userIdentity"]["autoUser"]["elevationLevel"], "admin")
        self.assertEqual(st["userIdentity"]["autoUser"]["scope"], "pool")
        self.assertIs(st["waitForSuccess"], True)
        self.assertIn("hpcbake install", st["commandLine"])
        self.assertIn("--reboot=", st["commandLine"])
        self.assertGreaterEqual(st["maxTaskRetryCount"], 1)
        self.assertTrue(doc["vmSize"].startswith("Standard_"))
        ref = doc["virtualMachineConfiguration"]["imageReference"]
        self.assertTrue({"publisher", "offer", "sku"} <= set(ref))
        self.assertIn("nodeAgentSKUId", doc["virtualMachineConfiguration"])

    def test_gallery_pool_json(self):
        with open(os.path.join(SRC, "examples", "batch-pool-gallery.json")) as f:
            doc = json.load(f)
        ref = doc["virtualMachineConfiguration"]["imageReference"]
        self.assertRegex(ref["virtualMachineImageId"],
                         r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft.Compute/galleries/[^/]+/"
                         r"images/[^/]+/versions/\d+\.\d+\.\d+$")
        st = doc["startTask"]
        self.assertEqual(st["userIdentity"]["autoUser"]["elevationLevel"], "admin")
        self.assertIs(st["waitForSuccess"], True)
        self.assertIn("/opt/hpcbake/bin/hpcbake verify", st["commandLine"], "where the Packer templates unpack it")
        self.assertNotIn("hpcbake install", st["commandLine"], "the image is already baked")
        # The image packer/README.md builds with security_type TrustedLaunch, in the gallery and
        # definition its example variables name: a definition of security type TrustedLaunch makes
        # "Trusted Launch VMs only" (docs/batch.md), so the pool must ask for one; Secure Boot off,
        # since no node has hpcbake's key enrolled as a MOK (the db route's pool turns it on).
        with open(packer_template.EXAMPLE) as f:
            example = dict(re.findall(r'^(\w+)\s*=\s*"([^"]*)"', f.read(), re.M))
        self.assertTrue(ref["virtualMachineImageId"].endswith(
            f"/resourceGroups/{example['gallery_resource_group']}/providers/Microsoft.Compute/galleries/"
            f"{example['gallery_name']}/images/{example['gallery_image_name']}/versions/{example['gallery_image_version']}"))
        self.assertEqual(doc["virtualMachineConfiguration"]["securityProfile"],
                         {"securityType": "trustedLaunch", "uefiSettings": {"secureBootEnabled": False, "vTpmEnabled": True}})

    def test_trusted_launch_pool_json(self):
        with open(os.path.join(SRC, "examples", "batch-pool-trusted-launch.json")) as f:
            doc = json.load(f)
        with open(os.path.join(SRC, "examples", "batch-pool-gallery.json")) as f:
            gallery = json.load(f)
        vmc = doc["virtualMachineConfiguration"]
        self.assertEqual(vmc["securityProfile"], {"securityType": "trustedLaunch",
                                                  "uefiSettings": {"secureBootEnabled": True, "vTpmEnabled": True}})
        # The version packer/README.md ("The image's UEFI db") creates with the certificate in its db.
        self.assertTrue(vmc["imageReference"]["virtualMachineImageId"].endswith(
            "/resourceGroups/rg-hpcbake-gallery/providers/Microsoft.Compute/galleries/hpcbakegallery/images/"
            "hpcbake-ubuntu-22.04/versions/1.0.0"))
        self.assertEqual(doc["startTask"], gallery["startTask"], "the same verify as the gallery pool")
        self.assertEqual(doc["vmSize"], "Standard_ND96isr_H100_v5")

    def test_the_start_task_command_line_verifies_unpacks_once_and_runs_the_release(self):
        # The pool's own command line, run by bash as Batch runs it, with /opt moved into a
        # scratch directory and a stand-in release in the task's working directory.
        with open(os.path.join(SRC, "examples", "batch-pool.json")) as f:
            argv = shlex.split(json.load(f)["startTask"]["commandLine"])
        self.assertEqual(argv[:2], ["/bin/bash", "-c"])
        tmp, wd, opt, digest = self.task_sandbox()
        # The digest is the start task's environment setting HPCBAKE_RELEASE_SHA256 (issue 46: it
        # was hidden in the escaped command line), which Batch sets in the task's environment.
        with open(os.path.join(SRC, "examples", "batch-pool.json")) as f:
            settings = {s["name"]: s["value"] for s in json.load(f)["startTask"]["environmentSettings"]}
        placeholder = "FILL_IN_the_64_hex_SHA-256_of_hpcbake-VERSION-linux-x86_64.tar.gz_from_SHA256SUMS"
        self.assertEqual(settings, {"HPCBAKE_RELEASE_SHA256": placeholder})
        self.assertIn("sha=$HPCBAKE_RELEASE_SHA256;", argv[2])
        self.assertNotIn(placeholder, argv[2])
        self.assertIsNone(re.search(r"[0-9a-f]{64}", argv[2]), "no digest in the command line")
        script = argv[2].replace("/opt/hpcbake", opt + "/hpcbake")
        env = dict(os.environ, AZ_BATCH_TASK_WORKING_DIR=wd)
        env.pop("HPCBAKE_RELEASE_SHA256", None)

        def start_task(sha):
            extra = {} if sha is None else {"HPCBAKE_RELEASE_SHA256": sha}
            return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                                  timeout=30, env=dict(env, **extra), cwd=wd)

        # As shipped (placeholder), unset, or a digest that is not the tarball's: nothing unpacked.
        r = start_task(None)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("HPCBAKE_RELEASE_SHA256: unbound variable", r.stderr)
        for sha in (placeholder, "0" * 64):
            r = start_task(sha)
            self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertFalse(os.path.exists(opt), r.stdout + r.stderr)
        r = start_task(digest)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("hpcbake.tar.gz: OK", r.stdout)
        self.assertIn("argv: install --yes --reboot=auto --lock-timeout 3600\n", r.stdout)
        self.assertIn(f"argv: verify --level 1 --junit {wd}/hpcbake-verify.xml", r.stdout)
        self.assertEqual(os.stat(os.path.join(opt, "hpcbake", "bin", "hpcbake")).st_mode & 0o777, 0o755)
        # Batch runs the start task again after every reboot: the same release is not unpacked
        # again (an install resuming from it may be running); an offline bundle is passed on.
        marker = os.path.join(opt, "hpcbake", "marker")
        open(marker, "w").close()
        open(os.path.join(wd, "bundle.tar"), "w").close()
        r = start_task(digest)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.exists(marker))
        self.assertIn("argv: install --yes --reboot=auto --lock-timeout 3600 --bundle bundle.tar", r.stdout)

    def test_the_start_task_exits_with_installs_code_and_waits_out_the_reboot_it_asked_for(self):
        # docs/batch.md, "Exit codes as Batch sees them": a failed install ends the task with its own
        # code (Batch retries, then starttaskfailed) and verify does not run; exit 7 under
        # --reboot=auto means `systemctl reboot` was called, so the task waits for it (here 0 s, not
        # 600) instead of reporting a failure Batch would retry in the boot that is ending.
        with open(os.path.join(SRC, "examples", "batch-pool.json")) as f:
            script = shlex.split(json.load(f)["startTask"]["commandLine"])[2]
        self.assertEqual(script.count("sleep 600"), 1)
        tmp, wd, opt, digest = self.task_sandbox()
        script = script.replace("/opt/hpcbake", opt + "/hpcbake")
        script = script.replace("sleep 600", "sleep 0")
        for code in (7, 5, 6, 8, 130):
            with self.subTest(code=code):
                env = dict(os.environ, AZ_BATCH_TASK_WORKING_DIR=wd, FAKE_EXIT=str(code), HPCBAKE_RELEASE_SHA256=digest)
                r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, env=env, cwd=wd)
                self.assertEqual(r.returncode, code, r.stdout + r.stderr)
                self.assertIn("argv: install ", r.stdout)
                self.assertNotIn("argv: verify", r.stdout, "verify must not run after a failed install")
                self.assertEqual("waiting for it" in r.stderr, code == 7, r.stderr)


def install_tree(prefix):
    """The release tarball's tree, as scripts/release makes it (`cmake --install` of the build at the
    prefix /, moved under one top directory, LICENSE and THIRD-PARTY-LICENSES beside it), at
    `prefix`; without --strip, which only makes it smaller."""
    if not BUILD or not os.path.exists(os.path.join(BUILD, "cmake_install.cmake")):
        raise unittest.SkipTest("HPCBAKE_BUILD_DIR has no cmake_install.cmake: run through ctest")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"cmake --install failed:\n{r.stdout}\n{r.stderr}")
    shutil.copy(os.path.join(SRC, "LICENSE"), prefix)
    return prefix


def readme_block(heading):
    """The first ```sh block after `heading` in README.md, without comments."""
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index(f"\n{heading}\n"):]
    block = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M).group(1)
    return [re.sub(r"\s+#.*$", "", line) for line in block.splitlines() if line.strip()]


class ShippedDocs(unittest.TestCase):
    """Issue 46 item 5: every doc the README, the manual or --help links ships in the tarball and the
    packages (share/doc/hpcbake, laid out as the source tree) and its links resolve there; --help
    names the installed manual and `man hpcbake`; after the README's install, `man` finds the page.
    The .deb and .rpm carry the same install tree (Deb, Rpm below)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hpcbake-shipped-docs-")
        cls.name = f"hpcbake-VERSION-linux-{platform.machine()}"  # the README's name, VERSION as written
        cls.tree = install_tree(os.path.join(cls.tmp, "stage", cls.name))
        cls.docdir = os.path.join(cls.tree, "share", "doc", "hpcbake")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def test_every_linked_doc_ships_and_every_link_resolves_inside_the_doc_dir(self):
        sys.path.insert(0, os.path.join(SRC, "tests", "docs"))
        import test_doc_links as links  # noqa: E402  (the docs/links test's parser)
        shipped = sorted(os.path.relpath(os.path.join(d, f), self.docdir)
                         for d, _, files in os.walk(self.docdir) for f in files)
        # What the issue found missing, and what the README and the manual start from.
        for doc in ("README.md", "docs/manual.md", "docs/secure-boot.md", "docs/kernels.md", "docs/security.md",
                    "docs/verify.md", "packer/README.md", "examples/batch-pool.json", "LICENSE"):
            self.assertIn(doc, shipped)
        found, followed = links.shipped_problems(self.docdir)
        self.assertEqual(found, [], "\n".join(found))
        self.assertGreater(followed, 100, "the links were read")
        # Every Markdown file the source README and manual link is among them, at the same place.
        for src_doc in ("README.md", "docs/manual.md"):
            with open(os.path.join(SRC, src_doc), encoding="utf-8") as f:
                text = links.without_code(f.read())
            for m in links.LINK.finditer(text):
                target = m.group(2).partition("#")[0]
                if target and not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    rel = os.path.normpath(os.path.join(os.path.dirname(src_doc), target))
                    self.assertIn(rel, shipped, f"{src_doc} links {target}")

    def test_help_names_man_and_the_installed_manual(self):
        env = {k: v for k, v in os.environ.items() if k not in ("HPCBAKE_MANIFESTS", "HPCBAKE_DRIVERS")}
        r = subprocess.run([os.path.join(self.tree, "bin", "hpcbake"), "--help"], capture_output=True, text=True,
                           timeout=30, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        manual = os.path.join(self.docdir, "docs", "manual.md")
        self.assertIn("man hpcbake", r.stdout)
        self.assertIn(manual, r.stdout)
        self.assertTrue(os.path.isfile(manual))

    def test_man_finds_the_page_after_the_readmes_install_as_root_and_as_a_user(self):
        """README.md's install block, run as written but for where /opt and /usr/local are (a scratch
        directory; for a user, ~/.local as the README says), from the tarball scripts/release would
        make; then `man` finds the page through PATH alone, as on the machine."""
        if not shutil.which("man") or not shutil.which("manpath"):
            self.skipTest("man-db is not installed (scripts/deps installs it)")
        work = os.path.join(self.tmp, "download")
        os.makedirs(work)
        tarball = f"{self.name}.tar.gz"
        with tarfile.open(os.path.join(work, tarball), "w:gz", compresslevel=1) as tar:
            tar.add(self.tree, arcname=self.name)
        with open(os.path.join(work, tarball), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(work, "SHA256SUMS"), "w") as f:
            f.write(f"{digest}  {tarball}\n")
        block = readme_block("## Install")
        self.assertTrue(any(line.startswith("tar ") for line in block), block)
        self.assertFalse([line for line in block if "sudo" in line], "as root, without sudo")
        with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
            user_mkdir = re.search(r"Without root: `(mkdir -p ~/\.local/[^`]*)`", f.read()).group(1)
        for who, opt, local in (("root", "{r}/opt", "{r}/usr/local"), ("a user", "{r}/home/.local/opt", "{r}/home/.local")):
            with self.subTest(who=who):
                r_dir = tempfile.mkdtemp(dir=self.tmp)
                opt, local = opt.format(r=r_dir), local.format(r=r_dir)
                lines = [line.replace("/opt", opt).replace("/usr/local", local).replace("man hpcbake", "man -w hpcbake")
                         for line in block]
                if who == "root":
                    for d in (opt, os.path.join(local, "bin")):
                        os.makedirs(d)  # there on every machine
                else:
                    os.makedirs(os.path.join(r_dir, "home"))
                    lines.insert(0, user_mkdir.replace("~", os.path.join(r_dir, "home")))
                script = "set -e\n" + "\n".join(lines)
                env = {k: v for k, v in os.environ.items()
                       if k not in ("HPCBAKE_MANIFESTS", "HPCBAKE_DRIVERS", "MANPATH")}
                env["PATH"] = os.path.join(local, "bin") + os.pathsep + env.get("PATH", "")
                r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, cwd=work,
                                   env=env)
                self.assertEqual(r.returncode, 0, script + "\n" + r.stdout + r.stderr)
                self.assertIn(f"{tarball}: OK", r.stdout)
                self.assertRegex(r.stdout, r"(?m)^hpcbake \d+\.\d+\.\d+")
                page = os.path.join(opt, self.name, "share", "man", "man1", "hpcbake.1.gz")
                # `man -w` prints the page it would show (the link resolved), found from PATH alone.
                self.assertEqual(r.stdout.splitlines()[-1], page)
                link = os.path.join(local, "share", "man", "man1", "hpcbake.1.gz")
                self.assertEqual(os.path.realpath(link), page)
                shown = subprocess.run(["man", "-P", "cat", "hpcbake"], capture_output=True, text=True, timeout=60,
                                       env=dict(env, MANWIDTH="80"))
                self.assertEqual(shown.returncode, 0, shown.stderr)
                self.assertIn("hpcbake - turn a Linux VM", " ".join(shown.stdout.split()))
                # Without the README's man link (the tarball's tree alone), man does not find it.
                os.unlink(link)
                shown = subprocess.run(["man", "-w", "hpcbake"], capture_output=True, text=True, timeout=60, env=env)
                self.assertNotEqual(shown.returncode, 0, shown.stdout)


class Deb(unittest.TestCase):
    def test_contents_fields_and_the_binary_inside_runs(self):
        if not shutil.which("dpkg-deb"):
            self.skipTest("dpkg-deb is not installed")
        deb = build_package("DEB")
        listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
        paths = {line.split()[-1] for line in listing.splitlines() if line.strip()}
        for p in ("./usr/bin/hpcbake",
                  "./usr/share/hpcbake/manifests/sizes/nd96isr_h100_v5.yaml",
                  "./usr/share/hpcbake/manifests/distros/ubuntu-22.04.yaml",
                  "./usr/share/hpcbake/drivers/nvidia-driver.yaml",
                  "./usr/share/hpcbake/drivers/dkms/dkms.conf.in",
                  "./usr/lib/systemd/system/hpcbake-resume.service",
                  "./usr/lib/systemd/system/hpcbake-verify-boot.service",
                  "./usr/lib/systemd/system/hpcbake-verify.timer",
                  "./usr/share/bash-completion/completions/hpcbake",
                  "./usr/share/man/man1/hpcbake.1.gz",
                  "./usr/share/doc/hpcbake/README.md",
                  # Every guide the README and the manual link, laid out as in the source tree.
                  "./usr/share/doc/hpcbake/docs/manual.md",
                  "./usr/share/doc/hpcbake/docs/secure-boot.md",
                  "./usr/share/doc/hpcbake/docs/kernels.md",
                  "./usr/share/doc/hpcbake/docs/security.md",
                  "./usr/share/doc/hpcbake/docs/verify.md",
                  "./usr/share/doc/hpcbake/examples/batch-pool.json",
                  # The templates upload it from beside themselves (${path.root}/scripts).
                  "./usr/share/doc/hpcbake/packer/hpcbake.pkr.hcl",
                  "./usr/share/doc/hpcbake/packer/scripts/hpcbake-step.sh",
                  # docs/containers.md: `kubectl apply -f` it where nvidia is not the default runtime.
                  "./usr/share/doc/hpcbake/kubernetes/runtimeclass-nvidia.yaml"):
            self.assertIn(p, paths)
        self.assertFalse([p for p in paths if p.startswith("./usr/local")], "a package installs under /usr")
        fields = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Depends"],
                                capture_output=True, text=True, check=True).stdout
        self.assertIn("Package: hpcbake", fields)
        self.assertIn("Architecture: amd64", fields)
        depends = next((line.split(":", 1)[1] for line in fields.splitlines() if line.startswith("Depends:")), "")
        if static_build():
            # The portable release: glibc is all it needs (dpkg-shlibdeps finds nothing else).
            self.assertRegex(depends.strip(), r"^libc6 \(>= [0-9.]+\)$", fields)
        else:
            self.assertIn("libcurl", depends, "dpkg-shlibdeps found the shared libraries")

        root = tempfile.mkdtemp(prefix="hpcbake-deb-x-")
        self.addCleanup(shutil.rmtree, root, True)
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        exe = os.path.join(root, "usr", "bin", "hpcbake")
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^hpcbake \d+\.\d+\.\d+")
        # The unpacked binary finds the manifests it was packaged with, beside itself.
        env = {k: v for k, v in os.environ.items() if k not in ("HPCBAKE_MANIFESTS", "HPCBAKE_DRIVERS")}
        r = subprocess.run([exe, "manifest", "lint"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(os.path.join(root, "usr", "share", "hpcbake", "manifests"), r.stdout)
        # The guides' links resolve in the installed copy, and --help names it.
        sys.path.insert(0, os.path.join(SRC, "tests", "docs"))
        import test_doc_links as links  # noqa: E402
        docdir = os.path.join(root, "usr", "share", "doc", "hpcbake")
        found, _ = links.shipped_problems(docdir)
        self.assertEqual(found, [], "\n".join(found))
        r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30, env=env)
        self.assertIn(os.path.join(docdir, "docs", "manual.md"), r.stdout)
        with gzip.open(os.path.join(root, "usr/share/man/man1/hpcbake.1.gz"), "rt") as f:
            man = f.read()
        self.assertIn("seal", man)
        self.assertIn(".TH HPCBAKE", man.upper())
        with open(os.path.join(root, "usr/lib/systemd/system/hpcbake-resume.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=/usr/bin/hpcbake install --resume", unit)
        self.assertIn("SuccessExitStatus=7", unit)
        self.assertIn("Type=oneshot", unit)

    def test_dpkg_installs_it_into_a_scratch_root(self):
        if os.geteuid() != 0 or not shutil.which("dpkg"):
            self.skipTest("dpkg --root needs root")
        deb = build_package("DEB")
        root = tempfile.mkdtemp(prefix="hpcbake-deb-root-")
        self.addCleanup(shutil.rmtree, root, True)
        admin = os.path.join(root, "var", "lib", "dpkg")
        for d in ("updates", "info", "triggers"):
            os.makedirs(os.path.join(admin, d))
        for f in ("status", "available"):
            open(os.path.join(admin, f), "w").close()
        # The scratch root has none of the library packages: --force-depends; no maintainer scripts run.
        r = subprocess.run(["dpkg", f"--root={root}", "--force-depends", "--force-script-chrootless", "-i", deb],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run(["dpkg", f"--root={root}", "-L", "hpcbake"], capture_output=True, text=True, timeout=30)
        self.assertIn("/usr/bin/hpcbake", r.stdout)
        r = subprocess.run([os.path.join(root, "usr/bin/hpcbake"), "--version"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)


class Rpm(unittest.TestCase):
    def test_rpm_lists_the_same_files(self):
        if not shutil.which("rpmbuild"):
            self.skipTest("rpmbuild is not installed (scripts/deps installs Debian's rpm)")
        rpm = build_package("RPM")
        r = subprocess.run(["rpm", "-qlp", rpm], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        for p in ("/usr/bin/hpcbake", "/usr/lib/systemd/system/hpcbake-resume.service",
                  "/usr/share/bash-completion/completions/hpcbake", "/usr/share/man/man1/hpcbake.1.gz",
                  "/usr/share/doc/hpcbake/docs/manual.md", "/usr/share/doc/hpcbake/docs/secure-boot.md",
                  "/usr/share/hpcbake/manifests/sizes/nd96isr_h100_v5.yaml"):
            self.assertIn(p, r.stdout.split("\n"))
        req = subprocess.run(["rpm", "-qRp", rpm], capture_output=True, text=True, timeout=60).stdout
        if static_build():
            self.assertNotIn("libcurl", req, "the portable release requires glibc's sonames only")
            self.assertIn("libc.so.6", req)
        else:
            self.assertIn("libcurl.so.4", req)


if __name__ == "__main__":
    unittest.main()
