"""Shared helpers for the CLI tests: run the built hpcbake binary and compare."""
import json
import re
import os
import select
import shutil
import subprocess
import time
import unittest

# The shipped binary, and hpcbake-test: the same CLI with the test hooks (tests/seams/seams.hpp),
# which the shipped one does not have. A command that sets a hook runs hpcbake-test (bin_for).
BIN = os.environ.get("HPCBAKE_BIN", "")
TEST_BIN = os.environ.get("HPCBAKE_TEST_BIN", "")
HOOKS = ("HPCBAKE_TEST_RUNNER", "HPCBAKE_TEST_FAIL_COMMANDS", "HPCBAKE_TEST_REAL_COMMANDS",
         "HPCBAKE_TEST_CRASH_POINT", "HPCBAKE_TEST_CRASH_AFTER_WRITES", "HPCBAKE_TEST_REBOOT",
         "HPCBAKE_TEST_TLS_ROOT", "HPCBAKE_TEST_ROOTFS_WALK")
SRC = os.environ.get("HPCBAKE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
FIXTURES = os.path.join(SRC, "tests", "fixtures")
GOLDEN = os.path.join(SRC, "tests", "golden")


def host(name):
    return os.path.join(FIXTURES, "hosts", name)


def _env(env):
    if not BIN:
        raise unittest.SkipTest("HPCBAKE_BIN is not set: run through ctest")
    full_env = dict(os.environ)
    full_env.pop("HPCBAKE_IMDS_URL", None)
    full_env["HPCBAKE_MANIFESTS"] = os.path.join(SRC, "manifests")
    if env:
        full_env.update(env)
    return full_env


def bin_for(env):
    """The binary to run with the full environment `env`: hpcbake-test when a test hook is set in it
    (non-empty, as hpcbake-test reads them), else the shipped hpcbake."""
    if not any(env.get(h) for h in HOOKS):
        return BIN
    if not TEST_BIN:
        raise unittest.SkipTest("HPCBAKE_TEST_BIN (hpcbake-test, for the test hooks) is not set: run through ctest")
    return TEST_BIN


def run(*args, env=None, timeout=60):
    """Runs hpcbake with the source tree's manifests; returns CompletedProcess."""
    full = _env(env)
    return subprocess.run([bin_for(full), *args], capture_output=True, text=True, env=full, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def start(*args, env=None):
    """Starts hpcbake as run() runs it, in the background: a Popen with stdout and stderr piped (bytes),
    for read_until and communicate."""
    full = _env(env)
    return subprocess.Popen([bin_for(full), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full,
                            stdin=subprocess.DEVNULL)


def read_until(proc, text, seconds=60):
    """Reads proc's piped stdout until `text` has appeared, and returns what it read (str). Fails when
    the output ends first, or after `seconds` (a bound for a hung process, not a wait for the text)."""
    fd, want, got = proc.stdout.fileno(), text.encode(), b""
    end = time.monotonic() + seconds
    while want not in got:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError(f"no {text!r} on stdout in {seconds} s; so far:\n{got.decode(errors='replace')}")
        chunk = os.read(fd, 65536)
        if not chunk:
            err = proc.communicate()[1] or b""
            raise AssertionError(f"stdout ended (exit {proc.returncode}) without {text!r}:\n"
                                 f"{got.decode(errors='replace')}{err.decode(errors='replace')}")
        got += chunk
    return got.decode(errors="replace")


def run_json(*args, **kw):
    r = run(*args, **kw)
    if r.returncode != 0:
        raise AssertionError(f"hpcbake {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)


def edit_once(test, path, old, new):
    """Replaces the first `old` in the file at `path` by `new` (both str, or both bytes), and fails
    `test` when the file does not hold `old`: a test's edit never silently edits nothing."""
    mode = "b" if isinstance(old, bytes) else ""
    with open(path, "r" + mode) as f:
        text = f.read()
    test.assertIn(old, text)
    with open(path, "w" + mode) as f:
        f.write(text.replace(old, new, 1))


def copy_manifest_set(dst, manifests=True):
    """Copies the project's manifest set: manifests/ to dst and the driver recipes to drivers/
    beside it (--manifests DIR reads DIR/../drivers). manifests=False copies only the recipes,
    for a test that writes its own manifests into dst."""
    import shutil
    if manifests:
        shutil.copytree(os.path.join(SRC, "manifests"), dst)
    shutil.copytree(os.path.join(SRC, "drivers"), os.path.join(os.path.dirname(os.path.abspath(dst)), "drivers"))


def tamper_bundle(bundle, member, out):
    """A copy of the offline bundle `bundle` at `out` with the last byte of `member` flipped (a
    bundle damaged after it was made), every other member as it was."""
    import io
    import tarfile
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == member:
                data = data[:-1] + bytes([data[-1] ^ 1])
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


def link_device(link, target):
    """Make `link` (sysfs's /sys/class/<class>/<dev>/device) a relative link to the PCI device folder
    `target`, as sysfs has it. A fixture root's plain `device` folder (net/ibN, for the kernel log
    checks) moves into the PCI device first, where sysfs keeps it."""
    os.makedirs(target, exist_ok=True)
    if os.path.isdir(link) and not os.path.islink(link):
        for name in os.listdir(link):
            shutil.move(os.path.join(link, name), os.path.join(target, name))
        os.rmdir(link)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


def drop_userspace(manifests):
    """Removes the userspace components (MPI, NCCL, tools: kind userspace) from a manifest copy, for a
    test whose fixture repositories and sizes serve only the driver layer; then prune_profiles."""
    import yaml
    comps = os.path.join(manifests, "components")
    for name in os.listdir(comps):
        with open(os.path.join(comps, name)) as f:
            if yaml.safe_load(f).get("kind") == "userspace":
                os.remove(os.path.join(comps, name))
    prune_profiles(manifests)


def prune_profiles(manifests):
    """Drops from every profile of a manifest copy the components the copy no longer has (a test
    that removed some), keeping each profile's other fields."""
    import yaml
    comps = os.path.join(manifests, "components")
    pdir = os.path.join(manifests, "profiles")
    for name in os.listdir(pdir):
        path = os.path.join(pdir, name)
        with open(path) as f:
            prof = yaml.safe_load(f)
        for key in ("components", "best_effort"):
            if key in prof:
                prof[key] = [c for c in prof[key] if os.path.exists(os.path.join(comps, c + ".yaml"))]
                if not prof[key] and key == "best_effort":
                    del prof[key]
        with open(path, "w") as f:
            yaml.safe_dump(prof, f, sort_keys=False)


RESUME_UNIT = "etc/systemd/system/hpcbake-resume.service"
RESUME_DROPIN = "etc/systemd/system/hpcbake-resume.service.d/50-hpcbake-install.conf"
RESUME_WANTS = "etc/systemd/system/multi-user.target.wants/hpcbake-resume.service"


def systemd_words(line):
    """Splits an ExecStart= value as systemd does (systemd.syntax(7), systemd.service(5)):
    quoted words with C escapes, %% for %, and $$ for $ in arguments (not in the executable)."""
    words, i = [], 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        word, quote = "", None
        if line[i] in "\"'":
            quote = line[i]
            i += 1
        while i < len(line) and (line[i] != quote if quote else line[i] != " "):
            c = line[i]
            if c == "\\":
                n = line[i + 1]
                if n == "x":
                    word += chr(int(line[i + 2:i + 4], 16))
                    i += 4
                    continue
                word += {"n": "\n", "t": "\t"}.get(n, n)
                i += 2
                continue
            if c == "%":  # a specifier: only %% is a plain %
                if line[i + 1:i + 2] != "%":
                    raise ValueError(f"specifier %{line[i + 1:i + 2]} in {line!r}")
                i += 1
            elif c == "$" and words:  # in an argument, $$ is $ and $NAME an (unset: empty) variable
                if line[i + 1:i + 2] == "$":
                    i += 1
                else:
                    m = re.match(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)", line[i:])
                    if m:
                        i += len(m.group(0))
                        continue
            word += c
            i += 1
        i += 1
        words.append(word)
    return words


def resume_command(root):
    """The argv the resume unit runs: the last ExecStart= of the drop-in install wrote."""
    with open(os.path.join(root, RESUME_DROPIN)) as f:
        lines = [l[len("ExecStart="):] for l in f.read().splitlines() if l.startswith("ExecStart=")]
    return systemd_words(lines[-1])



def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_https_nginx(cls, prefix):
    """nginx over HTTPS (HTTP/2) on a free loopback port, with a CA made here (cls.tmp/ca.pem),
    serving cls.tmp/www; sets cls.tmp, cls.port and cls.nginx. Needs nginx and openssl."""
    import shutil
    import socket
    import subprocess
    import tempfile
    import time
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    openssl = shutil.which("openssl")
    cls.tmp = tempfile.mkdtemp(prefix=prefix)
    t = cls.tmp
    os.chmod(t, 0o755)  # nginx workers run as nobody when the master is root
    os.makedirs(os.path.join(t, "www"))
    ssl = lambda *a: subprocess.run([openssl, *a], check=True, capture_output=True, cwd=t)  # noqa: E731
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=hpcbake test CA")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(t, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "srv.pem", "-days", "2", "-extfile", "san.ext")
    cls.port = free_port()
    conf = f"""
worker_processes 1;
pid {t}/nginx.pid;
error_log {t}/error.log;
events {{ worker_connections 64; }}
http {{
  client_body_temp_path {t}/tmp; proxy_temp_path {t}/tmp; fastcgi_temp_path {t}/tmp;
  uwsgi_temp_path {t}/tmp; scgi_temp_path {t}/tmp;
  log_format hb '$request_uri $status $body_bytes_sent $connection $connection_requests "$http_range" "$http_if_range"';
  access_log {t}/access.log hb;
  keepalive_timeout 30;
  server {{
    listen 127.0.0.1:{cls.port} ssl http2;
    ssl_certificate {t}/srv.pem;
    ssl_certificate_key {t}/srv.key;
    root {t}/www;
  }}
}}
"""
    with open(os.path.join(t, "nginx.conf"), "w") as f:
        f.write(conf)
    os.makedirs(os.path.join(t, "tmp"))
    cls.nginx = subprocess.Popen([nginx, "-p", t, "-c", os.path.join(t, "nginx.conf"), "-g", "daemon off;"],
                                 stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", cls.port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise RuntimeError("nginx did not start: " + cls.nginx.stderr.read().decode())


def stop_https_nginx(cls):
    import shutil
    cls.nginx.terminate()
    cls.nginx.wait()
    shutil.rmtree(cls.tmp)


class TestSigner:
    """A signing key made for one test run, in its own GNUPGHOME under `tmp` (passphrase empty):
    `gpg(*args)` runs gpg there, `fpr` is the key's fingerprint, `env` the environment with it."""

    def __init__(self, tmp, uid, algo):
        self.home = os.path.join(tmp, "gnupg")
        os.makedirs(self.home, mode=0o700)
        self.env = dict(os.environ, GNUPGHOME=self.home)
        self.gpg("--quick-gen-key", uid, algo, "sign", "never")
        self.fpr = [line.split(":")[9] for line in self.gpg("--with-colons", "--list-keys").stdout.splitlines()
                    if line.startswith("fpr:")][0]

    def gpg(self, *args):
        return subprocess.run(["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
                              env=self.env, check=True, capture_output=True, text=True)

    def close(self):
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True)


def help_of(*path):
    """`hpcbake help PATH...` at 200 columns: one row per option."""
    r = run("help", *path, env={"COLUMNS": "200"}, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def help_commands(text):
    """The command names a help text lists under "Subcommands:"."""
    section = text.split("Subcommands:")[1] if "Subcommands:" in text else ""
    return [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()]


def help_options(text):
    """The long option names a help text lists, without --help."""
    found = re.findall(r"^  (?:-\w,)?(--[a-z0-9-]+)", text, re.M)
    return {o for o in found if o != "--help"}
