"""`hpcbake rdma enable|disable|status` against a fixture --root holding the real Debian waagent.conf,
and a cross-check of hpcbake's reading against the real agent's own parser (waagent 2.7.3)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

from common import SRC, run

REFERENCE = os.path.join(SRC, "..", "shared", "reference", "waagent.conf.debian-2.7.3")
# Unpacked (never installed) by scripts/deps.
WAAGENT_DIR = os.environ.get("HPCBAKE_WAAGENT_DIR", "/var/cache/hpcbake-deps/waagent")
WAAGENT_PY = os.path.join(WAAGENT_DIR, "usr", "lib", "python3", "dist-packages")

DEBIAN_OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class Root:
    """A fixture root: etc/os-release (Debian 12) and, unless conf is None, etc/waagent.conf."""

    def __init__(self, conf):
        self.dir = tempfile.mkdtemp(prefix="hpcbake-rdma-")
        write(os.path.join(self.dir, "etc", "os-release"), DEBIAN_OS_RELEASE.encode())
        self.conf = os.path.join(self.dir, "etc", "waagent.conf")
        self.backup = self.conf + ".hpcbake-orig"
        if conf is not None:
            write(self.conf, conf)

    def rdma(self, *args):
        return run("--root", self.dir, "rdma", *args)

    def rdma_json(self, *args):
        r = self.rdma(*args, "--json")
        if r.returncode != 0:
            raise AssertionError(f"rdma {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
        return json.loads(r.stdout)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class RdmaCli(unittest.TestCase):
    def setUp(self):
        self.original = read(REFERENCE)
        self.assertIn(b"\n# OS.EnableRDMA=y\n", self.original)
        self.root = Root(self.original)
        self.addCleanup(self.root.cleanup)

    def test_status_of_the_shipped_file(self):
        s = self.root.rdma_json("status")
        self.assertEqual(s["schema"], 1)
        self.assertEqual(s["config"], "/etc/waagent.conf")
        self.assertTrue(s["exists"])
        self.assertEqual(s["keys"]["OS.EnableRDMA"], {"value": None, "line": None, "assignments": 0})
        self.assertEqual(s["agent"], {"enable_rdma": False, "enable_rdma_update": False, "enable_check_rdma_driver": True})
        self.assertIsNone(s["wanted"])
        self.assertIsNone(s["matches"])
        self.assertIsNone(s["backup"])
        text = self.root.rdma("status")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("RDMA setup at start: off", text.stdout)

    def test_status_against_sizes(self):
        hb = self.root.rdma_json("status", "--size", "Standard_HB120rs_v3")
        self.assertEqual(hb["wanted"], "on")
        self.assertFalse(hb["matches"])
        self.assertEqual(hb["differences"], ["OS.EnableRDMA is unset; wants y"])
        nc = self.root.rdma_json("status", "--size", "standard_nc6s_v3")
        self.assertEqual(nc["wanted"], "off")
        self.assertTrue(nc["matches"])

    def test_enable_edits_one_line_backs_up_once_and_is_idempotent(self):
        r = self.root.rdma("enable")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OS.EnableRDMA=y (line", r.stdout)
        self.assertIn("uncommented", r.stdout)
        self.assertIn("not restarted: --root is not /", r.stdout)
        after = read(self.root.conf)
        old_lines, new_lines = self.original.splitlines(True), after.splitlines(True)
        self.assertEqual(len(old_lines), len(new_lines))
        changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
        self.assertEqual(len(changed), 1)
        self.assertEqual(old_lines[changed[0]], b"# OS.EnableRDMA=y\n")
        self.assertEqual(new_lines[changed[0]], b"OS.EnableRDMA=y\n")
        self.assertEqual(read(self.root.backup), self.original)
        backup_stat = os.stat(self.root.backup)

        again = self.root.rdma("enable")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("nothing changed", again.stdout)
        self.assertIn("from an earlier run", again.stdout)
        self.assertEqual(read(self.root.conf), after)
        self.assertEqual(os.stat(self.root.backup).st_mtime_ns, backup_stat.st_mtime_ns)

        s = self.root.rdma_json("status", "--size", "Standard_ND96isr_H100_v5")
        self.assertTrue(s["matches"])
        self.assertEqual(s["keys"]["OS.EnableRDMA"]["line"], changed[0] + 1)
        self.assertEqual(s["backup"], self.root.backup)
        self.assertEqual([n for n in os.listdir(os.path.dirname(self.root.conf)) if ".tmp." in n], [])

    def test_enable_json_then_disable(self):
        j = self.root.rdma_json("enable", "--size", "Standard_HB120rs_v3")
        self.assertTrue(j["changed"])
        self.assertTrue(j["backup_created"])
        self.assertEqual(len(j["edits"]), 1)
        self.assertEqual(j["edits"][0]["how"], "uncommented")
        self.assertIsNone(j["edits"][0]["before"])
        self.assertEqual(j["service"]["unit"], "walinuxagent")
        self.assertFalse(j["service"]["restarted"])
        self.assertTrue(j["status"]["matches"])

        d = self.root.rdma_json("disable")
        self.assertTrue(d["changed"])
        self.assertFalse(d["backup_created"])
        self.assertEqual(d["edits"][0]["how"], "in-place")
        self.assertEqual(d["edits"][0]["before"], "y")
        self.assertIn(b"\nOS.EnableRDMA=n\n", read(self.root.conf))
        self.assertEqual(read(self.root.backup), self.original, "the backup is never overwritten")
        self.assertFalse(self.root.rdma_json("status")["agent"]["enable_rdma"])
        self.assertFalse(self.root.rdma_json("disable")["changed"])

    def test_disable_on_the_shipped_file_changes_nothing(self):
        d = self.root.rdma_json("disable")
        self.assertFalse(d["changed"])
        self.assertEqual(read(self.root.conf), self.original)
        self.assertFalse(os.path.exists(self.root.backup))

    def test_distro_names_the_unit(self):
        self.assertEqual(self.root.rdma_json("enable", "--distro", "rhel-9")["service"]["unit"], "waagent")
        os.remove(self.root.conf)
        write(self.root.conf, self.original)
        self.assertEqual(self.root.rdma_json("enable", "--distro", "ubuntu-22.04")["service"]["unit"], "walinuxagent")

    def test_exit_codes(self):
        cases = [
            (("enable", "--size", "Standard_NC6s_v3"), 3, "the size wants RDMA off"),
            (("disable", "--size", "Standard_HB120rs_v3"), 3, "the size wants RDMA on"),
            (("status", "--size", "Standard_Nope"), 3, "unknown VM size"),
            (("enable", "--distro", "plan9-4"), 3, "unsupported distro"),
            (("frobnicate",), 2, "usage error"),
            (("enable", "--bogus"), 2, "usage error"),
        ]
        for args, code, text in cases:
            with self.subTest(args=args):
                r = self.root.rdma(*args)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(text, r.stderr)
        self.assertEqual(read(self.root.conf), self.original)
        self.assertFalse(os.path.exists(self.root.backup))

    def test_missing_config(self):
        os.remove(self.root.conf)
        r = self.root.rdma("enable")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("does not exist", r.stderr)
        self.assertIn("hint:", r.stderr)
        self.assertIn("--create", r.stderr)
        self.assertFalse(os.path.exists(self.root.conf))
        self.assertEqual(self.root.rdma("disable").returncode, 0)
        s = self.root.rdma_json("status")
        self.assertFalse(s["exists"])
        c = self.root.rdma("enable", "--create")
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertEqual(read(self.root.conf), b"OS.EnableRDMA=y\n")

    def test_read_only_config(self):
        os.chmod(self.root.conf, 0o444)
        r = self.root.rdma("enable")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("read-only", r.stderr)
        self.assertIn("nothing changed", r.stderr)
        self.assertEqual(read(self.root.conf), self.original)
        self.assertEqual(stat.S_IMODE(os.stat(self.root.conf).st_mode), 0o444)
        self.assertFalse(os.path.exists(self.root.backup))

    def test_symlinked_config(self):
        target = os.path.join(self.root.dir, "usr", "share", "waagent", "waagent.conf")
        write(target, self.original)
        os.remove(self.root.conf)
        os.symlink("/usr/share/waagent/waagent.conf", self.root.conf)  # absolute: resolved under --root
        self.assertEqual(self.root.rdma("enable").returncode, 0)
        self.assertTrue(os.path.islink(self.root.conf))
        self.assertIn(b"\nOS.EnableRDMA=y\n", read(target))
        self.assertEqual(read(self.root.backup), self.original)


# Files that exercise the parser's corners: hpcbake's reading must equal the agent's.
EDGE_CASES = {
    "shipped": None,  # the reference file itself
    "crlf": "crlf",
    "in_place": b"A=1\nOS.EnableRDMA=n\nB=2\n",
    "none": b"OS.EnableRDMA=None\n",
    "several": b"OS.EnableRDMA=y\nX=1\nOS.EnableRDMA=n\n",
    "commented_tight": b"Extensions.Enabled=y\n#OS.EnableRDMA=y\n",
    "commented_spaced": b"Extensions.Enabled=y\n# OS.EnableRDMA = y\n",
    "indented_comment": b"Extensions.Enabled=y\n  # OS.EnableRDMA=y\n",
    "trailing_comment": b"OS.EnableRDMA=n # off for now\n",
    "quoted": b'OS.EnableRDMA = "n"  # quoted\n',
    "quoted_crlf": b'OS.EnableRDMA="y"\r\n',
    "upper": b"OS.EnableRDMA=Y\n",
    "no_final_newline": b"Extensions.Enabled=y",
    "update_driver_on": b"OS.UpdateRdmaDriver=y\nOS.CheckRdmaDriver=y\n",
    "check_driver_off": b"OS.CheckRdmaDriver=n\n",
}

# Every character the agent's Python strips from a key or a value: str.strip() with no
# argument removes what str.isspace() is true for (U+00A0, U+2000..U+200A, U+3000, U+0085,
# \x1c..\x1f...), asked of the Python that runs the agent's parser here. '\n' is left out: it
# ends the line before anything is stripped.
PY_SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace() and c != 0x0A]


def whitespace_variants():
    """Each whitespace character around keys and values, inside and outside quotes, on LF and
    CRLF lines: the files `rdma status` must read, and `enable`/`disable` edit, as the agent does."""
    out = {}
    for w in PY_SPACES:
        n = f"U+{ord(w):04X}"
        out[f"ws_value_{n}"] = (f'A=1\nOS.EnableRDMA={w}y{w}\nOS.UpdateRdmaDriver{w}={w}"y"\n'
                                f'OS.CheckRdmaDriver="{w}n"\n').encode()
        out[f"ws_key_{n}"] = f"{w}OS.EnableRDMA{w}= n {w}# off\n{w}OS.CheckRdmaDriver={w}Y\n".encode()
        out[f"ws_quotes_{n}"] = (f'OS.EnableRDMA={w}"y"\r\nOS.UpdateRdmaDriver="y{w}"\r\n'
                                 f'OS.CheckRdmaDriver= "{w}None"\r\n').encode()
    return out


EDGE_CASES.update(whitespace_variants())

AGENT_SCRIPT = r"""
import json, sys
from azurelinuxagent.common import conf
out = {}
for path in sys.argv[1:]:
    c = conf.ConfigurationProvider()
    conf.load_conf_from_file(path, c)
    out[path] = {
        "values": {k: c.values.get(k) for k in ("OS.EnableRDMA", "OS.UpdateRdmaDriver", "OS.CheckRdmaDriver")},
        "agent": {"enable_rdma": conf.enable_rdma(c), "enable_rdma_update": conf.enable_rdma_update(c),
                  "enable_check_rdma_driver": conf.enable_check_rdma_driver(c)},
    }
