#!/usr/bin/env bash
# Builds, or reuses from the cache, the e2e guest's root disk: a Debian 12 (bookworm) system made
# with debootstrap from this machine's own apt mirror, booting with systemd as init, holding what
# hpcbake needs at run time and what a real GPU/InfiniBand install touches (kmod, rdma-core,
# perftest, DKMS with gcc/make and the headers of the kernel the VM boots, the real waagent).
# The VM has no network device, so everything is installed here, before it boots.
#
# Usage: tests/e2e/image.sh CACHE_DIR KERNEL_RELEASE
#   Prints the image's path as the last line of stdout. The image is a raw ext4 file system
#   (mkfs.ext4 -d), CACHE_DIR/guest-<key>.img, where <key> hashes this script (and so the
#   package list and every boot setting below), the kernel release and the mirror. A cached image
#   is reused as is; the test boots it with snapshot=on, so runs never change it.
#   Beside it: guest-<key>.vmlinux (the same kernel, uncompressed, booted through its PVH entry:
#   no BIOS and no xz decompression under TCG) and guest-<key>.initrd (a busybox initramfs that
#   loads virtio_blk and ext4 and mounts /dev/vda; Debian's initramfs-tools one, with udev and 30
#   MB of modules, takes about 35 s more per boot under TCG). See docs/e2e.md.
#   Building needs root (debootstrap, chroot); reusing does not.
# Environment: HPCBAKE_E2E_MIRROR overrides the mirror read from /etc/apt/sources.list.d/*.sources.
# Exit codes: 0 ok, 1 build failed, 77 cannot build here (not root, debootstrap missing).
set -euo pipefail

CACHE=$(realpath -m "${1:?usage: image.sh CACHE_DIR KERNEL_RELEASE}")
K=${2:?usage: image.sh CACHE_DIR KERNEL_RELEASE}
SELF=$(readlink -f "$0")

# The guest's packages. Runtime libraries are those `ldd build/src/hpcbake` names (libcurl4,
# libarchive13, libyaml-cpp0.7, libssl3, libfmt9, libkmod2; the rest are in minbase). The VM is
# offline, so every package the e2e size's plan installs from Debian (debian-12's rdma_packages,
# build_packages and gpu_build_packages) is here already and `apt-get install` in the guest finds
# nothing to download; initramfs-tools is there for the plan's update-initramfs, as on any VM.
GUEST_PACKAGES=(
  systemd systemd-sysv udev procps busybox
  libcurl4 libarchive13 libyaml-cpp0.7 libssl3 libfmt9 libkmod2
  kmod iproute2 rdma-core ibverbs-utils ibverbs-providers infiniband-diags perftest
  dkms build-essential "linux-headers-$K" pkg-config libglvnd-dev initramfs-tools
  waagent
  # Secure Boot (secure_boot.py): mokutil reads shim's variables, keyctl the kernel's keyrings
  mokutil keyutils
  # MPI over RDMA (guest.sh step mpi, docs/e2e.md): Debian's Open MPI (built with UCX: libopenmpi3
  # depends on libucx0), mpicc for the ping-pong, UCX's own tools. What the hpc profile's Debian
  # variant of the openmpi component names, so its packages step finds them installed, offline.
  openmpi-bin libopenmpi-dev libucx0 ucx-utils
  # every userspace component's module is a modulefile (the plan's packages:userspace-base)
  environment-modules
)
# Kernel modules copied from the host's package of the same kernel (with their dependencies):
# the guest does not install linux-image (400 MB and an initramfs build), it boots the host's.
# efivarfs: systemd mounts /sys/firmware/efi/efivars with it on a UEFI boot (secure_boot.py).
# sunrpc: the hpc profile's sunrpc_tcp_settings.service loads it (as on Azure's images) to set its sysctl.
GUEST_MODULES=(rdma_rxe crc32_generic veth ib_uverbs rdma_ucm ib_umad ib_ipoib efivarfs sunrpc)

mirror() {
  if [ -n "${HPCBAKE_E2E_MIRROR:-}" ]; then echo "$HPCBAKE_E2E_MIRROR"; return; fi
  local m
  m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
  echo "$m"
}
MIRROR=$(mirror)
[ -n "$MIRROR" ] || { echo "image.sh: no apt mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list (set HPCBAKE_E2E_MIRROR)" >&2; exit 1; }

