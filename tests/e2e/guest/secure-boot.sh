# The Secure Boot guest's two boots (tests/e2e/secure_boot.py, docs/secure-boot.md), sourced by
# guest.sh when e2e.conf says MODE=secure-boot: OVMF with Microsoft's keys, Debian's signed shim,
# grub and kernel; hpcbake's signing certificate pre-seeded as a MOK (the firmware's MokList).
# Boot 1 checks the chain and installs a GPU + InfiniBand size whose driver and DOCA-OFED are DKMS
# stand-ins from the signed repository; boot 2 loads every module and seals. e2e.conf adds
# SB_MODULES (every module the bake installs), UNSIGNED_PACKAGE and UNSIGNED_MODULE (the stand-in
# package whose module no one signs).
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
  # The driver and DOCA-OFED need the reboot (their packages build modules nothing loads yet);
  # install queues it (--reboot=auto) and its resume unit finishes in boot 2. Not under timeout(1):
  # it would pass on the SIGTERM of the queued reboot's shutdown, which this unit ignores (install
  # then exited 130). A prompt cannot wait: stdin is /dev/null, and the host's
  # HPCBAKE_E2E_TIMEOUT bounds the run.
  "$H" --no-imds --manifests "$M" install --bundle "$BUNDLE" --size "$SIZE" --yes --reboot=auto \
    --verify-level 1 --ib-device rxe0; rc=$?
  echo "install_rc=$rc"
  cp /var/lib/hpcbake/state.json "$OUT/state-boot-1.json" 2>/dev/null
  [ "$rc" -eq 7 ] || { echo "install exited $rc; expected 7 (reboot required, reboot queued)" >&2; return 1; }
  systemctl list-jobs --no-legend | grep -q 'reboot.target' ||
    { echo "install exited 7 but no reboot.target job is queued" >&2; return 1; }
}

sb_modules() {   # boot 2: every module the bake installed, its signer, and whether the kernel takes it
  local m ko out rc loaded bad=0 t
  echo "loaded at boot: $(grep -o '^nvidia_peermem' /proc/modules)"
  for m in $SB_MODULES; do
    ko=$(modinfo -n "$m" 2>&1) || { echo "module $m: path=none ($ko)"; bad=1; continue; }
    out=$(modprobe "$m" 2>&1); rc=$?
    loaded=no; [ -d "/sys/module/${m//-/_}" ] && loaded=yes
    echo "module $m: path=$ko signer=$(modinfo -F signer "$m" | tr ' ' '_') sig_key=$(modinfo -F sig_key "$m")" \
      "modprobe_rc=$rc loaded=$loaded${out:+ modprobe: $out}"
    [ "$loaded" = yes ] || bad=1
  done
  t=$(cat /proc/sys/kernel/tainted)
  echo "tainted=$t"
  dmesg | grep -i -e 'module verification' -e 'Loading of' -e 'Key was rejected' | tail -5
  [ "$bad" -eq 0 ] || { echo "a module the bake installed did not load" >&2; return 1; }
  # Taint E (8192): an unsigned or unverifiable module was loaded.
  [ $(( t & 8192 )) -eq 0 ] || { echo "the kernel is tainted E (unsigned module)" >&2; return 1; }
}

seal_refuses_unsigned_package() {   # a package's module no one signed: seal refuses it before capturing anything
  local deb ko out rc1 rc2
  deb=$(ls "$E2E/repo/${UNSIGNED_PACKAGE}"_*.deb) || return 1
  dpkg -i "$deb" >&2 || return 1
  echo "package=$(dpkg-query -W -f='${Package} ${Version} ${Status}' "$UNSIGNED_PACKAGE")"
  ko=$(modinfo -n "$UNSIGNED_MODULE") || return 1
  echo "path=$ko"
  echo "signer=$(modinfo -F signer "$UNSIGNED_MODULE")"
  out=$(modprobe "$UNSIGNED_MODULE" 2>&1); echo "modprobe rc=$?: $out"
  hb seal --check --remove-signing-key --json > "$OUT/seal-unsigned-package-check.json"; rc1=$?
  echo "seal --check rc=$rc1"
  hb seal --remove-signing-key --json > "$OUT/seal-unsigned-package-seal.json"; rc2=$?
  echo "seal rc=$rc2"
  [ -e /var/lib/hpcbake/image-manifest.json ] && echo "image-manifest=written" || echo "image-manifest=absent"
  [ -e /var/lib/hpcbake/signing/signing.key ] && echo "signing-key=kept" || echo "signing-key=removed"
  dpkg --purge "$UNSIGNED_PACKAGE" >&2 && depmod -a || return 1
  [ "$rc1" -ne 0 ] && [ "$rc2" -ne 0 ] || { echo "seal accepted a module no one signed with Secure Boot on" >&2; return 1; }
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
case $BOOT in
  1)
    step deb-install deb_install
    step sb-state sb_state
    step detect hb detect --json
    step insmod-unsigned refused "$SB/unsigned/$FIXTURE_MODULE.ko"
    step insmod-other-key refused "$SB/other-key/$FIXTURE_MODULE.ko"
    step sign-off-refused sign_off_refused
    step plan hb plan --size "$SIZE" --json
    # Last in this boot: install queues the reboot (--reboot=auto).
    step install sb_install
    if systemctl list-jobs --no-legend | grep -q 'reboot.target'; then
      next reboot
    else   # nothing to boot into: power off, and say why (secure_boot.py reports it)
      echo "install queued no reboot: $(grep -h -m1 -e '^install_rc=' "$OUT/steps/install.out")," \
        "$(tail -n 3 "$OUT/steps/install.err" | tr '\n' ' ')" > "$OUT/stopped"
      next poweroff
    fi
    ;;
  2)
    step resume-ran resume_ran
    step modules sb_modules
    step seal-check hb seal --check --remove-signing-key --json
    step seal-unsigned seal_refuses_unsigned
    step seal-unsigned-package seal_refuses_unsigned_package
    step seal hb seal --remove-signing-key --json
    cp /var/lib/hpcbake/image-manifest.json "$OUT/image-manifest.json" 2>/dev/null
    echo "$BOOT" > "$OUT/done"
    next poweroff
    ;;
  *)
    echo "unexpected boot $BOOT: the test plans 2" > "$OUT/error"
    next poweroff
    ;;
esac
finish_boot
echo "E2E-BOOT $BOOT done uptime=$(now)s"
sync
exit 0
