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
# mkfs.ext4 -d keeps the host's owners: when the host side ran as a user, the data disk's files
# are that uid's, and hpcbake (root here) refuses recipes and manifests others could change
# (docs/security.md). They are root's on a real machine; make them so here.
{ chown -R 0:0 "$E2E/share" "$E2E/bundle" && chmod -R go-w "$E2E/share" "$E2E/bundle" &&
  chown 0:0 "$E2E" && chmod go-w "$E2E"; } ||
  { mkdir -p "$OUT" && echo "cannot make the data disk's manifests and bundle root's (hpcbake refuses them otherwise)" >> "$OUT/error"; }
# hpcbake as its .deb installs it (step deb-install): /usr/bin/hpcbake, its drivers data in
# /usr/share/hpcbake. The manifests come from the data disk: the project's, plus the test size and
# the fixture driver's component (pinned to this run's .run). Passed as --manifests, not through
# the environment, so the resume unit install writes (which repeats install's global flags) sees them.
H=/usr/bin/hpcbake
M=$E2E/share/manifests
hb() { "$H" --no-imds --manifests "$M" "$@"; }
# Written by the host: SIZE, BUNDLE, PREBUILT (a prebuilt-modules file, or empty), FIXTURE_NAME,
# FIXTURE_MODULE, DRIVER_VERSION (the NVIDIA driver stand-in's), BREAK (a fault to inject),
# HOST_VERSION (what the host's build says to --version, up to " from DIR)").
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

# `together NAME...` runs steps at once (each a `step` with its own record) and waits for them all:
# read-only checks that need nothing from each other. Under TCG a step is mostly CPU; the guest
# has two.
together() {
  local pids=() spec
  for spec in "$@"; do
    # shellcheck disable=SC2086 # each spec is "NAME CMD ARGS...", split on purpose
    step $spec &
    pids+=($!)
  done
  wait "${pids[@]}"
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
    timeout -s KILL 120 ib_write_bw -d rxe0 -x $g -n 1000 -s 65536 -F --report_gbits > /tmp/bw-server.log 2>&1 &
    srv=$!; sleep 1
    timeout -s KILL 120 ib_write_bw -d rxe0 -x $g -n 1000 -s 65536 -F --report_gbits 127.0.0.1; rc=$?
    wait $srv; src=$?
    echo "gid_index=$g client_rc=$rc server_rc=$src"
    [ $rc = 0 ] && [ $src = 0 ] && return 0
    cat /tmp/bw-server.log >&2
  done
  return 1
}

deb_install() {   # the .deb made by CPack on the host installs into this clean Debian 12 root
  local deb v
  deb=$(ls "$E2E"/pkg/hpcbake_*.deb) || return 1
  dpkg -i "$deb" || return 1
  dpkg-query -W -f='package=${Package} ${Version} ${Status}\n' hpcbake
  v=$("$H" --version) || { echo "$H --version failed" >&2; return 1; }
  echo "version=$v"
  # The same version, commit and manifest digest; the manifest directory differs (" from DIR)").
  [ "${v%% from *}" = "$HOST_VERSION" ] || { echo "$H --version says '$v'; the host's build says '$HOST_VERSION'" >&2; return 1; }
  local f
  for f in /usr/share/hpcbake/drivers/dkms-module.yaml /usr/lib/systemd/system/hpcbake-resume.service \
           /usr/share/man/man1/hpcbake.1.gz /usr/share/bash-completion/completions/hpcbake; do
    [ -e "$f" ] || { echo "the package did not install $f" >&2; return 1; }
    echo "installed $f"
  done
}

