#!/bin/sh
# One step of an image build. packer/hpcbake.pkr.hcl runs its hpcbake steps through this
# script, from its one build block, and tests/packer runs that same build block with Packer's
# null builder over SSH on loopback (test_packer_null.py) and with its qemu builder in a Debian
# 12 VM that hpcbake really reboots (test_packer_qemu.py). So the command lines that build an
# image on Azure are the ones the tests prove, not a copy of them.
#
# Usage: sh hpcbake-step.sh package
#        sh hpcbake-step.sh install --reboot=auto|never
#        sh hpcbake-step.sh verify
#        sh hpcbake-step.sh verify-status
#        sh hpcbake-step.sh uefi-db
#        sh hpcbake-step.sh seal
# Options after the step are passed on to hpcbake's verb.
#
# Settings come from the environment (the template's environment_vars, local.env):
#   HPCBAKE_PAYLOAD       the uploaded payload directory (the template's remote_dir): this
#                         script, optionally bundle.tar (an offline bundle), where the release
#                         tarball is downloaded to and the verify report written; seal deletes it
#   HPCBAKE_DIR           where the release is unpacked (default /opt/hpcbake): every step runs
#                         $HPCBAKE_DIR/bin/hpcbake, which finds its manifests beside itself
#   HPCBAKE_LINK          a symbolic link made to that binary (such as /usr/local/bin/hpcbake),
#                         so that `hpcbake` is on PATH in the image; empty: none
#   HPCBAKE_SIZE          the VM size to install and verify for (the template's size: the size
#                         the image is for, which need not be the build VM's)
#   HPCBAKE_HARDWARE_CHECKS
#                         "deferred" (the template's build_vm_size is not size): install and verify
#                         get --hardware-checks deferred (the checks that need the target's GPUs
#                         and HCAs are recorded as deferred, to run at the first boot on the
#                         target), and seal and the uefi-db step's seal --check get --verify
#                         deferred; empty: none of these options, the hardware is verified here
#   HPCBAKE_PROFILE       the image profile (manifests/profiles; default: default)
#   HPCBAKE_JUNIT         where verify writes its JUnit report (the template downloads it); verify's
#                         exit status goes beside it, in the same name ending .status instead of .xml
#   HPCBAKE_SEAL_ARGS     seal's options (--deprovision, --remove-signing-key)
#   HPCBAKE_SECURE_BOOT   "off": the build VM must not have booted with Secure Boot on (the
#                         package step asks `hpcbake detect` and exits 3 if it did); empty: no check
#   HPCBAKE_SIGN          install's --sign (on: sign every module hpcbake builds); empty: install's default
#   HPCBAKE_UEFI_DB_ARGS  the uefi-db step's options for `seal --check --uefi-db-json`
#                         (--remove-signing-key, --source-id, --location, --target-region);
#                         empty: the step does nothing
# the package step only (local.release in the templates):
#   HPCBAKE_RELEASE_URL     the release tarball, hpcbake-VERSION-linux-ARCH.tar.gz; any URL curl
#                           reads (a storage blob with a SAS token, https, http, file). Its query
#                           string (the token) is never printed
#   HPCBAKE_RELEASE_SHA256  its SHA-256: 64 hex digits, or its whole line from SHA256SUMS
# and, from the templates' hpcbake_env variable, empty unless set there:
#   HPCBAKE_ARGS          global options before every verb (--manifests DIR; the null-builder
#                         test gives --root and --manifests of its fixture machine)
#   HPCBAKE_INSTALL_ARGS  more options for install (--verify-level 2, --distro, --cache)
#   HPCBAKE_VERIFY_ARGS   more options for verify (--level 2)
# The *_ARGS values are split on white space: a path in them cannot contain spaces.
#
# The exit status is hpcbake's own (docs/manual.md, "EXIT STATUS"): Packer fails the build on any
# status its provisioner does not list in valid_exit_codes, and a failure is never turned into 0.
# The package step exits 4 when the release cannot be downloaded or does not match its SHA-256
# (nothing is unpacked then), 3 when it is for another architecture, 2 on a bad setting.
# install exits 7 when a reboot is required (with --reboot=auto it has asked for it: the
# template accepts 7 on those two steps only).
# The verify step is the one exception, so that the report can be downloaded whatever verify
# found: when verify wrote its report, the step records verify's exit status beside it and exits
# 0; the verify-status step, after the download, exits with that status (6: a check failed).
# When verify wrote no report (a usage error, say), the step exits with verify's status at once.
set -eu
set -f # the *_ARGS values are split into words, never expanded as file names
umask 022 # the unpacked tree must be writable by root alone, or hpcbake refuses it (exit 9)

