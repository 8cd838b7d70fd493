#!/bin/bash
# Runs in the guest early in every boot (hpcbake-e2e-softroce.service, before sysinit.target):
# brings up soft-RoCE, the RDMA device the test uses in place of an Azure HCA. rdma_rxe binds to
# one end of a veth pair inside the guest (the VM has no network device); the "rdma link" does
# not survive a reboot, so every boot does this, as a real HCA's driver would probe at boot.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
set -u
NIC=veth0
log() { echo "E2E-SOFTROCE: $*"; }
ip link show "$NIC" >/dev/null 2>&1 || { modprobe veth && ip link add "$NIC" type veth peer name veth1; } || { log "veth failed"; exit 1; }
ip link set lo up; ip link set veth1 up; ip link set "$NIC" up
ip addr show dev "$NIC" | grep -q 192.0.2.1/24 || ip addr add 192.0.2.1/24 dev "$NIC"
modprobe crc32_generic || { log "modprobe crc32_generic failed"; exit 1; }   # rdma_rxe's ICRC needs the crc32 shash
modprobe rdma_rxe || { log "modprobe rdma_rxe failed"; exit 1; }
modprobe ib_uverbs; modprobe rdma_ucm
rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$NIC" || { log "rdma link add failed"; exit 1; }
for _ in $(seq 50); do
  [ "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" = "4: ACTIVE" ] && break
  sleep 0.2
done
log "rxe0 on $NIC: state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null) rate=$(cat /sys/class/infiniband/rxe0/ports/1/rate 2>/dev/null)"
[ "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" = "4: ACTIVE" ]
