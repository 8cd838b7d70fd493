#!/usr/bin/env python3
"""Writes the release binary's SBOM (SPDX 2.3 JSON) from what scripts/static-deps really built.

Usage: sbom.py --static-dir DIR --version V --arch ARCH --binary HPCBAKE --compiler-version CV --out FILE

The records it reads, all scripts/static-deps' own (docs/release.md):
  DIR/versions              each source package built ("source NAME VERSION"), the sysroot's
                            glibc ("sysroot libc6:ARCH VERSION") and the verbs headers
  DIR/licenses/NAME.copyright
                            each source package's debian/copyright (the license of its `Files: *`)
  DIR/../apt                static-deps' private apt state: the Sources index of the mirror it
                            fetched from (apt verified it against the signed Release file), for
                            each package's directory in the pool and its .dsc's SHA-256
The binary's own commit comes from `HPCBAKE --version`. SPDX 2.3: its STATIC_LINK relationship
says what a static build is, and Debian's scanners (and Trivy, Grype) read SPDX JSON; each
package also carries its purl (pkg:deb/debian/NAME@VERSION?arch=source), what scanners match on.
Deterministic: `created` is $SOURCE_DATE_EPOCH when set (scripts/release sets the commit's time).
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.parse

# Debian's copyright-format 1.0 short names (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/,
# "License short name") whose SPDX identifier differs or is spelled otherwise
# (https://spdx.org/licenses/); a name not here and not an SPDX identifier itself is NOASSERTION,
# with Debian's name in licenseComments.
DEBIAN_TO_SPDX = {
    "Expat": "MIT", "MIT": "MIT", "BSD-2-clause": "BSD-2-Clause", "BSD-3-clause": "BSD-3-Clause",
    "LGPL-2.1+": "LGPL-2.1-or-later", "LGPL-2.1": "LGPL-2.1-only", "GPL-2+": "GPL-2.0-or-later",
    "GPL-2": "GPL-2.0-only", "Apache-2.0": "Apache-2.0", "Zlib": "Zlib", "curl": "curl", "X11": "X11",
}
# static-deps builds doctest for the unit tests of a release build only (its SOURCES comment).
TEST_ONLY = {"doctest"}


def die(msg):
    print(f"packaging/sbom.py: {msg}", file=sys.stderr)
    sys.exit(1)


def read_versions(static_dir):
    path = os.path.join(static_dir, "versions")
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        die(f"cannot read {path} ({e.strerror}): rerun scripts/static-deps")
    out = []
    for line in lines:
        f = line.split()
        if len(f) == 3:
            out.append((f[0], f[1], urllib.parse.unquote(f[2])))
    if not any(kind == "source" for kind, _, _ in out):
        die(f"{path} names no source package: rerun scripts/static-deps")
    return out


def declared_license(static_dir, name):
    """(SPDX expression or NOASSERTION, comment) from the package's debian/copyright."""
    path = os.path.join(static_dir, "licenses", f"{name}.copyright")
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return "NOASSERTION", f"no debian/copyright recorded for {name}"
    for para in re.split(r"\n\s*\n", text):
        if re.search(r"^Files:\s*\*\s*$", para, re.M):
            m = re.search(r"^License:\s*(\S.*)$", para, re.M)
            if m:
                deb = m.group(1).strip()
                # "A or B" / "A and B": an SPDX expression when every term has an identifier.
                terms = re.split(r"\s+(or|and)\s+", deb)
                ids = [DEBIAN_TO_SPDX.get(t) if i % 2 == 0 else t.upper() for i, t in enumerate(terms)]
                spdx = " ".join(ids) if all(ids) else "NOASSERTION"
                return spdx, f"debian/copyright of {name}, Files: *, License: {deb}"
    return "NOASSERTION", f"debian/copyright of {name} is not in copyright-format 1.0 (no Files: * paragraph)"


def apt_state(static_dir):
    apt = os.path.join(os.path.dirname(os.path.abspath(static_dir)), "apt")
    return apt if os.path.isdir(os.path.join(apt, "lists")) else None


def mirror_and_suite(apt):
    try:
        text = open(os.path.join(apt, "parts", "src.sources")).read()
    except OSError:
        return None, None
    uri = re.search(r"^URIs:\s*(\S+)", text, re.M)
    suite = re.search(r"^Suites:\s*(\S+)", text, re.M)
    return (uri.group(1).rstrip("/") if uri else None), (suite.group(1) if suite else None)


def source_record(apt, name, version):
    """The Sources stanza of NAME VERSION in static-deps' apt state: (directory, dsc, sha256, homepage)."""
    if not apt:
        return None
    opts = []
    for k, v in (("Dir::Etc::SourceList", "empty.list"), ("Dir::Etc::SourceParts", "parts"),
                 ("Dir::State::Lists", "lists"), ("Dir::State::status", "status")):
        opts += ["-o", f"{k}={os.path.join(apt, v)}"]
    opts += ["-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache="]
    try:
        r = subprocess.run(["apt-cache", *opts, "showsrc", "--only-source", name], capture_output=True, text=True)
    except OSError:  # no apt here: no checksum, never a made-up one
        return None
    for stanza in r.stdout.split("\n\n"):
        if not re.search(rf"^Version:\s*{re.escape(version)}\s*$", stanza, re.M):
            continue
        d = re.search(r"^Directory:\s*(\S+)", stanza, re.M)
        h = re.search(r"^Homepage:\s*(\S+)", stanza, re.M)
        sums = re.search(r"^Checksums-Sha256:\n((?: .*\n?)*)", stanza, re.M)
        dsc = None
        for line in (sums.group(1).splitlines() if sums else []):
            f = line.split()
            if len(f) == 3 and f[2].endswith(".dsc"):
                dsc = (f[2], f[0])
        return (d.group(1) if d else None, dsc[0] if dsc else None, dsc[1] if dsc else None, h.group(1) if h else None)
    return None