install_first_boot() {   # install from the bundle; it builds the driver, then queues the reboot itself
  local rc
  # PREBUILT (when the host made one): the fixture driver built once on the host for this kernel.
  # --ib-seconds 2: soft-RoCE under TCG moves ~0.3 Gb/s, so the loopback always runs to its time
  # limit; 2 s measures the same rate as the default 10 (run_vm.py test_10 checks the limit held).
  # --hardware-checks deferred: the guest bakes for a size it is not (it has no GPU), as a bake on a
  # general-purpose VM does; the sealed image's first boot (boot 3) runs the hardware checks.
  hb install --bundle "$BUNDLE" ${PREBUILT:+--prebuilt "$PREBUILT"} --size "$SIZE" --profile "${PROFILE:-default}" \
    --yes --reboot=auto --hardware-checks deferred \
    --verify-level 2 --ib-device rxe0 --ib-seconds 2
  rc=$?
  echo "install_rc=$rc"
  cp /var/lib/hpcbake/state.json "$OUT/state-boot-1.json" || echo "install left no journal" >&2
  cp /etc/systemd/system/hpcbake-resume.service "$OUT/resume-unit.service" || echo "install wrote no resume unit" >&2
  cp /etc/systemd/system/hpcbake-resume.service.d/50-hpcbake-install.conf "$OUT/resume-unit-dropin.conf" ||
    echo "install wrote no resume drop-in" >&2
  cp /var/lib/hpcbake/plan.json "$OUT/plan-boot-1.json" || echo "install stored no plan" >&2
  systemctl list-jobs --no-legend | awk '{print "job=" $2 "/" $3}'
  if [ "${BREAK:-}" = resume ]; then   # fault injection: the resume unit left disabled
    echo "BREAK=resume: disabling hpcbake-resume.service" >&2
    systemctl disable hpcbake-resume.service >&2
  fi
  # 7: a reboot is needed, and with --reboot=auto install has asked systemd for it.
  [ "$rc" -eq 7 ] || { echo "install exited $rc; expected 7 (reboot required, reboot queued)" >&2; return 1; }
  systemctl list-jobs --no-legend | grep -q 'reboot.target' ||
    { echo "install exited 7 but no reboot.target job is queued" >&2; return 1; }
}

resume_ran() {    # boot 2: install's resume unit ran in this boot, completed the install, removed itself
  local result status
  systemctl show hpcbake-resume.service -p LoadState -p ActiveState -p Result -p ExecMainStatus
  journalctl -b -u hpcbake-resume.service --no-pager -o short-monotonic > "$OUT/resume-unit.log" 2>&1
  cp /var/lib/hpcbake/state.json "$OUT/state-boot-2.json" || echo "no journal in boot 2" >&2
  grep -q 'hpcbake' "$OUT/resume-unit.log" || {
    echo "the resume unit did not run on this boot: journalctl -u hpcbake-resume.service is empty" \
         "(unit: $(systemctl is-enabled hpcbake-resume.service 2>&1))" >&2; return 1; }
  result=$(systemctl show hpcbake-resume.service -p Result --value)
  status=$(systemctl show hpcbake-resume.service -p ExecMainStatus --value)
  [ "$result" = success ] && [ "$status" = 0 ] ||
    { echo "the resume unit ran but failed: Result=$result ExecMainStatus=$status" >&2; tail -20 "$OUT/resume-unit.log" >&2; return 1; }
  # The unit ran `install --resume`, which continued the stored plan with the first run's options
  # (this install's bundle), read from /var/lib/hpcbake/plan.json, not from its command line.
  systemctl show hpcbake-resume.service -p ExecStart --value > "$OUT/resume-execstart.txt"
  grep -q -- "install --resume" "$OUT/resume-execstart.txt" ||
    { echo "the resume unit did not run 'install --resume': $(cat "$OUT/resume-execstart.txt")" >&2; return 1; }
  grep -q "resuming the stored plan /var/lib/hpcbake/plan.json" "$OUT/resume-unit.log" ||
    { echo "the resumed install did not say it continued the stored plan" >&2; return 1; }
  grep -qF "\"bundle\": \"$BUNDLE\"" /var/lib/hpcbake/plan.json ||
    { echo "the stored plan's options do not name this install's bundle $BUNDLE" >&2; return 1; }
  [ ! -e /etc/systemd/system/hpcbake-resume.service ] && [ ! -e /etc/systemd/system/multi-user.target.wants/hpcbake-resume.service ] &&
    [ ! -e /etc/systemd/system/hpcbake-resume.service.d/50-hpcbake-install.conf ] ||
    { echo "the install completed but its resume unit is still installed" >&2; return 1; }
  cat "$OUT/resume-unit.log"
}

