#!/bin/bash
# The guest side of tests/packer/test_packer_qemu.py. The e2e image (tests/e2e/image.sh) runs
# /e2e/guest/guest.sh from the data disk on every boot (hpcbake-e2e.service, after
# multi-user.target); this is that script for the Packer test. It gives the guest what an Azure
# marketplace image has and the e2e image lacks, and nothing hpcbake installs:
#   - a network interface: virtio_net (copied from the host's package of the same kernel, as
#     image.sh copies the modules it needs) on QEMU's user network, the address QEMU's DHCP
#     would give;
#   - sshd with the test's throwaway keys: Debian's openssh-server and its dependencies,
#     installed with dpkg from the data disk in the first boot (dpkg enables ssh.service, so it
#     starts by itself in the next boot), and curl, which the template's package step uses;
# and it reports each boot on the console (PACKER-QEMU lines): the boot id, whether a mark left
# in /tmp in boot 1 is still there (Debian, like Ubuntu, empties /tmp at boot), and what the
# payload directory holds. Then it ends without a reboot or a power-off: Packer drives the VM.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
E=/e2e
PAYLOAD=$(cat $E/guest/payload-dir)
echo list-jobs > /run/hpcbake-e2e-next   # what hpcbake-e2e-boot runs next: nothing that stops the VM
state=/var/lib/hpcbake-packer-qemu
mkdir -p $state
boot=$(( $(cat $state/boots 2>/dev/null || echo 0) + 1 ))
echo "$boot" > $state/boots
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "PACKER-QEMU boot=$boot $*"; }
say "start uptime=$(up) boot_id=$(cat /proc/sys/kernel/random/boot_id) kernel=$(uname -r)"
if [ "$boot" = 1 ]; then
  echo "left in boot 1" > /tmp/hpcbake-packer-qemu-mark
else
  if [ -e /tmp/hpcbake-packer-qemu-mark ]; then say "tmp-mark=kept"; else say "tmp-mark=gone"; fi
fi
# Fault injection (HPCBAKE_PACKER_QEMU_BREAK=payload): the payload is gone in boot 2, as it would
# be under /tmp. The build must then fail.
if [ "$boot" = 2 ] && [ "$(cat $E/guest/break 2>/dev/null)" = payload ]; then
  rm -rf "$PAYLOAD"
  say "break=payload-deleted"
fi
# shellcheck disable=SC2012 # names only, for the console
say "payload=$(ls -A "$PAYLOAD" 2>/dev/null | tr '\n' ' ')"
# hpcbake's resume unit in this boot: how many lines it logged, and how it ended.
say "hpcbake-resume-lines=$(journalctl -b -u hpcbake-resume.service -o cat 2>/dev/null | grep -c .)" \
  "hpcbake-resume=$(systemctl show hpcbake-resume.service -p Result --value 2>/dev/null)/$(systemctl show hpcbake-resume.service -p ExecMainStatus --value 2>/dev/null)"

k=$(uname -r)
if [ ! -e "/lib/modules/$k/kernel/drivers/net/virtio_net.ko" ]; then
  mkdir -p "/lib/modules/$k/kernel/net/core" "/lib/modules/$k/kernel/drivers/net"
  cp $E/net/failover.ko "/lib/modules/$k/kernel/net/core/"
  cp $E/net/net_failover.ko $E/net/virtio_net.ko "/lib/modules/$k/kernel/drivers/net/"
  depmod -a "$k"
fi
modprobe virtio_net || say "modprobe virtio_net failed"
ip link set lo up
ip addr add 10.0.2.15/24 dev eth0 2>/dev/null
ip link set eth0 up
ip route replace default via 10.0.2.2
say "net=$(ip -br addr show eth0 | tr -s ' ')"

if ! command -v sshd >/dev/null; then
  # The host keys are the test's (made on the host), so the postinst generates none under TCG.
  install -d -m 0755 /etc/ssh
  install -m 0600 $E/ssh/ssh_host_*_key /etc/ssh/
  install -m 0644 $E/ssh/ssh_host_*_key.pub /etc/ssh/
  t0=$(up)
  if ! DEBIAN_FRONTEND=noninteractive dpkg -i $E/debs/*.deb > $state/dpkg.log 2>&1; then
    say "dpkg -i failed"
    sed 's/^/PACKER-QEMU dpkg: /' $state/dpkg.log | tail -20
  fi
  say "dpkg-seconds=$(echo "$(up) $t0" | awk '{printf "%.1f", $1 - $2}')"
  install -d -m 0700 /root/.ssh
  install -m 0600 $E/ssh/authorized_keys /root/.ssh/authorized_keys
fi
systemctl start ssh.service
say "sshd=$(systemctl is-active ssh.service) uptime=$(up)"
exit 0
