#!/usr/bin/env bash
# Interop test: uroce against the Linux kernel's Soft-RoCE (rdma_rxe) and rdma-core's
# ibv_rc_pingpong, running in a qemu VM (Debian 12 kernel, built by build-vm-image.sh).
#
# usage: rxe_interop_test.sh UROCE_BINARY OUT_DIR
#
# Layout: a network namespace of its own holds a bridge (10.123.0.1/24, where uroce binds) and
# a tap device for the VM (10.123.0.2, rxe0 on its eth0). Nothing routes out of the namespace.
# Cases, both directions, data checked with --chk, over IPv4 (rxe's IPv4-mapped GID
# ::ffff:a.b.c.d, usually index 1) and IPv6 (fd00:123::/64), several message sizes, and with
# 10% of rxe's data packets dropped by netem in the guest:
#   uroce_server*: `uroce ping` serves, ibv_rc_pingpong -g N in the VM is the client
#   rxe_server*:   ibv_rc_pingpong -g N serves in the VM, `uroce ping` is the client
# Every packet is captured twice (uroce's own UROCE_PCAP, tcpdump on the tap); both captures
# must pass `uroce pcap check` and hold the same packets (same_frames.py); rxe must have
# accepted every packet uroce sent (its rcvd_pkts counts only packets whose ICRC it verified)
# and, without loss, counted no sequence, RNR or retry-exceeded error; uroce must have dropped
# nothing; `uroce devinfo` must show rxe0's port attributes.
# Everything (logs, console, captures) stays in OUT_DIR; the VM and the namespace are removed
# on exit, whatever happens. Every wait is bounded.
# Environment: UROCE_INTEROP_CASES (regex of case names), UROCE_INTEROP_ITERS (exchanges per
# case, default 20), UROCE_INTEROP_BOOT_TIMEOUT (s, default 180), UROCE_INTEROP_CACHE (image
# cache), UROCE_INTEROP_KERNEL (another kernel: tests of the failure paths).
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
kernel=${UROCE_INTEROP_KERNEL:-$kernel}  # tests: a kernel that does not boot

ns=uroce-ix-$$
host_ip=10.123.0.1
vm_ip=10.123.0.2
host_ip6=fd00:123::1
vm_ip6=fd00:123::2
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

