"""Each examples/batch-pool*.json against the Batch service's published pool-create schema
(PoolAddParameter, BatchService.json API 2024-07-01.20.0, trimmed in tests/fixtures/batch/), with
swagger_schema.py; and mutated copies of the examples, which must be refused, so that the check is
known to catch a misspelled property, a wrong type, a bad enum value or a missing required one.
Standard library only. ctest: batch/schema."""
import copy
import glob
import json
import os
import re
import unittest

import swagger_schema as schema

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE_DIR = os.path.join(SRC, "tests", "fixtures", "batch")
SPEC_FILE = os.path.join(FIXTURE_DIR, "batch-service-2024-07-01.20.0-pool-add.json")
EXAMPLES = sorted(glob.glob(os.path.join(SRC, "examples", "batch-pool*.json")))
ROOT = "PoolAddParameter"

with open(SPEC_FILE) as f:
    SPEC = json.load(f)


def load(name):
    with open(os.path.join(SRC, "examples", name)) as f:
        return json.load(f)


def problems(body):
    return schema.validate(SPEC, body, ROOT) + schema.documented_rules(body)


class Fixture(unittest.TestCase):
    def test_every_definition_the_pool_and_task_reach_is_there_and_nothing_else(self):
        # The roots: the pool-create body, and the task-add body (examples/batch-task-*.json,
        # tests/batch/test_batch_containers.py).
        self.assertEqual(SPEC["x-trimmed-from"]["roots"], [ROOT, "TaskAddParameter"])
        reached = set().union(*(schema.closure(SPEC, root) for root in SPEC["x-trimmed-from"]["roots"]))
        self.assertEqual(reached, set(SPEC["definitions"]))
        for name, definition in SPEC["definitions"].items():
            for ref in schema.refs_of(definition):
                self.assertIn(ref, SPEC["definitions"], f"{name} refers to {ref}")

    def test_the_source_is_recorded_in_the_fixture_and_its_readme(self):
        src = SPEC["x-trimmed-from"]
        self.assertEqual(src["repository"], "https://github.com/Azure/azure-rest-api-specs")
        self.assertRegex(src["commit"], r"^[0-9a-f]{40}$")
        self.assertIn(f"/stable/{src['api-version']}/BatchService.json", src["path"])
        with open(os.path.join(FIXTURE_DIR, "README.md")) as f:
            readme = f.read()
        for value in (src["commit"], src["path"], src["api-version"]):
            self.assertIn(value, readme)

    def test_what_the_schema_says_of_the_properties_the_examples_rely_on(self):
        # The facts docs/batch.md cites, read back from the vendored definitions.
        defs = SPEC["definitions"]
        self.assertEqual(set(defs["PoolAddParameter"]["required"]), {"id", "vmSize"})
        self.assertEqual(defs["StartTask"]["required"], ["commandLine"])
        self.assertEqual(defs["StartTask"]["properties"]["waitForSuccess"], {"type": "boolean"})
        self.assertEqual(defs["ElevationLevel"]["enum"], ["nonadmin", "admin"])
        self.assertEqual(defs["AutoUserSpecification"]["properties"]["scope"]["enum"], ["task", "pool"])
        self.assertEqual(set(defs["VirtualMachineConfiguration"]["required"]), {"nodeAgentSKUId", "imageReference"})
        # Trusted Launch (examples/batch-pool-trusted-launch.json, docs/batch.md).
        self.assertEqual(defs["VirtualMachineConfiguration"]["properties"]["securityProfile"],
                         {"$ref": "#/definitions/SecurityProfile"})
        self.assertEqual(defs["SecurityProfile"]["properties"]["securityType"]["enum"], ["trustedLaunch", "confidentialVM"])
        self.assertEqual(defs["UefiSettings"]["properties"],
                         {"secureBootEnabled": {"type": "boolean"}, "vTpmEnabled": {"type": "boolean"}})


class Examples(unittest.TestCase):
    def test_there_are_examples_to_check(self):
        names = [os.path.basename(p) for p in EXAMPLES]
        self.assertIn("batch-pool.json", names)
        self.assertIn("batch-pool-gallery.json", names)
        self.assertIn("batch-pool-trusted-launch.json", names)

    def test_each_example_is_a_valid_pool_create_body(self):
        for path in EXAMPLES:
            with self.subTest(example=os.path.basename(path)):
                with open(path) as f:
                    body = json.load(f)
                self.assertEqual(problems(body), [])


