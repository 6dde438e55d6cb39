#!/usr/bin/env bash
# Interop test: uroce against the Linux kernel's Soft-RoCE (rdma_rxe) and rdma-core's
# ibv_rc_pingpong, running in a qemu VM (Debian 12 kernel, built by build-vm-image.sh).
#
# usage: rxe_interop_test.sh UROCE_BINARY OUT_DIR
#
# Layout: a network namespace of its own holds a bridge (10.123.0.1/24, where uroce binds) and
# a tap device for the VM (10.123.0.2, rxe0 on its eth0). Nothing routes out of the namespace.
# Cases, both directions, data checked with --chk:
#   uroce_server: `uroce ping` serves, ibv_rc_pingpong -g 1 in the VM is the client
#   rxe_server:   ibv_rc_pingpong -g 1 serves in the VM, `uroce ping` is the client
# Every packet is captured twice (uroce's own UROCE_PCAP, tcpdump on the tap) and both captures
# must pass `uroce pcap check`; the VM's rxe must have dropped nothing (no bad-ICRC reports, its
# receive counter matching what uroce sent).
# Everything (logs, console, captures) stays in OUT_DIR; the VM and the namespace are removed
# on exit, whatever happens. Every wait is bounded.
set -euo pipefail

uroce=$(realpath "${1:?usage: rxe_interop_test.sh UROCE_BINARY OUT_DIR}")
out=${2:?usage: rxe_interop_test.sh UROCE_BINARY OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
iters=${UROCE_INTEROP_ITERS:-20}
boot_timeout=${UROCE_INTEROP_BOOT_TIMEOUT:-180}

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/harness.log
exec > >(tee -a "$log") 2>&1

note() { printf '[interop %3ds] %s\n' "$SECONDS" "$*"; }
fail() {
  note "FAIL: $*"
  note "logs and captures are in $out"
  exit 1
}

# ---- prerequisites: stated, not guessed ----
((EUID == 0)) || fail "needs root (network namespace, tap device, qemu)"
for tool in qemu-system-x86_64 tcpdump ip python3 cpio; do
  command -v "$tool" >/dev/null 2>&1 || fail "missing '$tool' (scripts/install-deps installs it)"
done
[[ -c /dev/net/tun ]] || fail "no /dev/net/tun: cannot create the VM's tap device"
[[ -x $uroce ]] || fail "no uroce binary at $uroce"

note "VM image (cached under ${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop})"
image=$("$here/build-vm-image.sh" 2>"$out/build-vm-image.log" | tail -1) ||
  { cat "$out/build-vm-image.log"; fail "building the VM image failed"; }
read -r kernel initrd <<<"$image"

ns=uroce-ix-$$
host_ip=10.123.0.1
vm_ip=10.123.0.2
sock=$out/console.sock
console_log=$out/console.log
qemu_pid=
tcpdump_pid=
uroce_pid=

cleanup() {
  local rc=$?
  set +e
  [[ -n $uroce_pid ]] && kill "$uroce_pid" 2>/dev/null
  [[ -n $tcpdump_pid ]] && kill -INT "$tcpdump_pid" 2>/dev/null && wait "$tcpdump_pid" 2>/dev/null
  [[ -z $qemu_pid && -f $out/qemu.pid ]] && qemu_pid=$(cat "$out/qemu.pid")
  if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid"
    for _ in $(seq 50); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$qemu_pid" 2>/dev/null
  fi
  ip netns del "$ns" 2>/dev/null
  if ((rc != 0)); then
    note "exit $rc; logs and captures are in $out"
    [[ -f $console_log ]] && { note "last console lines:"; tail -n 15 "$console_log"; }
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- network: namespace, bridge with uroce's address, tap for the VM ----
note "namespace $ns: bridge br0 $host_ip/24, tap0"
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" addr add "$host_ip/24" dev br0
ip -n "$ns" tuntap add tap0 mode tap
ip -n "$ns" link set tap0 master br0
ip -n "$ns" link set tap0 up
ip -n "$ns" link set br0 up
inns() { ip netns exec "$ns" "$@"; }

# ---- VM ----
note "booting the VM (qemu tcg, rxe0 on eth0 $vm_ip)"
# Background processes are started with `ip netns exec` directly (not through a shell function)
# so that $! is their own pid, which the cleanup kills.
ip netns exec "$ns" qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 1 -nodefaults -no-user-config \
  -display none -no-reboot \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet panic=-1 uroce_ip=$vm_ip/24" \
  -chardev "socket,id=con,path=$sock,server=on,wait=off,logfile=$console_log" \
  -serial chardev:con \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:12:30:02 -pidfile "$out/qemu.pid" \
  >"$out/qemu.log" 2>&1 &
qemu_pid=$!
if ! python3 "$here/vm_console.py" wait-ready "$console_log" "$boot_timeout"; then
  kill -0 "$qemu_pid" 2>/dev/null || { note "qemu exited:"; cat "$out/qemu.log"; }
  fail "the VM did not boot within ${boot_timeout}s"
fi
note "VM ready"
vm() { # vm TIMEOUT 'command' -> output on stdout, exit status of the command
  python3 "$here/vm_console.py" run "$sock" "$1" "$2"
}
vm 60 'ibv_devinfo -d rxe0 -v; ibv_devices; rdma link show' >"$out/vm-devinfo.txt" ||
  fail "ibv_devinfo in the VM failed"
grep -q 'PORT_ACTIVE' "$out/vm-devinfo.txt" || fail "rxe0's port is not active"
grep -Eq 'GID\[ *1\]:.*::ffff:10.123.0.2' "$out/vm-devinfo.txt" ||
  fail "rxe0 has no IPv4-mapped GID at index 1 (see vm-devinfo.txt)"
inns "$uroce" devinfo -a "$host_ip" -v >"$out/uroce-devinfo.txt" 2>&1 ||
  fail "uroce devinfo failed (see uroce-devinfo.txt)"

# rxe's per-port counters (hw_counters) as NAME=VALUE lines.
rxe_counters() {
  vm 30 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f=$(cat $f)"; done'
}
counter() { grep "^$1=" "$2" | cut -d= -f2; }

start_tcpdump() {
  # --immediate-mode: without it packets still in the kernel's capture block when tcpdump is
  # stopped are lost. -Z root: write the file without dropping privileges.
  ip netns exec "$ns" tcpdump --immediate-mode -Z root -i tap0 -s 0 -U -w "$out/$1.tap.pcap" udp port 4791 >"$out/$1.tcpdump.log" 2>&1 &
  tcpdump_pid=$!
  # tcpdump prints "listening on tap0" once its capture is open.
  for _ in $(seq 100); do grep -q 'listening on' "$out/$1.tcpdump.log" && return 0; sleep 0.1; done
  fail "tcpdump did not start (see $1.tcpdump.log)"
}
stop_tcpdump() {
  kill -INT "$tcpdump_pid"
  wait "$tcpdump_pid" || true
  tcpdump_pid=
}

# Checks common to both directions: output lines, captures, rxe's counters.
check_case() { # name uroce_log vm_log before_counters after_counters
  local name=$1 ulog=$2 vlog=$3 before=$4 after=$5
  grep -q "^$iters iters in .* usec/iter" "$ulog" || fail "$name: uroce did not report $iters iters"
  grep -q "^$iters iters in .* usec/iter" "$vlog" ||
    fail "$name: ibv_rc_pingpong did not report $iters iters"
  ! grep -q 'invalid data' "$ulog" "$vlog" || fail "$name: data check failed"
  grep -q 'remote address: LID 0x0000, QPN 0x[0-9a-f]\{6\}, PSN 0x[0-9a-f]\{6\}, GID ::ffff:' \
    "$ulog" || fail "$name: uroce did not print the remote address"
  # The tap capture is the wire: every packet, both directions, with its real headers.
  "$uroce" pcap check "$out/$name.tap.pcap" >"$out/$name.tap.pcap.check.txt" 2>&1 ||
    fail "$name: uroce pcap check failed on $name.tap.pcap"
  grep -q ', 0 invalid' "$out/$name.tap.pcap.check.txt" && ! grep -q ', 0 valid' \
    "$out/$name.tap.pcap.check.txt" || fail "$name: the tap capture holds no valid RoCEv2 packet"
  # uroce's own capture: the packets it sent are exactly as on the wire. The ones it received
  # come from a UDP socket, which does not show the sender's IPv4 identification; rxe sets a
  # nonzero one, which the ICRC covers, so those frames cannot be re-verified from uroce's side
  # (the datapath counts them as rx_icrc_unverified) and are checked in the tap capture instead.
  tcpdump -r "$out/$name.uroce.pcap" -w "$out/$name.uroce-sent.pcap" src host "$host_ip" \
    >/dev/null 2>&1 || fail "$name: cannot filter uroce's capture"
  "$uroce" pcap check "$out/$name.uroce-sent.pcap" >"$out/$name.uroce-sent.pcap.check.txt" 2>&1 ||
    fail "$name: uroce pcap check failed on the packets uroce sent ($name.uroce-sent.pcap)"
  # What uroce sent, rxe received: its ICRC check drops bad packets without counting them.
  local sent recv_before recv_after
  sent=$(sed -n 's/^uroce: .*tx_packets=\([0-9]*\).*/\1/p' "$ulog")
  recv_before=$(counter rcvd_pkts "$before")
  recv_after=$(counter rcvd_pkts "$after")
  [[ -n $sent && -n $recv_before && -n $recv_after ]] ||
    fail "$name: missing packet counters (uroce stats or rxe hw_counters)"
  ((recv_after - recv_before == sent)) ||
    fail "$name: uroce sent $sent packets, rxe received $((recv_after - recv_before))"
  vm 30 'dmesg' >"$out/$name.vm-dmesg.txt" || true
  ! grep -qi 'icrc' "$out/$name.vm-dmesg.txt" || fail "$name: rxe reported ICRC errors"
  note "$name: PASS ($sent packets to rxe, all received; captures check clean)"
}

# ---- case 1: uroce ping serves, ibv_rc_pingpong in the VM connects ----
name=uroce_server
note "case $name"
rxe_counters >"$out/$name.counters-before.txt"
start_tcpdump "$name"
ip netns exec "$ns" env UROCE_PCAP="$out/$name.uroce.pcap" "$uroce" ping -a "$host_ip" \
  -n "$iters" -c --timeout 120 --stats >"$out/$name.uroce.log" 2>&1 &
uroce_pid=$!
for _ in $(seq 100); do grep -q 'local address' "$out/$name.uroce.log" && break; sleep 0.1; done
grep -q 'local address' "$out/$name.uroce.log" || fail "$name: uroce ping did not start"
vm 300 "ibv_rc_pingpong -d rxe0 -g 1 -n $iters -c $host_ip" >"$out/$name.vm.log" ||
  fail "$name: ibv_rc_pingpong (client, VM) failed"
wait "$uroce_pid" || { uroce_pid=; fail "$name: uroce ping (server) failed"; }
uroce_pid=
stop_tcpdump
rxe_counters >"$out/$name.counters-after.txt"
check_case "$name" "$out/$name.uroce.log" "$out/$name.vm.log" \
  "$out/$name.counters-before.txt" "$out/$name.counters-after.txt"

# ---- case 2: ibv_rc_pingpong serves in the VM, uroce ping connects ----
name=rxe_server
note "case $name"
rxe_counters >"$out/$name.counters-before.txt"
start_tcpdump "$name"
# 18515 = 0x4853; state 0A = LISTEN in /proc/net/tcp.
vm 60 "rm -f /tmp/srv.log; (ibv_rc_pingpong -d rxe0 -g 1 -n $iters -c >/tmp/srv.log 2>&1; \
echo \"exit=\$?\" >>/tmp/srv.log) & \
n=0; until grep -q ':4853 00000000:0000 0A' /proc/net/tcp; do n=\$((n+1)); \
[ \$n -gt 300 ] && exit 1; sleep 0.1; done" >"$out/$name.vm-start.log" ||
  fail "$name: ibv_rc_pingpong (server, VM) did not start listening"
inns env UROCE_PCAP="$out/$name.uroce.pcap" "$uroce" ping -a "$host_ip" -n "$iters" -c \
  --timeout 120 --stats "$vm_ip" >"$out/$name.uroce.log" 2>&1 ||
  fail "$name: uroce ping (client) failed"
vm 120 'n=0; until grep -q "^exit=" /tmp/srv.log; do n=$((n+1)); [ $n -gt 1000 ] && break; \
sleep 0.1; done; cat /tmp/srv.log' >"$out/$name.vm.log" || true
grep -q '^exit=0' "$out/$name.vm.log" || fail "$name: ibv_rc_pingpong (server, VM) failed"
stop_tcpdump
rxe_counters >"$out/$name.counters-after.txt"
check_case "$name" "$out/$name.uroce.log" "$out/$name.vm.log" \
  "$out/$name.counters-before.txt" "$out/$name.counters-after.txt"

note "PASS: both directions"
