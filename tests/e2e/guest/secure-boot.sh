# The Secure Boot guest's one boot (tests/e2e/secure_boot.py, docs/secure-boot.md), sourced by
# guest.sh when e2e.conf says MODE=secure-boot: OVMF with Microsoft's keys, Debian's signed shim,
# grub and kernel; hpcbake's signing certificate pre-seeded as a MOK (the firmware's MokList).
# Every step runs with stdin from /dev/null (guest.sh's `step`): a command that asked for a
# password would fail or hang until the host's timeout, never get an answer.
SB=$E2E/sb
SHIM_GUID=605dab50-e046-4300-abb6-3dd810dd8b23

sb_state() {   # the firmware, shim and kernel as mokutil and the kernel's keyrings see them
  mokutil --sb-state || return 1
  echo "lockdown: $(cat /sys/kernel/security/lockdown 2>&1)"
  echo "MokListTrustedRT: $(od -An -tx1 /sys/firmware/efi/efivars/MokListTrustedRT-$SHIM_GUID 2>&1)"
  echo "--- mokutil --list-enrolled"
  mokutil --list-enrolled | grep -E 'Subject:|Issuer:'
  echo "--- dmesg"
  dmesg | grep -i -e 'secure boot' -e 'locked down' -e 'Loaded X.509 cert' -e 'MokListRT' | head -20
  echo "--- keyctl list %:.machine"
  keyctl list %:.machine 2>&1
  echo "--- keyctl list %:.builtin_trusted_keys"
  keyctl list %:.builtin_trusted_keys 2>&1
  mokutil --sb-state | grep -q 'SecureBoot enabled' || { echo "mokutil: Secure Boot is not enabled" >&2; return 1; }
}

refused() {   # $1: a module file the kernel must refuse to load
  local out rc mod
  mod=$(modinfo -F name "$1")
  echo "signer=$(modinfo -F signer "$1")"
  out=$(insmod "$1" 2>&1); rc=$?
  echo "insmod rc=$rc: $out"
  dmesg | grep -i -e lockdown -e 'module verification' -e 'Loading of' -e 'Key was rejected' | tail -3
  if [ "$rc" -eq 0 ] || [ -d "/sys/module/$mod" ]; then
    echo "$1 loaded under Secure Boot" >&2; rmmod "$mod"; return 1
  fi
}

sign_off_refused() {   # --sign off while Secure Boot is on: refused before anything is built
  local rc
  hb module install "$SB/src" --name "$FIXTURE_NAME" --version 1.0 --module "$FIXTURE_MODULE" --sign off; rc=$?
  echo "rc=$rc"
  [ "$rc" -ne 0 ] || { echo "--sign off was accepted with Secure Boot on" >&2; return 1; }
  [ ! -d "/var/lib/dkms/$FIXTURE_NAME" ] || { echo "a refused build left /var/lib/dkms/$FIXTURE_NAME" >&2; return 1; }
}

sb_install() {   # install with Secure Boot on: it signs with the key in /var/lib/hpcbake/signing on its own
  local rc
  # The key whose certificate the firmware's MokList holds, where install keeps its key; a user
  # who enrolled hpcbake's certificate once keeps the key between bakes the same way.
  install -d -m 0700 /var/lib/hpcbake/signing &&
    install -m 0600 "$SB/keys/signing.key" /var/lib/hpcbake/signing/signing.key &&
    install -m 0644 "$SB/keys/signing.der" /var/lib/hpcbake/signing/signing.der || return 1
  timeout 900 "$H" --no-imds --manifests "$M" install --bundle "$BUNDLE" --size "$SIZE" --yes --reboot=never; rc=$?
  echo "install_rc=$rc"
  cp /var/lib/hpcbake/state.json "$OUT/state-secure-boot.json" 2>/dev/null
  [ "$rc" -eq 0 ] || { [ "$rc" -eq 124 ] && echo "install did not finish in 900 s (waiting for input?)" >&2; return 1; }
}

sb_modprobe() {   # the module install built and signed loads; the kernel is not tainted by it
  local ko
  modprobe "$FIXTURE_MODULE" || return 1
  ko=$(modinfo -n "$FIXTURE_MODULE")
  echo "path=$ko"
  echo "signer=$(modinfo -F signer "$FIXTURE_MODULE")"
  grep "^$FIXTURE_MODULE " /proc/modules
  echo "tainted=$(cat /proc/sys/kernel/tainted)"
  # Taint E (8192): an unsigned or unverifiable module was loaded.
  [ $(( $(cat /proc/sys/kernel/tainted) & 8192 )) -eq 0 ] || { echo "the kernel is tainted E (unsigned module)" >&2; return 1; }
}

seal_refuses_unsigned() {   # the installed module swapped for an unsigned build: seal --check refuses it
  local ko rc
  ko=$(modinfo -n "$FIXTURE_MODULE") || return 1
  cp "$ko" /tmp/signed.ko && cp "$SB/unsigned/$FIXTURE_MODULE.ko" "$ko" || return 1
  hb seal --check --remove-signing-key --json > "$OUT/seal-unsigned.json"; rc=$?
  cp /tmp/signed.ko "$ko"
  echo "seal --check rc=$rc"
  [ "$rc" -ne 0 ] || { echo "seal accepted an unsigned module with Secure Boot on" >&2; return 1; }
}

echo "E2E-BOOT $BOOT start uptime=$(now)s kernel=$(uname -r)"
boot_record
step deb-install deb_install
step sb-state sb_state
step detect hb detect --json
step insmod-unsigned refused "$SB/unsigned/$FIXTURE_MODULE.ko"
step insmod-other-key refused "$SB/other-key/$FIXTURE_MODULE.ko"
step sign-off-refused sign_off_refused
step install sb_install
step modprobe sb_modprobe
step verify hb verify --size "$SIZE" --level 0 --json
step seal-unsigned seal_refuses_unsigned
step seal-check hb seal --check --remove-signing-key --json
step seal hb seal --remove-signing-key --json
cp /var/lib/hpcbake/image-manifest.json "$OUT/image-manifest.json" 2>/dev/null
next poweroff
finish_boot
echo "E2E-BOOT $BOOT done uptime=$(now)s"
echo "$BOOT" > "$OUT/done"
sync
exit 0
