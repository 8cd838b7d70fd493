"""Every relative link in the user-facing Markdown (README.md, docs/*.md, packer/README.md,
examples/ and tests/fixtures/*/README.md are not included) resolves: the file or directory exists
in the source tree, and an anchor (#section) names a heading of the target as GitHub renders it.
A section quoted right after a link to a guide ([packer/README.md](../packer/README.md), "Step by
step") must be one of that guide's headings or a step it names in bold. Issue 46: docs/batch.md
linked a Packer guide section that did not exist. Standard library only. ctest: docs/links."""
import glob
import os
import re
import unittest

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = sorted([os.path.join(SRC, "README.md"), os.path.join(SRC, "packer", "README.md")]
              + glob.glob(os.path.join(SRC, "docs", "*.md")))
LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")
QUOTED = re.compile(r'\]\(([^()\s#]+\.md)\),?\s+"([^"]+)"')


def without_code(text):
    """The text with fenced code blocks and inline code blanked (links there are not links)."""
    text = re.sub(r"^```.*?^```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped, spaces
    to hyphens."""
    s = re.sub(r"`", "", heading.strip()).lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def headings(path):
    with open(path) as f:
        text = f.read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    titles = [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)]
    anchors, seen = set(), {}
    for t in titles:
        s = slug(t)
        n = seen.get(s, 0)
        anchors.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    # Steps a guide names in bold ("1. **Check the tools.**") are referred to by name as well.
    steps = [m.group(1).rstrip(".") for m in re.finditer(r"^\d+\.\s+\*\*([^*]+)\*\*", text, re.M)]
    return anchors, {words(t) for t in titles + steps}


def words(s):
    """A section name as prose quotes it: no backticks, one space between words."""
    return " ".join(s.replace("`", "").split())


def problems(path, root=SRC):
    """What is wrong with the relative links of the Markdown file `path`, each named by its place
    relative to `root` (the source tree; tests/cli/test_cli_packaging.py passes an installed doc
    directory)."""
    with open(path) as f:
        raw = f.read()
    text = without_code(raw)
    prose = re.sub(r"^```.*?^```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), raw, flags=re.S | re.M)
    out = []
    for m in LINK.finditer(text):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        where = f"{os.path.relpath(path, root)}:{text.count(chr(10), 0, m.start()) + 1}"
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            out.append(f"{where}: {target}: {os.path.relpath(dest, root)} does not exist")
            continue
        if anchor and dest.endswith(".md") and anchor not in headings(dest)[0]:
            out.append(f"{where}: {target}: no heading of {os.path.relpath(dest, root)} has the anchor #{anchor}")
    for m in QUOTED.finditer(prose):
        dest = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        if os.path.exists(dest) and words(m.group(2)) not in headings(dest)[1]:
            where = f"{os.path.relpath(path, root)}:{prose.count(chr(10), 0, m.start()) + 1}"
            out.append(f'{where}: "{words(m.group(2))}" is not a section of {os.path.relpath(dest, root)}')
    return out


def shipped_problems(docdir):
    """problems() of every Markdown file in an installed doc directory (share/doc/hpcbake of the
    tarball or a package), plus every relative link that leaves it; and how many links were
    followed. tests/cli/test_cli_packaging.py and tests/release use it."""
    found, followed = [], 0
    for d, _, files in sorted(os.walk(docdir)):
        for name in sorted(f for f in files if f.endswith(".md")):
            path = os.path.join(d, name)
            found += problems(path, docdir)
            with open(path) as f:
                text = without_code(f.read())
            for m in LINK.finditer(text):
                file = m.group(2).partition("#")[0]
                if not file or re.match(r"^[a-z][a-z0-9+.-]*:", file):
                    continue
                followed += 1
                dest = os.path.normpath(os.path.join(d, file))
                if os.path.commonpath([dest, docdir]) != docdir:
                    found.append(f"{os.path.relpath(path, docdir)}: {m.group(2)} leaves {docdir}")
    return found, followed


class Links(unittest.TestCase):
    def test_every_relative_link_and_anchor_resolves(self):
        self.assertIn(os.path.join(SRC, "docs", "batch.md"), DOCS)
        found = [p for path in DOCS for p in problems(path)]
        self.assertEqual(found, [], "\n".join(found))

    def test_the_checker_catches_a_missing_file_anchor_and_section(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "guide.md"), "w") as f:
                f.write("# Guide\n\n## Step by step\n\n1. **Check the tools.**\n\n## Don't `panic`, ever\n")
            doc = os.path.join(tmp, "doc.md")
            with open(doc, "w") as f:
                f.write('[ok](guide.md#step-by-step) [ok](guide.md#dont-panic-ever), [g](guide.md), "Step by step"\n'
                        '[g](guide.md), "Check the tools" `[code](nowhere.md)`\n'
                        '[gone](nowhere.md) [bad](guide.md#no-such) [g](guide.md), "The hpcbake release"\n')
            found = problems(doc)
            self.assertEqual(len(found), 3, found)
            self.assertIn("nowhere.md does not exist", found[0])
            self.assertIn("has the anchor #no-such", found[1])
            self.assertIn('"The hpcbake release" is not a section of', found[2])


class RootCommands(unittest.TestCase):
    def test_no_command_in_the_readme_or_docs_starts_with_sudo(self):
        """Issue 46: the README's and the guides' commands are for a root shell, which may have no
        sudo; a text for another user says so in prose (packer/README.md: the SSH user)."""
        found = []
        for path in [p for p in DOCS if not p.endswith(os.path.join("packer", "README.md"))]:
            with open(path) as f:
                text = f.read()
            for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
                found += [f"{os.path.relpath(path, SRC)}: {line}" for line in block.splitlines()
                          if re.match(r"^\s*(\$ )?sudo\b", line)]
        self.assertEqual(found, [], "\n".join(found))

if __name__ == "__main__":
    unittest.main()