load_module() {   # modprobe the DKMS-installed module and show it is loaded
  modprobe "$FIXTURE_MODULE" || return 1
  echo "path=$(modinfo -n "$FIXTURE_MODULE")"
  echo "vermagic=$(modinfo -F vermagic "$FIXTURE_MODULE")"
  test -d "/sys/module/$FIXTURE_MODULE" || { echo "/sys/module/$FIXTURE_MODULE missing after modprobe" >&2; return 1; }
  echo "/sys/module/$FIXTURE_MODULE exists"
}

nvidia_modprobe() {   # NVIDIA's real module, signed on the host, where DKMS installs it; loading needs a GPU
  local k d
  [ -d "$E2E/nvidia/modules" ] || { echo "NVIDIA's modules are not on the data disk" >&2; return 1; }
  k=$(uname -r); d=/lib/modules/$k/updates/dkms
  # With what it needs from the kernel (drm), which the image leaves out.
  if [ -d "$E2E/nvidia/lib-modules" ]; then cp -r "$E2E/nvidia/lib-modules/." "/lib/modules/$k/" || return 1; fi
  install -m 0644 "$E2E"/nvidia/modules/nvidia-tesla-535*.ko "$d/" && depmod -a "$k" || return 1
  echo "path=$(modinfo -n nvidia-tesla-535)"
  echo "vermagic=$(modinfo -F vermagic nvidia-tesla-535)"
  echo "signer=$(modinfo -F signer nvidia-tesla-535)"
  # The module's own name is "nvidia", as the stand-in driver's is: unload the stand-ins first.
  for m in nvidia_peermem nvidia_drm nvidia_uvm nvidia_modeset nvidia; do rmmod "$m" 2>/dev/null; done
  dmesg -C
  local out rc
  out=$(modprobe nvidia-tesla-535 2>&1); rc=$?
  echo "modprobe rc=$rc: $out"
  dmesg | grep -i -e nvrm -e nvidia | head -20
  [ "$rc" -ne 0 ] || { echo "NVIDIA's module loaded with no GPU" >&2; return 1; }
  if [ -d /sys/module/nvidia ]; then echo "/sys/module/nvidia exists after a failed modprobe" >&2; return 1; fi
  echo "not loaded after modprobe"
}

nvidia_verify() {   # verify --level 0 with NVIDIA's real libraries and no driver loaded: fails, saying why
  local rc
  LD_LIBRARY_PATH=$E2E/nvidia/lib hb verify --size Standard_NC40ads_H100_v5 --level 0 --json > "$OUT/nvidia-verify.json"
  rc=$?
  echo "exit $rc"
  [ "$rc" -eq 6 ]
}

repository_packages() {   # DOCA-OFED's stand-in came through apt from the signed repository on /e2e/repo
  cat /etc/apt/sources.list.d/hpcbake-e2e-standin.sources || return 1
  dpkg-query -W -f='${Package} ${Version} ${Status}\n' doca-ofed hpcbake-e2e-doca-dep || return 1
  echo "postinst: $(cat /var/lib/hpcbake-e2e/doca-postinst)"
  echo "modules-load: $(cat /etc/modules-load.d/hpcbake-e2e-doca.conf)"
  apt-cache policy doca-ofed
}

driver_packages() {   # the NVIDIA driver's stand-ins came through apt from the same repository, built by DKMS
  local m
  dpkg-query -W -f='${Package} ${Version} ${Status}\n' nvidia-open nvidia-dkms-open libnvidia-compute \
    nvidia-persistenced "nvidia-driver-pinning-$DRIVER_VERSION" || return 1
  # DKMS's status (a long shell script, seconds under TCG) beside the rest of the checks.
  local status dpid; status=$(mktemp); dkms status -m nvidia > "$status" 2>&1 & dpid=$!
  apt-mark showhold
  for m in nvidia nvidia-modeset nvidia-uvm nvidia-drm nvidia-peermem; do
    echo "module $m: $(modinfo -n "$m") vermagic=$(modinfo -F vermagic "$m")"   # run_vm.py checks each line
  done
  echo "loaded at boot: $(grep -o '^nvidia_peermem' /proc/modules)"
  echo "nvidia-persistenced: $(systemctl is-enabled nvidia-persistenced.service) $(systemctl is-active nvidia-persistenced.service)"
  echo "libnvidia-ml: $(ldconfig -p | grep -c 'libnvidia-ml.so.1 ') libcuda: $(ldconfig -p | grep -c 'libcuda.so.1 ')"
  wait "$dpid"; cat "$status"; rm -f "$status"
}