# A run killed without its cleanup (SIGKILL, a ctest timeout) leaves its namespace and VM
# behind: remove those of runs whose harness is gone (the namespace is named after its pid).
for stale in $(ip netns list | awk '/^uroce-ix-[0-9]+/ {print $1}'); do
  kill -0 "${stale#uroce-ix-}" 2>/dev/null && continue
  note "removing $stale, left by a run that did not clean up"
  for p in $(ip netns pids "$stale" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$stale" 2>/dev/null || true
done

# ---- network: namespace, bridge with uroce's address, tap for the VM ----
note "namespace $ns: bridge br0 $host_ip/24 $host_ip6/64, tap0"
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" addr add "$host_ip/24" dev br0
ip -n "$ns" addr add "$host_ip6/64" dev br0 nodad
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
  -append "console=ttyS0 quiet panic=-1 uroce_ip=$vm_ip/24 uroce_ip6=$vm_ip6/64" \
  -chardev "socket,id=con,path=$sock,server=on,wait=off,logfile=$console_log" \
  -serial chardev:con \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:12:30:02 -pidfile "$out/qemu.pid" \
  >"$out/qemu.log" 2>&1 &
qemu_pid=$!
if ! python3 "$here/vm_console.py" wait-ready "$console_log" "$boot_timeout" "$qemu_pid"; then
  if ! kill -0 "$qemu_pid" 2>/dev/null; then
    cat "$out/qemu.log"
    fail "qemu exited before the VM was ready (see qemu.log, console.log)"
  fi
  fail "the VM did not boot within ${boot_timeout}s"
fi
note "VM ready"
vm() { # vm TIMEOUT 'command' -> output on stdout, exit status of the command
  python3 "$here/vm_console.py" run "$sock" "$1" "$2"
}
# The GID table fills in the background (address events): wait, bounded, until it holds
# both addresses.
for _ in $(seq 30); do
  vm 60 'ibv_devinfo -d rxe0 -v; ibv_devices; rdma link show' >"$out/vm-devinfo.txt" ||
    fail "ibv_devinfo in the VM failed"
  grep -q "::ffff:$vm_ip, RoCE v2" "$out/vm-devinfo.txt" &&
    grep -q "[[:space:]]$vm_ip6, RoCE v2" "$out/vm-devinfo.txt" && break
  sleep 0.5
done
grep -q 'PORT_ACTIVE' "$out/vm-devinfo.txt" || fail "rxe0's port is not active"
# rxe's GID table: usually index 0 the link-local IPv6 address, 1 the IPv4-mapped one, then
# the global IPv6 address; but the kernel fills it from address events in the background and
# the link-local entry sometimes appears twice, shifting the others. Look the indices up.
gid_index() { # address -> its RoCE v2 GID index in rxe0's table
  sed -n "s/^[[:space:]]*GID\[ *\([0-9]*\)\]:[[:space:]]*$1, RoCE v2.*/\1/p" \
    "$out/vm-devinfo.txt" | head -1
}
vm4_gidx=$(gid_index "::ffff:$vm_ip")
vm6_gidx=$(gid_index "$vm_ip6")
[[ -n $vm4_gidx ]] || fail "rxe0 has no IPv4-mapped GID ::ffff:$vm_ip (see vm-devinfo.txt)"
[[ -n $vm6_gidx ]] || fail "rxe0 has no GID for $vm_ip6 (see vm-devinfo.txt)"
((vm4_gidx == 1)) || note "rxe0's IPv4-mapped GID is at index $vm4_gidx (usually 1)"
inns "$uroce" devinfo -a "$host_ip" -v >"$out/uroce-devinfo.txt" 2>&1 ||
  fail "uroce devinfo failed (see uroce-devinfo.txt)"
# The same port attributes as rxe on a 1500-byte netdev (active MTU 1024), line for line as
# ibv_devinfo -v prints them. (max_msg_sz differs on purpose: rxe's is 8 MiB.)
port_fields='state|max_mtu|active_mtu|sm_lid|port_lid|port_lmc|link_layer|port_cap_flags|'
port_fields+='max_vl_num|pkey_tbl_len|gid_tbl_len|subnet_timeout|active_width|active_speed|phys_state'
grep -E "^[[:space:]]+($port_fields):" "$out/vm-devinfo.txt" | tr -d '\r' >"$out/port-rxe.txt"
grep -E "^[[:space:]]+($port_fields):" "$out/uroce-devinfo.txt" >"$out/port-uroce.txt"
grep -q 'active_mtu:.*1024 (3)' "$out/port-uroce.txt" ||
  fail "uroce devinfo: active MTU is not 1024 at netdev MTU 1500"
diff "$out/port-rxe.txt" "$out/port-uroce.txt" >"$out/port-diff.txt" ||
  { cat "$out/port-diff.txt"; fail "uroce devinfo's port attributes differ from rxe0's"; }

# rxe's per-port counters (hw_counters) as NAME=VALUE lines.
rxe_counters() {
  vm 30 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f=$(cat $f)"; done'
}
counter() { grep "^$1=" "$2" | cut -d= -f2; }
delta() { echo $(($(counter "$1" "$3") - $(counter "$1" "$2"))); }

start_tcpdump() {
  # --immediate-mode: without it packets still in the kernel's capture block when tcpdump is
  # stopped are lost. -B: a 32 MiB capture buffer, so that a burst (a go-back-N
  # retransmission) is not dropped. -Z root: write the file without dropping privileges.
  ip netns exec "$ns" tcpdump --immediate-mode -B 32768 -Z root -i tap0 -s 0 -U \
    -w "$out/$1.tap.pcap" \
    udp port 4791 >"$out/$1.tcpdump.log" 2>&1 &
  tcpdump_pid=$!
  # tcpdump prints "listening on tap0" once its capture is open.
  for _ in $(seq 100); do grep -q 'listening on' "$out/$1.tcpdump.log" && return 0; sleep 0.1; done
  fail "tcpdump did not start (see $1.tcpdump.log)"
}
stop_tcpdump() { # name
  kill -INT "$tcpdump_pid"
  wait "$tcpdump_pid" || true
  tcpdump_pid=
  # The wire capture is the reference: it must be complete.
  grep -q '^0 packets dropped by kernel' "$out/$1.tcpdump.log" ||
    fail "$1: tcpdump lost packets ($(grep 'dropped by kernel' "$out/$1.tcpdump.log"))"
}

# Checks common to both directions: output lines, captures, rxe's counters.
check_case() { # name iters uroce_addr
  local name=$1 n=$2 addr=$3
  local ulog=$out/$name.uroce.log vlog=$out/$name.vm.log
  local before=$out/$name.counters-before.txt after=$out/$name.counters-after.txt
  grep -q "^$n iters in .* usec/iter" "$ulog" || fail "$name: uroce did not report $n iters"
  grep -q "^$n iters in .* usec/iter" "$vlog" ||
    fail "$name: ibv_rc_pingpong did not report $n iters"
  # With --chk the server checks the data: uroce every message in full, rc_pingpong the first
  # byte of each page at the end ("invalid data in page N").
  ! grep -q 'invalid data\|wrong data' "$ulog" "$vlog" || fail "$name: data check failed"
  grep -q "remote address: LID 0x0000, QPN 0x[0-9a-f]\{6\}, PSN 0x[0-9a-f]\{6\}, GID $4\$" \
    "$ulog" || fail "$name: uroce did not print the VM's address $4"
  # The tap capture is the wire: every packet, both directions, with its real headers.
  "$uroce" pcap check "$out/$name.tap.pcap" >"$out/$name.tap.pcap.check.txt" 2>&1 ||
    fail "$name: uroce pcap check failed on $name.tap.pcap"
  grep -q ', 0 invalid' "$out/$name.tap.pcap.check.txt" &&
    ! grep -q ', 0 valid' "$out/$name.tap.pcap.check.txt" ||
    fail "$name: the tap capture holds no valid RoCEv2 packet"
  # uroce's own capture: every packet it sent and received, valid too, and the same packets
  # as on the wire: what rxe sent byte for byte as uroce reconstructed it from its UDP socket
  # (the IPv4 identification recovered from the ICRC), what uroce sent up to the fields the
  # kernel fills in (TTL, checksums, flow label: all masked by the ICRC).
  "$uroce" pcap check "$out/$name.uroce.pcap" >"$out/$name.uroce.pcap.check.txt" 2>&1 ||
    fail "$name: uroce pcap check failed on $name.uroce.pcap"
  local peer=$vm_ip
  [[ $addr == *:* ]] && peer=$vm_ip6
  python3 "$here/same_frames.py" "$out/$name.tap.pcap" "$out/$name.uroce.pcap" "$peer" "$addr" \
    >"$out/$name.same-frames.txt" 2>&1 ||
    { cat "$out/$name.same-frames.txt"; fail "$name: uroce's capture differs from the wire"; }
  # rxe counts a packet in rcvd_pkts only after its ICRC check passed (rxe_recv.c, rxe_rcv:
  # a bad ICRC is logged "bad ICRC from ..." and dropped), so every packet uroce sent must be
  # in it; and the run needed no retry, NAK or duplicate on rxe's side.
  local sent received
  sent=$(sed -n 's/^uroce: .*tx_packets=\([0-9]*\).*/\1/p' "$ulog")
  [[ -n $sent ]] && grep -q '^rcvd_pkts=' "$before" "$after" ||
    fail "$name: missing packet counters (uroce --stats or rxe hw_counters)"
  received=$(delta rcvd_pkts "$before" "$after")
  ((received == sent)) || fail "$name: uroce sent $sent packets, rxe accepted $received"
  if [[ $name == loss_* ]]; then
    # Loss of rxe's data packets: rxe must have recovered (on uroce's NAK of the PSN gap or on
    # its own timeout), and never given up.
    (($(delta retry_exceeded_err "$before" "$after") == 0)) || fail "$name: rxe gave up"
    local lost
    lost=$(vm 30 '/sbin/tc -s qdisc show dev eth0' |
      sed -n '/netem/,/dropped/ s/.*dropped \([0-9]*\).*/\1/p' | head -1)
    note "$name: netem dropped ${lost:-?} of rxe's packets; rxe counters: $(for c in \
      rcvd_seq_err out_of_seq_request duplicate_request completer_retry_err; do
      printf '%s +%s ' "$c" "$(delta "$c" "$before" "$after")"; done)"
    [[ -n $lost ]] && ((lost > 0)) || fail "$name: netem dropped nothing; the case tested no loss"
  else
    # No loss: no PSN gap either way (rcvd_seq_err: uroce NAKed a gap; out_of_seq_request:
    # rxe saw one), no RNR, no error. rxe's retransmit timer may still fire spuriously in a run
    # longer than its timeout (67 ms at timeout 14): rxe arms it on a send only when it is not
    # pending, and its completer pushes it forward only when it exits with requests still
    # outstanding, which never happens when one ACK completes the message (rxe_comp.c: "some
    # timeouts are spurious since we do not reset the timer but kick it down the road or let
    # it expire"). A timer left from an earlier message then fires while a later one waits for
    # its ACK, and rxe retransmits; the longer the round trip (here an emulated NIC), the more
    # often. Between two rxe QPs on one host it is rare (the ACK is immediate). These retries
    # (completer_retry_err) and the duplicates they cause are reported, not failed.
    for c in retry_exceeded_err rcvd_seq_err out_of_seq_request rcvd_rnr_err send_rnr_err \
             send_err; do
      (($(delta "$c" "$before" "$after") == 0)) || fail "$name: rxe counted $c"
    done
    local spurious
    spurious=$(delta completer_retry_err "$before" "$after")
    ((spurious == 0)) || note "$name: rxe's retransmit timer fired $spurious time(s) (spurious)"
  fi
  # uroce dropped nothing it received (a bad ICRC would be a drop).
  grep -q ' rx_drops=0 ' "$ulog" || fail "$name: uroce dropped received packets (see --stats)"
  vm 30 'dmesg' >"$out/$name.vm-dmesg.txt" || true
  ! grep -qi 'icrc' "$out/$name.vm-dmesg.txt" || fail "$name: rxe reported ICRC errors"
  note "$name: PASS ($sent packets to rxe, all accepted; captures clean and equal to the wire)"
}

