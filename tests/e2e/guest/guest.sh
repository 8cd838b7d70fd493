#!/bin/bash
# The e2e test's driver inside the guest. hpcbake-e2e.service (in the image) runs it on every boot,
# after multi-user.target, from the data disk (/e2e); the host reads /e2e/out back when the VM has
# powered off, and the console carries E2E-* markers as a second copy.
#
# Each boot runs a list of steps (boot1, boot2 below). `step NAME CMD...` runs CMD, keeps its stdout
# and stderr in out/steps/NAME.{out,err} and appends {"step","boot","rc","seconds"} to
# out/steps.jsonl; the host's run_vm.py has one test per step. A failed step does not stop the
# boot's list: every step reports, and the host shows which failed and why.
# `next reboot|poweroff` says what the VM does when the list is done.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
set -u
E2E=/e2e
OUT=$E2E/out
H=$E2E/bin/hpcbake
export HPCBAKE_MANIFESTS=$E2E/share/manifests HPCBAKE_DRIVERS=$E2E/share/drivers
# Written by the host: FIXTURE_RUN, FIXTURE_NAME, FIXTURE_MODULE, BREAK (a fault to inject).
. "$E2E/guest/e2e.conf"
mkdir -p "$OUT/steps"

BOOT=$(( $(cat "$OUT/boot-count" 2>/dev/null || echo 0) + 1 ))
echo "$BOOT" > "$OUT/boot-count"
now() { cut -d' ' -f1 /proc/uptime; }
next() { echo "$1" > /run/hpcbake-e2e-next; }
jstr() { printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

step() {
  local name=$1; shift
  local t0 t1 rc
  t0=$(now)
  echo "E2E-STEP-BEGIN boot=$BOOT $name: $*"
  "$@" > "$OUT/steps/$name.out" 2> "$OUT/steps/$name.err" < /dev/null
  rc=$?
  t1=$(now)
  printf '{"step":%s,"boot":%d,"rc":%d,"seconds":%s,"cmd":%s}\n' "$(jstr "$name")" "$BOOT" "$rc" \
    "$(echo "$t1 - $t0" | awk '{printf "%.2f", $1 - $3}')" "$(jstr "$*")" >> "$OUT/steps.jsonl"
  echo "E2E-STEP-END boot=$BOOT $name rc=$rc"
  if [ "$rc" -ne 0 ]; then tail -n 15 "$OUT/steps/$name.err" | sed "s/^/E2E-STEP-ERR $name: /"; fi
  sync
  return 0
}

# ---- step bodies ----------------------------------------------------------------------------------
check_libraries() {   # every library the host-built binary links is in the image
  ldd "$H" || return 1
  ! ldd "$H" | grep -q 'not found' || { echo "missing libraries: $(ldd "$H" | grep 'not found' | tr '\n' ' ')" >&2; return 1; }
}

softroce_state() {   # the port as sysfs and ibv_devinfo see it; JSON on stdout
  local p=/sys/class/infiniband/rxe0/ports/1
  rdma link show rxe0/1 >&2 || return 1
  printf '{"device":"rxe0","state":%s,"phys_state":%s,"rate":%s,"link_layer":%s,"netdev":%s}\n' \
    "$(jstr "$(cat $p/state)")" "$(jstr "$(cat $p/phys_state)")" "$(jstr "$(cat $p/rate)")" \
    "$(jstr "$(cat $p/link_layer)")" "$(jstr "$(rdma link show rxe0/1 | awk '{for(i=1;i<NF;i++) if ($i=="netdev") print $(i+1)}')")"
  ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || { echo "ibv_devinfo: rxe0 port not PORT_ACTIVE" >&2; return 1; }
}

write_bw() {   # ib_write_bw loopback on rxe0: server and client in this guest; client output on stdout
  local g srv rc src
  for g in 1 0; do   # GID 1: IPv4-mapped (RoCEv2), GID 0: the fe80:: link-local one
    timeout 120 ib_write_bw -d rxe0 -x $g -n 1000 -s 65536 -F --report_gbits > /tmp/bw-server.log 2>&1 &
    srv=$!; sleep 1
    timeout 120 ib_write_bw -d rxe0 -x $g -n 1000 -s 65536 -F --report_gbits 127.0.0.1; rc=$?
    wait $srv; src=$?
    echo "gid_index=$g client_rc=$rc server_rc=$src"
    [ $rc = 0 ] && [ $src = 0 ] && return 0
    cat /tmp/bw-server.log >&2
  done
  return 1
}

load_module() {   # modprobe the DKMS-installed module and show it is loaded
  modprobe "$FIXTURE_MODULE" || return 1
  echo "path=$(modinfo -n "$FIXTURE_MODULE")"
  echo "vermagic=$(modinfo -F vermagic "$FIXTURE_MODULE")"
  test -d "/sys/module/$FIXTURE_MODULE" || { echo "/sys/module/$FIXTURE_MODULE missing after modprobe" >&2; return 1; }
  echo "/sys/module/$FIXTURE_MODULE exists"
}

arm_resume() {    # a one-shot unit for the next boot (hpcbake install will bring its own)
  cat > /etc/systemd/system/hpcbake-e2e-resume.service <<'EOF'
[Unit]
Description=hpcbake e2e: one-shot resume after reboot
RequiresMountsFor=/e2e
After=hpcbake-e2e-softroce.service

[Service]
Type=oneshot
ExecStart=/e2e/guest/resume.sh
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable hpcbake-e2e-resume.service || return 1
  if [ "${BREAK:-}" = resume ]; then   # fault injection: what a resume unit left disabled looks like
    echo "BREAK=resume: disabling the resume unit" >&2
    systemctl disable hpcbake-e2e-resume.service
  fi
  systemctl is-enabled hpcbake-e2e-resume.service
  return 0
}

resume_ran() {    # boot 2: the resume unit ran in this boot and succeeded
  local id
  systemctl show hpcbake-e2e-resume.service -p UnitFileState -p ActiveState -p Result -p ExecMainStatus
  [ -f "$OUT/resume.json" ] || { echo "the resume unit did not run on this boot: no $OUT/resume.json (unit: $(systemctl is-enabled hpcbake-e2e-resume.service 2>&1))" >&2; return 1; }
  cat "$OUT/resume.json"
  id=$(cat /proc/sys/kernel/random/boot_id)
  grep -q "\"boot_id\":\"$id\"" "$OUT/resume.json" || { echo "resume.json is from another boot than $id" >&2; return 1; }
  [ "$(systemctl show hpcbake-e2e-resume.service -p Result --value)" = success ] || { echo "the resume unit failed" >&2; return 1; }
}

usec_prop() { systemctl show $1 -p "$2" --value | awk '{printf "%.2f", $1 / 1000000}'; }   # $1: unit, or "" for the manager

boot_record() {   # what this boot was, for the host: kernel, boot id, when systemd and multi-user.target began
  # (systemd-analyze cannot say yet: this unit is part of the boot it would time)
  printf '{"boot":%d,"boot_id":%s,"kernel":%s,"uptime_at_driver_s":%s,"userspace_at_s":%s,"multi_user_at_s":%s,"failed_units":%s}\n' \
    "$BOOT" "$(jstr "$(cat /proc/sys/kernel/random/boot_id)")" "$(jstr "$(uname -r)")" "$(now)" \
    "$(usec_prop "" UserspaceTimestampMonotonic)" \
    "$(usec_prop multi-user.target ActiveEnterTimestampMonotonic)" \
    "$(jstr "$(systemctl --failed --no-legend --plain | awk '{print $1}' | tr '\n' ' ')")" > "$OUT/boot-$BOOT.json"
}

finish_boot() {
  systemd-analyze blame > "$OUT/boot-$BOOT-blame.txt" 2>&1
  journalctl -b --no-pager -o short-monotonic > "$OUT/journal-boot-$BOOT.txt" 2>&1
  dmesg > "$OUT/dmesg-boot-$BOOT.txt" 2>&1
  sync
}

# ---- the boots ------------------------------------------------------------------------------------
echo "E2E-BOOT $BOOT start uptime=$(now)s kernel=$(uname -r)"
boot_record
case $BOOT in
  1)
    step libraries check_libraries
    step detect-initial "$H" --no-imds detect --json
    step softroce softroce_state
    step ibv_devinfo ibv_devinfo -d rxe0 -v
    step detect "$H" --no-imds detect --json
    step ib_write_bw write_bw
    step module-install "$H" module install "$FIXTURE_RUN" --subdir kernel --name "$FIXTURE_NAME" --version 1.0 \
      --module "$FIXTURE_MODULE" --kernel "$(uname -r)" --sign off
    step modprobe load_module
    step resume-arm arm_resume
    next reboot
    ;;
  2)
    step resume-ran resume_ran
    step modprobe-after-reboot load_module
    step softroce-after-reboot softroce_state
    next poweroff
    ;;
  *)
    echo "unexpected boot $BOOT: the test plans 2" > "$OUT/error"
    next poweroff
    ;;
esac
finish_boot
echo "E2E-BOOT $BOOT done uptime=$(now)s"
[ "$BOOT" -eq 2 ] && echo "$BOOT" > "$OUT/done"
sync
exit 0