KEY=$( { cat "$SELF"; echo "$K $MIRROR"; } | sha256sum | cut -c1-16)
IMG=$CACHE/guest-$KEY.img
mkdir -p "$CACHE"
if [ -f "$IMG" ] && [ -f "${IMG%.img}.vmlinux" ] && [ -f "${IMG%.img}.initrd" ]; then
  echo "image.sh: reusing $IMG"
  echo "$IMG"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then echo "image.sh: building the guest image needs root (debootstrap, chroot); no cached $IMG" >&2; exit 77; fi
command -v debootstrap >/dev/null || { echo "image.sh: debootstrap is missing (scripts/deps installs it)" >&2; exit 77; }
[ -d "/lib/modules/$K/kernel" ] || { echo "image.sh: /lib/modules/$K/kernel missing: install linux-image-$K (scripts/deps: linux-image-amd64)" >&2; exit 1; }

T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 ))s"; }
R=$CACHE/rootfs-$KEY
umount_all() {
  for m in "$R/var/cache/apt/archives" "$R/dev/pts" "$R/dev" "$R/sys" "$R/proc"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m" || true
  done
}
cleanup() { umount_all; rm -rf "$R"; }
trap cleanup EXIT
rm -rf "$R"

# ---- 1. base system: minbase, from the mirror the host's apt uses --------------------------------
# Downloaded .debs are kept in the cache, so a rebuild after an edit of this script downloads nothing.
mkdir -p "$CACHE/debs"
echo "image.sh: debootstrap bookworm from $MIRROR ($(el))"
debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include=apt-utils bookworm "$R" "$MIRROR" \
  > "$CACHE/debootstrap.log" 2>&1 || { tail -30 "$CACHE/debootstrap.log" >&2; echo "image.sh: debootstrap failed (log: $CACHE/debootstrap.log)" >&2; exit 1; }

# ---- 2. everything else through apt, with the host's own sources (bookworm, -updates, -security):
# the headers of the booted kernel come from bookworm-security, which debootstrap cannot use.
echo "image.sh: apt-get install in the guest root ($(el))"
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
  [ -s "$f" ] && cp "$f" "$R$f"
