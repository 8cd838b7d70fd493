#!/bin/sh
# Writes hpcbake.1.gz from docs/manual.md (packaging/manual-to-man.py), with the version the
# binary reports. Usage: gen-manpage.sh HPCBAKE_BINARY MANUAL.md OUT.1.gz
set -eu
bin="$1"
manual="$2"
out="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# "hpcbake VERSION", without the commit and the build machine's manifest path and digest.
version="$("$bin" --version | sed 's/ (.*//; s/^hpcbake //')"
python3 "$(dirname "$0")/manual-to-man.py" "$manual" "$version" "$tmp/hpcbake.1"
gzip -n -9 -c "$tmp/hpcbake.1" >"$out"