step=${1:?usage: hpcbake-step.sh package|install|verify|verify-status|uefi-db|seal [options]}
shift
dir=${HPCBAKE_PAYLOAD:?HPCBAKE_PAYLOAD is not set (the template sets it in environment_vars)}
size=${HPCBAKE_SIZE:?HPCBAKE_SIZE is not set (the template sets it in environment_vars)}
profile=${HPCBAKE_PROFILE:-default}
hardware=
verdict=
case ${HPCBAKE_HARDWARE_CHECKS:-} in
'') ;;
deferred)
  hardware="--hardware-checks deferred"
  verdict="--verify deferred"
  ;;
*)
  echo "hpcbake-step: HPCBAKE_HARDWARE_CHECKS must be deferred or empty (it is '$HPCBAKE_HARDWARE_CHECKS')" >&2
  exit 2
  ;;
esac
home=${HPCBAKE_DIR:-/opt/hpcbake}
bin=$home/bin/hpcbake

fail() {
  rc=$1
  shift
  echo "hpcbake-step: $step: $*" >&2
  exit "$rc"
}

# Runs a command as root. sudo -E keeps the environment, so that HPCBAKE_* settings and proxies
# given through hpcbake_env reach hpcbake.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -E "$@"; fi
}

# Prints the command, then runs it as root. On failure it says which command ended with which
# status, and returns that status (set -e then ends the script with it).
run() {
  echo "+ $*"
  rc=0
  as_root "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then echo "hpcbake-step: $step: $1 exited $rc" >&2; fi
  return "$rc"
}

# Downloads the release tarball, checks it against its SHA-256 with sha256sum -c, and only then
# unpacks it into $HPCBAKE_DIR. Nothing is built here: the binary is the release's own.
install_release() {
  url=${HPCBAKE_RELEASE_URL:-}
  [ -n "$url" ] || fail 2 "HPCBAKE_RELEASE_URL is not set (the template's hpcbake_release_url)"
  want=${HPCBAKE_RELEASE_SHA256:-}
  want=${want%%[[:space:]]*} # a line of SHA256SUMS: the digest is its first word
  want=$(printf '%s' "$want" | tr 'A-F' 'a-f')
  case $want in
  *[!0-9a-f]* | '') want=bad ;;
  esac
  [ "${#want}" -eq 64 ] ||
    fail 2 "HPCBAKE_RELEASE_SHA256 is not a SHA-256 (the template's hpcbake_release_sha256:" \
      "64 hex digits, or the tarball's line of SHA256SUMS)"
  case $home in
  /?*) ;;
  *) fail 2 "HPCBAKE_DIR must be an absolute directory other than / (it is '$home')" ;;
  esac

  # The URL may carry a SAS token in its query: only the part before '?' is ever printed, and
  # nothing here writes it to a file (seal refuses an image whose hpcbake files hold one).
  shown=${url%%\?*}
  tarball=$dir/hpcbake-release.tar.gz
  rm -f "$tarball"
  echo "+ curl -o $tarball $shown"
  rc=0
  curl --fail --silent --show-error --location --retry 5 --retry-connrefused --connect-timeout 30 \
    --output "$tarball" "$url" || rc=$?
  unset HPCBAKE_RELEASE_URL url # no command below (sudo -E keeps the environment) gets the token
  if [ "$rc" -ne 0 ]; then
    rm -f "$tarball"
    fail 4 "downloading $shown failed (curl exit $rc): check hpcbake_release_url and," \
      "for a storage blob, that its SAS token grants read and has not expired"
  fi

  echo "+ sha256sum -c (expecting $want)"
  if ! printf '%s  %s\n' "$want" "$tarball" | sha256sum -c --strict -; then
    got=$(sha256sum "$tarball" | cut -d' ' -f1)
    rm -f "$tarball"
    fail 4 "$shown does not match hpcbake_release_sha256: expected $want, got $got; nothing was" \
      "unpacked. Take this tarball's line of the release's SHA256SUMS (and check SHA256SUMS itself first)"
  fi

  # A release tarball holds one directory, hpcbake-VERSION-linux-ARCH; ARCH must be this VM's.
  arch=$(uname -m)
  top=$(tar -tzf "$tarball" | sed -e 's|^\./||' -e 's|/.*||' | sort -u)
  if [ "$(printf '%s\n' "$top" | wc -l)" -ne 1 ]; then
    rm -f "$tarball"
    fail 4 "$shown is not an hpcbake release: it does not hold one top directory"
  fi
  case $top in
  hpcbake-*-linux-"$arch") ;;
  hpcbake-*-linux-*)
    rm -f "$tarball"
    fail 3 "$shown is the release for ${top##*-linux-}, and this VM is $arch:" \
      "use hpcbake-VERSION-linux-$arch.tar.gz and its line of SHA256SUMS"
    ;;
  *)
    rm -f "$tarball"
    fail 4 "$shown is not an hpcbake release: its top directory is '$top', not hpcbake-VERSION-linux-$arch"
    ;;
  esac

  # Unpacked beside the destination, then moved into place, so that $HPCBAKE_DIR is either the
  # old tree or the whole new one. Owned by root, modes under umask 022, whoever built it.
  if [ -e "$home" ] && [ ! -x "$home/bin/hpcbake" ]; then
    fail 2 "$home exists and is not an unpacked hpcbake release: move it away, or set hpcbake_dir"
  fi
  stage=$home.unpack
  run rm -rf "$stage"
  run mkdir -p "$stage"
  run tar -xzf "$tarball" -C "$stage" --no-same-owner --no-same-permissions
  run rm -rf "$home"
  run mv "$stage/$top" "$home"
  run rmdir "$stage"
  rm -f "$tarball"
  if [ -n "${HPCBAKE_LINK:-}" ]; then
    run mkdir -p "$(dirname "$HPCBAKE_LINK")"
    run ln -sfn "$bin" "$HPCBAKE_LINK"
  fi
}

