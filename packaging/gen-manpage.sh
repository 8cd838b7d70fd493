#!/bin/sh
# Writes hpcbake.1.gz from the binary's own --help: help2man when Debian's help2man is
# installed (with every verb's --help as extra sections), else a plain roff page with the
# same text. Usage: gen-manpage.sh HPCBAKE_BINARY OUT.1.gz
set -eu
bin="$1"
out="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
verbs="detect plan fetch bundle cache manifest extract module nouveau rdma verify install seal"

# Each verb's help, as an include file (help2man) and as plain text (fallback).
{
  echo "[VERBS]"
  for v in $verbs; do
    if "$bin" "$v" --help >"$tmp/$v.txt" 2>/dev/null; then
      printf '.SS "hpcbake %s"\n.nf\n' "$v"
      sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' "$tmp/$v.txt"
      printf '.fi\n'
    fi
  done
  echo "[FILES]"
  echo "/var/lib/hpcbake/state.json (install journal), /var/lib/hpcbake/verify.json (last verify),"
  echo "/var/lib/hpcbake/image-manifest.json (written by seal), /var/cache/hpcbake (artifact cache),"
  echo "/usr/share/hpcbake (manifests and driver recipes)."
} >"$tmp/include"

if command -v help2man >/dev/null 2>&1; then
  help2man --no-info --no-discard-stderr --section=1 --source=hpcbake \
    --name="turn an Azure VM into a working GPU/InfiniBand machine, then into an image" \
    --include="$tmp/include" --output="$tmp/hpcbake.1" "$bin"
else
  {
    # "hpcbake VERSION", without the commit and the build machine's manifest path and digest.
    printf '.TH HPCBAKE 1 "" "%s" "User Commands"\n' "$("$bin" --version | sed 's/ (.*//')"
    printf '.SH NAME\nhpcbake \\- turn an Azure VM into a working GPU/InfiniBand machine, then into an image\n'
    printf '.SH DESCRIPTION\n.nf\n'
    "$bin" --help | sed -e 's/\\/\\e/g' -e 's/^\./\\\&./'
    printf '.fi\n.SH VERBS\n'
    sed -n '/^\[VERBS\]/,/^\[FILES\]/p' "$tmp/include" | sed '1d;$d'
    printf '.SH FILES\n'
    sed -n '/^\[FILES\]/,$p' "$tmp/include" | sed '1d'
  } >"$tmp/hpcbake.1"
fi
gzip -n -9 -c "$tmp/hpcbake.1" >"$out"