# uroce ping serves, ibv_rc_pingpong in the VM connects.
case_uroce_server() { # name uroce_addr vm_gid_index vm_gid_text size iters
  local name=$1 addr=$2 gidx=$3 vgid=$4 size=$5 n=$6
  [[ $name =~ ${UROCE_INTEROP_CASES:-.} ]] || return 0
  note "case $name: uroce ping serves on $addr, ibv_rc_pingpong -g $gidx -s $size -n $n"
  rxe_counters >"$out/$name.counters-before.txt"
  start_tcpdump "$name"
  ip netns exec "$ns" env UROCE_PCAP="$out/$name.uroce.pcap" "$uroce" ping -a "$addr" \
    -s "$size" -n "$n" -c --timeout 120 --stats >"$out/$name.uroce.log" 2>&1 &
  uroce_pid=$!
  for _ in $(seq 100); do grep -q 'local address' "$out/$name.uroce.log" && break; sleep 0.1; done
  grep -q 'local address' "$out/$name.uroce.log" || fail "$name: uroce ping did not start"
  vm 150 "ibv_rc_pingpong -d rxe0 -g $gidx -s $size -n $n -c $host_ip" >"$out/$name.vm.log" ||
    fail "$name: ibv_rc_pingpong (client, VM) failed"
  wait "$uroce_pid" || { uroce_pid=; fail "$name: uroce ping (server) failed"; }
  uroce_pid=
  stop_tcpdump "$name"
  rxe_counters >"$out/$name.counters-after.txt"
  check_case "$name" "$n" "$addr" "$vgid"
}