seal_image() {   # seal for capture, deprovisioning with the real waagent; the manifest to the host
  # The hardware verdict deferred (verify-deferred, the last verify of this boot): boot 3 gives it.
  hb seal --deprovision --verify deferred --json; local rc=$?
  cp /var/lib/hpcbake/image-manifest.json "$OUT/image-manifest.json" || echo "seal wrote no image manifest" >&2
  return $rc
}

mpi_job() {   # two ranks of Debian's Open MPI over UCX, RDMA on rxe0 only; the evidence in $OUT/mpi
  # Run the way a user's job is: by an ordinary user (no CAP_IPC_LOCK, so the memlock limit binds),
  # from a login shell (runuser -l: PAM's pam_limits applies /etc/security/limits.conf and
  # limits.d, where hpcbake's limits go), mpirun's ranks on this node. run_vm.py asserts on it all.
  local d=$OUT/mpi job=/tmp/mpi-job hw=/sys/class/infiniband/rxe0/ports/1/hw_counters user=e2e-mpi rc
  local tls=rc_verbs,ud_verbs,self dev=rxe0:1   # RDMA verbs (RC, UD) on rxe0's port, self: a rank to itself
  case ${BREAK:-} in   # fault injection: the same job over TCP, or over shared memory (run_vm.py must fail)
    mpi-tcp) tls=tcp,self dev=veth0 ;;
    mpi-shm) tls=sm,self ;;
  esac
  mkdir -p "$d" "$job" || return 1
  id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user" || return 1
  mpicc -O2 -o "$job/pingpong" "$E2E/guest/pingpong.c" || { echo "mpicc failed" >&2; return 1; }
  # mpirun: pml ucx only (btl self: no shared-memory or TCP byte transfer layer beside it); Open
  # MPI's own filter (pml_ucx_tls/devices, defaults rc_verbs,... on mlx*) left open, so UCX_TLS
  # alone decides and a TCP or shared-memory run starts (and fails run_vm.py's assertions).
  # UCX_UD_VERBS_ETH_DGID_CHECK=n: UCX 1.13 (its default y) drops the UD packets soft-RoCE delivers
  # as not addressed to its GID; the UD wire-up then times out after 30 s ("UD endpoint ...:
  # unhandled timeout error") though rxe0 counted every packet sent and received (docs/e2e.md).
  cat > "$job/job.sh" <<EOF
#!/bin/sh
echo "limits: memlock=\$(ulimit -l) nofile=\$(ulimit -n) user=\$(id -un)"
export UCX_TLS=$tls UCX_NET_DEVICES=$dev UCX_UD_VERBS_ETH_DGID_CHECK=n UCX_LOG_LEVEL=info
exec timeout -s KILL 240 mpirun -np 2 --allow-run-as-root --mca pml ucx --mca btl self \\
  --mca pml_ucx_tls any --mca pml_ucx_devices any \\
  -x UCX_TLS -x UCX_NET_DEVICES -x UCX_UD_VERBS_ETH_DGID_CHECK -x UCX_LOG_LEVEL \\
  $job/pingpong $job/pingpong.json 500 4 4
