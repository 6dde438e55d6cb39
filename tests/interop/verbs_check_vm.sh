#!/usr/bin/env bash
# Manual check (not a ctest): uroce_verbs_check against the kernel's Soft-RoCE in the interop VM,
# the same binary on both sides: in the VM over rdma-core + rdma_rxe, on the host over uroce's
# drop-in libibverbs.so.1. The matrix itself (captures, counters, loss) is rxe_interop_test.sh's;
# this is the quick way to see the program pass (or fail) against a peer we did not write.
#
# usage (root): verbs_check_vm.sh BUILD_DIR OUT_DIR [CASE_REGEX] [-- EXTRA_ARGS...]
#   BUILD_DIR: a build with uroce_verbs_check, compat/libibverbs.so.1 and src/tools/uroce.
#   Cases, each printing both sides' last lines, rxe's hw_counters that changed, and
#   `uroce pcap check` of uroce's capture:
#     v4_rxe_responder / v4_uroce_responder    IPv4 GIDs, every op, default sizes
#     rnr_rxe_responder / rnr_uroce_responder  --rnr (rxe's send_rnr_err / rcvd_rnr_err grow)
#     v6_rxe_responder / v6_uroce_responder    IPv6 GIDs, -n 5
#   "rxe responder": the VM runs the server; "uroce responder": the host does.
# Uses the image build-vm-image.sh caches, with the program appended to its initramfs; its own
# namespace (uroce-vc-PID) on 10.124.0.0/24 and fd00:124::/64. Exit 1 when a case failed.
# VC_VM_MTU=9000: both netdevs at MTU 9000 (active MTU 4096 on both sides) instead of 1500 (1024).
# VC_VM_LOSS=P: netem drops P% of the VM's outgoing packets (RC retransmits, lost UD messages
# are asked for again).
set -uo pipefail
build=$(realpath "${1:?usage: verbs_check_vm.sh BUILD_DIR OUT_DIR [CASE_REGEX] [-- ARGS]}")
out=${2:?usage: verbs_check_vm.sh BUILD_DIR OUT_DIR [CASE_REGEX] [-- ARGS]}
cases=${3:-.}
shift $(($# < 3 ? $# : 3))
[[ ${1:-} == -- ]] && shift
extra=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prog=$build/tests/interop/uroce_verbs_check
uroce=$build/src/tools/uroce
step=${VC_STEP_TIMEOUT:-120}
((EUID == 0)) || { echo "needs root (namespace, tap, qemu)"; exit 2; }
[[ -x $prog && -x $uroce && -e $build/compat/libibverbs.so.1 ]] ||
  { echo "no uroce_verbs_check, uroce or compat/libibverbs.so.1 in $build"; exit 2; }

rm -rf "$out" && mkdir -p "$out" && out=$(cd "$out" && pwd)
image=$("$here/build-vm-image.sh" 2>"$out/build-vm-image.log" | tail -1) ||
  { cat "$out/build-vm-image.log"; exit 1; }
read -r kernel initrd <<<"$image"
# The kernel unpacks concatenated cpio archives: the image's, then one with the program.
mkdir -p "$out/stage/usr/bin"
cp "$prog" "$out/stage/usr/bin/"
cp "$initrd" "$out/initrd.gz"
(cd "$out/stage" && find . | cpio -o -H newc 2>/dev/null | gzip) >>"$out/initrd.gz"

ns=uroce-vc-$$
host4=10.124.0.1 vm4=10.124.0.2 host6=fd00:124::1 vm6=fd00:124::2
sock=$out/console.sock
qemu_pid=
cleanup() {
  [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" addr add "$host4/24" dev br0
ip -n "$ns" addr add "$host6/64" dev br0 nodad
ip -n "$ns" tuntap add tap0 mode tap
ip -n "$ns" link set tap0 master br0
mtu=${VC_VM_MTU:-1500}
ip -n "$ns" link set tap0 mtu "$mtu" up
ip -n "$ns" link set br0 mtu "$mtu" up
ip netns exec "$ns" qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 1 -nodefaults \
  -no-user-config -display none -no-reboot -kernel "$kernel" -initrd "$out/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 uroce_ip=$vm4/24 uroce_ip6=$vm6/64 uroce_mtu=$mtu" \
  -chardev "socket,id=con,path=$sock,server=on,wait=off,logfile=$out/console.log" \
  -serial chardev:con -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:12:40:02 >"$out/qemu.log" 2>&1 &
qemu_pid=$!
# The interpreter itself: a version manager's python3 shim costs up to a second a call.
py=$(python3 -c 'import sys; print(sys.executable)')
"$py" "$here/vm_console.py" wait-ready "$out/console.log" 240 "$qemu_pid" ||
  { echo "the VM did not boot (see $out/console.log)"; exit 1; }
vm() { "$py" "$here/vm_console.py" run "$sock" "$1" "$2" | tr -d '\r'; }
for _ in $(seq 30); do  # the GID table fills from address events: wait (bounded) for both
  vm 60 'ibv_devinfo -d rxe0 -v' >"$out/vm-devinfo.txt"
  grep -q "::ffff:$vm4, RoCE v2" "$out/vm-devinfo.txt" &&
    grep -q "[[:space:]]$vm6, RoCE v2" "$out/vm-devinfo.txt" && break
  sleep 0.5
done
gid_index() { sed -n "s/^[[:space:]]*GID\[ *\([0-9]*\)\]:[[:space:]]*$1, RoCE v2.*/\1/p" \
  "$out/vm-devinfo.txt" | head -1; }
g4=$(gid_index "::ffff:$vm4") g6=$(gid_index "$vm6")
[[ -n $g4 && -n $g6 ]] || { echo "rxe0 lacks the GIDs (see $out/vm-devinfo.txt)"; exit 1; }
echo "VM ready: rxe0 GID index $g4 ($vm4), $g6 ($vm6)"
if [[ -n ${VC_VM_LOSS:-} ]]; then
  vm 30 "/sbin/tc qdisc add dev eth0 root netem loss ${VC_VM_LOSS}%; /sbin/tc qdisc show dev eth0"
fi

preload=
if readelf -d "$build/compat/libibverbs.so.1" | grep -q libasan; then
  preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
fi
counters() {
  vm 30 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f=$(cat $f)"; done'
}
port=18960 failed=0
run_case() { # name vmserver|hostserver host_addr vm_gid_index vm_addr ARGS...
  local name=$1 dir=$2 haddr=$3 vg=$4 vaddr=$5
  shift 5
  [[ $name =~ $cases ]] || return 0
  port=$((port + 1))
  local hlog=$out/$name.host.log vlog=$out/$name.vm.log args="$*"
  echo "=== $name: $dir $args"
  counters >"$out/$name.counters-before.txt"
  local host=(ip netns exec "$ns" env LD_LIBRARY_PATH="$build/compat" LD_PRELOAD="$preload"
    ASAN_OPTIONS=detect_leaks=0 UROCE_DEVICES="$haddr" UROCE_PCAP="$out/$name.uroce.pcap"
    timeout -k 5 900 "$prog" -p "$port" --timeout "$step" "$@")
  if [[ $dir == vmserver ]]; then
    # Started in the background of the console's shell; wait (bounded) until it listens.
    local hex
    hex=$(printf '%04X' "$port")
    vm 60 "rm -f /tmp/s.log; (uroce_verbs_check -d rxe0 -g $vg -p $port --timeout $step $args \
>/tmp/s.log 2>&1; echo exit=\$? >>/tmp/s.log) & n=0; \
until grep -q ':$hex 0\{8\}:0000 0A\|:$hex 0\{32\}:0000 0A' /proc/net/tcp /proc/net/tcp6; do \
n=\$((n+1)); [ \$n -gt 300 ] && exit 1; sleep 0.1; done" >/dev/null ||
      echo "the VM's server did not listen"
    "${host[@]}" "$vaddr" >"$hlog" 2>&1
    echo "host exit $?"
    vm 900 'wait; cat /tmp/s.log' >"$vlog"
  else
    "${host[@]}" >"$hlog" 2>&1 &
    local hpid=$!
    for _ in $(seq 100); do
      ip netns exec "$ns" ss -Hltn "sport = :$port" | grep -q . && break
      sleep 0.1
    done
    vm 900 "uroce_verbs_check -d rxe0 -g $vg -p $port --timeout $step $args $haddr; \
echo exit=\$?" >"$vlog"
    wait "$hpid"
    echo "host exit $?"
  fi
  grep -q '^exit=0' "$vlog" && tail -1 "$hlog" | grep -q ': PASS ' || failed=1
  echo "vm:   $(grep -v '^exit=' "$vlog" | tail -1)"
  echo "host: $(tail -1 "$hlog")"
  counters >"$out/$name.counters-after.txt"
  local changed="" k v b
  while IFS== read -r k v; do
    b=$(grep "^$k=" "$out/$name.counters-before.txt" | cut -d= -f2)
    [[ -n $b && $v != "$b" ]] && changed+="$k+$((v - b)) "
  done <"$out/$name.counters-after.txt"
  echo "rxe hw_counters: $changed"
  echo "uroce capture: $("$uroce" pcap check "$out/$name.uroce.pcap" 2>&1 | grep 'frames,')"
}
rnr=(--rnr -o send,send_imm,write_imm -s 1,1024,4097,65536 -n 5)
run_case v4_rxe_responder vmserver "$host4" "$g4" "$vm4" "${extra[@]}"
run_case v4_uroce_responder hostserver "$host4" "$g4" "$vm4" "${extra[@]}"
run_case rnr_rxe_responder vmserver "$host4" "$g4" "$vm4" "${rnr[@]}" "${extra[@]}"
run_case rnr_uroce_responder hostserver "$host4" "$g4" "$vm4" "${rnr[@]}" "${extra[@]}"
run_case v6_rxe_responder vmserver "$host6" "$g6" "$vm6" -n 5 "${extra[@]}"
run_case v6_uroce_responder hostserver "$host6" "$g6" "$vm6" -n 5 "${extra[@]}"
((failed == 0)) && echo "ALL PASSED" || echo "SOME CASE FAILED (logs in $out)"
exit $failed