done
if [ -n "${HPCBAKE_E2E_MIRROR:-}" ]; then
  printf 'deb %s bookworm main\n' "$HPCBAKE_E2E_MIRROR" > "$R/etc/apt/sources.list"
  rm -f "$R"/etc/apt/sources.list.d/*
fi
printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
  'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' 'force-unsafe-io' \
  > "$R/etc/dpkg/dpkg.cfg.d/01-hpcbake-e2e"
printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
mount -t proc proc "$R/proc"; mount -t sysfs sysfs "$R/sys"; mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
mkdir -p "$CACHE/apt-archives/partial"; mount --bind "$CACHE/apt-archives" "$R/var/cache/apt/archives"
export DEBIAN_FRONTEND=noninteractive
chroot "$R" apt-get -q update > "$CACHE/apt.log" 2>&1 &&
chroot "$R" apt-get -q -y -o APT::Install-Recommends=0 -o Dpkg::Options::=--force-confold \
  install "${GUEST_PACKAGES[@]}" >> "$CACHE/apt.log" 2>&1 &&
chroot "$R" apt-get -q -y -o Dpkg::Options::=--force-confold upgrade >> "$CACHE/apt.log" 2>&1 \
  || { tail -30 "$CACHE/apt.log" >&2; echo "image.sh: apt-get in the guest root failed (log: $CACHE/apt.log)" >&2; exit 1; }
chroot "$R" dpkg-query -W -f='${Package} ${Version}\n' > "$CACHE/guest-$KEY.packages"
umount_all
rm -f "$R/usr/sbin/policy-rc.d"
# The excludes only kept the image small; what is installed later (hpcbake's .deb) lands whole.
rm -f "$R/etc/dpkg/dpkg.cfg.d/01-hpcbake-e2e"
# No package lists, as in Ubuntu's cloud images (livecd-rootfs builds them with /var/lib/apt
# blank): `hpcbake install` refreshes the index before it installs anything, here only the
# stand-in repository answers (the VM is offline), and every dependency of its packages is
# installed already. Kept, Debian's lists (about 85 MB) were parsed again by each of the bake's
# apt transactions under TCG (docs/benchmarks.md, "The QEMU bake, fourth look").
find "$R/var/lib/apt/lists" -maxdepth 1 -type f ! -name lock -delete
rm -f "$R"/var/cache/apt/*.bin
rm -rf "$R"/var/log/*.log "$R"/var/log/apt/*

# ---- 3. the kernel: the host's build of K, its modules the test needs, its config --------------
echo "image.sh: kernel modules of $K ($(el))"
for m in "${GUEST_MODULES[@]}"; do modprobe -S "$K" --show-depends "$m"; done | awk '/^insmod/{print $2}' | sort -u |
while read -r f; do mkdir -p "$R$(dirname "$f")"; cp "$f" "$R$(dirname "$f")/"; done
cp /lib/modules/"$K"/modules.order /lib/modules/"$K"/modules.builtin* "$R/lib/modules/$K/"
depmod -b "$R" "$K"
# /boot as a real install has it, so `hpcbake detect` finds the installed (and next-boot) kernel.
for f in vmlinuz config System.map; do [ -f "/boot/$f-$K" ] && cp "/boot/$f-$K" "$R/boot/"; done
# ... with Debian's initramfs for it, which the plan's `update-initramfs -u` rebuilds in the guest
# (the fast boot mode boots the busybox one below; the stock mode boots the host's).
mount -t proc proc "$R/proc"
chroot "$R" mkinitramfs -o "/boot/initrd.img-$K" "$K" > "$CACHE/mkinitramfs.log" 2>&1 ||
  { umount "$R/proc"; tail -30 "$CACHE/mkinitramfs.log" >&2; echo "image.sh: mkinitramfs in the guest root failed (log: $CACHE/mkinitramfs.log)" >&2; exit 1; }
umount "$R/proc"

# ---- 3b. boot files: the kernel uncompressed (PVH entry), a minimal initramfs ---------------
# The bzImage's payload is one xz stream: the ELF vmlinux, which QEMU loads directly (CONFIG_PVH).
python3 - "/boot/vmlinuz-$K" "$CACHE/guest-$KEY.vmlinux" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\xfd7zXZ\x00")
if at < 0:
    sys.exit(f"{sys.argv[1]}: no xz payload (not a Debian amd64 bzImage?)")
elf = lzma.LZMADecompressor().decompress(data[at:])
if elf[:4] != b"\x7fELF":
    sys.exit(f"{sys.argv[1]}: the xz payload is not an ELF vmlinux")
open(sys.argv[2], "wb").write(elf)
PY
I=$CACHE/initrd-$KEY
rm -rf "$I"; mkdir -p "$I"/{bin,dev,proc,sys,root,mods,lib64,lib/x86_64-linux-gnu}
cp -L "$R/bin/busybox" "$I/bin/"
for l in $(chroot "$R" ldd /bin/busybox | awk '$3 ~ /^\//{print $3} $1 ~ /^\/lib64/{print $1}'); do cp -L "$R$l" "$I$l"; done
for m in virtio_pci virtio_blk crc32c_generic ext4; do modprobe -S "$K" --show-depends "$m"; done |
  awk '/^insmod/{print $2}' | grep -v crc32c-intel | awk '!seen[$0]++' |
  while read -r f; do cp "$f" "$I/mods/"; basename "$f" >> "$I/mods/order"; done
cat > "$I/init" <<'EOF'
#!/bin/busybox sh
# The e2e guest's initramfs: load the root disk's drivers, mount it, hand over to systemd.
B=/bin/busybox
$B mount -t proc proc /proc; $B mount -t sysfs sysfs /sys; $B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /mods/order); do $B insmod "/mods/$m" || echo "initrd: insmod $m failed"; done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do $B sleep 0.05; i=$((i + 1)); done
$B mount -t ext4 -o rw /dev/vda /root || { echo "E2E-INITRD: cannot mount /dev/vda"; $B poweroff -f; }
$B umount /proc /sys; $B mount --move /dev /root/dev
exec $B switch_root /root /sbin/init
EOF
chmod +x "$I/init"
(cd "$I" && find . | cpio -o -H newc --quiet) > "$CACHE/guest-$KEY.initrd"
rm -rf "$I"

# ---- 4. boot settings: reach multi-user.target fast under TCG, with no network ------------------
echo "image.sh: boot settings ($(el))"
echo hpcbake-e2e > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 hpcbake-e2e\n' > "$R/etc/hosts"
echo "$KEY$KEY" > "$R/etc/machine-id"          # not a first boot: no systemd-firstboot prompt
cat > "$R/etc/fstab" <<'EOF'
# The root disk (booted with snapshot=on) and the test's data disk (hpcbake, bundle, results).
LABEL=hpcbake-e2e-root  /     ext4  rw,noatime  0 0
LABEL=hpcbake-e2e-data  /e2e  ext4  rw,noatime,nofail,x-systemd.device-timeout=30s  0 0
EOF
mkdir -p "$R/e2e" "$R/etc/systemd/journald.conf.d" "$R/etc/systemd/system.conf.d"
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n' > "$R/etc/systemd/journald.conf.d/e2e.conf"
printf '[Manager]\nDefaultTimeoutStartSec=120s\nDefaultTimeoutStopSec=20s\n' > "$R/etc/systemd/system.conf.d/e2e.conf"
# Timers and services that only cost time in a throwaway VM with no network and no console login.
MASK=(getty.target systemd-firstboot.service apt-daily.timer apt-daily-upgrade.timer
      dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer
      systemd-networkd-wait-online.service systemd-timesyncd.service
      dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount
      proc-sys-fs-binfmt_misc.automount systemd-binfmt.service systemd-update-utmp.service
      systemd-update-utmp-runlevel.service modprobe@dm_mod.service modprobe@efi_pstore.service
      modprobe@loop.service modprobe@fuse.service systemd-pstore.service)
for u in "${MASK[@]}"; do ln -sf /dev/null "$R/etc/systemd/system/$u"; done
# waagent stays installed and enabled units stay as the package set them, except its service:
# with no network it would retry the wireserver forever and spend CPU the test needs. `hpcbake
# install` restarting it (plan step `waagent`) still works on a disabled unit.
chroot "$R" systemctl disable walinuxagent.service >/dev/null 2>&1 || true

# The test's entry point: runs /e2e/guest/guest.sh from the data disk on every boot, after
# multi-user.target (so after any one-shot unit of the boot, such as hpcbake's resume unit), then
# reboots or powers off as the script asked. The script lives on the data disk, so editing the
# test never rebuilds this image.
cat > "$R/usr/local/sbin/hpcbake-e2e-boot" <<'EOF'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# `hpcbake install --reboot=auto` queues the reboot itself; systemd then stops this unit with
# SIGTERM while guest.sh still writes the step's record and the boot's logs. Ignored here (and so
# in guest.sh), the shutdown waits for them (up to DefaultTimeoutStopSec, 20 s, then SIGKILL).
trap '' TERM
next=/run/hpcbake-e2e-next
echo poweroff > $next
if [ -x /e2e/guest/guest.sh ]; then
  /e2e/guest/guest.sh; rc=$?
  echo "E2E: guest.sh exited $rc"
else
  echo "E2E: /e2e/guest/guest.sh missing: is the data disk attached as /dev/vdb?"; ls -la /e2e /dev/vd* 2>&1
fi
sync
action=$(cat $next)
echo "E2E: next: $action"
systemctl --no-block "$action"
EOF
chmod +x "$R/usr/local/sbin/hpcbake-e2e-boot"
# Soft-RoCE comes up early in every boot, as a real HCA's port would (the kernel driver probes it
# before any service runs), so hpcbake's own units (its resume unit) find rxe0 ready.
cat > "$R/etc/systemd/system/hpcbake-e2e-softroce.service" <<'EOF'
[Unit]
Description=hpcbake e2e: soft-RoCE (rdma_rxe on a veth pair) from the data disk
DefaultDependencies=no
RequiresMountsFor=/e2e
After=systemd-udevd.service
Before=sysinit.target
ConditionPathExists=/e2e/guest/softroce.sh

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/e2e/guest/softroce.sh
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=sysinit.target
EOF
chroot "$R" systemctl enable hpcbake-e2e-softroce.service >/dev/null 2>&1
cat > "$R/etc/systemd/system/hpcbake-e2e.service" <<'EOF'
[Unit]
Description=hpcbake e2e test driver (from the data disk)
After=multi-user.target
RequiresMountsFor=/e2e

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/hpcbake-e2e-boot
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
chroot "$R" systemctl enable hpcbake-e2e.service >/dev/null 2>&1

# ---- 5. the disk image: ext4 from the directory, no loop mount ----------------------------------
echo "image.sh: mkfs.ext4 ($(el))"
MB=$(( $(du -sm "$R" | cut -f1) + 1024 ))   # room for DKMS builds and what install writes
mkfs.ext4 -q -F -L hpcbake-e2e-root -E lazy_itable_init=1 -d "$R" "$IMG.tmp" "${MB}M"
mv "$IMG.tmp" "$IMG"
# Older images (other keys) are dead weight.
find "$CACHE" -maxdepth 1 -name 'guest-*' ! -name "guest-$KEY.*" -delete
echo "image.sh: built $IMG ($(du -h "$IMG" | cut -f1) allocated, ${MB}M apparent) in $(el)"
echo "$IMG"
