"""The container pool (examples/batch-pool-containers.json) and its two tasks
(examples/batch-task-gpu-container.json, examples/batch-task-rdma-container.json) against the Batch
service's published schema: the pool against PoolAddParameter, each task against TaskAddParameter
(the body of Task - Add, `POST {batchUrl}/jobs/{jobId}/tasks`), both in BatchService.json API
2024-07-01.20.0, trimmed in tests/fixtures/batch/ (README.md there). Then the rules docs/batch.md,
"Container pools", states for the pair, each quoting where it comes from, and mutated copies that must
be refused. Standard library only. ctest: batch/schema."""
import copy
import json
import os
import re
import shlex
import unittest

import swagger_schema as schema

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SPEC_FILE = os.path.join(SRC, "tests", "fixtures", "batch", "batch-service-2024-07-01.20.0-pool-add.json")
POOL = "batch-pool-containers.json"
GPU_TASK = "batch-task-gpu-container.json"
RDMA_TASK = "batch-task-rdma-container.json"

with open(SPEC_FILE) as f:
    SPEC = json.load(f)


def load(name):
    with open(os.path.join(SRC, "examples", name)) as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------------
# Rules for a task body and for a pool with its tasks (docs/batch.md, "Container pools").

_TAGGED = re.compile(r"^[^@\s]+(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")


def _registry_of(image):
    """The registry host of an image reference, or None for Docker Hub (no dot, colon or localhost
    before the first slash)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def _run_options(task):
    """containerRunOptions as words; not a string (the schema reports that): none."""
    options = (task.get("containerSettings") or {}).get("containerRunOptions")
    return shlex.split(options) if isinstance(options, str) else []


def _has_option(argv, name, value=None):
    """Whether `argv` holds `name value` or `name=value` (value None: any value)."""
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv) and (value is None or argv[i + 1] == value):
            return True
        if word.startswith(name + "=") and (value is None or word[len(name) + 1:] == value):
            return True
    return False


def task_rules(task, path="$"):
    """Rules BatchService.json states in descriptions for one TaskAddParameter body."""
    errors = []
    if not isinstance(task, dict):
        return errors
    for i, rf in enumerate(task.get("resourceFiles") or []):
        if isinstance(rf, dict):
            errors += schema._resource_file_rules(rf, f"{path}.resourceFiles[{i}]")
    if isinstance(task.get("userIdentity"), dict):
        errors += schema._user_identity_rules(task["userIdentity"], f"{path}.userIdentity")
    # TaskAddParameter.requiredSlots: "For multi-instance Tasks, this must be 1."
    if "multiInstanceSettings" in task and task.get("requiredSlots", 1) != 1:
        errors.append(f"{path}.requiredSlots: a multi-instance task must have requiredSlots 1")
    return errors


def container_rules(pool, tasks):
    """Rules for a container pool and the tasks meant for it; each problem names the file's object."""
    errors = []
    vmc = pool.get("virtualMachineConfiguration") or {}
    cc = vmc.get("containerConfiguration")
    if not isinstance(cc, dict):
        return ["pool: no virtualMachineConfiguration.containerConfiguration"]
    names = cc.get("containerImageNames") or []
    servers = {r.get("registryServer") for r in cc.get("containerRegistries") or [] if isinstance(r, dict)}
    for image in names:
        # ContainerConfiguration.containerImageNames / TaskContainerSettings.imageName: "If no tag is
        # provided as part of the Image name, the tag ':latest' is used as a default."
        if not _TAGGED.match(image) or image.endswith(":latest"):
            errors.append(f"pool: image {image!r} is not pinned (give a tag other than latest, or @sha256:DIGEST)")
        # ContainerConfiguration.containerRegistries: "If any Images must be downloaded from a private
        # registry which requires credentials, then those credentials must be provided here."
        if _registry_of(image) and _registry_of(image) not in servers:
            errors.append(f"pool: image {image!r} is from {_registry_of(image)}, which containerRegistries does not name")
    for name, task in tasks.items():
        settings = task.get("containerSettings")
        # TaskAddParameter.containerSettings: "If the Pool that will run this Task has
        # containerConfiguration set, this must be set as well."
        if not isinstance(settings, dict):
            errors.append(f"{name}: no containerSettings, which a task on a container pool must have")
            continue
        # Azure's "Run container applications on Azure Batch": the pool's prefetched images are what
        # tasks run without waiting for a pull.
        if settings.get("imageName") not in names:
            errors.append(f"{name}: image {settings.get('imageName')!r} is not in the pool's containerImageNames")
        argv = _run_options(task)
        # Same page: "Batch automatically enables GPU for container tasks, so you shouldn't include the
        # --gpus argument."
        if _has_option(argv, "--gpus"):
            errors.append(f"{name}: containerRunOptions has --gpus, which Batch adds itself on GPU pools")
        if "multiInstanceSettings" in task:
            errors += _multi_instance_rules(pool, name, argv)
    return errors


