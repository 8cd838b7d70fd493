#!/bin/sh
# One step of an image build. Every template in packer/ runs its hpcbake steps through this
# script, from one shared build block, and tests/packer/test_packer_null.py runs that same
# build block with Packer's null builder over SSH on loopback. So the command lines that build
# an image on Azure are the ones the test proves, not a copy of them.
#
# Usage: sh hpcbake-step.sh package
#        sh hpcbake-step.sh install --reboot=auto|never
#        sh hpcbake-step.sh verify
#        sh hpcbake-step.sh seal
# Options after the step are passed on to hpcbake's verb.
#
# Settings come from the environment (the templates' environment_vars, local.env):
#   HPCBAKE_PAYLOAD       the uploaded payload directory: hpcbake_*.deb, hpcbake-*.rpm or a bare
#                         hpcbake executable, and optionally bundle.tar (an offline bundle)
#   HPCBAKE_SIZE          the VM size to install and verify for
#   HPCBAKE_JUNIT         where verify writes its JUnit report (the template downloads it)
#   HPCBAKE_SEAL_ARGS     seal's options (--deprovision, --remove-signing-key)
# and, from the templates' hpcbake_env variable, empty unless set there:
#   HPCBAKE_ARGS          global options before every verb (--manifests DIR; the null-builder
#                         test gives --root and --manifests of its fixture machine)
#   HPCBAKE_INSTALL_ARGS  more options for install (--verify-level 2, --distro, --cache)
#   HPCBAKE_VERIFY_ARGS   more options for verify (--level 2)
# The *_ARGS values are split on white space: a path in them cannot contain spaces.
#
# The exit status is hpcbake's own (README.md, "Exit codes"): Packer fails the build on any
# status its provisioner does not list in valid_exit_codes, and a failure is never turned into 0.
set -eu
set -f # the *_ARGS values are split into words, never expanded as file names

step=${1:?usage: hpcbake-step.sh package|install|verify|seal [options]}
shift
dir=${HPCBAKE_PAYLOAD:?HPCBAKE_PAYLOAD is not set (the template sets it in environment_vars)}
size=${HPCBAKE_SIZE:?HPCBAKE_SIZE is not set (the template sets it in environment_vars)}

# A bare executable in the payload (a build for the target distro, as the test uploads) is run
# from there; otherwise the package's /usr/bin/hpcbake.
bin=hpcbake
if [ -f "$dir/hpcbake" ]; then bin=$dir/hpcbake; fi

# Prints the command, then runs it as root. sudo -E keeps the environment, so that HPCBAKE_*
# settings and proxies given through hpcbake_env reach hpcbake. On failure it says which
# command ended with which status, and returns that status (set -e then ends the script with
# it).
run() {
  echo "+ $*"
  rc=0
  if [ "$(id -u)" -eq 0 ]; then "$@" || rc=$?; else sudo -E "$@" || rc=$?; fi
  if [ "$rc" -ne 0 ]; then echo "hpcbake-step: $step: $1 exited $rc" >&2; fi
  return "$rc"
}

case $step in
package)
  # On a fresh VM cloud-init may still be installing packages and hold the dpkg/rpm lock.
  if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait || true; fi
  set +f
  if [ -f "$dir/hpcbake" ]; then
    chmod 0755 "$dir/hpcbake"
  elif ls "$dir"/hpcbake_*.deb >/dev/null 2>&1; then
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y "$dir"/hpcbake_*.deb
  elif ls "$dir"/hpcbake-*.rpm >/dev/null 2>&1; then
    run dnf install -y "$dir"/hpcbake-*.rpm
  else
    echo "hpcbake-step: package: $dir holds no hpcbake_*.deb, hpcbake-*.rpm or hpcbake executable" >&2
    exit 2
  fi
  set -f
  run "$bin" --version
  ;;
install)
  # --lock-timeout 3600: after a reboot, the hpcbake-resume unit may already be running the
  # same install; this one then waits for it and finds the steps done.
  bundle=
  if [ -f "$dir/bundle.tar" ]; then bundle="--bundle $dir/bundle.tar"; fi
  # shellcheck disable=SC2086 # the *_ARGS and $bundle are lists of words
  run "$bin" ${HPCBAKE_ARGS:-} install --size "$size" --yes --lock-timeout 3600 $bundle ${HPCBAKE_INSTALL_ARGS:-} "$@"
  ;;
verify)
  junit=${HPCBAKE_JUNIT:?HPCBAKE_JUNIT is not set (the template sets it in environment_vars)}
  # shellcheck disable=SC2086
  run "$bin" ${HPCBAKE_ARGS:-} verify --size "$size" --junit "$junit" ${HPCBAKE_VERIFY_ARGS:-} "$@"
  ;;
seal)
  # shellcheck disable=SC2086
  run "$bin" ${HPCBAKE_ARGS:-} seal ${HPCBAKE_SEAL_ARGS:-} "$@"
  sync
  ;;
*)
  echo "hpcbake-step: unknown step '$step' (package, install, verify or seal)" >&2
  exit 2
  ;;
esac