EOF
  chmod 755 "$job/job.sh"; chown -R "$user:" "$job"
  printf '{"user":%s,"ucx_tls":%s,"ucx_net_devices":%s}\n' "$(jstr "$user")" "$(jstr "$tls")" "$(jstr "$dev")" > "$d/job.json"
  grep -H . "$hw"/* > "$d/counters-before.txt"
  runuser -l "$user" -c "$job/job.sh" > "$d/mpirun.log" 2>&1; rc=$?
  grep -H . "$hw"/* > "$d/counters-after.txt"
  cp "$job/pingpong.json" "$d/" 2>/dev/null
  rdma link show > "$d/rdma-link.txt" 2>&1
  cat "$d/mpirun.log"
  echo "mpirun_rc=$rc"
  return $rc
}

# The boot check seal enabled (hpcbake-verify-boot.service), in the boot after the seal: what a VM
# made from the image runs at its first boot. START_TASK: the Batch gallery pool's start task
# (examples/batch-pool-gallery.json's commandLine, from the host), run by bash as Batch runs it.
BOOT_UNIT=hpcbake-verify-boot.service
unit_record() {   # $1: suffix; the unit's state, its journal, the node state and the textfile to $OUT
  systemctl show "$BOOT_UNIT" -p ActiveState -p Result -p ExecMainStatus -p ExecMainStartTimestampMonotonic \
    -p ExecMainExitTimestampMonotonic -p NRestarts > "$OUT/boot-unit-$1.txt"
  journalctl -b -u "$BOOT_UNIT" --no-pager -o short-monotonic > "$OUT/boot-unit-$1.log" 2>&1
  cp /var/lib/hpcbake/node-state.json "$OUT/node-state-$1.json" || echo "no node state" >&2
  cp /var/lib/prometheus/node-exporter/hpcbake.prom "$OUT/hpcbake-$1.prom" || echo "no textfile" >&2
  cat "$OUT/boot-unit-$1.txt"
}

start_task() {   # $1: suffix; the start task's exit status on stdout, its output in $OUT
  # The pool's image has hpcbake where the release tarball puts it (/opt/hpcbake); here it is the .deb's.
  mkdir -p /opt/hpcbake/bin && ln -sf /usr/bin/hpcbake /opt/hpcbake/bin/hpcbake || return 1
  /bin/bash -c "$START_TASK" > "$OUT/start-task-$1.out" 2>&1
  echo $?
}

boot_unit_ran() {   # boot 3: the unit ran at this boot, before this service; the start task reads its verdict
  local rc result status
  # A unit that never ran would leave the start task waiting its whole 900 s: say so at once.
  [ "$(systemctl show "$BOOT_UNIT" -p ExecMainStartTimestampMonotonic --value)" != 0 ] ||
    { echo "$BOOT_UNIT did not run at this boot ($(systemctl is-enabled "$BOOT_UNIT" 2>&1))" >&2; unit_record healthy; return 1; }
  echo "start task: $START_TASK"
  rc=$(start_task healthy)
  echo "start task exit $rc"
  unit_record healthy
  cp /var/lib/hpcbake/hardware-verdict.json "$OUT/hardware-verdict.json" || echo "no first-boot hardware verdict" >&2
  result=$(systemctl show "$BOOT_UNIT" -p Result --value)
  status=$(systemctl show "$BOOT_UNIT" -p ExecMainStatus --value)
  [ "$rc" = 0 ] || { echo "the start task failed ($rc) on a healthy node: $(cat "$OUT/start-task-healthy.out")" >&2; return 1; }
  [ "$result" = success ] && [ "$status" = 0 ] ||
    { echo "$BOOT_UNIT: Result=$result ExecMainStatus=$status" >&2; tail -20 "$OUT/boot-unit-healthy.log" >&2; return 1; }
}

boot_unit_fails() {   # $1: gpus (the fakes report one GPU of the size's two) or hca (rxe0 gone)
  local rc result status dropin=/run/systemd/system/$BOOT_UNIT.d
  case $1 in
    gpus)   # the stand-in driver's fake NVML and CUDA read FAKE_GPU_COUNT (tests/fakes/README.md)
      mkdir -p "$dropin" && printf '[Service]\nEnvironment=FAKE_GPU_COUNT=1\n' > "$dropin/50-e2e-gpus.conf" &&
        systemctl daemon-reload || return 1
      # As the image's first boot on hardware with one GPU missing: no verdict yet, so the unit
      # runs the deferred checks again (the boot id is this boot's; everything else is as at boot).
      rm -f /var/lib/hpcbake/hardware-verdict.json
      echo "the fakes now report 1 GPU; the first-boot verdict removed" ;;
    hca)
      rm -rf "$dropin" && systemctl daemon-reload || return 1
      rdma link delete rxe0 || return 1   # soft-RoCE's device, the size's one InfiniBand port
      echo "rxe0 deleted: $(rdma link show 2>&1 | tr '\n' ' ')" ;;
  esac
  systemctl restart "$BOOT_UNIT"; echo "systemctl restart exit $?"
  unit_record "$1"
  cp /var/lib/hpcbake/hardware-verdict.json "$OUT/hardware-verdict-$1.json" || echo "no first-boot hardware verdict" >&2
  rc=$(start_task "$1")
  echo "start task exit $rc"
  result=$(systemctl show "$BOOT_UNIT" -p Result --value)
  status=$(systemctl show "$BOOT_UNIT" -p ExecMainStatus --value)
  [ "$result" = exit-code ] && [ "$status" = 6 ] ||
    { echo "$BOOT_UNIT with rxe0 gone: Result=$result ExecMainStatus=$status, expected exit-code and 6" >&2; return 1; }
  [ "$rc" = 6 ] || { echo "the start task exited $rc on an unhealthy node; expected 6" >&2; return 1; }
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
  # What apt and dpkg did, with dpkg's timestamps: where a bake's package time goes.
  cp /var/log/dpkg.log "$OUT/dpkg-boot-$BOOT.log" 2>/dev/null
  cp /var/log/apt/term.log "$OUT/apt-term-boot-$BOOT.log" 2>/dev/null
  journalctl -b --no-pager -o short-monotonic > "$OUT/journal-boot-$BOOT.txt" 2>&1
  dmesg > "$OUT/dmesg-boot-$BOOT.txt" 2>&1
  sync
}

# ---- the boots ------------------------------------------------------------------------------------
# The Secure Boot test's guest has its own, single boot.
if [ "${MODE:-}" = secure-boot ]; then . "$E2E/guest/secure-boot.sh"; fi
echo "E2E-BOOT $BOOT start uptime=$(now)s kernel=$(uname -r)"
boot_record
case $BOOT in
  1)
    step deb-install deb_install
    together "libraries check_libraries" "detect-initial hb detect --json" "softroce softroce_state" \
      "ibv_devinfo ibv_devinfo -d rxe0 -v" "plan hb plan --size $SIZE --json" "ib_write_bw write_bw"
    # Last in this boot: install queues the reboot (--reboot=auto). systemd stops this unit while
    # the list ends; guest.sh ignores SIGTERM (hpcbake-e2e-boot) so the records still get written.
    step install install_first_boot
    next reboot
    ;;
  2)
    step resume-ran resume_ran
    step modprobe load_module
    together "repository repository_packages" "driver driver_packages" "softroce-after-reboot softroce_state" \
      "verify hb verify --size $SIZE --level 2 --ib-device rxe0 --ib-seconds 2 --json --junit $OUT/verify.junit.xml"
    # Alone, so rxe0's counters move for the MPI job only.
    step mpi mpi_job
    # The bake's own verdict, last before the seal: what is on disk, the hardware deferred.
    step verify-deferred hb verify --hardware-checks deferred --json
    step seal-check hb seal --check --verify deferred --json
    step seal seal_image
    # NVIDIA's real module and libraries, last: they replace the stand-in driver's modules.
    step nvidia-modprobe nvidia_modprobe
    step nvidia-verify nvidia_verify
    next reboot
    ;;
  3)
    step boot-unit boot_unit_ran
    step boot-unit-gpus boot_unit_fails gpus
    step boot-unit-hca boot_unit_fails hca
    next poweroff
    ;;
  *)
    echo "unexpected boot $BOOT: the test plans 3" > "$OUT/error"
    next poweroff
    ;;
esac
finish_boot
echo "E2E-BOOT $BOOT done uptime=$(now)s"
[ "$BOOT" -eq 3 ] && echo "$BOOT" > "$OUT/done"
sync
exit 0
