"""The start task command lines of examples/batch-pool*.json keep the rules of docs/batch.md, "What a
start task command line must do" (start_task_rules.py): stop at the first failure, wait for the
package manager's lock where they call one, check each downloaded file's SHA-256 before anything is
unpacked, installed or run. Broken command lines must be caught, so each rule is also tried on one.
(tests/cli/test_cli_packaging.py runs batch-pool.json's command line itself with bash.)"""
import copy
import glob
import json
import os
import shlex
import unittest

import start_task_rules as rules

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = sorted(glob.glob(os.path.join(SRC, "examples", "batch-pool*.json")))


def load(name):
    with open(os.path.join(SRC, "examples", name)) as f:
        return json.load(f)


def with_script(script, resource_files=None):
    """A pool body whose start task runs `script` through /bin/bash -c."""
    body = copy.deepcopy(load("batch-pool.json"))
    body["startTask"]["commandLine"] = "/bin/bash -c " + shlex.quote(script)
    body["startTask"]["resourceFiles"] = resource_files if resource_files is not None else \
        [{"httpUrl": "https://a.blob.core.windows.net/c/hpcbake.deb?sas", "filePath": "hpcbake.deb"}]
    return body


CHECKED = 'set -euo pipefail; cd "$AZ_BATCH_TASK_WORKING_DIR"; echo "$sha  hpcbake.deb" | sha256sum -c --strict -; '


class Examples(unittest.TestCase):
    def test_each_example_keeps_the_rules(self):
        self.assertGreaterEqual(len(EXAMPLES), 2)
        for path in EXAMPLES:
            with self.subTest(example=os.path.basename(path)):
                with open(path) as f:
                    self.assertEqual(rules.check(json.load(f)), [])

    def test_the_tarball_example_checks_its_download_and_runs_no_package_manager(self):
        body = load("batch-pool.json")
        script = rules.shell_script(body["startTask"]["commandLine"])
        self.assertTrue(script.startswith("set -euo pipefail;"))
        programs = {cmd[0].rsplit("/", 1)[-1] for cmd in rules._commands(script)}
        self.assertFalse(programs & {"apt-get", "apt", "dpkg", "dnf", "yum", "tdnf", "rpm", "zypper"}, programs)
        self.assertLess(script.index("sha256sum -c"), script.index("tar -x"))


class RulesCatchMistakes(unittest.TestCase):
    def assertCaught(self, body, *needles):
        found = rules.check(body)
        self.assertTrue(found, "the mistake went through")
        for needle in needles:
            self.assertTrue(any(needle in p for p in found), f"{needle!r} not in {found}")

    def test_a_correct_deb_install_passes(self):
        body = with_script(CHECKED + "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=3600 install -y "
                                     "./hpcbake.deb; hpcbake install --yes --reboot=auto")
        self.assertEqual(rules.check(body), [])

    def test_apt_get_without_the_lock_timeout(self):
        self.assertCaught(with_script(CHECKED + "apt-get install -y ./hpcbake.deb"), "no -o DPkg::Lock::Timeout=N")

    def test_apt_update_whose_lock_the_timeout_does_not_cover(self):
        self.assertCaught(with_script(CHECKED + "apt-get -o DPkg::Lock::Timeout=600 update"),
                          "/var/lib/apt/lists/lock")

    def test_dpkg_called_directly(self):
        self.assertCaught(with_script(CHECKED + "dpkg -i hpcbake.deb"), "dpkg does not wait for its lock")

    def test_dnf_told_not_to_wait(self):
        self.assertCaught(with_script(CHECKED + "dnf -y --setopt=exit_on_lock=True install ./hpcbake.rpm"),
                          "exit_on_lock")

    def test_several_commands_without_set_e(self):
        self.assertCaught(with_script('cd "$AZ_BATCH_TASK_WORKING_DIR"; echo "$sha  hpcbake.deb" | sha256sum -c -; '
                                      "apt-get -o DPkg::Lock::Timeout=60 install -y ./hpcbake.deb"),
                          "no leading `set -e`")

    def test_installing_before_the_checksum(self):
        self.assertCaught(with_script("set -e; apt-get -o DPkg::Lock::Timeout=60 install -y ./hpcbake.deb; "
                                      'echo "$sha  hpcbake.deb" | sha256sum -c -'),
                          "runs before the checksum is checked")

    def test_unpacking_before_the_checksum(self):
        body = with_script('set -e; tar -xzf hpcbake.tar.gz -C /opt/x; echo "$sha  hpcbake.tar.gz" | sha256sum -c -',
                           [{"httpUrl": "https://a/hpcbake.tar.gz", "filePath": "hpcbake.tar.gz"}])
        self.assertCaught(body, "'tar -xzf hpcbake.tar.gz -C /opt/x' runs before the checksum is checked")

    def test_a_download_that_is_never_checked(self):
        self.assertCaught(with_script("set -e; /opt/hpcbake/bin/hpcbake verify"), "never runs `sha256sum -c`")
        body = with_script(CHECKED + "true", [{"httpUrl": "https://a/hpcbake.deb", "filePath": "hpcbake.deb"},
                                              {"httpUrl": "https://a/extra.tar", "filePath": "extra.tar"}])
        self.assertCaught(body, "'extra.tar' is downloaded but not in the checksum command")

    def test_a_command_line_batch_would_not_run_through_a_shell(self):
        body = copy.deepcopy(load("batch-pool.json"))
        body["startTask"]["commandLine"] = "hpcbake verify --level 0"
        self.assertCaught(body, "is not `/bin/bash -c")


if __name__ == "__main__":
    unittest.main()