# ibv_rc_pingpong serves in the VM, uroce ping connects.
case_rxe_server() { # name uroce_addr vm_gid_index vm_gid_text size iters
  local name=$1 addr=$2 gidx=$3 vgid=$4 size=$5 n=$6
  [[ $name =~ ${UROCE_INTEROP_CASES:-.} ]] || return 0
  note "case $name: ibv_rc_pingpong -g $gidx -s $size -n $n serves, uroce ping on $addr connects"
  rxe_counters >"$out/$name.counters-before.txt"
  start_tcpdump "$name"
  # Wait (bounded) until the server listens: 18515 = 0x4853, state 0A = LISTEN.
  vm 60 "rm -f /tmp/srv.log; (ibv_rc_pingpong -d rxe0 -g $gidx -s $size -n $n -c \
>/tmp/srv.log 2>&1; echo \"exit=\$?\" >>/tmp/srv.log) & \
n=0; until grep -q ':4853 00000000:0000 0A' /proc/net/tcp; do n=\$((n+1)); \
[ \$n -gt 300 ] && exit 1; sleep 0.1; done" >"$out/$name.vm-start.log" ||
    fail "$name: ibv_rc_pingpong (server, VM) did not start listening"
  ip netns exec "$ns" env UROCE_PCAP="$out/$name.uroce.pcap" "$uroce" ping -a "$addr" \
    -s "$size" -n "$n" -c --timeout 120 --stats "$vm_ip" >"$out/$name.uroce.log" 2>&1 ||
    fail "$name: uroce ping (client) failed"
  # The server is a background job of the console's shell: `wait` for it rather than poll
  # (every command the guest runs costs emulated CPU that the server needs).
  vm 120 'wait; cat /tmp/srv.log' >"$out/$name.vm.log" || true
  grep -q '^exit=0' "$out/$name.vm.log" || fail "$name: ibv_rc_pingpong (server, VM) failed"
  stop_tcpdump "$name"
  rxe_counters >"$out/$name.counters-after.txt"
  check_case "$name" "$n" "$addr" "$vgid"
}