print(json.dumps(out))
"""


def agent_read(paths):
    """The real agent's view of each file: its parsed values and its RDMA switches."""
    env = dict(os.environ, PYTHONPATH=WAAGENT_PY, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", AGENT_SCRIPT, *paths], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"the agent's parser failed:\n{r.stderr}")
    return json.loads(r.stdout)


class AgainstTheRealAgent(unittest.TestCase):
    """Needs the waagent 2.7.3 package unpacked by scripts/deps; skips (never passes) without it."""

    def setUp(self):
        if not os.path.isfile(os.path.join(WAAGENT_PY, "azurelinuxagent", "common", "conf.py")):
            self.skipTest(f"waagent sources not found under {WAAGENT_DIR}: run scripts/deps as root "
                          "(it unpacks the Debian waagent package there) or set HPCBAKE_WAAGENT_DIR")
        self.original = read(REFERENCE)
        self.roots = {}
        for name, content in EDGE_CASES.items():
            if content is None:
                content = self.original
            elif content == "crlf":
                content = self.original.replace(b"\n", b"\r\n")
            root = Root(content)
            self.addCleanup(root.cleanup)
            self.roots[name] = root

    def assert_same_reading(self, stage):
        agent = agent_read([r.conf for r in self.roots.values()])
        for name, root in self.roots.items():
            with self.subTest(stage=stage, file=name):
                ours = root.rdma_json("status")
                theirs = agent[root.conf]
                self.assertEqual({k: v["value"] for k, v in ours["keys"].items()}, theirs["values"])
                self.assertEqual(ours["agent"], theirs["agent"])
        return agent

    def test_status_reads_like_the_agent(self):
        self.assert_same_reading("as written")

    def test_enable_and_disable_as_the_agent_sees_them(self):
        for name, root in self.roots.items():
            r = root.rdma("enable", "--no-restart")
            self.assertEqual(r.returncode, 0, f"{name}: {r.stderr}")
        agent = self.assert_same_reading("after enable")
        for name, root in self.roots.items():
            with self.subTest(file=name):
                self.assertTrue(agent[root.conf]["agent"]["enable_rdma"])
                self.assertFalse(agent[root.conf]["agent"]["enable_rdma_update"])
        for name, root in self.roots.items():
            r = root.rdma("disable", "--no-restart")
            self.assertEqual(r.returncode, 0, f"{name}: {r.stderr}")
        agent = self.assert_same_reading("after disable")
        for name, root in self.roots.items():
            with self.subTest(file=name):
                self.assertFalse(agent[root.conf]["agent"]["enable_rdma"])

    def test_edits_land_on_the_line_the_agent_reads(self):
        """Every key present in a whitespace variant is edited where it stands: never appended
        as a second assignment, never reported as "nothing changed" while the agent reads y."""
        for name, root in self.roots.items():
            if not name.startswith("ws_"):
                continue
            lines = read(root.conf).count(b"\n")
            for verb in ("enable", "disable"):
                with self.subTest(file=name, verb=verb):
                    j = root.rdma_json(verb, "--no-restart")
                    self.assertEqual([e["how"] for e in j["edits"] if e["how"] != "in-place"], [])
                    self.assertEqual(read(root.conf).count(b"\n"), lines)
        agent = agent_read([r.conf for n, r in self.roots.items() if n.startswith("ws_")])
        for conf, seen in agent.items():
            with self.subTest(file=conf):
                self.assertFalse(seen["agent"]["enable_rdma"])

    def test_a_file_the_agent_cannot_decode_is_refused(self):
        """The agent decodes waagent.conf as strict UTF-8 and does not start on an invalid byte;
        hpcbake says where that byte is instead of answering for it, and changes nothing."""
        content = b"A=1\nOS.EnableRDMA=y\n# caf\xe9\n"
        root = Root(content)
        self.addCleanup(root.cleanup)
        env = dict(os.environ, PYTHONPATH=WAAGENT_PY, PYTHONDONTWRITEBYTECODE="1")
        agent = subprocess.run([sys.executable, "-c", AGENT_SCRIPT, root.conf], capture_output=True, text=True,
                               env=env, timeout=60)
        self.assertNotEqual(agent.returncode, 0)
        self.assertIn("UnicodeDecodeError", agent.stderr)
        for verb in ("status", "enable", "disable"):
            with self.subTest(verb=verb):
                r = root.rdma(verb, "--no-restart") if verb != "status" else root.rdma(verb)
                self.assertEqual(r.returncode, 3, r.stderr)
                self.assertIn("/etc/waagent.conf:3:6: ", r.stderr)
                self.assertIn("0xe9", r.stderr)
                self.assertEqual(read(root.conf), content)


if __name__ == "__main__":
    unittest.main()