# With HPCBAKE_SECURE_BOOT=off (security_type Standard, and the UEFI db route's build VM): the VM
# must have booted with Secure Boot off. The template cannot ask Azure for securityType Standard
# (the Azure plugin refuses it), so a subscription where Trusted Launch is the default may boot it
# with Secure Boot on; the modules hpcbake signs would then not load, and the build would fail
# late, at verify. Asked of hpcbake detect (efivarfs), before anything is installed.
check_secure_boot() {
  [ "${HPCBAKE_SECURE_BOOT:-}" = off ] || return 0
  # shellcheck disable=SC2086
  state=$(as_root "$bin" ${HPCBAKE_ARGS:-} --no-imds detect --json | tr -d ' \n' |
    sed -n 's/.*"secure_boot":{[^}]*"state":"\([a-z-]*\)".*/\1/p')
  echo "hpcbake-step: Secure Boot: ${state:-unknown}"
  if [ "$state" = enabled ]; then
    fail 3 "this VM booted with Secure Boot on, and security_type is Standard or TrustedLaunchSupported," \
      "whose build VM has it off: Azure made it a Trusted Launch VM by default (the subscription's" \
      "TrustedLaunchByDefaultPreview feature), and the Azure plugin cannot ask for securityType Standard." \
      "Unregister that preview feature (az feature unregister --namespace Microsoft.Compute" \
      "--name TrustedLaunchByDefaultPreview), or build with security_type = \"TrustedLaunch\""
  fi
}

case $step in
package) ;;
install | verify | verify-status | uefi-db | seal)
  [ -x "$bin" ] || fail 2 "$bin is missing: the package step unpacks the release there first"
  ;;
*)
  echo "hpcbake-step: unknown step '$step' (package, install, verify, verify-status, uefi-db or seal)" >&2
  exit 2
  ;;
esac

case $step in
package)
  # On a fresh VM cloud-init may still be installing packages and hold the dpkg/rpm lock.
  if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait || true; fi
  install_release
  run "$bin" --version
  check_secure_boot
  ;;