def _multi_instance_rules(pool, name, argv):
    errors = []
    # batch-mpi.md: "Multi-instance tasks require a pool with inter-node communication enabled, and with
    # concurrent task execution disabled" (taskSlotsPerNode 1).
    if pool.get("enableInterNodeCommunication") is not True:
        errors.append(f"{name}: a multi-instance task needs enableInterNodeCommunication true on the pool")
    if pool.get("taskSlotsPerNode", 1) != 1:
        errors.append(f"{name}: a multi-instance task needs taskSlotsPerNode 1 on the pool")
    # docs/batch.md, "Container pools": what an MPI/NCCL container needs on an InfiniBand size.
    if not (_has_option(argv, "--net", "host") or _has_option(argv, "--network", "host")):
        errors.append(f"{name}: no --net=host (the ranks reach the other nodes at the addresses in AZ_BATCH_HOST_LIST)")
    if not any(_has_option(argv, "--device", d) for d in ("/dev/infiniband", "/dev/infiniband/uverbs0")):
        errors.append(f"{name}: no --device=/dev/infiniband (the verbs devices are not in the container)")
    if not any(_has_option(argv, "--ulimit", v) for v in ("memlock=-1", "memlock=-1:-1")):
        errors.append(f"{name}: no --ulimit memlock=-1 (RDMA registers memory; Docker's default limit is small)")
    if not (_has_option(argv, "--shm-size") or _has_option(argv, "--ipc", "host")):
        errors.append(f"{name}: neither --shm-size nor --ipc=host (NCCL's shared memory in /dev/shm)")
    return errors


def problems(pool, tasks):
    found = schema.validate(SPEC, pool, "PoolAddParameter") + schema.documented_rules(pool)
    for name, task in tasks.items():
        found += [f"{name}: {p}" for p in schema.validate(SPEC, task, "TaskAddParameter") + task_rules(task)]
    return found + container_rules(pool, tasks)


def examples():
    return load(POOL), {GPU_TASK: load(GPU_TASK), RDMA_TASK: load(RDMA_TASK)}


# ------------------------------------------------------------------------------------------------

class Fixture(unittest.TestCase):
    def test_what_the_schema_says_of_the_container_properties_the_examples_use(self):
        # The facts docs/batch.md, "Container pools", cites, read back from the vendored definitions.
        defs = SPEC["definitions"]
        self.assertEqual(defs["VirtualMachineConfiguration"]["properties"]["containerConfiguration"],
                         {"$ref": "#/definitions/ContainerConfiguration"})
        self.assertEqual(defs["ContainerConfiguration"]["required"], ["type"])
        self.assertEqual(defs["ContainerConfiguration"]["properties"]["type"]["enum"], ["dockerCompatible", "criCompatible"])
        self.assertEqual(defs["TaskAddParameter"]["required"], ["id", "commandLine"])
        self.assertEqual(defs["TaskAddParameter"]["properties"]["containerSettings"],
                         {"$ref": "#/definitions/TaskContainerSettings"})
        self.assertEqual(defs["TaskContainerSettings"]["required"], ["imageName"])
        self.assertEqual(defs["TaskContainerSettings"]["properties"]["containerRunOptions"], {"type": "string"})
        self.assertEqual(defs["TaskContainerSettings"]["properties"]["workingDirectory"]["enum"],
                         ["taskWorkingDirectory", "containerImageDefault"])
        self.assertEqual(defs["MultiInstanceSettings"]["required"], ["coordinationCommandLine"])
        self.assertEqual(set(defs["ContainerRegistry"]["properties"]),
                         {"username", "password", "registryServer", "identityReference"})