class Mutations(unittest.TestCase):
    """A copy of an example with one mistake must be refused, with the path of the mistake."""

    def refused(self, mutate, *expected, example="batch-pool.json"):
        body = copy.deepcopy(load(example))
        mutate(body)
        found = problems(body)
        self.assertTrue(found, "the mistake went through")
        for pattern in expected:
            self.assertTrue(any(re.search(pattern, p) for p in found), f"no problem matches {pattern!r}: {found}")
        return found

    def accepted(self, mutate, example="batch-pool.json"):
        body = copy.deepcopy(load(example))
        mutate(body)
        self.assertEqual(problems(body), [])

    # -- misspelled properties
    def test_a_misspelled_top_level_property(self):
        def mutate(b):
            b["vmSzie"] = b.pop("vmSize")
        self.refused(mutate, r"^\$\.vmSzie: unknown property \(did you mean 'vmSize'\?\)$",
                     r"^\$: missing required property 'vmSize'$")

    def test_a_misspelled_start_task_property(self):
        def mutate(b):
            b["startTask"]["waitForSucess"] = b["startTask"].pop("waitForSuccess")
        self.refused(mutate, r"^\$\.startTask\.waitForSucess: unknown property \(did you mean 'waitForSuccess'\?\)$")

    def test_a_misspelled_property_deep_down(self):
        def mutate(b):
            auto = b["startTask"]["userIdentity"]["autoUser"]
            auto["elevationlevel"] = auto.pop("elevationLevel")
        self.refused(mutate, r"^\$\.startTask\.userIdentity\.autoUser\.elevationlevel: unknown property "
                             r"\(did you mean 'elevationLevel'\?\)$")

    def test_a_misspelled_resource_file_property(self):
        def mutate(b):
            b["startTask"]["resourceFiles"][0]["httpURL"] = b["startTask"]["resourceFiles"][0].pop("httpUrl")
        self.refused(mutate, r"^\$\.startTask\.resourceFiles\[0\]\.httpURL: unknown property")

    def test_a_misspelled_gallery_image_property(self):
        def mutate(b):
            ref = b["virtualMachineConfiguration"]["imageReference"]
            ref["virtualMachineImageID"] = ref.pop("virtualMachineImageId")
        self.refused(mutate, r"imageReference\.virtualMachineImageID: unknown property", example="batch-pool-gallery.json")

    def test_trusted_launch_mistakes(self):
        # The Trusted Launch pool (the UEFI db route) and the gallery pool (an image definition of
        # security type TrustedLaunch: Trusted Launch VMs only, docs/batch.md).
        sp = lambda b: b["virtualMachineConfiguration"]["securityProfile"]  # noqa: E731
        for example in ("batch-pool-trusted-launch.json", "batch-pool-gallery.json"):
            with self.subTest(example=example):
                self.refused(lambda b: sp(b).update(securityType="TrustedLaunch"),
                             r"securityProfile\.securityType: 'TrustedLaunch' is not one of .*did you mean 'trustedLaunch'",
                             example=example)
                self.refused(lambda b: sp(b)["uefiSettings"].update(secureBoot=sp(b)["uefiSettings"].pop("secureBootEnabled")),
                             r"uefiSettings\.secureBoot: unknown property \(did you mean 'secureBootEnabled'\?\)",
                             example=example)
                self.refused(lambda b: sp(b)["uefiSettings"].update(vTpmEnabled="true"),
                             r"uefiSettings\.vTpmEnabled: expected boolean, got string", example=example)

    # -- wrong types
    def test_wrong_types(self):
        cases = {
            "targetDedicatedNodes as a string": (lambda b: b.update(targetDedicatedNodes="2"),
                                                 r"^\$\.targetDedicatedNodes: expected integer, got string '2'$"),
            "waitForSuccess as a string": (lambda b: b["startTask"].update(waitForSuccess="true"),
                                           r"^\$\.startTask\.waitForSuccess: expected boolean, got string"),
            "maxTaskRetryCount as a fraction": (lambda b: b["startTask"].update(maxTaskRetryCount=3.5),
                                                r"maxTaskRetryCount: expected integer, got number"),
            "maxTaskRetryCount as true": (lambda b: b["startTask"].update(maxTaskRetryCount=True),
                                          r"maxTaskRetryCount: expected integer, got boolean"),
            "resourceFiles as an object": (lambda b: b["startTask"].update(resourceFiles=b["startTask"]["resourceFiles"][0]),
                                           r"^\$\.startTask\.resourceFiles: expected array, got object"),
            "an environment value as a number": (lambda b: b["startTask"]["environmentSettings"][0].update(value=1),
                                                 r"environmentSettings\[0\]\.value: expected string, got integer"),
            "the command line as a list": (lambda b: b["startTask"].update(commandLine=["/bin/bash", "-c", "true"]),
                                           r"^\$\.startTask\.commandLine: expected string, got array"),
            "targetDedicatedNodes past int32": (lambda b: b.update(targetDedicatedNodes=2**31),
                                                r"targetDedicatedNodes: 2147483648 is outside int32"),
            "a resize timeout that is not a duration": (lambda b: b.update(resizeTimeout="15m"),
                                                        r"resizeTimeout: '15m' is not an ISO 8601 duration"),
        }
        for what, (mutate, expected) in cases.items():
            with self.subTest(what):
                self.refused(mutate, expected)

    # -- missing required properties
    def test_missing_required_properties(self):
        cases = {
            "vmSize": (lambda b: b.pop("vmSize"), r"^\$: missing required property 'vmSize'$"),
            "id": (lambda b: b.pop("id"), r"^\$: missing required property 'id'$"),
            "startTask.commandLine": (lambda b: b["startTask"].pop("commandLine"),
                                      r"^\$\.startTask: missing required property 'commandLine'$"),
            "nodeAgentSKUId": (lambda b: b["virtualMachineConfiguration"].pop("nodeAgentSKUId"),
                               r"^\$\.virtualMachineConfiguration: missing required property 'nodeAgentSKUId'$"),
            "an environment setting's name": (lambda b: b["startTask"]["environmentSettings"][0].pop("name"),
                                              r"environmentSettings\[0\]: missing required property 'name'$"),
        }
        for what, (mutate, expected) in cases.items():
            with self.subTest(what):
                self.refused(mutate, expected)

    # -- enum values
    def test_values_outside_an_enum(self):
        self.refused(lambda b: b["startTask"]["userIdentity"]["autoUser"].update(elevationLevel="root"),
                     r"autoUser\.elevationLevel: 'root' is not one of \['nonadmin', 'admin'\]$")
        self.refused(lambda b: b["startTask"]["userIdentity"]["autoUser"].update(scope="node"),
                     r"autoUser\.scope: 'node' is not one of \['task', 'pool'\]$")
        self.refused(lambda b: b.update(targetNodeCommunicationMode="simple"),
                     r"targetNodeCommunicationMode: 'simple' is not one of .*did you mean 'simplified'")

    # -- what the service sets, and what only the descriptions say
    def test_a_read_only_property_in_the_request(self):
        self.refused(lambda b: b["virtualMachineConfiguration"]["imageReference"].update(exactVersion="22.04.202401010"),
                     r"imageReference\.exactVersion: read-only")

    def test_rules_the_definitions_state_in_words(self):
        self.refused(lambda b: b["startTask"]["resourceFiles"][0].pop("filePath"),
                     r"resourceFiles\[0\]: filePath is required with httpUrl")
        self.refused(lambda b: b["startTask"]["resourceFiles"][0].update(storageContainerUrl="https://a/b"),
                     r"resourceFiles\[0\]: exactly one of autoStorageContainerName, storageContainerUrl, httpUrl")
        self.refused(lambda b: b["startTask"]["resourceFiles"][0].update(filePath="../hpcbake.tar.gz"),
                     r"filePath: '\.\./hpcbake\.tar\.gz' leaves the task's working directory")
        self.refused(lambda b: b["startTask"]["userIdentity"].update(username="hpc"),
                     r"userIdentity: exactly one of username and autoUser")
        self.refused(lambda b: b.pop("virtualMachineConfiguration"), r"virtualMachineConfiguration must be specified")
        self.refused(lambda b: b.update(enableAutoScale=True),
                     r"targetDedicatedNodes must not be given with enableAutoScale true",
                     r"autoScaleFormula is required with enableAutoScale true")
        self.refused(lambda b: b.pop("targetDedicatedNodes"), r"targetDedicatedNodes or targetLowPriorityNodes is required")
        self.refused(lambda b: b["virtualMachineConfiguration"]["imageReference"].update(publisher="Canonical"),
                     r"virtualMachineImageId excludes the other properties", example="batch-pool-gallery.json")

    # -- and the validator is not simply refusing everything
    def test_valid_additions_pass(self):
        self.accepted(lambda b: b.update(resizeTimeout="PT15M", taskSchedulingPolicy={"nodeFillType": "pack"}))
        self.accepted(lambda b: b.update(resourceTags={"team": "hpc", "cost-center": "42"}))
        self.accepted(lambda b: b["virtualMachineConfiguration"].update(extensions=[
            {"name": "x", "publisher": "Microsoft.Azure.Extensions", "type": "CustomScript",
             "settings": {"anything": ["goes", 1]}}]))
        self.accepted(lambda b: b["startTask"]["resourceFiles"][0].update(
            identityReference={"resourceId": "/subscriptions/0/resourceGroups/rg/providers/"
                                             "Microsoft.ManagedIdentity/userAssignedIdentities/id"},
            httpUrl="https://ACCOUNT.blob.core.windows.net/hpcbake/hpcbake-VERSION-linux-x86_64.tar.gz"))

    def test_maps_and_free_form_objects_are_still_checked_where_the_schema_says(self):
        self.refused(lambda b: b.update(resourceTags={"team": 7}), r"^\$\.resourceTags\.team: expected string, got integer")
        self.refused(lambda b: b["virtualMachineConfiguration"].update(extensions=[{"name": "x", "type": "CustomScript"}]),
                     r"extensions\[0\]: missing required property 'publisher'")


class Validator(unittest.TestCase):
    def test_a_dangling_reference_is_an_error_in_the_spec_not_a_pass(self):
        spec = {"definitions": {"A": {"type": "object", "properties": {"b": {"$ref": "#/definitions/B"}}}}}
        with self.assertRaises(schema.SpecError):
            schema.validate(spec, {"b": {}}, "A")
        with self.assertRaises(schema.SpecError):
            schema.closure(spec, "A")

    def test_a_reference_cycle_is_reported(self):
        spec = {"definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"$ref": "#/definitions/A"}}}
        with self.assertRaises(schema.SpecError):
            schema.validate(spec, {}, "A")


if __name__ == "__main__":
    unittest.main()