install)
  # --lock-timeout 3600: after a reboot, the hpcbake-resume unit may already be running the
  # same install; this one then waits for it and finds the steps done.
  bundle=
  if [ -f "$dir/bundle.tar" ]; then bundle="--bundle $dir/bundle.tar"; fi
  sign=
  if [ -n "${HPCBAKE_SIGN:-}" ]; then sign="--sign $HPCBAKE_SIGN"; fi
  # shellcheck disable=SC2086 # the *_ARGS, $bundle, $sign and $hardware are lists of words
  run "$bin" ${HPCBAKE_ARGS:-} install --size "$size" --profile "$profile" --yes --lock-timeout 3600 $bundle $sign $hardware ${HPCBAKE_INSTALL_ARGS:-} "$@"
  ;;
verify)
  junit=${HPCBAKE_JUNIT:?HPCBAKE_JUNIT is not set (the template sets it in environment_vars)}
  status=${junit%.xml}.status
  # A report or status left by an earlier run must not stand for this one.
  as_root rm -f "$junit" "$status"
  rc=0
  # shellcheck disable=SC2086
  run "$bin" ${HPCBAKE_ARGS:-} verify --size "$size" --profile "$profile" --junit "$junit" $hardware ${HPCBAKE_VERIFY_ARGS:-} "$@" || rc=$?
  if [ "$rc" -ne 0 ] && [ ! -f "$junit" ]; then exit "$rc"; fi # no report to download
  echo "$rc" | as_root tee "$status" >/dev/null
  if [ "$rc" -ne 0 ]; then
    echo "hpcbake-step: verify: the report is downloaded next; the verify-status step then fails the build with exit $rc" >&2
  fi
  ;;
verify-status)
  junit=${HPCBAKE_JUNIT:?HPCBAKE_JUNIT is not set (the template sets it in environment_vars)}
  status=${junit%.xml}.status
  [ -f "$status" ] || fail 2 "$status is missing: the verify step runs first and records verify's exit status there"
  rc=$(cat "$status")
  case $rc in
  '' | *[!0-9]*) fail 2 "$status does not hold an exit status (it holds '$rc')" ;;
  esac
  if [ "$rc" -ne 0 ]; then
    echo "hpcbake-step: verify-status: verify exited $rc (its report was downloaded to the template's junit_out)" >&2
    exit "$rc"
  fi
  echo "hpcbake-step: verify-status: verify passed"
  ;;
uefi-db)
  # The UEFI db route: seal --check (nothing changes) and, when the machine can be sealed, the
  # request body of the image version whose UEFI db holds the module-signing certificate. The
  # template downloads it before the seal step deletes the payload.
  if [ -n "${HPCBAKE_UEFI_DB_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    run "$bin" ${HPCBAKE_ARGS:-} seal --check --uefi-db-json "$dir/hpcbake-uefi-db.json" $verdict $HPCBAKE_UEFI_DB_ARGS "$@"
  else
    echo "hpcbake-step: uefi-db: nothing to do (security_type is not TrustedLaunchSupported)"
  fi
  ;;
seal)
  # The install is complete (the last one found nothing to do) and the report is downloaded: the
  # payload (this script, an offline bundle's gigabytes, the report) is not part of the image.
  # It goes before seal, whose --deprovision is the last thing that runs on the VM. The shell
  # reading this script keeps it open, so deleting it here is safe.
  case $dir in
  *//* | */ | *..* | */./* | */.) fail 2 "HPCBAKE_PAYLOAD must be an absolute directory below a top-level one (it is '$dir')" ;;
  /*/?*) ;;
  *) fail 2 "HPCBAKE_PAYLOAD must be an absolute directory below a top-level one (it is '$dir')" ;;
  esac
  case $home/ in
  "$dir"/*) fail 2 "HPCBAKE_PAYLOAD ($dir) holds HPCBAKE_DIR ($home): it cannot be deleted" ;;
  esac
  if [ -e "$dir" ]; then run rm -rf "$dir"; fi
  # shellcheck disable=SC2086
  run "$bin" ${HPCBAKE_ARGS:-} seal $verdict ${HPCBAKE_SEAL_ARGS:-} "$@"
  sync
  ;;
esac
