"""The trimmed Compute Gallery schema (GalleryImageVersion, GalleryRP.json API 2025-03-03, in
tests/fixtures/gallery/) that `hpcbake seal --uefi-db-json` bodies are validated against
(tests/cli/test_cli_seal.py, class UefiDb): closed under $ref and allOf, its source recorded, the
facts the body relies on read back from it, Azure's own example with custom UEFI keys accepted, and
the validator's allOf support. Standard library only. ctest: batch/schema."""
import copy
import json
import os
import unittest

import swagger_schema as schema

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE_DIR = os.path.join(SRC, "tests", "fixtures", "gallery")
ROOT = "GalleryImageVersion"

with open(os.path.join(FIXTURE_DIR, "compute-gallery-2025-03-03-image-version.json")) as f:
    SPEC = json.load(f)
with open(os.path.join(FIXTURE_DIR, "GalleryImageVersion_Create_WithVHD_UefiSettings.request.json")) as f:
    EXAMPLE = json.load(f)


class Fixture(unittest.TestCase):
    def test_every_definition_the_image_version_reaches_is_there_and_nothing_else(self):
        self.assertEqual(schema.closure(SPEC, ROOT), set(SPEC["definitions"]))
        for name, definition in SPEC["definitions"].items():
            for ref in schema.refs_of(definition):
                self.assertIn(ref, SPEC["definitions"], f"{name} refers to {ref}")

    def test_the_sources_are_recorded_in_the_fixture_and_its_readme(self):
        src = SPEC["x-trimmed-from"]
        self.assertEqual(src["repository"], "https://github.com/Azure/azure-rest-api-specs")
        self.assertRegex(src["commit"], r"^[0-9a-f]{40}$")
        self.assertRegex(src["common-types"]["commit"], r"^[0-9a-f]{40}$")
        self.assertIn(f"/GalleryRP/stable/{src['api-version']}/GalleryRP.json", src["path"])
        with open(os.path.join(FIXTURE_DIR, "README.md")) as f:
            readme = f.read()
        for value in (src["commit"], src["path"], src["api-version"], src["common-types"]["commit"],
                      src["common-types"]["path"]):
            self.assertIn(value, readme)
        # hpcbake names the same API version in the body's PUT (src/seal/uefi_db.hpp).
        with open(os.path.join(SRC, "src", "seal", "uefi_db.hpp")) as f:
            self.assertIn(f'kGalleryApiVersion = "{src["api-version"]}"', f.read())

    def test_what_the_schema_says_of_the_properties_the_body_relies_on(self):
        defs = SPEC["definitions"]
        self.assertEqual(defs["TrackedResource"]["required"], ["location"])
        self.assertEqual(defs["GalleryImageVersionProperties"]["required"], ["storageProfile"])
        self.assertEqual(defs["UefiKeyType"]["enum"], ["sha256", "x509"])
        self.assertIn("MicrosoftUefiCertificateAuthorityTemplate", defs["UefiSignatureTemplateName"]["enum"])
        self.assertEqual(defs["UefiKeySignatures"]["properties"]["db"],
                         {"type": "array", "items": {"$ref": "#/definitions/UefiKey"}})
        self.assertEqual(defs["UefiKey"]["properties"]["value"], {"type": "array", "items": {"type": "string"}})
        self.assertEqual(set(defs["GalleryArtifactVersionFullSource"]["properties"]),
                         {"communityGalleryImageId", "virtualMachineId"})
        self.assertEqual(defs["GalleryArtifactVersionSource"]["properties"], {"id": {"type": "string"}})

    def test_azures_own_example_with_custom_uefi_keys_is_accepted(self):
        self.assertEqual(schema.validate(SPEC, EXAMPLE, ROOT), [])

    def test_and_a_mistake_in_it_is_not(self):
        body = copy.deepcopy(EXAMPLE)
        body["properties"]["securityProfile"]["uefiSettings"]["additionalSignatures"]["db"][0]["type"] = "pem"
        body["properties"]["storageProfile"]["osDiskImage"]["sizeInGB"] = 64
        found = schema.validate(SPEC, body, ROOT)
        self.assertIn("$.properties.securityProfile.uefiSettings.additionalSignatures.db[0].type: 'pem' is not one "
                      "of ['sha256', 'x509']", found)
        self.assertIn("$.properties.storageProfile.osDiskImage.sizeInGB: read-only (the service sets it), not part of "
                      "a request", found)


class AllOf(unittest.TestCase):
    SPEC = {"definitions": {
        "Base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        "Mid": {"type": "object", "properties": {"name": {"type": "string"}}, "allOf": [{"$ref": "#/definitions/Base"}]},
        "Leaf": {"type": "object", "properties": {"n": {"type": "integer"}}, "allOf": [{"$ref": "#/definitions/Mid"}]},
    }}

    def test_inherited_properties_and_required_ones_count(self):
        self.assertEqual(schema.validate(self.SPEC, {"id": "a", "name": "b", "n": 1}, "Leaf"), [])
        self.assertEqual(schema.validate(self.SPEC, {"name": "b"}, "Leaf"), ["$: missing required property 'id'"])
        self.assertEqual(schema.validate(self.SPEC, {"id": 1, "nam": "b"}, "Leaf"),
                         ["$.id: expected string, got integer 1",
                          "$.nam: unknown property (did you mean 'name'?)"])

    def test_an_allof_cycle_is_an_error_in_the_spec(self):
        spec = {"definitions": {"A": {"type": "object", "allOf": [{"$ref": "#/definitions/B"}]},
                                "B": {"type": "object", "allOf": [{"$ref": "#/definitions/A"}]}}}
        with self.assertRaises(schema.SpecError):
            schema.validate(spec, {}, "A")


if __name__ == "__main__":
    unittest.main()
