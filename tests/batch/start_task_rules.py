"""Rules for a Batch pool's start task command line (docs/batch.md, "What a start task command line
must do"), checked on the text of the examples' commandLine. Each function returns a list of problems
(strings); an empty list when the command line keeps the rule.

- Stop on failure: a command line of several commands starts with `set -e` (bash -c runs them
  one after another; without -e a failed step is ignored and the last one's status is reported).
- Package-manager locks: apt-get/apt calls pass `-o DPkg::Lock::Timeout=N` (apt >= 1.9.11), and
  do not run `update`, whose lock (/var/lib/apt/lists/lock) that option does not cover; dpkg is not
  called directly (it does not wait for its lock); dnf/yum/tdnf are not told exit_on_lock.
- Verified before use: a downloaded resource file is checked with `sha256sum -c` before anything
  is unpacked, installed or run.
"""
import re
import shlex

# Programs that unpack, install or run something: none of them may come before the digest check. A
# program named by a path (./x, /opt/hpcbake/bin/hpcbake) runs a file, which counts too.
_CONSUMERS = {"tar", "unzip", "gunzip", "cpio", "dpkg", "apt-get", "apt", "rpm", "dnf", "yum", "tdnf", "zypper",
              "bash", "sh", "source", ".", "chmod", "install", "hpcbake"}
_APT = {"apt-get", "apt"}
_DNF = {"dnf", "yum", "tdnf"}


def shell_script(command_line):
    """The script a `/bin/bash -c '...'` (or /bin/sh -c) command line runs; None if it is not one."""
    argv = shlex.split(command_line)
    if len(argv) >= 3 and argv[0] in ("/bin/bash", "/bin/sh") and argv[1] == "-c":
        return argv[2]
    return None


def _words(script):
    """The script as shell words, operators (; | && || ( )) as separate tokens."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _commands(script):
    """Simple commands: lists of words split at ; | & ( ) and newlines. `$(...)` stays inside its word."""
    commands, current = [], []
    for word in _words(script):
        if word and set(word) <= set(";|&()\n"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    if current:
        commands.append(current)
    # Shell keywords start a command but are not the program: `if apt-get ...`, `then tar ...`.
    out = []
    for cmd in commands:
        while cmd and cmd[0] in ("if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "fi", "done"):
            cmd = cmd[1:]
        # Leading VAR=value assignments (DEBIAN_FRONTEND=noninteractive apt-get ...).
        while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        if cmd:
            out.append(cmd)
    return out


def stops_on_failure(script):
    """A script of several commands must start with `set -e` (any `set -e...` spelling)."""
    if len(_commands(script)) <= 1:
        return []
    first = _commands(script)[0]
    if first[0] == "set" and any(w.startswith("-") and "e" in w[1:] for w in first[1:]):
        return []
    return [f"several commands but no leading `set -e`: a failed step would not stop the task ({first!r} comes first)"]


def package_manager_calls(script):
    problems = []
    for cmd in _commands(script):
        prog = cmd[0].rsplit("/", 1)[-1]
        if prog in _APT:
            opts = [cmd[i + 1] for i, w in enumerate(cmd[:-1]) if w == "-o"] + \
                   [w[2:] for w in cmd if w.startswith("-o") and len(w) > 2]
            if not any(re.match(r"(?i)^dpkg::lock::timeout=\d+$", o) for o in opts):
                problems.append(f"{' '.join(cmd)!r}: no -o DPkg::Lock::Timeout=N; apt fails at once while "
                                "cloud-init or unattended-upgrades holds the dpkg lock")
            if "update" in cmd[1:]:
                problems.append(f"{' '.join(cmd)!r}: `update` takes /var/lib/apt/lists/lock, which "
                                "DPkg::Lock::Timeout does not wait for")
        elif prog == "dpkg" and any(w in ("-i", "--install", "--configure", "-r", "--remove", "-P", "--purge")
                                    for w in cmd[1:]):
            problems.append(f"{' '.join(cmd)!r}: dpkg does not wait for its lock; use apt-get with "
                            "-o DPkg::Lock::Timeout=N")
        elif prog in _DNF and any(re.search(r"(?i)exit_on_lock\s*=\s*(1|true|yes)", w) for w in cmd):
            problems.append(f"{' '.join(cmd)!r}: exit_on_lock makes dnf fail instead of waiting for its lock")
    return problems


def verified_before_use(script, resource_files):
    """Each downloaded file is named in the command that feeds `sha256sum -c`, and nothing is
    unpacked, installed or run before that command."""
    if not resource_files:
        return []
    match = re.search(r"\bsha256sum\b[^;|&]*\s(-c|--check)\b", script)
    if not match:
        return ["resource files are downloaded but the command line never runs `sha256sum -c`"]
    start = max(script.rfind(";", 0, match.start()), script.rfind("&&", 0, match.start()),
                script.rfind("\n", 0, match.start())) + 1
    end_candidates = [i for i in (script.find(";", match.end()), script.find("&&", match.end())) if i != -1]
    check = script[start:min(end_candidates) if end_candidates else len(script)]
    problems = []
    for rf in resource_files:
        path = rf.get("filePath", "")
        if path and path not in check:
            problems.append(f"{path!r} is downloaded but not in the checksum command {check.strip()!r}")
    for cmd in _commands(script[:start]):
        prog = cmd[0]
        if prog in _CONSUMERS or "/" in prog:
            problems.append(f"{' '.join(cmd)!r} runs before the checksum is checked")
    return problems


def check(pool):
    """Every problem of a pool body's start task command line."""
    st = pool.get("startTask")
    if not st:
        return []
    script = shell_script(st["commandLine"])
    if script is None:
        return ["the command line is not `/bin/bash -c '...'` or `/bin/sh -c '...'`"]
    return stops_on_failure(script) + package_manager_calls(script) + \
        verified_before_use(script, st.get("resourceFiles") or [])
