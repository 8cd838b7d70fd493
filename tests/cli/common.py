"""Shared helpers for the CLI tests: run the built hpcbake binary and compare."""
import json
import os
import subprocess
import unittest

BIN = os.environ.get("HPCBAKE_BIN", "")
SRC = os.environ.get("HPCBAKE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
FIXTURES = os.path.join(SRC, "tests", "fixtures")
GOLDEN = os.path.join(SRC, "tests", "golden")


def host(name):
    return os.path.join(FIXTURES, "hosts", name)


def run(*args, env=None, timeout=60):
    """Runs hpcbake with the source tree's manifests; returns CompletedProcess."""
    if not BIN:
        raise unittest.SkipTest("HPCBAKE_BIN is not set: run through ctest")
    full_env = dict(os.environ)
    full_env.pop("HPCBAKE_IMDS_URL", None)
    full_env["HPCBAKE_MANIFESTS"] = os.path.join(SRC, "manifests")
    if env:
        full_env.update(env)
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=full_env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run_json(*args, **kw):
    r = run(*args, **kw)
    if r.returncode != 0:
        raise AssertionError(f"hpcbake {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)


def copy_manifest_set(dst, manifests=True):
    """Copies the project's manifest set: manifests/ to dst and the driver recipes to drivers/
    beside it (--manifests DIR reads DIR/../drivers). manifests=False copies only the recipes,
    for a test that writes its own manifests into dst."""
    import shutil
    if manifests:
        shutil.copytree(os.path.join(SRC, "manifests"), dst)
    shutil.copytree(os.path.join(SRC, "drivers"), os.path.join(os.path.dirname(os.path.abspath(dst)), "drivers"))