class Examples(unittest.TestCase):
    def test_the_pool_and_its_tasks_are_valid_and_keep_the_rules(self):
        pool, tasks = examples()
        self.assertEqual(problems(pool, tasks), [])

    def test_the_pool_waits_for_the_boot_verdict_as_the_gallery_pool_does(self):
        pool, gallery = load(POOL), load("batch-pool-gallery.json")
        self.assertEqual(pool["startTask"], gallery["startTask"])

    def test_the_rdma_task_is_a_two_node_mpi_task_on_the_pool_size(self):
        task = load(RDMA_TASK)
        self.assertEqual(task["multiInstanceSettings"]["numberOfInstances"], load(POOL)["targetDedicatedNodes"])
        self.assertIn("$AZ_BATCH_HOST_LIST", task["commandLine"])


class Mutations(unittest.TestCase):
    """A copy of the examples with one mistake must be refused, with a problem that names it."""

    def refused(self, mutate, *expected):
        pool, tasks = examples()
        mutate(pool, tasks[GPU_TASK], tasks[RDMA_TASK])
        found = problems(pool, tasks)
        self.assertTrue(found, "the mistake went through")
        for pattern in expected:
            self.assertTrue(any(re.search(pattern, p) for p in found), f"no problem matches {pattern!r}: {found}")

    def accepted(self, mutate):
        pool, tasks = examples()
        mutate(pool, tasks[GPU_TASK], tasks[RDMA_TASK])
        self.assertEqual(problems(pool, tasks), [])

    def test_unknown_properties(self):
        def misspell(d, old, new):
            d[new] = d.pop(old)
        self.refused(lambda p, g, r: misspell(g["containerSettings"], "containerRunOptions", "containerRunOption"),
                     r"^batch-task-gpu-container\.json: \$\.containerSettings\.containerRunOption: unknown property "
                     r"\(did you mean 'containerRunOptions'\?\)$")
        self.refused(lambda p, g, r: misspell(p["virtualMachineConfiguration"]["containerConfiguration"],
                                              "containerImageNames", "containerImages"),
                     r"containerConfiguration\.containerImages: unknown property")
        self.refused(lambda p, g, r: misspell(r["multiInstanceSettings"], "numberOfInstances", "instances"),
                     r"multiInstanceSettings\.instances: unknown property")

    def test_wrong_types(self):
        self.refused(lambda p, g, r: r["containerSettings"].update(
            containerRunOptions=shlex.split(r["containerSettings"]["containerRunOptions"])),
            r"containerSettings\.containerRunOptions: expected string, got array")
        self.refused(lambda p, g, r: r["multiInstanceSettings"].update(numberOfInstances="2"),
                     r"multiInstanceSettings\.numberOfInstances: expected integer, got string")
        self.refused(lambda p, g, r: p["virtualMachineConfiguration"]["containerConfiguration"].update(
            containerImageNames="hpcregistry.azurecr.io/hpc/cuda-smoke:1.0.0"),
            r"containerImageNames: expected array, got string")

    def test_missing_required_properties(self):
        self.refused(lambda p, g, r: g["containerSettings"].pop("imageName"),
                     r"^batch-task-gpu-container\.json: \$\.containerSettings: missing required property 'imageName'$")
        self.refused(lambda p, g, r: r["multiInstanceSettings"].pop("coordinationCommandLine"),
                     r"multiInstanceSettings: missing required property 'coordinationCommandLine'$")
        self.refused(lambda p, g, r: p["virtualMachineConfiguration"]["containerConfiguration"].pop("type"),
                     r"containerConfiguration: missing required property 'type'$")
        self.refused(lambda p, g, r: r.pop("commandLine"), r"\$: missing required property 'commandLine'$")

    def test_values_outside_an_enum(self):
        self.refused(lambda p, g, r: p["virtualMachineConfiguration"]["containerConfiguration"].update(type="docker"),
                     r"containerConfiguration\.type: 'docker' is not one of \['dockerCompatible', 'criCompatible'\]")
        self.refused(lambda p, g, r: g["containerSettings"].update(workingDirectory="taskWorkingDir"),
                     r"workingDirectory: 'taskWorkingDir' is not one of .*did you mean 'taskWorkingDirectory'")

    def test_container_rules(self):
        self.refused(lambda p, g, r: g["containerSettings"].update(containerRunOptions="--rm --gpus all"),
                     r"^batch-task-gpu-container\.json: containerRunOptions has --gpus")
        self.refused(lambda p, g, r: r.pop("containerSettings"),
                     r"^batch-task-rdma-container\.json: no containerSettings")
        self.refused(lambda p, g, r: g["containerSettings"].update(imageName="hpcregistry.azurecr.io/hpc/other:1.0.0"),
                     r"image 'hpcregistry\.azurecr\.io/hpc/other:1\.0\.0' is not in the pool's containerImageNames")
        names = lambda p: p["virtualMachineConfiguration"]["containerConfiguration"]["containerImageNames"]  # noqa: E731
        self.refused(lambda p, g, r: names(p).append("nvcr.io/nvidia/pytorch"),
                     r"'nvcr\.io/nvidia/pytorch' is not pinned", r"from nvcr\.io, which containerRegistries does not name")
        self.refused(lambda p, g, r: names(p).append("ubuntu:latest"), r"'ubuntu:latest' is not pinned")
        self.refused(lambda p, g, r: p["virtualMachineConfiguration"]["containerConfiguration"].pop("containerRegistries"),
                     r"from hpcregistry\.azurecr\.io, which containerRegistries does not name")
        self.refused(lambda p, g, r: r.update(requiredSlots=2), r"requiredSlots: a multi-instance task must have requiredSlots 1")
        self.refused(lambda p, g, r: p.update(taskSlotsPerNode=2), r"needs taskSlotsPerNode 1")
        self.refused(lambda p, g, r: p.pop("enableInterNodeCommunication"), r"needs enableInterNodeCommunication true")

    def test_what_an_rdma_container_needs(self):
        def without(option):
            def mutate(p, g, r):
                argv = shlex.split(r["containerSettings"]["containerRunOptions"])
                r["containerSettings"]["containerRunOptions"] = " ".join(w for w in argv if not w.startswith(option))
            return mutate
        self.refused(without("--net"), r"no --net=host")
        self.refused(without("--device"), r"no --device=/dev/infiniband")
        self.refused(without("--shm-size"), r"neither --shm-size nor --ipc=host")

        def memlock_dropped(p, g, r):
            r["containerSettings"]["containerRunOptions"] = "--net=host --device=/dev/infiniband --shm-size=1g"
        self.refused(memlock_dropped, r"no --ulimit memlock=-1")

    def test_equivalent_spellings_and_a_digest_pass(self):
        def spelled_apart(p, g, r):
            r["containerSettings"]["containerRunOptions"] = ("--network host --device /dev/infiniband "
                                                             "--ulimit memlock=-1:-1 --ipc=host")
        self.accepted(spelled_apart)
        digest = "hpcregistry.azurecr.io/hpc/cuda-smoke@sha256:" + "0" * 64

        def by_digest(p, g, r):
            p["virtualMachineConfiguration"]["containerConfiguration"]["containerImageNames"][0] = digest
            g["containerSettings"]["imageName"] = digest
        self.accepted(by_digest)


if __name__ == "__main__":
    unittest.main()
