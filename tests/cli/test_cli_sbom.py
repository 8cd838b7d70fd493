"""The release SBOM (packaging/sbom.py, docs/release.md "SBOM") and the packages' Debian metadata.

- packaging/sbom.py run on a copy of scripts/static-deps' records (tests/fixtures/sbom/static-deps)
  writes an SPDX 2.3 document the published schema (tests/fixtures/sbom/spdx-schema-2.3.json, via
  python3-jsonschema: Debian packages no SPDX validator) accepts, listing every library static-deps
  built (never doctest, the tests' only) with its version, purl and license, STATIC_LINK from
  hpcbake; documents with a required field dropped are refused by the same validator.
- A portable build's own hpcbake.spdx.json (HPCBAKE_BUILD_DIR, built against static-deps) is valid
  and lists exactly what its static-deps directory's `versions` names, each with the SHA-256 of its
  .dsc from the mirror's Sources index. Skipped, with the reason, in a build without static-deps.
- The packages' copyright file is machine-readable (copyright-format 1.0) and carries LICENSE; the
  Maintainer is not a localhost address.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import test_cli_packaging as packaging  # its build_package (a module import: its tests are not run again)
from common import BIN, FIXTURES, SRC

SCHEMA = os.path.join(FIXTURES, "sbom", "spdx-schema-2.3.json")
STATIC = os.path.join(FIXTURES, "sbom", "static-deps")
BUILD = os.environ.get("HPCBAKE_BUILD_DIR", "")
SBOM_PY = os.path.join(SRC, "packaging", "sbom.py")

try:
    import jsonschema
except ImportError:  # scripts/deps installs python3-jsonschema
    jsonschema = None


def validate(doc):
    """Raises jsonschema.ValidationError when the SPDX 2.3 schema refuses doc."""
    with open(SCHEMA) as f:
        jsonschema.validate(doc, json.load(f), cls=jsonschema.Draft7Validator)


def read(path):
    with open(path) as f:
        return f.read()


def static_dir_of_build():
    """The scripts/static-deps directory BUILD was configured with (its toolchain file's), or None."""
    try:
        text = read(os.path.join(BUILD, "CMakeCache.txt"))
    except OSError:
        return None
    m = re.search(r"^CMAKE_TOOLCHAIN_FILE:[A-Z]+=(.*)/toolchain\.cmake$", text, re.M)
    return m.group(1) if m and os.path.exists(os.path.join(m.group(1), "versions")) else None


@unittest.skipUnless(jsonschema, "SKIPPED: python3-jsonschema is missing (scripts/deps installs it)")
class ReleaseSbom(unittest.TestCase):
    def generate(self, static_dir=STATIC, epoch="1764288000"):
        out = os.path.join(tempfile.mkdtemp(prefix="hpcbake-sbom-"), "hpcbake.spdx.json")
        r = subprocess.run([sys.executable, SBOM_PY, "--static-dir", static_dir, "--version", "1.2.3+4.gabcdef0",
                            "--arch", "x86_64", "--binary", BIN, "--compiler-version", "12.2.0", "--out", out],
                           capture_output=True, text=True, env=dict(os.environ, SOURCE_DATE_EPOCH=epoch))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            return json.load(f), out

    def test_fixture_records_give_a_valid_spdx_document_of_every_static_library(self):
        doc, _ = self.generate()
        validate(doc)
        self.assertEqual(doc["spdxVersion"], "SPDX-2.3")
        self.assertEqual(doc["creationInfo"]["created"], "2025-11-28T00:00:00Z", "SOURCE_DATE_EPOCH, not the clock")
        pkgs = {p["name"]: p for p in doc["packages"]}
        with open(os.path.join(STATIC, "versions")) as f:
            built = [line.split()[1:] for line in f if line.startswith("source ")]
        self.assertGreater(len(built), 10)
        for name, version in built:
            if name == "doctest":
                self.assertNotIn(name, pkgs, "doctest is linked into the unit tests only")
                continue
            with self.subTest(package=name):
                p = pkgs[name]
                self.assertEqual(p["versionInfo"], version)
                ref = p["externalRefs"][0]
                self.assertEqual((ref["referenceCategory"], ref["referenceType"]), ("PACKAGE-MANAGER", "purl"))
                self.assertTrue(ref["referenceLocator"].startswith(f"pkg:deb/debian/{name}@"), ref)
                self.assertIn({"spdxElementId": "SPDXRef-Package-hpcbake", "relationshipType": "STATIC_LINK",
                               "relatedSpdxElement": p["SPDXID"]}, doc["relationships"])
        main = pkgs["hpcbake"]
        self.assertEqual((main["versionInfo"], main["licenseDeclared"]), ("1.2.3+4.gabcdef0", "Apache-2.0"))
        self.assertRegex(main["sourceInfo"], r"built from commit ([0-9a-f]{40}|unknown)")
        # Licenses: from each debian/copyright's Files: * paragraph; Debian's names made SPDX's.
        self.assertEqual(pkgs["openssl"]["licenseDeclared"], "Apache-2.0")
        self.assertEqual(pkgs["curl"]["licenseDeclared"], "curl")
        self.assertEqual(pkgs["libzstd"]["licenseDeclared"], "BSD-3-Clause OR GPL-2.0-only")
        self.assertEqual(pkgs["xz-utils"]["licenseDeclared"], "NOASSERTION")  # Debian's "PD": no SPDX id
        self.assertIn("License: PD", pkgs["xz-utils"]["licenseComments"])
        self.assertEqual(pkgs["kmod"]["licenseDeclared"], "NOASSERTION")  # no copyright file in the fixture
        self.assertIn("no debian/copyright recorded for kmod", pkgs["kmod"]["licenseComments"])
        # glibc: the sysroot's, a run-time dependency (dynamic), not a static link.
        self.assertEqual(pkgs["libc6"]["versionInfo"], "2.31-13+deb11u11")
        self.assertIn({"spdxElementId": "SPDXRef-Package-hpcbake", "relationshipType": "DEPENDS_ON",
                       "relatedSpdxElement": pkgs["libc6"]["SPDXID"]}, doc["relationships"])
        # No apt state beside the fixture: no checksum or download location is made up.
        self.assertEqual(pkgs["openssl"]["downloadLocation"], "NOASSERTION")
        self.assertNotIn("checksums", pkgs["openssl"])

    def test_same_records_same_document(self):
        a, _ = self.generate()
        b, _ = self.generate()
        self.assertEqual(a, b)

    def test_the_validator_refuses_a_document_missing_a_required_field(self):
        doc, _ = self.generate()
        validate(doc)
        for what, mutate in (
                ("spdxVersion", lambda d: d.pop("spdxVersion")),
                ("creationInfo.creators", lambda d: d["creationInfo"].pop("creators")),
                ("a package's downloadLocation", lambda d: d["packages"][1].pop("downloadLocation")),
                ("a package's name", lambda d: d["packages"][2].pop("name")),
                ("a relationship's type", lambda d: d["relationships"][1].pop("relationshipType")),
                ("an unknown relationship type", lambda d: d["relationships"][1].update(relationshipType="LINKS"))):
            with self.subTest(broken=what):
                broken = copy.deepcopy(doc)
                mutate(broken)
                with self.assertRaises(jsonschema.ValidationError):
                    validate(broken)

    def test_missing_records_are_refused_with_the_fix(self):
        empty = tempfile.mkdtemp(prefix="hpcbake-sbom-empty-")
        r = subprocess.run([sys.executable, SBOM_PY, "--static-dir", empty, "--version", "1", "--arch", "x86_64",
                            "--binary", BIN, "--compiler-version", "12", "--out", os.path.join(empty, "x.json")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"cannot read {empty}/versions", r.stderr)
        self.assertIn("rerun scripts/static-deps", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(empty, "x.json")))

    def test_the_portable_builds_own_sbom(self):
        static_dir = static_dir_of_build()
        path = os.path.join(BUILD, "hpcbake.spdx.json")
        if not static_dir:
            self.skipTest(f"SKIPPED: {BUILD or 'HPCBAKE_BUILD_DIR'} is not a portable build (no scripts/static-deps toolchain)")
        if not os.path.exists(path):
            self.skipTest(f"SKIPPED: {path} is not built yet (cmake --build --target hpcbake_sbom)")
        with open(path) as f:
            doc = json.load(f)
        validate(doc)
        pkgs = {p["name"]: p for p in doc["packages"]}
        with open(os.path.join(static_dir, "versions")) as f:
            built = {line.split()[1]: line.split()[2] for line in f if line.startswith("source ")}
        built.pop("doctest", None)
        listed = {n: p["versionInfo"] for n, p in pkgs.items() if p["SPDXID"].startswith("SPDXRef-DebianSource-")}
        self.assertEqual(listed, built)
        for name in built:
            with self.subTest(package=name):
                sums = pkgs[name].get("checksums", [])
                self.assertEqual(len(sums), 1, f"{name}: no .dsc SHA-256 from the Sources index")
                self.assertRegex(sums[0]["checksumValue"], r"^[0-9a-f]{64}$")
                self.assertTrue(pkgs[name]["downloadLocation"].endswith(".dsc"), pkgs[name]["downloadLocation"])


class DebianMetadata(unittest.TestCase):
    def test_copyright_file_is_machine_readable_and_carries_license(self):
        path = os.path.join(BUILD, "copyright")
        if not os.path.exists(path):
            self.skipTest(f"SKIPPED: no {path} (HPCBAKE_BUILD_DIR is not a configured build)")
        text = read(path)
        paras = text.split("\n\n")
        self.assertTrue(paras[0].startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"))
        self.assertIn("Files: *\nCopyright: ", paras[1])
        self.assertIn("\nLicense: Apache-2.0", paras[1])
        self.assertEqual(len(paras), 3, "three paragraphs: header, Files, License (no blank line inside one)")
        body = paras[2].rstrip("\n").split("\n")
        self.assertEqual(body[0], "License: Apache-2.0")
        self.assertTrue(all(line.startswith(" ") for line in body[1:]), "continuation lines start with a space")
        unfolded = "\n".join(("" if line == " ." else line[1:]).rstrip() for line in body[1:])
        # LICENSE's own notice (its appendix), line for line, then where the full text is.
        notice = re.search(r"Licensed under the Apache License.*?limitations under the License\.", read(os.path.join(SRC, "LICENSE")), re.S)
        self.assertIn("\n".join(line.strip() for line in notice.group(0).split("\n")), unfolded)
        self.assertIn("/usr/share/common-licenses/Apache-2.0", unfolded)

    @unittest.skipUnless(shutil.which("lintian") and shutil.which("dpkg-deb"),
                         "SKIPPED: lintian or dpkg-deb is missing (scripts/deps installs them)")
    def test_lintian_finds_nothing_wrong_with_the_maintainer_or_the_copyright_file(self):
        deb = packaging.build_package("DEB")
        r = subprocess.run(["lintian", "--tag-display-limit", "0", deb], capture_output=True, text=True, timeout=300)
        tags = [line for line in r.stdout.splitlines() if re.match(r"^[EW]: ", line)]
        # What this change is about; lintian's other findings (a native package without a changelog,
        # the static build's embedded-library, which the SBOM lists) are not.
        bad = [t for t in tags if re.search(r"copyright|maintainer|mail-address|mail-host", t)
               and "copyright-without-copyright-notice" not in t]
        self.assertEqual(bad, [], r.stdout)
        fields = subprocess.run(["dpkg-deb", "-f", deb, "Maintainer"], capture_output=True, text=True, check=True)
        self.assertNotIn("localhost", fields.stdout)
        listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
        self.assertIn("./usr/share/doc/hpcbake/copyright", listing)

    def test_maintainer_is_not_localhost(self):
        path = os.path.join(BUILD, "CPackConfig.cmake")
        if not os.path.exists(path):
            self.skipTest(f"SKIPPED: no {path} (HPCBAKE_BUILD_DIR is not a configured build)")
        m = re.search(r'^set\(CPACK_PACKAGE_CONTACT "(.*)"\)$', read(path), re.M)
        self.assertTrue(m)
        self.assertNotIn("localhost", m.group(1))
        self.assertRegex(m.group(1), r"^[^<>]+ <[^@<>]+@[^@<>]+>$", "Debian Policy 5.6.2: a name and an address")

    def test_the_install_tree_holds_the_copyright_and_the_sbom(self):
        """What scripts/release packs into the tarball and CPack into the .deb and .rpm: `cmake --install`."""
        if not os.path.exists(os.path.join(BUILD, "cmake_install.cmake")):
            self.skipTest(f"SKIPPED: {BUILD or 'HPCBAKE_BUILD_DIR'} is not a configured build")
        dest = tempfile.mkdtemp(prefix="hpcbake-sbom-install-")
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", "/usr"], capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=dest))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = os.path.join(dest, "usr", "share", "doc", "hpcbake")
        self.assertEqual(read(os.path.join(doc, "copyright")), read(os.path.join(BUILD, "copyright")))
        if static_dir_of_build():
            with open(os.path.join(doc, "hpcbake.spdx.json")) as f:
                validate(json.load(f))
        else:
            self.assertFalse(os.path.exists(os.path.join(doc, "hpcbake.spdx.json")),
                             "a build against Debian's shared libraries has no static SBOM: dpkg lists them")


if __name__ == "__main__":
    unittest.main()
