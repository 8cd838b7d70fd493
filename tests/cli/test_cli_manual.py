#!/usr/bin/env python3
"""docs/manual.md is the one reference, and the binary's definitions are what runs: every command,
option, exit code and environment variable must be in both, and the man page generated from the
manual must be clean roff."""
import os
import re
import subprocess
import tempfile
import unittest

from common import BIN, SRC, help_commands as commands, help_of, help_options as options

MANUAL = os.path.join(SRC, "docs", "manual.md")
SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "FILES",
            "EXAMPLES", "SEE ALSO"]


def manual_sections():
    with open(MANUAL, encoding="utf-8") as f:
        text = f.read()
    parts = re.split(r"^(##+ .*)$", text, flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def bullets(body):
    return set(re.findall(r"^- `(?:-\w, )?(--[a-z0-9-]+)", body, re.M))


class Manual(unittest.TestCase):
    def setUp(self):
        if not BIN:
            self.skipTest("HPCBAKE_BIN is not set: run through ctest")
        self.sections = manual_sections()

    def test_sections_in_order(self):
        self.assertEqual([h[3:] for h, _ in self.sections if h.startswith("## ")], SECTIONS)

    def test_global_options_match_the_binary(self):
        body = dict(self.sections)["## GLOBAL OPTIONS"]
        self.assertEqual(bullets(body), options(help_of()))

    def test_every_command_and_its_options_match_the_binary(self):
        documented = {h[4:].strip(): body for h, body in self.sections if h.startswith("### ")}
        leaves = []
        for verb in commands(help_of()):
            subs = commands(help_of(verb))
            leaves += [(verb, s) for s in subs] if subs else [(verb,)]
        self.assertEqual(sorted(documented), sorted("hpcbake " + " ".join(p) for p in leaves))
        for path in leaves:
            # A leaf also takes the options of the verb above it (cache --cache DIR list).
            want = options(help_of(*path)) | (options(help_of(path[0])) if len(path) > 1 else set())
            self.assertEqual(bullets(documented["hpcbake " + " ".join(path)]), want, " ".join(path))

    def test_exit_codes_match_the_enum(self):
        with open(os.path.join(SRC, "src", "util", "error.hpp"), encoding="utf-8") as f:
            enum = f.read().split("enum class ExitCode")[1].split("};")[0]
        codes = {int(c) for c in re.findall(r"=\s*(\d+)", enum)}
        body = dict(self.sections)["## EXIT STATUS"]
        self.assertEqual({int(c) for c in re.findall(r"^\| (\d+) \|", body, re.M)}, codes)

    def test_every_environment_variable_the_code_reads_is_documented(self):
        read = set()
        for root, _, files in os.walk(os.path.join(SRC, "src")):
            for name in files:
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                    read |= set(re.findall(r'getenv\("([A-Z_]+)"\)', f.read()))
        self.assertIn("HPCBAKE_IMDS_URL", read)
        body = dict(self.sections)["## ENVIRONMENT"]
        for var in read:
            self.assertIn(f"`{var}`", body, f"{var} is read by src/ but not in the manual's ENVIRONMENT")

    def test_help_names_man_and_where_the_packages_install_the_manual(self):
        """Issue 46: --help ended with "the manual is docs/manual.md", a path of the source tree. A
        binary without the docs beside it (this build tree) names where the packages put them;
        cli/packaging (ShippedDocs, Deb) checks that an installed one names its own copy."""
        text = help_of()
        self.assertIn("man hpcbake", text)
        self.assertIn("/usr/share/doc/hpcbake/", text)
        self.assertIn("share/doc/hpcbake/ in the release tarball", text)
        self.assertNotIn("docs/manual.md", text)

    def test_the_man_page_is_generated_from_it_and_renders_without_warnings(self):
        with tempfile.TemporaryDirectory() as tmp:
            page = os.path.join(tmp, "hpcbake.1")
            subprocess.run(["python3", os.path.join(SRC, "packaging", "manual-to-man.py"), MANUAL, "0.0.0test", page],
                           check=True, timeout=60)
            with open(page, encoding="utf-8") as f:
                roff = f.read()
            for section in SECTIONS:
                self.assertIn(f".SH {section}\n", roff)
            self.assertIn('.SS "hpcbake install"', roff)
            self.assertIn("\\fB\\-\\-reboot", roff)
            if not os.path.exists("/usr/bin/man"):
                self.skipTest("man is not installed: the page was generated, not rendered")
            r = subprocess.run(["man", "--warnings=all", "-l", page], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, MANWIDTH="80", LANG="C.UTF-8", MANPAGER="cat"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, "", "groff warnings")
            self.assertIn("EXIT STATUS", r.stdout)


if __name__ == "__main__":
    unittest.main()