def purl(name, version, arch, suite):
    q = f"?arch={arch}" + (f"&distro={suite}" if suite else "")
    return f"pkg:deb/debian/{name}@{urllib.parse.quote(version, safe='.~-_')}{q}"


def spdx_id(kind, name):
    return f"SPDXRef-{kind}-" + re.sub(r"[^A-Za-z0-9.-]", "-", name)


def library(static_dir, apt, mirror, suite, name, version):
    lic, comment = declared_license(static_dir, name)
    pkg = {
        "SPDXID": spdx_id("DebianSource", name), "name": name, "versionInfo": version,
        "supplier": "Organization: Debian", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION", "licenseDeclared": lic, "licenseComments": comment,
        "copyrightText": "NOASSERTION", "primaryPackagePurpose": "LIBRARY",
        "sourceInfo": f"Debian source package {name} {version} (dpkg-source -x: Debian's patches applied), "
                      "built static by scripts/static-deps",
        "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                          "referenceLocator": purl(name, version, "source", suite)}],
    }
    rec = source_record(apt, name, version)
    if rec:
        directory, dsc, sha, home = rec
        if mirror and directory and dsc:
            pkg["downloadLocation"] = f"{mirror}/{directory}/{dsc}"
        if sha:
            pkg["checksums"] = [{"algorithm": "SHA256", "checksumValue": sha}]
        if home:
            pkg["homepage"] = home
    return pkg


def commit_of(binary):
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        die(f"{binary} --version failed ({e})")
    m = re.search(r"commit ([0-9a-f]{7,40}|unknown)", out)
    return m.group(1) if m else "unknown"


def build(args):
    versions = read_versions(args.static_dir)
    apt = apt_state(args.static_dir)
    mirror, suite = mirror_and_suite(apt) if apt else (None, None)
    commit = commit_of(args.binary)
    main_id = "SPDXRef-Package-hpcbake"
    packages = [{
        "SPDXID": main_id, "name": "hpcbake", "versionInfo": args.version, "supplier": "Organization: hpcbake",
        "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "Apache-2.0", "copyrightText": "NOASSERTION", "primaryPackagePurpose": "APPLICATION",
        "sourceInfo": f"built from commit {commit}, for linux-{args.arch}, by scripts/release",
    }]
    rels = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": main_id}]
    for kind, name, version in versions:
        if kind == "source" and name not in TEST_ONLY:
            pkg = library(args.static_dir, apt, mirror, suite, name, version)
            packages.append(pkg)
            rels.append({"spdxElementId": main_id, "relationshipType": "STATIC_LINK", "relatedSpdxElement": pkg["SPDXID"]})
        elif kind == "sysroot" and name.startswith("libc6:"):
            deb_arch = name.split(":", 1)[1]
            lic, comment = declared_license(args.static_dir, "glibc")
            packages.append({
                "SPDXID": spdx_id("DebianBinary", "libc6"), "name": "libc6", "versionInfo": version,
                "supplier": "Organization: Debian", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
                "licenseConcluded": "NOASSERTION", "licenseDeclared": lic, "licenseComments": comment,
                "copyrightText": "NOASSERTION", "primaryPackagePurpose": "LIBRARY",
                "sourceInfo": "Debian 11's glibc, the sysroot the binary is linked against (its glibc floor); "
                              "at run time the host's glibc, linked dynamically",
                "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                  "referenceLocator": purl("libc6", version, deb_arch, "bullseye")}],
            })
            rels.append({"spdxElementId": main_id, "relationshipType": "DEPENDS_ON",
                         "relatedSpdxElement": spdx_id("DebianBinary", "libc6")})
    # libstdc++ and libgcc: -static-libstdc++ -static-libgcc (packaging/static/static.cmake), from
    # the compiler static-deps' wrappers run.
    packages.append({
        "SPDXID": spdx_id("Runtime", "libstdc++"), "name": "libstdc++ and libgcc (gcc)", "versionInfo": args.compiler_version,
        "supplier": "Organization: Debian", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION",
        "licenseComments": "gcc's debian/copyright (licenses/gcc.copyright): GPL v3 or later with the GCC Runtime "
                           "Library Exception 3.1; not copyright-format 1.0, so not asserted here",
        "copyrightText": "NOASSERTION", "primaryPackagePurpose": "LIBRARY",
        "sourceInfo": "the build compiler's own libstdc++.a and libgcc_eh.a (-static-libstdc++ -static-libgcc)",
    })
    rels.append({"spdxElementId": main_id, "relationshipType": "STATIC_LINK",
                 "relatedSpdxElement": spdx_id("Runtime", "libstdc++")})
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.datetime.fromtimestamp(int(epoch) if epoch else int(datetime.datetime.now().timestamp()),
                                           datetime.timezone.utc)
    name = f"hpcbake-{args.version}-linux-{args.arch}"
    digest = hashlib.sha256(json.dumps([packages, rels], sort_keys=True).encode()).hexdigest()
    return {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT", "name": name,
        "documentNamespace": f"https://spdx.org/spdxdocs/{name}-{digest[:16]}",
        "creationInfo": {"created": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "creators": ["Organization: hpcbake", "Tool: hpcbake-packaging-sbom.py"]},
        "documentDescribes": [main_id], "packages": packages, "relationships": rels,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for opt in ("--static-dir", "--version", "--arch", "--binary", "--compiler-version", "--out"):
        p.add_argument(opt, required=True)
    args = p.parse_args()
    doc = build(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
