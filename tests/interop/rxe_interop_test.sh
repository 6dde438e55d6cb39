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

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/harness.log
exec > >(tee -a "$log") 2>&1
# shellcheck source=vm_lib.sh
source "$here/vm_lib.sh"

vm_prerequisites
[[ -x $uroce ]] || fail "no uroce binary at $uroce"
vm_image
vm_network
vm_boot
vm_gids
inns "$uroce" devinfo -a "$host_ip" -v >"$out/uroce-devinfo.txt" 2>&1 ||
  fail "uroce devinfo failed (see uroce-devinfo.txt)"
# The same port attributes as rxe on a 1500-byte netdev (active MTU 1024), line for line as
# ibv_devinfo -v prints them. (max_msg_sz differs on purpose: rxe's is 8 MiB.)
port_fields='state|max_mtu|active_mtu|sm_lid|port_lid|port_lmc|link_layer|port_cap_flags|'
port_fields+='max_vl_num|pkey_tbl_len|gid_tbl_len|subnet_timeout|phys_state'
grep -E "^[[:space:]]+($port_fields):" "$out/vm-devinfo.txt" | tr -d '\r' >"$out/port-rxe.txt"
grep -E "^[[:space:]]+($port_fields):" "$out/uroce-devinfo.txt" >"$out/port-uroce.txt"
grep -q 'active_mtu:.*1024 (3)' "$out/port-uroce.txt" ||
  fail "uroce devinfo: active MTU is not 1024 at netdev MTU 1500"
diff "$out/port-rxe.txt" "$out/port-uroce.txt" >"$out/port-diff.txt" ||
  { cat "$out/port-diff.txt"; fail "uroce devinfo's port attributes differ from rxe0's"; }
# Width and speed: each side's follow its own interface's speed by the kernel's RoCE table
# (ib_get_eth_speed; an unknown speed counts as 1000 Mb/s), and the two interfaces differ (the
# VM's virtio NIC reports none; the host's bridge reports its tap's), so each is checked against
# the table for its own interface rather than against the other.
rate_lines() { # Mb/s -> the two lines ibv_devinfo -v prints
  local mbps=$1 w='1X (1)' sp='2.5 Gbps (1)'
  ((mbps > 0)) || mbps=1000
  if ((mbps <= 1000)); then :
  elif ((mbps <= 10000)); then sp='10.0 Gbps (8)'
  elif ((mbps <= 20000)); then w='4X (2)' sp='5.0 Gbps (2)'
  elif ((mbps <= 25000)); then sp='25.0 Gbps (32)'
  elif ((mbps <= 40000)); then w='4X (2)' sp='10.0 Gbps (8)'
  else w='4X (2)' sp='25.0 Gbps (32)'; fi
  printf 'active_width: %s\nactive_speed: %s\n' "$w" "$sp"
}
rate_of() { grep -E '^[[:space:]]+active_(width|speed):' "$1" | tr -d '\r' | sed -E 's/^[[:space:]]+//; s/:[[:space:]]+/: /'; }
host_mbps=$(inns cat /sys/class/net/br0/speed 2>/dev/null || echo 0)
[[ $host_mbps =~ ^-?[0-9]+$ ]] || host_mbps=0
[[ "$(rate_of "$out/uroce-devinfo.txt")" == "$(rate_lines "$host_mbps")" ]] ||
  fail "uroce devinfo's width/speed are not the kernel's for br0 at $host_mbps Mb/s: $(rate_of "$out/uroce-devinfo.txt")"
[[ "$(rate_of "$out/vm-devinfo.txt")" == "$(rate_lines 0)" ]] ||
  fail "rxe0's width/speed are not the kernel's for a NIC without a speed: $(rate_of "$out/vm-devinfo.txt")"

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
  "$py" "$here/same_frames.py" "$out/$name.tap.pcap" "$out/$name.uroce.pcap" "$peer" "$addr" \
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
  start_tcpdump "$out/$name.tap.pcap" "$out/$name.tcpdump.log"
  ip netns exec "$ns" env UROCE_PCAP="$out/$name.uroce.pcap" "$uroce" ping -a "$addr" \
    -s "$size" -n "$n" -c --timeout 120 --stats >"$out/$name.uroce.log" 2>&1 &
  host_pid=$!
  for _ in $(seq 100); do grep -q 'local address' "$out/$name.uroce.log" && break; sleep 0.1; done
  grep -q 'local address' "$out/$name.uroce.log" || fail "$name: uroce ping did not start"
  vm 150 "ibv_rc_pingpong -d rxe0 -g $gidx -s $size -n $n -c $host_ip" >"$out/$name.vm.log" ||
    fail "$name: ibv_rc_pingpong (client, VM) failed"
  wait "$host_pid" || { host_pid=; fail "$name: uroce ping (server) failed"; }
  host_pid=
  stop_tcpdump "$out/$name.tcpdump.log"
  rxe_counters >"$out/$name.counters-after.txt"
  check_case "$name" "$n" "$addr" "$vgid"
}

# ibv_rc_pingpong serves in the VM, uroce ping connects.
case_rxe_server() { # name uroce_addr vm_gid_index vm_gid_text size iters
  local name=$1 addr=$2 gidx=$3 vgid=$4 size=$5 n=$6
  [[ $name =~ ${UROCE_INTEROP_CASES:-.} ]] || return 0
  note "case $name: ibv_rc_pingpong -g $gidx -s $size -n $n serves, uroce ping on $addr connects"
  rxe_counters >"$out/$name.counters-before.txt"
  start_tcpdump "$out/$name.tap.pcap" "$out/$name.tcpdump.log"
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
  stop_tcpdump "$out/$name.tcpdump.log"
  rxe_counters >"$out/$name.counters-after.txt"
  check_case "$name" "$n" "$addr" "$vgid"
}


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
# ACK (the side that sent it has exited and destroyed its QP, so the other retries: rxe forever,
# uroce 7 times with rc_pingpong's retry_cnt 7, then fails with RETRY_EXC_ERR).
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
