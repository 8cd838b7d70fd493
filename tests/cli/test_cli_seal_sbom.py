"""The image SBOM `seal` writes beside image-manifest.json (/var/lib/hpcbake/image-sbom.spdx.json,
docs/security.md "The image SBOM"), on test_cli_seal.py's fixture: valid against the SPDX 2.3 JSON
schema (tests/fixtures/sbom), holding what the manifest holds (packages with purls, modules with
SHA-256 and signer, artifacts with URL and SHA-256, repositories with key fingerprints); a copy
with a required field dropped is refused by the same validator; a refused seal writes neither."""
import copy
import json
import os
import unittest

from test_cli_seal import SealBase
from test_cli_sbom import jsonschema, validate

SBOM = "var/lib/hpcbake/image-sbom.spdx.json"
MANIFEST = "var/lib/hpcbake/image-manifest.json"


@unittest.skipUnless(jsonschema, "SKIPPED: python3-jsonschema is missing (scripts/deps installs it)")
class ImageSbom(SealBase):
    def sealed(self):
        self.verified()
        r = self.seal()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"wrote /{SBOM} (SPDX 2.3", r.stdout)
        with open(os.path.join(self.root, SBOM)) as f:
            sbom = json.load(f)
        with open(os.path.join(self.root, MANIFEST)) as f:
            manifest = json.load(f)
        return sbom, manifest

    def test_seal_writes_a_valid_spdx_sbom_of_what_the_manifest_holds(self):
        sbom, manifest = self.sealed()
        validate(sbom)
        self.assertEqual(sbom["spdxVersion"], "SPDX-2.3")
        self.assertEqual(oct(os.stat(os.path.join(self.root, SBOM)).st_mode & 0o777), "0o644")
        by_id = {p["SPDXID"]: p for p in sbom["packages"]}
        rels = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in sbom["relationships"]}
        (image,) = sbom["documentDescribes"]
        self.assertIn(("SPDXRef-DOCUMENT", "DESCRIBES", image), rels)
        self.assertEqual(by_id[image]["name"], "hpcbake-image-ubuntu-22.04-Standard_ND4test_v1")
        # Components and their packages, with purls a scanner matches.
        comps = {p["name"]: p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-Component-")}
        self.assertEqual(set(comps), {c["component"] for c in manifest["components"]})
        fm = comps["nvidia-fabricmanager"]
        self.assertIn((image, "CONTAINS", fm["SPDXID"]), rels)
        pkgs = [by_id[t] for (s, k, t) in rels if s == fm["SPDXID"] and k == "CONTAINS"]
        self.assertEqual([(p["name"], p["versionInfo"]) for p in pkgs], [("nvidia-fabricmanager", "580.126.16-1")])
        self.assertEqual(pkgs[0]["externalRefs"], [{
            "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
            "referenceLocator": "pkg:deb/ubuntu/nvidia-fabricmanager@580.126.16-1?distro=ubuntu-22.04"}])
        self.assertIn("package manager apt; held at this version", pkgs[0]["annotations"][0]["comment"])
        # Every module of the manifest, with its SHA-256 and signer.
        mods = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-Module-")]
        self.assertEqual(sorted((m["name"], m["packageFileName"], m["checksums"][0]["checksumValue"]) for m in mods),
                         sorted((m["name"], m["path"], m["sha256"]) for m in manifest["modules"]))
        for m in mods:
            self.assertIn((image, "CONTAINS", m["SPDXID"]), rels)
            self.assertRegex(m["annotations"][0]["comment"], r"^kernel module for \S+ \(vermagic .*\); signer: ")
        # Artifacts: URL and SHA-256 as the manifest has them, GENERATED_FROM by their component.
        want = sorted((a["name"], a["url"] or "NOASSERTION", a["sha256"])
                      for c in manifest["components"] for a in c["artifacts"])
        arts = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-Artifact-")]
        self.assertEqual(sorted((a["name"], a["downloadLocation"], (a.get("checksums") or [{}])[0].get("checksumValue"))
                                for a in arts), want)
        # Repositories hpcbake configured, each with its pinned key's fingerprint.
        with open(os.path.join(self.root, "var/lib/hpcbake/plan.json")) as f:
            plan = json.load(f)["plan"]
        repo_steps = [s for s in plan["steps"] if s.get("kind") in ("repository", "canonical-driver")]
        repos = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-Repository-")]
        self.assertEqual(len(repos), len(repo_steps), [p["name"] for p in repos])
        for r in repos:
            self.assertRegex(r["annotations"][0]["comment"], r"fingerprint [0-9A-F]{40}")

    def test_the_validator_refuses_an_sbom_missing_a_required_field(self):
        sbom, _ = self.sealed()
        validate(sbom)
        for what, mutate in (("dataLicense", lambda d: d.pop("dataLicense")),
                             ("a package's SPDXID", lambda d: d["packages"][0].pop("SPDXID")),
                             ("an annotation's date", lambda d: next(p for p in d["packages"] if "annotations" in p)
                              ["annotations"][0].pop("annotationDate")),
                             ("a checksum's algorithm", lambda d: next(p for p in d["packages"] if "checksums" in p)
                              ["checksums"][0].update(algorithm="SHA-256"))):
            with self.subTest(broken=what):
                broken = copy.deepcopy(sbom)
                mutate(broken)
                with self.assertRaises(jsonschema.ValidationError):
                    validate(broken)

    def test_a_refused_seal_writes_no_sbom(self):
        r = self.seal()  # no verify in this boot
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.root, SBOM)))

    def test_json_names_the_sbom(self):
        self.verified()
        r = self.seal("--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["sbom_path"], "/" + SBOM)


if __name__ == "__main__":
    unittest.main()