v4gid=::ffff:$vm_ip

# Sizes: 4096 (rc_pingpong's default, 4 packets at MTU 1024), 1 (one packet, inline on rxe's
# side), 10000 (a partial last packet); small counts: emulated rxe needs ~1 ms per exchange.
case_uroce_server uroce_server "$host_ip" "$vm4_gidx" "$v4gid" 4096 "$iters"
case_rxe_server rxe_server "$host_ip" "$vm4_gidx" "$v4gid" 4096 "$iters"
case_uroce_server uroce_server_s1 "$host_ip" "$vm4_gidx" "$v4gid" 1 "$iters"
case_rxe_server rxe_server_s10000 "$host_ip" "$vm4_gidx" "$v4gid" 10000 "$iters"
case_uroce_server uroce_server_ipv6 "$host_ip6" "$vm6_gidx" "$vm_ip6" 4096 "$iters"
case_rxe_server rxe_server_ipv6 "$host_ip6" "$vm6_gidx" "$vm_ip6" 4096 "$iters"

# Loss: netem drops 10% of rxe's data packets (RC opcodes below 0x10, BTH byte 0 at IP offset
# 28) on the guest's egress, so both ends recover: uroce's responder NAKs the PSN gaps, rxe
# retransmits on the NAK or on its timeout when a message's last packet is lost; the data must
# still check. rxe's ACKs are spared: rc_pingpong's protocol has no way to recover a lost final
# ACK (the side that sent it has exited and destroyed its QP, so the other retries forever).
loss_on() {
  vm 30 '/sbin/tc qdisc del dev eth0 root 2>/dev/null
/sbin/tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 &&
/sbin/tc qdisc add dev eth0 parent 1:3 handle 30: netem loss 10% &&
/sbin/tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
  match ip dport 4791 0xffff match u8 0x00 0xf0 at 28 flowid 1:3' >"$out/netem-setup.log" ||
    { cat "$out/netem-setup.log"; fail "cannot set up netem loss in the VM"; }
}
if [[ loss_uroce_server =~ ${UROCE_INTEROP_CASES:-.} || loss_rxe_server =~ ${UROCE_INTEROP_CASES:-.} ]]
then
  loss_on
  case_uroce_server loss_uroce_server "$host_ip" "$vm4_gidx" "$v4gid" 4096 $((iters * 3))
  loss_on
  case_rxe_server loss_rxe_server "$host_ip" "$vm4_gidx" "$v4gid" 4096 $((iters * 3))
  vm 30 '/sbin/tc qdisc del dev eth0 root' >/dev/null || true
fi

note "PASS: all cases"
