#!/usr/bin/env bash
# The interop matrix: the same unmodified rdma-core binaries on both sides of the wire, in a
# qemu VM over the kernel's Soft-RoCE (rxe0) and on the host over uroce's drop-in
# libibverbs.so.1 (device uroce0 on the namespace's bridge). VM and namespace: vm_lib.sh.
#
# usage: rxe_matrix_test.sh UROCE_BINARY COMPAT_LIBDIR OUT_DIR GROUP [VERBS_CHECK_BINARY]
#
# GROUP (one VM boot each; a ctest test each):
#   pingpong       ibv_{rc,uc,srq}_pingpong --chk at 1 B and 1 MiB, ibv_ud_pingpong --chk at
#                  1 B and a full MTU; MTU 1024 and 4096
#   perftest_1024, perftest_4096
#                  ib_{send,write,read}_{bw,lat} at 1 B, 64 KiB (bw) and 1 MiB, and
#                  ib_atomic_{bw,lat}; at that MTU
#   verbs          uroce_verbs_check (tests/interop/verbs_check.c): SEND, SEND with immediate,
#                  WRITE, WRITE with immediate, READ, CAS, FAA and UD (GRH checked) over sizes
#                  1 B..1 MiB, data verified; MTU 1024 and 4096
#   faults         the VM loses 5% of all the RoCE packets it sends (netem on the guest's
#                  egress: data, ACKs, READ responses, atomic ACKs) under ib_{write,read,send}_bw,
#                  ib_send_lat, ib_atomic_bw and uroce_verbs_check (and 1% under
#                  uroce_verbs_check); 5% of those it receives
#                  (netem on ifb0, where eth0's ingress is redirected: uroce's packets) under the
#                  same; RNR (uroce_verbs_check --rnr: the server posts its receives late); and
#                  loss in uroce's own fault stage (UROCE_FAULTS in the host's program, no netem;
#                  see uroce_fault_spec): 5% of uroce's requests as the requester (ureq5:
#                  ib_{write,send,read}_bw as client, ib_{write,send}_bw -b as server), of its
#                  atomic requests (uatomic5), of its ACKs and atomic ACKs as the responder
#                  (uack5: ib_{write,send,atomic}_bw as server), of its READ responses (uread5:
#                  ib_read_bw as server), of all it sends (utx5: uroce_verbs_check both ways) and
#                  of all it receives (urx5: ib_write_bw, ib_read_bw, uroce_verbs_check both ways)
#   rdmacm         rdma_cm programs, over the kernel's rdma_cm in the VM and over the drop-in
#                  librdmacm.so.1 (uroce's CM in the device's coordinator) on the host: rping -C
#                  100 -v, ucmatose (2 connections), udaddy (UD, SIDR) and rdma_server /
#                  rdma_client (synchronous endpoints) over IPv4 and IPv6; cmtime (10
#                  connections at once), qperf -cm1 rc_bw and rc_lat, and ib_send_bw,
#                  ib_write_bw and ib_read_lat with -R over IPv4 (Debian 12's qperf and
#                  perftest do rdma_cm over IPv4 only); and lost CM MADs: the first REQ, REP, RTU
#                  and DREQ of either side dropped in the VM (cmdrop cases), the connections
#                  established and torn down all the same by the CMs' retries
# Every case runs in both directions: NAME.uroce_server (uroce's side serves, the VM's
# connects) and NAME.uroce_client. The client is the requester of perftest's bw tests, of the
# lat tests of READ and atomics, and of uroce_verbs_check; the pingpongs and the SEND/WRITE
# lat tests send both ways.
#
# Evidence, per case, in OUT_DIR/CASE/: host.log and vm.log (both programs' output and exit
# status), tap.pcap (tcpdump on the VM's tap: every packet, both directions), uroce.pcap (the
# drop-in's own capture, UROCE_PCAP), uroce-stats.txt (the drop-in's counters as its device
# closed, UROCE_STATS_FILE), counters-{before,after}.txt (rxe0's hw_counters), dmesg.txt (the
# VM's kernel log during the case), and the checks' outputs; with uroce's own faults, also
# uroce-faults.txt (the UROCE_FAULTS given) and uroce.pcap.faults (the capture's companion
# log: every fault its stage injected). A case passes when
# both programs exit 0 and report their result (the pingpongs' and uroce_verbs_check's data
# checks included), tcpdump lost nothing, both captures pass `uroce pcap check` and hold the
# same packets (same_frames.py; rxe's last packets may reach uroce's device as it closes),
# uroce dropped nothing (no bad ICRC) and sent what the tap saw, rxe accepted every packet uroce
# sent (its rcvd_pkts counts only packets whose ICRC it verified), the VM's kernel logged no
# ICRC error, rxe counted no
# sequence or RNR error, retry or retry-exceeded error beyond what the case's fault causes (and
# the fault did happen), and the largest packet fits the MTU (and, for messages larger than
# it, fills it). With uroce's own faults the captures are compared without the packets its
# receive stage dropped (on the wire only; what its transmit stage dropped is on neither), and
# check_ufaults requires the stage to have dropped packets of the aimed class and nothing else,
# its log and counters to agree with the captures, and the side that must recover to have
# retransmitted (uroce's retransmitted_pkts, rxe's duplicate_request, out_of_seq_request,
# completer_retry_err, rcvd_seq_err, as the case says). In the rdmacm group the CM MADs (to
# and from QP 1) are uroce's coordinator's: its capture (devd.pcap, UROCE_DEVD_PCAP) holds the
# same MADs as the wire, and the program's counters and capture the rest; and no program in the VM crashed (its kernel log: a crash of a
# server's child shows in no exit status), but for qperf 0.4.11's own after each test (see
# check_run). Captures of passing cases are deleted (UROCE_INTEROP_KEEP=1 keeps them).
# A case listed in known_failures below is run and reported as KNOWN FAILURE, not failed.
#
# A failed case after which the guest still answers its console but not the network (the known
# qemu wedge: its virtio receive path stops) runs once more on the rebooted VM; the first
# attempt's folder is CASE.wedged, and the result line and the summary count say so.
#
# Environment: UROCE_INTEROP_CASES (regex of case names), UROCE_INTEROP_KEEP,
# UROCE_INTEROP_WEDGE_TEST (regex: simulate the wedge after those cases' first attempt),
# UROCE_TEST_PRELOAD (sanitizer runtimes for a sanitizer build of the drop-in), and vm_lib.sh's.
set -euo pipefail

usage='usage: rxe_matrix_test.sh UROCE_BINARY COMPAT_LIBDIR OUT_DIR GROUP [VERBS_CHECK_BINARY]'
uroce=$(realpath "${1:?$usage}")
libdir=$(realpath "${2:?$usage}")
out=${3:?$usage}
group=${4:?$usage}
vcheck=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cases_re=${UROCE_INTEROP_CASES:-.}

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/harness.log") 2>&1
# shellcheck source=vm_lib.sh
source "$here/vm_lib.sh"

# Cases that fail for a reason reported and not yet fixed (regex on case names): they run,
# and their failure is reported as KNOWN FAILURE instead of failing the test. None now ('^$'
# matches no case name; an empty regex would match them all).
# (verbs_check.flush.uroce_client, group ibta15, was one until the group set
# UROCE_RXE_FLUSH_PEERS below: rxe drops a FLUSH with the IBTA's ICRC; docs/INTEROP.md, "FLUSH
# and rxe".)
known_failures='^$'

case $group in
  pingpong | perftest_1024 | perftest_4096) ;;
  verbs | faults | ibta15)
    [[ -n $vcheck ]] || fail "group $group needs the uroce_verbs_check binary"
    [[ -x $vcheck ]] || fail "no uroce_verbs_check binary at $vcheck"
    vcheck=$(realpath "$vcheck")
    ;;
  rdmacm)
    [[ -e $libdir/librdmacm.so.1 ]] || fail "no drop-in librdmacm.so.1 in $libdir"
    for tool in rping ucmatose udaddy rdma_server rdma_client cmtime qperf; do
      command -v "$tool" >/dev/null 2>&1 || fail "missing '$tool' (scripts/install-deps installs it)"
    done
    ;;
  *) fail "unknown group '$group' ($usage)" ;;
esac
vm_prerequisites
[[ -x $uroce ]] || fail "no uroce binary at $uroce"
[[ -e $libdir/libibverbs.so.1 ]] || fail "no drop-in libibverbs.so.1 in $libdir"
for tool in ib_write_bw ibv_rc_pingpong ss ping; do
  command -v "$tool" >/dev/null 2>&1 || fail "missing '$tool' (scripts/install-deps installs it)"
done

# The host's programs run over the drop-in. A sanitizer build of it needs the sanitizer
# runtimes loaded first (the programs are not instrumented); their own leaks are not ours.
host_env=(env "LD_LIBRARY_PATH=$libdir" "UROCE_DEVICES=uroce0=$host_ip")
if readelf -d "$libdir/libibverbs.so.1" | grep -q libasan; then
  [[ -n ${UROCE_TEST_PRELOAD:-} ]] ||
    fail "the drop-in is a sanitizer build: set UROCE_TEST_PRELOAD to the runtimes (ctest does)"
  host_env+=("LD_PRELOAD=$UROCE_TEST_PRELOAD" "ASAN_OPTIONS=detect_leaks=0")
fi

# IBTA 1.5's ATOMIC WRITE and FLUSH came to rxe in 6.2; Debian 12's kernel is 6.1. Their group
# boots the kernel of bookworm-backports (6.12) with the same user space (rdma-core 44).
[[ $group == ibta15 ]] && export UROCE_INTEROP_KERNEL_SUITE=bookworm-backports
# rxe checks a FLUSH's ICRC in a form of its own (rxe_opcode.c gives RC FLUSH no payload offset;
# docs/INTEROP.md, "FLUSH and rxe"): uroce sends the VM's rxe that form, as a NIC driver's peer
# quirk would. Only FLUSH changes; its answer, and every other packet, keep the IBTA's ICRC.
[[ $group == ibta15 ]] && host_env+=("UROCE_RXE_FLUSH_PEERS=$vm_ip")
vm_image
boot_initrd=$initrd
if [[ -n $vcheck ]]; then
  # uroce_verbs_check goes into the VM without touching the cached image: a second cpio
  # archive appended to the image's initramfs (the kernel unpacks concatenated archives), with
  # the binary and the libraries it needs that the image lacks (a sanitizer build's runtimes),
  # taken from the host (the same Debian release as the VM).
  extra=$out/extra-root
  image_root=$(dirname "$initrd")/root
  mkdir -p "$extra/usr/bin" "$extra/usr/lib/x86_64-linux-gnu"
  cp "$vcheck" "$extra/usr/bin/uroce_verbs_check"
  for lib in $(ldd "$vcheck" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    name=$(basename "$lib")
    [[ -e $image_root/lib/x86_64-linux-gnu/$name || -e $image_root/usr/lib/x86_64-linux-gnu/$name ]] &&
      continue
    cp -L "$lib" "$extra/usr/lib/x86_64-linux-gnu/$name"
    note "uroce_verbs_check needs $name, which the image lacks: taken from the host"
  done
  (cd "$extra" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/extra.cpio.gz"
  cat "$initrd" "$out/extra.cpio.gz" >"$out/initrd.img"
  boot_initrd=$out/initrd.img
  rm -rf "$extra"
fi
vm_network
vm_boot "$boot_initrd"
vm_gids
if [[ -n $vcheck ]]; then
  vm 30 'uroce_verbs_check --help >/dev/null 2>&1; echo help-exit=$?' >"$out/vm-vcheck.txt" || true
  grep -q 'help-exit=[01]$' "$out/vm-vcheck.txt" ||
    fail "uroce_verbs_check does not run in the VM (see vm-vcheck.txt)"
fi

# ---- MTU: the netdevs' MTU on both sides; rxe follows its netdev, uroce reads it at open ----
mtu=
set_mtu() { # 1024 | 4096
  local netdev=1500
  ((${1} == 4096)) && netdev=4200  # 4096 of payload + BTH, RETH, ICRC, UDP, IP
  vm 30 "ip link set eth0 mtu $netdev && ibv_devinfo -d rxe0 | grep active_mtu" \
    >"$out/mtu-$1.vm.txt" || fail "cannot set the VM's MTU to $netdev"
  ip -n "$ns" link set tap0 mtu "$netdev"
  ip -n "$ns" link set br0 mtu "$netdev"
  inns "$uroce" devinfo -a "$host_ip" >"$out/mtu-$1.uroce.txt" 2>&1 || fail "uroce devinfo failed"
  grep -q "active_mtu:.*$1 (" "$out/mtu-$1.vm.txt" ||
    fail "rxe0's active MTU is not $1 at netdev MTU $netdev (see mtu-$1.vm.txt)"
  grep -q "active_mtu:.*$1 (" "$out/mtu-$1.uroce.txt" ||
    fail "uroce's active MTU is not $1 at netdev MTU $netdev (see mtu-$1.uroce.txt)"
  mtu=$1
  note "MTU $1 (netdev $netdev): rxe0 and uroce0 both report active_mtu $1"
}

# ---- faults: netem in the guest, for RoCE packets only (TCP carries the tools' connection
# set-up, which must not suffer): on eth0's egress (what rxe sends is lost) or, redirected to
# ifb0, on its ingress (what uroce sends is lost before rxe sees it). netem queues at most
# `limit` packets (1000 by default) and tail-drops beyond; rxe answers a repeated READ with the
# rest of its response at once, and when qemu drains the guest's NIC slowly (a busy CI machine;
# reproduced with two busy loops on the host) the backlog passes 1000: the tail drop shows as
# rxe's send_err (ip_local_out refused the packet), which the cases fail on. The limit is raised
# so that netem loses only the percentage asked for; 20000 packets of at most a 4 KiB MTU are
# well inside the guest's memory. ----
netem=none
netem_limit=20000
set_netem() { # none | egress PERCENT | ingress PERCENT
  [[ "$*" == "$netem" ]] && return 0
  local match='u32 match ip protocol 17 0xff match ip dport 4791 0xffff'
  local cmd='/sbin/tc qdisc del dev eth0 root 2>/dev/null; /sbin/tc qdisc del dev eth0 ingress \
2>/dev/null; /sbin/tc qdisc del dev ifb0 root 2>/dev/null; true'
  if [[ $1 == egress ]]; then
    cmd+="
/sbin/tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 &&
/sbin/tc qdisc add dev eth0 parent 1:3 handle 30: netem loss $2% limit $netem_limit &&
/sbin/tc filter add dev eth0 parent 1: protocol ip prio 1 $match flowid 1:3"
  elif [[ $1 == ingress ]]; then
    cmd+="
ip link set ifb0 up && /sbin/tc qdisc add dev eth0 handle ffff: ingress &&
/sbin/tc filter add dev eth0 parent ffff: protocol ip prio 1 $match \
  action mirred egress redirect dev ifb0 &&
/sbin/tc qdisc add dev ifb0 root netem loss $2% limit $netem_limit"
  fi
  vm 30 "$cmd" >"$out/netem.log" 2>&1 || { cat "$out/netem.log"; fail "cannot set netem: $*"; }
  netem="$*"
}
netem_dropped() { # DEV: what its netem qdisc dropped so far
  vm 30 "/sbin/tc -s qdisc show dev $1" |
    sed -n '/netem/,/dropped/ s/.*dropped \([0-9]*\).*/\1/p' | head -1
}

# ---- faults in uroce's own datapath (u* kinds): UROCE_FAULTS in the host's program, the VM
# without netem. uroce's transmit stage drops its packets of one class (a packet it drops never
# reaches the wire: neither the tap nor its own capture has it), or its receive stage drops what
# rxe sent (on the tap, not in uroce's capture: same_frames.py --rx-faults takes those out of the
# comparison, by the companion log of uroce's capture, uroce.pcap.faults). The seed comes from
# the case's name, the same in each run (the packets it hits depend on the packet sequence too,
# which timing changes: retransmissions, coalesced ACKs). ----
uroce_fault_spec() { # KIND CASE -> the case's UROCE_FAULTS
  local match rate=${1##*[a-z]}
  case ${1%"$rate"} in
    ureq) match='dir=tx,class=req' ;;        # its requests: SEND, WRITE, READ request
    uatomic) match='dir=tx,class=atomic' ;;  # its CmpSwap, FetchAdd requests
    uack) match='dir=tx,class=ack' ;;        # its ACKs, NAKs and atomic ACKs
    uread) match='dir=tx,class=read' ;;      # its READ responses
    utx) match='dir=tx' ;;                   # all it sends
    urx) match='dir=rx' ;;                   # all it receives
    *) return 1 ;;
  esac
  [[ $rate =~ ^[0-9]+$ ]] || return 1
  echo "$match,loss=$rate%,seed=$(printf '%s' "$2" | cksum | cut -d' ' -f1)"
}

# ---- CM MAD drops (rdmacm group): the first MAD of a kind from one side, dropped in the guest
# (cmdrop kinds). A u32 filter matches the MAD (IPv4 or IPv6 without options, UDP port 4791,
# BTH DestQP 1 at UDP payload bytes 5-7, MAD class 7 at byte 21, the attribute at 36-37) and a
# police action drops what conforms: its bucket holds one MAD (400 bytes, refilled at 3 B/s: a
# MAD's 322 take two minutes), so the first MAD is dropped and its retransmissions, seconds
# later, pass. uroce's MADs
# on eth0's ingress (the ingress qdisc), rxe's in the root prio qdisc's classifier: a drop there
# looks like a sent packet to rxe, whereas one at the clsact egress hook fails rxe's send and rxe
# sends the MAD again at once. Each filter's police action has its own index: the attribute *
# 10, + 1 for uroce's MADs, + 2 for rxe's. ----
cm_attr() { # REQ | MRA | REJ | REP | RTU | DREQ | DREP -> the MAD's attribute ID
  case $1 in
    REQ) echo 16 ;; MRA) echo 17 ;; REJ) echo 18 ;; REP) echo 19 ;; RTU) echo 20 ;;
    DREQ) echo 21 ;; DREP) echo 22 ;; *) return 1 ;;
  esac
}
set_cmdrop() { # 4|6 DROP[,DROP...] (DROP: uroce-KIND or rxe-KIND, KIND as cm_attr's)
  local fam=$1 d side attr proto m at parent flow index
  if ((fam == 4)); then
    proto=ip at=64
    m='match u8 0x45 0xff at 0 match u8 17 0xff at 9 match u16 4791 0xffff at 22'
    m+=' match u32 1 0x00ffffff at 32 match u8 7 0xff at 49'
  else
    proto=ipv6 at=84
    m='match u8 17 0xff at 6 match u16 4791 0xffff at 42 match u32 1 0x00ffffff at 52'
    m+=' match u8 7 0xff at 69'
  fi
  local cmd='/sbin/tc qdisc del dev eth0 root 2>/dev/null; /sbin/tc qdisc del dev eth0 ingress \
2>/dev/null; /sbin/tc qdisc del dev ifb0 root 2>/dev/null; true
/sbin/tc qdisc add dev eth0 root handle 1: prio && /sbin/tc qdisc add dev eth0 handle ffff: ingress'
  for d in ${2//,/ }; do
    side=${d%%-*}
    attr=$(cm_attr "${d#*-}") || fail "unknown CM MAD '${d#*-}' in $2"
    case $side in
      uroce) parent=ffff: flow= index=$((attr * 10 + 1)) ;;
      rxe) parent=1: flow='flowid 1:1' index=$((attr * 10 + 2)) ;;
      *) fail "a CM drop is uroce-KIND or rxe-KIND, not $d" ;;
    esac
    cmd+=" &&
/sbin/tc filter add dev eth0 parent $parent protocol $proto prio 1 u32 $m match u16 $attr 0xffff \
at $at $flow action police rate 24bit burst 400 mtu 2000 conform-exceed ok/drop index $index"
  done
  vm 30 "$cmd" >"$out/cmdrop.log" 2>&1 || { cat "$out/cmdrop.log"; fail "cannot set the CM drops: $*"; }
  netem="cmdrop $*"  # set_netem none removes them
}
cmdrop_counts() { # -> "INDEX DROPPED" lines, one per police action
  vm 30 '/sbin/tc -s actions show action police' |
    awk '/police 0x/ { i = $5 } /dropped/ { d = $0; sub(/.*dropped /, "", d); sub(/,.*/, "", d); print i, d }' |
    while read -r i d; do echo "$((i)) $d"; done
}
# Each requested drop happened once, and its sender sent the MAD again (the tap sees uroce's MADs
# before the guest drops them, rxe's only after). Reads the caller's dir, drops, h_ip, v_ip; sets
# drops_note; returns 1 (with `why` set) when not.
check_cmdrops() {
  local d side k attr n times from want line
  drops_note=
  for d in ${drops//,/ }; do
    side=${d%%-*} k=${d#*-}
    attr=$(cm_attr "$k")
    if [[ $side == uroce ]]; then
      n=$(awk -v i=$((attr * 10 + 1)) '$1 == i { print $2 }' "$dir/cmdrops.txt")
      from=$h_ip want=2
    else
      n=$(awk -v i=$((attr * 10 + 2)) '$1 == i { print $2 }' "$dir/cmdrops.txt")
      from=$v_ip want=1
    fi
    ((${n:-0} == 1)) || { case_fail "the filter of $side's first $k dropped ${n:-no} MADs, not 1"; return 1; }
    line=$(grep "^$from " "$dir/packets-cm.txt")
    times=0
    [[ $line =~ (^|[ ,])$k:([0-9]+) ]] && times=${BASH_REMATCH[2]}
    ((times >= want)) ||
      { case_fail "$side's first $k was dropped, but the tap saw it only $times times: not sent again"; return 1; }
    drops_note+="${drops_note:+, }$side's first $k dropped"
  done
  return 0
}
# 0 once no coordinator of uroce's device at ADDRESS runs (bounded: SECONDS): its abstract
# socket is gone from the namespace.
devd_gone() { # ADDRESS SECONDS
  local i
  for ((i = 0; i <= $2 * 10; ++i)); do
    inns cat /proc/net/unix | grep -q "@uroce-devd/$1/4791" || return 0
    ((i < $2 * 10)) && sleep 0.1
  done
  return 1
}

# ---- running a case ----
port=18700
declare -a results=()
n_pass=0 n_fail=0 n_known=0 n_wedged=0

# The success line of each tool's client (and server, for the pingpongs).
pp_done='^[0-9]+ iters in [0-9.]+ seconds'
pt_result='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
vc_pass='^uroce_verbs_check: PASS [0-9]+ checks'

case_fail() { why="$*"; }
# 0 once a TCP socket in the namespace listens on PORT; 1 when PID has exited first or after
# TRIES looks 0.1 s apart.
ns_listening() { # PORT PID TRIES
  local i
  for ((i = 0; i < $3; ++i)); do
    inns ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stat_sum() { # COUNTER FILE: its sum over the `uroce stats` lines (one per device closed)
  awk -v c="$1" '{ for (i = 1; i < NF; ++i) if ($i == c) s += $(i + 1) } END { print s + 0 }' "$2"
}

# One attempt; sets `why` (empty: passed).
run_once() { # dir server kind limit prog args...
  local dir=$1 server=$2 kind=$3 limit=$4 prog=$5
  shift 5
  why=
  rm -rf "$dir"
  mkdir -p "$dir"
  local gopt=-g
  [[ $prog == ib_* ]] && gopt=-x
  port=$((port >= 18999 ? 18700 : port + 1))
  local host_args=(-d uroce0 "$gopt" 0 -p "$port" "$@")
  local vm_args="-d rxe0 $gopt $vm4_gidx -p $port $*"
  local vm_env=
  [[ $prog == uroce_verbs_check ]] && vm_env='ASAN_OPTIONS=detect_leaks=0 '
  local host_prog=$prog
  [[ $prog == uroce_verbs_check ]] && host_prog=$vcheck

  local netem_dev='' ufaults=() spec
  case $kind in
    loss*) set_netem egress "${kind#loss}"; netem_dev=eth0 ;;
    iloss*) set_netem ingress "${kind#iloss}"; netem_dev=ifb0 ;;
    u*)
      # uroce's own fault stage, in the host's program only; no netem.
      set_netem none
      spec=$(uroce_fault_spec "$kind" "$(basename "$dir")") || fail "unknown kind '$kind'"
      ufaults=("UROCE_FAULTS=$spec")
      echo "$spec" >"$dir/uroce-faults.txt"
      ;;
    *) set_netem none ;;
  esac
  vm_case_begin "$dir/counters-before.txt" || fail "cannot read rxe's counters"
  local dropped_before=0
  [[ -n $netem_dev ]] && dropped_before=$(netem_dropped "$netem_dev")
  start_tcpdump "$dir/tap.pcap" "$dir/tcpdump.log"
  local hrc=0
  if [[ $server == host ]]; then
    ip netns exec "$ns" "${host_env[@]}" "${ufaults[@]}" "UROCE_PCAP=$dir/uroce.pcap" \
      "UROCE_STATS_FILE=$dir/uroce-stats.txt" \
      timeout -k 5 "$limit" "$host_prog" "${host_args[@]}" >"$dir/host.log" 2>&1 &
    host_pid=$!
    # Wait (bounded) until it listens; a probe connection would consume its one accept.
    ns_listening "$port" "$host_pid" 300 || true
    vm $((limit + 30)) "${vm_env}timeout $limit $prog $vm_args $host_ip 2>&1; echo exit=\$?" \
      >"$dir/vm.log" || true
    wait "$host_pid" || hrc=$?
    host_pid=
  else
    # The server is a background job of the console's shell, started once it listens
    # (bounded; hex port in /proc/net/tcp{,6}, state 0A = LISTEN); `wait` collects it.
    local hex
    hex=$(printf '%04X' "$port")
    vm 60 "rm -f /tmp/srv.log; (${vm_env}timeout $limit $prog $vm_args >/tmp/srv.log 2>&1; \
echo \"exit=\$?\" >>/tmp/srv.log) & \
n=0; until grep -q ':$hex [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6; do n=\$((n+1)); \
[ \$n -gt 300 ] && exit 1; sleep 0.1; done" >"$dir/vm-start.log" ||
      case_fail "the VM's server did not start listening"
    if [[ -z $why ]]; then
      ip netns exec "$ns" "${host_env[@]}" "${ufaults[@]}" "UROCE_PCAP=$dir/uroce.pcap" \
        "UROCE_STATS_FILE=$dir/uroce-stats.txt" \
        timeout -k 5 "$limit" "$host_prog" "${host_args[@]}" "$vm_ip" >"$dir/host.log" 2>&1 ||
        hrc=$?
    fi
    vm $((limit + 30)) 'wait; cat /tmp/srv.log' >"$dir/vm.log" || true
  fi
  echo "exit=$hrc" >>"$dir/host.log"
  kill -INT "$tcpdump_pid"
  wait "$tcpdump_pid" || true
  tcpdump_pid=
  vm_case_end "$dir/counters-after.txt" "$dir/dmesg.txt" || fail "cannot read rxe's counters"
  local lost=0
  [[ -n $netem_dev ]] && lost=$(($(netem_dropped "$netem_dev") - dropped_before))
  [[ -n $why ]] && return 0
  local expect_client expect_server=
  case $prog in
    ibv_*) expect_client=$pp_done expect_server=$pp_done ;;
    ib_*) expect_client=$pt_result ;;
    *) expect_client=$vc_pass expect_server=$vc_pass ;;
  esac
  local h_ip=$host_ip v_ip=$vm_ip cm= bad_re=
  check_run "$@"
}

# The checks of a run (sets `why`). Called by run_once and run_cm_once, whose locals it reads:
# dir, server, kind, limit, prog, hrc (the host program's exit status), lost (packets of uroce's
# that netem or a filter dropped before rxe saw them), expect_client and expect_server (the
# programs' success lines; empty: none), h_ip and v_ip (the addresses of the run), cm (set: an
# rdma_cm run, whose CM MADs to and from QP 1 uroce's coordinator sends, receives and captures
# in devd.pcap: the program's own counters and capture hold the rest), nodata (set: the
# program's QPs send nothing, its own capture may hold no packet) and bad_re (more failure
# messages). ARGS: the programs' arguments.
check_run() {
  # -- the programs --
  ((hrc == 0)) || { case_fail "the host's $prog exited $hrc (124: timed out after ${limit}s)"; return 0; }
  grep -q '^exit=0' "$dir/vm.log" || { case_fail "the VM's $prog failed ($(grep '^exit=' "$dir/vm.log" || echo 'no exit status'))"; return 0; }
  local client_log=$dir/vm.log server_log=$dir/host.log
  [[ $server == vm ]] && { client_log=$dir/host.log; server_log=$dir/vm.log; }
  tr -d '\r' <"$client_log" | grep -Eq -- "$expect_client" || { case_fail "the client printed no result"; return 0; }
  if [[ -n $expect_server ]]; then
    tr -d '\r' <"$server_log" | grep -Eq -- "$expect_server" || { case_fail "the server printed no result"; return 0; }
  fi
  local bad
  bad=$(grep -Eih -- "invalid data|wrong data|failed|couldn.t|error|mismatch|unable|FAIL${bad_re:+|$bad_re}" \
    "$dir/host.log" "$dir/vm.log" | head -3 || true)
  [[ -z $bad ]] || { case_fail "a program reported: $bad"; return 0; }

  # -- the captures --
  grep -q '^0 packets dropped by kernel' "$dir/tcpdump.log" ||
    { case_fail "tcpdump lost packets"; return 0; }
  local f captures=(tap uroce) own=()
  if [[ -n ${nodata:-} ]]; then
    # nodata (cmtime): the program's QPs send nothing, so every packet on the wire is a CM MAD,
    # and the program's capture holds no packet: none at all, not even its file header, when
    # the harness stopped the program (a server that serves until killed) before it flushed it.
    "$py" "$here/pcap_summary.py" --qp1 none "$dir/tap.pcap" "$h_ip" "$v_ip" >"$dir/packets-own.txt"
    [[ $(awk '{ n += $3 } END { print n + 0 }' "$dir/packets-own.txt") == 0 ]] ||
      { case_fail "packets other than CM MADs on the wire (packets-own.txt)"; return 0; }
    [[ -s $dir/uroce.pcap ]] || captures=(tap)
  else
    [[ -s $dir/uroce.pcap ]] || { case_fail "the drop-in wrote no capture (UROCE_PCAP)"; return 0; }
  fi
  if [[ -n $cm ]]; then
    captures+=(devd)
    own=(--qp1 none)
    [[ -s $dir/devd.pcap ]] || { case_fail "uroce's coordinator wrote no capture (UROCE_DEVD_PCAP)"; return 0; }
  fi
  for f in "${captures[@]}"; do
    "$uroce" pcap check "$dir/$f.pcap" >"$dir/$f.pcap.check.txt" 2>&1 ||
      { case_fail "uroce pcap check failed on $f.pcap"; return 0; }
    grep -q ', 0 invalid' "$dir/$f.pcap.check.txt" ||
      { case_fail "$f.pcap holds invalid packets"; return 0; }
    [[ $f == uroce && -n ${nodata:-} ]] && continue
    ! grep -q ', 0 valid' "$dir/$f.pcap.check.txt" || { case_fail "$f.pcap holds no packet"; return 0; }
  done
  if [[ -s $dir/uroce.pcap ]]; then
    # What uroce's own receive stage dropped is on the wire only (u* kinds: its fault log).
    local rxf=()
    [[ -s $dir/uroce.pcap.faults ]] && rxf=(--rx-faults "$dir/uroce.pcap.faults")
    "$py" "$here/same_frames.py" --late-ok "${own[@]}" "${rxf[@]}" "$dir/tap.pcap" "$dir/uroce.pcap" \
      "$v_ip" "$h_ip" >"$dir/same-frames.txt" 2>&1 || { case_fail "uroce's capture differs from the wire"; return 0; }
  fi
  if [[ -n $cm ]]; then
    # Every CM MAD on the wire is the coordinator's, sent or received, and nothing else is.
    # The peer's last MADs may come as the coordinator exits (a DREP for a DREQ of ours that
    # crossed the peer's: the connection is in timewait already, nothing waits for it).
    "$py" "$here/same_frames.py" --late-ok --qp1 only "$dir/tap.pcap" "$dir/devd.pcap" "$v_ip" \
      "$h_ip" >"$dir/same-frames-cm.txt" 2>&1 ||
      { case_fail "the coordinator's capture of the CM MADs differs from the wire"; return 0; }
  fi
  "$py" "$here/pcap_summary.py" "$dir/tap.pcap" "$h_ip" "$v_ip" >"$dir/packets.txt"
  local sent vm_sent max_u max_v late_u own_sent
  read -r _ _ sent _ max_u _ late_u < <(grep "^$h_ip " "$dir/packets.txt")
  read -r _ _ vm_sent _ max_v _ _ < <(grep "^$v_ip " "$dir/packets.txt")
  own_sent=$sent
  if [[ -n $cm ]]; then
    # The program's device sent what is not to QP 1; the coordinator the rest.
    "$py" "$here/pcap_summary.py" "${own[@]}" "$dir/tap.pcap" "$h_ip" "$v_ip" >"$dir/packets-own.txt"
    "$py" "$here/pcap_summary.py" --qp1 only "$dir/tap.pcap" "$h_ip" "$v_ip" >"$dir/packets-cm.txt"
    read -r _ _ own_sent _ < <(grep "^$h_ip " "$dir/packets-own.txt")
    # rxe's packets after uroce's last one may have reached the coordinator, not the program.
    read -r _ _ _ _ _ _ late_u _ < <(grep "^$h_ip " "$dir/packets-own.txt")
  fi
  # IP packet = payload + at most IP 20, UDP 8, BTH 12, RETH 16, DETH 8, ICRC 4 (64 in all).
  local largest=$((max_u > max_v ? max_u : max_v))
  ((largest <= mtu + 64)) || { case_fail "a $largest-byte IP packet at MTU $mtu"; return 0; }
  if [[ $* =~ -s\ 1048576 ]]; then
    ((largest >= mtu + 20 + 8 + 12 + 4)) ||
      { case_fail "1 MiB messages at MTU $mtu, but the largest IP packet is $largest bytes"; return 0; }
  fi

  # -- uroce's view: the drop-in's counters as its device closed (UROCE_STATS_FILE) --
  local u_note=
  if [[ -s $dir/uroce-stats.txt ]]; then
    local u_sent u_rcvd u_drops u_icrc u_captured
    u_sent=$(stat_sum sent_pkts "$dir/uroce-stats.txt")
    u_rcvd=$(stat_sum rcvd_pkts "$dir/uroce-stats.txt")
    u_drops=$(stat_sum rx_drops "$dir/uroce-stats.txt")
    u_icrc=$(stat_sum icrc_err "$dir/uroce-stats.txt")
    read -r _ _ u_captured _ _ _ < <("$py" "$here/pcap_summary.py" "${own[@]}" "$dir/uroce.pcap" "$v_ip")
    ((u_drops == 0 && u_icrc == 0)) ||
      { case_fail "uroce dropped $u_drops received packets ($u_icrc with a bad ICRC)"; return 0; }
    ((u_sent == own_sent)) ||
      { case_fail "uroce counted $u_sent packets sent, the tap saw $own_sent"; return 0; }
    ((u_rcvd == u_captured)) ||
      { case_fail "uroce accepted $u_rcvd of the $u_captured packets it received from rxe"; return 0; }
    u_note="$u_rcvd accepted by uroce, none dropped"
    # FLUSH to rxe (ibta15's UROCE_RXE_FLUSH_PEERS): it left with rxe's form of the ICRC.
    if [[ $* =~ -o\ flush ]]; then
      local u_rxe
      u_rxe=$(stat_sum tx_rxe_flush_icrc "$dir/uroce-stats.txt")
      ((u_rxe > 0)) || { case_fail "no FLUSH left with rxe's ICRC (tx_rxe_flush_icrc 0)"; return 0; }
      u_note+="; uroce sent $u_rxe FLUSH with rxe's ICRC"
    fi
    local u_faulted
    u_faulted=$(stat_sum rx_loss "$dir/uroce-stats.txt")
    ((u_faulted == 0)) ||
      u_note="$u_rcvd accepted by uroce, $u_faulted lost to its own receive stage, no other dropped"
  else
    # The program exited without closing its device (perftest's passive side of
    # ib_atomic_lat returns from main without ibv_close_device), so the drop-in wrote no
    # counters: the captures' equality and rxe's rcvd_pkts stand for it.
    u_note="no uroce counters: the program did not close its device"
  fi

  # -- rxe's view --
  local b=$dir/counters-before.txt a=$dir/counters-after.txt
  local received reached=$sent
  # netem on the guest's ingress drops some of uroce's packets before rxe sees them, and so do the
  # CM MAD filters (rxe counts the MADs to QP 1 too).
  [[ $kind == iloss* || $kind == cmdrop* ]] && reached=$((sent - lost))
  received=$(delta rcvd_pkts "$b" "$a")
  # rxe counts a packet only once it found its QP (rxe_rcv: hdr_check before the count): the
  # packets uroce sent after rxe's last one may have found its program gone and its QPs
  # destroyed (srq_pingpong ends with sends outstanding on its other QPs). Any other packet
  # must have been accepted.
  local late_note=
  # ibv_srq_pingpong stops with up to 15 sends outstanding on its other QPs (see the pingpong
  # group): the side that finishes first destroys QPs its peer may still be answering on, and
  # rxe does not count what reaches a destroyed QP, whenever uroce sent it (a held ACK leaves
  # with the next request or at the QP's destroy, possibly after rxe's program moved on).
  [[ $prog == ibv_srq_pingpong ]] && ((late_u < 15)) && late_u=15
  if ((received < reached && received >= reached - late_u)); then
    late_note=", $((reached - received)) sent after rxe's last packet not counted (its QPs gone)"
  elif [[ $kind == iloss* ]] && ((received > reached && received <= sent)); then
    # netem's drop counter on ifb0 is read after the run and once came out one higher than
    # the packets it kept from rxe (seen in iloss5.ib_send_lat: 2725 computed, 2726 accepted).
    # rxe cannot accept more than uroce sent: between the two is consistent.
    late_note=", rxe accepted $((received - reached)) more than netem's drop count implies"
  elif ((received != reached)); then
    case_fail "$reached of uroce's packets reached rxe (tap capture, netem), rxe accepted $received (rcvd_pkts)"
    return 0
  fi
  ! grep -qi 'icrc' "$dir/dmesg.txt" || { case_fail "rxe reported ICRC errors (dmesg.txt)"; return 0; }
  # rdma_cm runs: no program in the VM crashed, whatever its exit status said (a server's
  # child: qperf's). Except one, qperf 0.4.11's own: its server's child for a test ends it with
  # rdma_destroy_qp on its listening ID (the connection's ID was never stored for it: fixed
  # after 0.4.11, "Use the rdma_cm_id from CMINFO rather than from the event"), for which
  # rdma-core's librdmacm calls ibv_destroy_qp(NULL), and the child segfaults once the test and
  # its results are done. (uroce's drop-in returns at an ID without a QP.)
  local crash_ok='^$' crashes= crash_note=
  [[ $prog == qperf && $server == vm ]] &&
    crash_ok='qperf\[[0-9]+\]: segfault at 0 ip [0-9a-f]+ sp [0-9a-f]+ error 4 in libibverbs\.so\.1\['
  [[ -n $cm ]] && crashes=$(grep -E 'segfault|general protection|traps:|Oops|BUG:' "$dir/dmesg.txt" |
    grep -Ev "$crash_ok" | head -1 || true)
  [[ -z $crashes ]] || { case_fail "in the VM: $crashes (dmesg.txt)"; return 0; }
  [[ $crash_ok != '^$' ]] && grep -Eq "$crash_ok" "$dir/dmesg.txt" &&
    crash_note="; qperf's server child segfaulted after the test (qperf 0.4.11's own bug)"
  local c
  for c in retry_exceeded_err retry_rnr_exceeded_err send_err; do
    (($(delta "$c" "$b" "$a") == 0)) || { case_fail "rxe counted $c"; return 0; }
  done
  local counts
  counts=$(for c in rcvd_seq_err out_of_seq_request duplicate_request rcvd_rnr_err send_rnr_err \
    completer_retry_err; do printf '%s+%s ' "$c" "$(delta "$c" "$b" "$a")"; done)
  echo "$counts" >"$dir/counters-delta.txt"
  case $kind in
    clean | cmdrop*)
      # No loss: no PSN gap either way, no RNR. rxe's retransmit timer may fire spuriously
      # (see rxe_interop_test.sh): completer_retry_err and the duplicates it causes are
      # reported, not failed.
      for c in rcvd_seq_err out_of_seq_request rcvd_rnr_err send_rnr_err; do
        (($(delta "$c" "$b" "$a") == 0)) || { case_fail "rxe counted $c without a fault"; return 0; }
      done
      # Lost MADs: each filter dropped the first of its kind, and its sender sent it again.
      [[ $kind == cmdrop* ]] && { check_cmdrops || return 0; }
      ;;
    loss* | iloss*)
      ((lost > 0)) || { case_fail "netem dropped nothing: the case tested no loss"; return 0; }
      if [[ $kind == loss* ]]; then
        counts="netem dropped $lost of rxe's packets; $counts"
      else
        counts="netem dropped $lost of uroce's packets; $counts"
      fi
      ;;
    u*)
      # uroce's own stage: it dropped what the case aims at, and the right side recovered.
      check_ufaults || return 0
      counts="$ufaults_note; $counts"
      ;;
    rnr)
      # uroce serves: its receives come late, it NAKs with RNR and rxe's requester counts
      # rcvd_rnr_err; rxe serves: rxe's responder sends the RNR NAKs (send_rnr_err).
      c=rcvd_rnr_err
      [[ $server == vm ]] && c=send_rnr_err
      (($(delta "$c" "$b" "$a") > 0)) || { case_fail "no RNR happened (rxe's $c did not move)"; return 0; }
      ;;
  esac
  local cm_note=
  if [[ -n $cm ]]; then
    local cm_u cm_v
    cm_u=$(sed -n "s/^$h_ip .* mads //p" "$dir/packets-cm.txt")
    cm_v=$(sed -n "s/^$v_ip .* mads //p" "$dir/packets-cm.txt")
    cm_note="; CM MADs uroce->rxe $cm_u, rxe->uroce $cm_v${drops_note:+; $drops_note}"
  fi
  note "  $sent packets uroce->rxe (all accepted$late_note), $vm_sent rxe->uroce ($u_note), largest $largest B; ${counts% }$cm_note$crash_note"
}

# The checks of a u* kind (see uroce_fault_spec), from uroce's counters at exit
# (uroce-stats.txt: its `faults` line and its `link` line), its fault log (uroce.pcap.faults)
# and rxe's counters (counters-{before,after}.txt). Reads check_run's locals. Sets ufaults_note; returns 1 (with `why` set) when a check fails:
# - uroce's stage applied the case's spec and dropped packets (its loss counter of the case's
#   direction > 0), nothing else: no other fault kind, nothing in the other direction;
# - its log lists each of them (as many loss lines as the counter says), all of the aimed class;
# - what it took and did not drop went on, and nothing more: uroce's packets of the class on the
#   wire (tap.pcap) on transmit, rxe's packets in uroce's capture on receive;
# - uroce counted no retry exceeded;
# - the side that must recover did, as its counters show (rxe's: the deltas):
#     its requests lost (ureq, uatomic; utx with uroce as the requester): uroce retransmitted
#       (retransmitted_pkts) what rxe's responder found missing (out_of_seq_request);
#     its READ responses (uread), atomic ACKs (uack under ib_atomic_bw; utx with uroce as the
#       responder): rxe's requester asked again (completer_retry_err + rcvd_seq_err: a timeout
#       or a NAK made it retry) and uroce's responder answered a duplicate (duplicate_request);
#     rxe's requests lost on receive (urx, uroce serves): uroce NAKed the gap (send_seq_err) and
#       rxe retried;
#     rxe's READ responses or atomic ACKs lost on receive (urx, uroce the requester under
#       ib_read_bw, ib_atomic_bw, uroce_verbs_check): uroce retransmitted its requests and rxe
#       answered duplicates (duplicate_request);
#   plain ACKs lost (uack under WRITE and SEND; urx with uroce as their requester) need no
#   recovery: an ACK acknowledges every earlier PSN, the next one covers a lost one (and a lost
#   last one is the requester's timeout). Their counters are reported, nothing more is required.
check_ufaults() {
  local s=$dir/uroce-stats.txt log=$dir/uroce.pcap.faults spec d=tx cls
  spec=$(cat "$dir/uroce-faults.txt")
  [[ $kind == urx* ]] && d=rx
  [[ -s $s ]] || { case_fail "no uroce counters: what its fault stage did is unknown"; return 1; }
  grep -q "^faults .* seed ${spec##*seed=} spec " "$s" ||
    { case_fail "uroce's counters have no faults line of seed ${spec##*seed=}: UROCE_FAULTS '$spec' not applied"; return 1; }
  local lost k n extra=
  lost=$(stat_sum "${d}_loss" "$s")
  ((lost > 0)) || { case_fail "uroce's $d stage ($spec) dropped nothing: the case tested no loss"; return 1; }
  for k in tx_loss tx_burst_loss tx_partition tx_queue_full tx_duplicate tx_reorder tx_delay \
    tx_corrupt rx_loss rx_burst_loss rx_partition rx_queue_full rx_duplicate rx_reorder rx_delay \
    rx_corrupt; do
    [[ $k == "${d}_loss" ]] && continue
    n=$(stat_sum "$k" "$s")
    ((n == 0)) || extra+=" $k $n"
  done
  [[ -z $extra ]] || { case_fail "uroce's stage ($spec) injected more than $d loss:$extra"; return 1; }
  # The log: one line per loss, "time_ns dir packet kind class dest_qpn peer rule".
  [[ -s $log ]] || { case_fail "uroce's capture has no fault log (uroce.pcap.faults)"; return 1; }
  local logged by_class
  logged=$(awk -v d="$d" '$1 !~ /^#/ && $2 == d && $4 == "loss"' "$log" | wc -l)
  ((logged == lost)) ||
    { case_fail "uroce counted $lost ${d}_loss, its fault log lists $logged"; return 1; }
  by_class=$(awk -v d="$d" '$1 !~ /^#/ && $2 == d && $4 == "loss" { n[$5]++ }
    END { for (c in n) printf "%s%s:%d", (s++ ? "," : ""), c, n[c] }' "$log")
  case $kind in
    ureq*) cls=req ;; uatomic*) cls=atomic ;; uack*) cls=ack ;; uread*) cls='read' ;; *) cls='' ;;
  esac
  if [[ -n $cls && $by_class != "$cls:$lost" ]]; then
    case_fail "uroce's stage aimed at class $cls, its log lists the losses as $by_class"
    return 1
  fi
  # What the stage took and did not drop, and only that, went on: on transmit, uroce's packets
  # of the class on the wire (a dropped one is not); on receive, rxe's packets in uroce's
  # capture (its device had them).
  local took passed classes where="uroce's capture"
  took=$(stat_sum "${d}_packets" "$s")
  if [[ $d == tx ]]; then
    passed=$own_sent where='the wire'
    if [[ -n $cls ]]; then
      classes=$("$py" "$here/pcap_summary.py" --classes "$dir/tap.pcap" "$h_ip" | sed -n 's/.* classes //p')
      passed=0
      [[ ,$classes, =~ ,$cls:([0-9]+), ]] && passed=${BASH_REMATCH[1]}
    fi
  else
    passed=$u_captured
  fi
  ((took - lost == passed)) ||
    { case_fail "uroce's $d stage took $took packets${cls:+ of class $cls} and dropped $lost, but $where has $passed"; return 1; }
  for k in retry_exceeded_err retry_rnr_exceeded_err; do
    (($(stat_sum "$k" "$s") == 0)) || { case_fail "uroce counted $k"; return 1; }
  done
  # What must have moved: u:COUNTER, uroce's; r:COUNTER, rxe's delta; r:retried, rxe's
  # completer_retry_err + rcvd_seq_err.
  local want=() w v got=
  case $kind in
    ureq* | uatomic*) want=(u:retransmitted_pkts r:out_of_seq_request) ;;
    uread*) want=(r:retried u:duplicate_request) ;;
    uack*) [[ $prog == ib_atomic_bw ]] && want=(r:retried u:duplicate_request) ;;
    utx*)
      if [[ $server == vm ]]; then
        want=(u:retransmitted_pkts r:out_of_seq_request)
      else
        want=(r:retried u:duplicate_request)
      fi
      ;;
    urx*)
      if [[ $server == host ]]; then
        want=(u:send_seq_err r:retried)
      elif [[ $prog == ib_read_bw || $prog == ib_atomic_bw || $prog == uroce_verbs_check ]]; then
        want=(u:retransmitted_pkts r:duplicate_request)
      fi
      ;;
  esac
  for w in u:retransmitted_pkts u:duplicate_request u:send_seq_err u:rcvd_seq_err \
    r:out_of_seq_request r:duplicate_request r:retried; do
    case $w in
      u:*) v=$(stat_sum "${w#u:}" "$s") ;;
      r:retried) v=$(($(delta completer_retry_err "$b" "$a") + $(delta rcvd_seq_err "$b" "$a"))) ;;
      r:*) v=$(delta "${w#r:}" "$b" "$a") ;;
    esac
    if [[ " ${want[*]} " == *" $w "* ]]; then
      ((v > 0)) ||
        { case_fail "uroce's stage dropped $lost packets ($by_class), but $w stayed 0 (u: uroce's counter, r: rxe's)"; return 1; }
    fi
    got+="${got:+ }$w+$v"
  done
  ufaults_note="uroce's $d stage dropped $lost ($by_class; '$spec'); ${got}${want[*]:+ (required: ${want[*]})}"
  return 0
}

# run_case NAME SERVER KIND LIMIT PROG ARGS...
#   SERVER: host (uroce's side serves) or vm; KIND: clean, lossN and ilossN (netem in the VM:
#   N% of what rxe sends, of what it receives), rnr, cmdrop:... (run_cm_once), or one of
#   uroce_fault_spec's (ureqN, uatomicN, uackN, ureadN, utxN, urxN: uroce's own stage)
run_case() {
  local name=$1 server=$2 kind=$3 limit=$4 prog=$5
  shift 5
  [[ $name =~ $cases_re ]] || return 0
  local dir=$out/$name t0=$SECONDS result
  note "case $name: $prog $* ($([[ $server == host ]] && echo 'uroce serves' || echo 'rxe serves'))"
  # `runner`: run_once (PROG ARGS are a verbs program's), or run_cm_once (see there).
  "${runner:-run_once}" "$dir" "$server" "$kind" "$limit" "$prog" "$@"
  # perftest calibrates its cycle counter before reporting and gives up when it was
  # preempted while sampling (r^2 < 0.9): the measuring tool, not the run. Once more.
  if [[ -n $why ]] && grep -qs 'Correlation coefficient' "$dir/host.log" "$dir/vm.log"; then
    note "  perftest's clock calibration failed ($why); running once more"
    "${runner:-run_once}" "$dir" "$server" "$kind" "$limit" "$prog" "$@"
  fi
  # perftest -R: the client connects its test QP as soon as the handshake over its first
  # connection is done, while the server has still to listen for it; the VM's server, under
  # emulation, is sometimes slower than uroce's client (and the other way), and the CM
  # rejects the REQ (no listener: reason 8). perftest 4.5's client then retries through freed
  # memory (rdma_cm_destroy_cma frees the nodes it connects again), failing. The tool's race, not
  # the run's (1 attempt in 2 lost it in some full runs of the group): the whole run again, up to
  # 10 attempts, as later perftest retries its connect 10 times. qperf 0.4.11 (Debian 12's) has
  # a race of the same kind: its server sends the client the port of its test's rdma_cm ID
  # before it calls rdma_listen on it (qperf after 0.4.11 listens first: "Fix rdmacm race"),
  # and a REQ that comes first is REJECTED; the client says "unexpected event from RDMA CM:
  # Event rejected", without the reason: the wire's REJ must give reason 8 (invalid service
  # ID: no listener).
  local attempt=1
  while [[ -n $why && ${runner:-} == run_cm_once ]] && ((attempt < 10)) &&
    cm_race_lost "$dir" "$server" "$1"; do
    note "  ${1%% *}'s test connection came before its server listened ($why); once more"
    # The failed attempt's evidence stays beside the case's.
    rm -rf "$dir.attempt$attempt"
    mv "$dir" "$dir.attempt$attempt"
    "$runner" "$dir" "$server" "$kind" "$limit" "$prog" "$@"
    attempt=$((attempt + 1))
  done
  # A guest whose network died under the case (the known qemu wedge: its virtio receive path
  # stops, it answers no ping, nothing counts a drop) failed the case whatever uroce did. The VM
  # is booted again (vm_health) and the case runs once more on it; the first attempt's evidence
  # and the reason go beside the case's folder and into the result line, so that the summary
  # still shows every wedge. Only a dead network on a guest that still answers its console
  # qualifies (vm_health sets vm_unfit to the reason, vm_net_dead then); a guest that does not
  # answer, or a program of the case that survives kill -9, fails the case as before.
  local wedged='' checked=''
  # The harness's own test of this (UROCE_INTEROP_WEDGE_TEST, a regex of case names): after the
  # first attempt of such a case its guest's eth0 goes down through the console, which leaves
  # the guest as the wedge does, and the attempt fails.
  if [[ -n ${UROCE_INTEROP_WEDGE_TEST:-} && $name =~ $UROCE_INTEROP_WEDGE_TEST ]]; then
    vm 20 'ip link set eth0 down' >/dev/null 2>&1 || true
    why=${why:-"the harness's wedge test took the guest's eth0 down after the case"}
  fi
  if [[ -n $why && ! $name =~ $known_failures ]]; then
    vm_health "$dir"
    checked=1
    if [[ -n $vm_net_dead ]]; then
      wedged="$why; then the guest's network was dead: $vm_unfit"
      note "  failed on a guest whose network died ($wedged): once more on the rebooted VM;" \
        "the first attempt's logs: $dir.wedged"
      failure_evidence "$dir"
      rm -rf "$dir.wedged"
      mv "$dir" "$dir.wedged"
      echo "$wedged" >"$dir.wedged/FAILED"
      "${runner:-run_once}" "$dir" "$server" "$kind" "$limit" "$prog" "$@"
      n_wedged=$((n_wedged + 1))
      checked=
    fi
  fi
  if [[ -z $why ]]; then
    result="PASS${wedged:+ (once more on a rebooted VM; the first attempt: $wedged)}"
    n_pass=$((n_pass + 1))
    [[ -n ${UROCE_INTEROP_KEEP:-} ]] ||
      rm -f "$dir/tap.pcap" "$dir/uroce.pcap" "$dir/devd.pcap" "$dir".attempt*/*.pcap \
        "$dir".wedged/*.pcap
  elif [[ $name =~ $known_failures ]]; then
    result="KNOWN FAILURE: $why"
    n_known=$((n_known + 1))
    echo "$why" >"$dir/FAILED"
  else
    result="FAIL: $why"
    n_fail=$((n_fail + 1))
    echo "$why" >"$dir/FAILED"
    result+="${wedged:+ (and the first attempt: $wedged)}"
    note "  FAIL: $why; logs and captures: $dir"
    failure_evidence "$dir"
  fi
  if [[ -n $why && -z $checked ]]; then vm_health "$dir"; fi
  results+=("$(printf '%-58s %4ds  %s' "$name" $((SECONDS - t0)) "$result")")
  note "  $result ($((SECONDS - t0)) s)"
}

# After a failed case: is the VM still fit for the cases after it? Its console answers, no
# program of the case still runs there (they are killed, and named), and the guest and the
# namespace reach each other: ping both ways, and a TCP connection from the guest to the host,
# as the VM's perftest and uroce_verbs_check clients make. The guest's state goes to
# DIR/vm-health.txt either way (load, memory, processes, qdiscs with their counters, eth0's and
# the tap's counters, rxe's QPs, the TCP/UDP MIB). When it is not fit, the VM is booted again
# and its MTU set again, so that one wedged guest fails one case, not every case after it.
stray_re='(ib_[a-z_]+|ibv_[a-z_]+|uroce_verbs_check|rping|ucmatose|udaddy|rdma_server|rdma_client|cmtime|qperf)'
health_port=18650
vm_unfit='' vm_net_dead=''
vm_health() { # DIR; sets vm_unfit (why the VM was not fit, or empty) and vm_net_dead
  local dir=$1 f=$1/vm-health.txt sick= net_dead= text listener line
  vm_unfit='' vm_net_dead=''
  text=$(vm 30 "cat /proc/loadavg; free; ps -o pid,ppid,stat,rss,args | grep -v ' \\[[^]]*\\]$'; /sbin/tc -s qdisc show; \
cat /proc/net/dev; rdma resource show qp; grep -E '^(Tcp|Udp):' /proc/net/snmp; \
for p in \$(ps -o pid,args | awk '\$2 ~ /(^|\/)$stray_re\$/ { print \$1 }'); do \
echo \"stray: \$(tr '\\0' ' ' </proc/\$p/cmdline)\"; kill -9 \$p; done; sleep 1; \
for p in \$(ps -o pid,args | awk '\$2 ~ /(^|\/)$stray_re\$/ { print \$1 }'); do \
echo \"unkillable: \$(tr '\\0' ' ' </proc/\$p/cmdline)\"; done; true" 2>&1) ||
    sick="its console did not answer"
  {
    echo "== the guest"
    echo "$text"
    echo "== the host's side: tap0, br0"
    inns ip -s link show tap0 || true
    inns ip -s link show br0 || true
  } >"$f" 2>&1
  while IFS= read -r line; do
    if [[ $line == stray:* ]]; then note "  VM: $line (killed)"; fi
    if [[ $line == unkillable:* ]]; then sick="a program of the case survived kill -9 (${line#*: })"; fi
  done <<<"$text"
  if [[ -z $sick ]] && ! inns ping -c 3 -i 0.2 -W 2 "$vm_ip" >>"$f" 2>&1; then
    sick="the host cannot ping it" net_dead=1
  fi
  if [[ -z $sick ]] && ! vm 20 "ping -c 3 -W 2 $host_ip" >>"$f" 2>&1; then
    sick="it cannot ping the host" net_dead=1
  fi
  if [[ -z $sick ]]; then
    # One connection from the guest to a listener in the namespace (bounded).
    inns timeout 50 "$py" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(45)
c, _ = s.accept()
print("accepted", c.recv(16).decode().strip())' "$host_ip" "$health_port" >"$dir/health-tcp.txt" 2>&1 &
    listener=$!
    ns_listening "$health_port" "$listener" 100 || true
    vm 30 "echo tcp-ok | nc -w 5 $host_ip $health_port; echo nc-exit=\$?" >>"$f" 2>&1 || true
    wait "$listener" || true
    cat "$dir/health-tcp.txt" >>"$f"
    grep -q '^accepted tcp-ok' "$dir/health-tcp.txt" ||
      sick="its TCP connection to the host failed" net_dead=1
  fi
  [[ -z $sick ]] && return 0
  vm_unfit=$sick
  # The guest answers on its console and nothing of the case survived, but its network is
  # dead: what the known wedge looks like. (A console that does not answer may be a crashed
  # guest kernel, which a packet could have caused: not this.)
  vm_net_dead=$net_dead
  note "  the VM is not fit for the next case: $sick (see $f); booting it again"
  vm_reboot "$boot_initrd"
  vm_gids
  netem=none
  [[ -n $mtu ]] && set_mtu "$mtu"
  return 0
}

# A failed case's evidence in the output itself (CI shows the output, not the folders): the
# last lines of both programs' logs, uroce's retry counters and rxe's counter changes.
failure_evidence() { # DIR
  local f line
  for f in host.log vm.log; do
    [[ -s $1/$f ]] || continue
    while IFS= read -r line; do note "    $f: ${line:0:200}"; done < <(tail -n 4 "$1/$f")
  done
  if [[ -s $1/uroce-stats.txt ]]; then
    line=$(grep -m1 '^link ' "$1/uroce-stats.txt" | grep -oE '(ack_timeouts|implied_nak_seq_err|retry_exceeded_err|retransmitted_pkts|out_of_seq_request|duplicate_request|rcvd_seq_err|send_seq_err|qp_dropped_pkts) [0-9]+' | tr '\n' ' ')
    [[ -z $line ]] || note "    uroce: $line"
  fi
  [[ -s $1/counters-delta.txt ]] && note "    rxe: $(head -c 300 "$1/counters-delta.txt")"
  return 0
}

# 0 when the failed rdma_cm run in DIR lost its program's own race (see run_case): perftest's or
# qperf's client connected before its server listened, and was REJECTED for it.
cm_race_lost() { # DIR SERVER SERVER_COMMAND
  local client_log=$1/vm.log
  [[ $2 == vm ]] && client_log=$1/host.log
  case $3 in
    ib_*) grep -qs 'RDMA_CM_EVENT_REJECTED; error: 8' "$client_log" ;;
    qperf*)
      grep -qs 'unexpected event from RDMA CM: Event rejected' "$client_log" &&
        "$uroce" pcap dump "$1/tap.pcap" 2>/dev/null | grep -q 'reason 0x0008 (invalid_service_id)'
      ;;
    *) return 1 ;;
  esac
}

# Both directions: NAME.uroce_server (the VM's program connects to uroce's) and
# NAME.uroce_client.
both() { # NAME KIND LIMIT PROG ARGS...
  local name=$1
  shift
  run_case "$name.uroce_server" host "$@"
  run_case "$name.uroce_client" vm "$@"
}

# ---- rdma_cm programs (rdmacm group): unmodified on both sides, connecting through the kernel's
# rdma_cm (rdma_ucm, ib_cm) over rxe0 in the VM and through uroce's CM (in the device's
# coordinator, uroce-devd) over the drop-in librdmacm.so.1 on the host. ----
#
# run_cm_once DIR SERVER KIND LIMIT ipv4|ipv6 'SERVER COMMAND' 'CLIENT COMMAND': in the commands
# @S@ stands for the server's address and @P@ for the case's port. KIND: clean, or
# cmdrop:DROP,... (set_cmdrop). The host's programs run with UROCE_DEVICES naming the one device
# of the case's address family, UROCE_DEVD_PCAP (the coordinator's capture: the CM MADs) and
# UROCE_DEVD_LINGER_MS=0: the coordinator exits once nobody uses the device and its CM has
# nothing left to retransmit, and the run waits for that (bounded) before it stops tcpdump, so
# that the captures hold every retransmission. The server is ready when its ID listens: `uroce
# stats` on the host, `rdma resource show cm_id` in the VM; qperf's when its TCP port listens
# (its control connection: it becomes an rdma_cm listener only when a test starts, on a port of
# its own). cmtime's and qperf's servers serve until killed: once their client is done (and
# qperf's child for the test has exited), they are stopped, and that counts as exit 0 when they
# were still running.
run_cm_once() {
  local dir=$1 server=$2 kind=$3 limit=$4 family=$5 scmd=$6 ccmd=$7
  why=
  rm -rf "$dir"
  mkdir -p "$dir"
  port=$((port >= 18999 ? 18700 : port + 1))
  local h_ip=$host_ip v_ip=$vm_ip fam=4
  [[ $family == ipv6 ]] && { h_ip=$host_ip6 v_ip=$vm_ip6 fam=6; }
  local saddr=$h_ip
  [[ $server == vm ]] && saddr=$v_ip
  scmd=${scmd//@S@/$saddr} ccmd=${ccmd//@S@/$saddr}
  scmd=${scmd//@P@/$port} ccmd=${ccmd//@P@/$port}
  local prog=${scmd%% *} lport=$port ready=cm stays= nodata=
  [[ $prog == udaddy ]] && lport=7174  # udaddy's one port (its -p is the port space)
  [[ $prog == qperf ]] && ready=tcp
  [[ $prog == cmtime || $prog == qperf ]] && stays=1
  # cmtime only connects and disconnects: its QPs send nothing, all its packets are CM MADs.
  [[ $prog == cmtime ]] && nodata=1
  local drops= drops_note= lost=0
  case $kind in
    cmdrop:*) drops=${kind#cmdrop:}; set_cmdrop "$fam" "$drops" ;;
    *) set_netem none ;;
  esac
  devd_gone "$h_ip" 0 || { case_fail "a coordinator of an earlier case still serves $h_ip"; return 0; }
  vm_case_begin "$dir/counters-before.txt" || fail "cannot read rxe's counters"
  start_tcpdump "$dir/tap.pcap" "$dir/tcpdump.log"
  local env=("${host_env[@]}" "UROCE_DEVICES=uroce0=$h_ip" "UROCE_PCAP=$dir/uroce.pcap"
    "UROCE_STATS_FILE=$dir/uroce-stats.txt" "UROCE_DEVD_PCAP=$dir/devd.pcap"
    "UROCE_DEVD_LINGER_MS=0")
  local hrc=0 sargv cargv
  read -ra sargv <<<"$scmd"
  read -ra cargv <<<"$ccmd"
  if [[ $server == host ]]; then
    ip netns exec "$ns" "${env[@]}" timeout -k 5 "$limit" "${sargv[@]}" >"$dir/host.log" 2>&1 &
    host_pid=$!
    local up=
    for _ in $(seq 300); do
      if [[ $ready == tcp ]]; then
        inns ss -Hltn "sport = :$lport" 2>/dev/null | grep -q . && { up=1; break; }
      else
        inns env "UROCE_DEVICES=uroce0=$h_ip" "$uroce" stats 2>/dev/null |
          grep -Eq "^cm_id $h_ip:4791 pid [0-9]+ ps [a-z]+ port $lport state listening" &&
          { up=1; break; }
      fi
      kill -0 "$host_pid" 2>/dev/null || break
      sleep 0.1
    done
    [[ -n $up ]] || case_fail "uroce's $prog did not start listening"
    if [[ -z $why ]]; then
      vm $((limit + 30)) "timeout $limit $ccmd 2>&1; echo exit=\$?" >"$dir/vm.log" || true
    fi
    # A client that failed (or never ran) leaves a server that waits for it, and a server that
    # serves until killed waits for the next: stopped (timeout passes the signal on), not waited
    # for. The latter first lets a child of its that serves the test (qperf's) exit (bounded).
    local client_ok= stopped=
    [[ -z $why ]] && grep -q '^exit=0' "$dir/vm.log" && client_ok=1
    if [[ -n $stays && -n $client_ok ]]; then
      local sp
      sp=$(pgrep -P "$host_pid" | head -1 || true)
      for _ in $(seq 100); do
        [[ -n $sp ]] && pgrep -P "$sp" >/dev/null || break
        sleep 0.1
      done
    fi
    if [[ -z $client_ok || -n $stays ]] && kill -0 "$host_pid" 2>/dev/null; then
      kill "$host_pid" 2>/dev/null && stopped=1
    fi
    wait "$host_pid" || hrc=$?
    host_pid=
    if [[ -n $stays && -n $client_ok && -n $stopped ]]; then
      echo "(the harness stopped the server, which serves until killed: exit $hrc)" >>"$dir/host.log"
      hrc=0
    fi
  else
    # The server's pid in /tmp/srv.pid (busybox's timeout runs the program in its own process).
    local listening="rdma resource show cm_id 2>/dev/null | \
grep -Eq 'state LISTEN .*src-addr [^ ]*:$lport( |\$)'"
    [[ $ready == tcp ]] &&  # hex port in /proc/net/tcp{,6}, state 0A = LISTEN
      listening="grep -q ':$(printf '%04X' "$lport") [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6"
    vm 60 "rm -f /tmp/srv.log; (timeout $limit $scmd >/tmp/srv.log 2>&1 & echo \$! >/tmp/srv.pid; \
wait \$!; echo \"exit=\$?\" >>/tmp/srv.log) & n=0; until $listening; do n=\$((n+1)); \
[ \$n -gt 300 ] && break; sleep 0.1; done; [ \$n -le 300 ]" >"$dir/vm-start.log" ||
      case_fail "the VM's $prog did not start listening"
    if [[ -z $why ]]; then
      ip netns exec "$ns" "${env[@]}" timeout -k 5 "$limit" "${cargv[@]}" >"$dir/host.log" 2>&1 ||
        hrc=$?
    fi
    # A client that failed (or never ran) leaves a server that waits for it, and a server that
    # serves until killed waits for the next: stopped, not waited for. The latter first lets
    # its children (qperf's for the test) exit (bounded), and marks its log when it was still
    # running.
    local stop=
    if ((hrc == 0)) && [[ -z $why && -n $stays ]]; then
      stop='p=$(cat /tmp/srv.pid); n=0; while [ $n -lt 100 ] && grep -qs "^[0-9]* ([^)]*) [A-Z] $p " \
/proc/[0-9]*/stat; do n=$((n+1)); sleep 0.1; done; kill $p 2>/dev/null && \
echo "(the harness stopped the server, which serves until killed)" >>/tmp/srv.log; '
    elif ((hrc != 0)) || [[ -n $why ]]; then
      stop='kill $(cat /tmp/srv.pid) 2>/dev/null; '
    fi
    vm $((limit + 30)) "${stop}wait; cat /tmp/srv.log" >"$dir/vm.log" || true
    # Stopped by the harness (SIGTERM: 143) while it served: a success.
    if [[ -n $stays ]] && grep -q '^(the harness stopped the server' "$dir/vm.log"; then
      sed -i 's/^exit=143\r\?$/exit=0 (143: stopped by the harness)/' "$dir/vm.log"
    fi
  fi
  echo "exit=$hrc" >>"$dir/host.log"
  # A DREQ the peer has not answered yet is the coordinator's to retransmit: it stays up until
  # it is answered or given up (15 retries of a few seconds).
  devd_gone "$h_ip" 120 || case_fail "uroce's coordinator did not exit within 120 s of the program"
  kill -INT "$tcpdump_pid"
  wait "$tcpdump_pid" || true
  tcpdump_pid=
  vm_case_end "$dir/counters-after.txt" "$dir/dmesg.txt" || fail "cannot read rxe's counters"
  if [[ -n $drops ]]; then
    cmdrop_counts >"$dir/cmdrops.txt"
    # uroce's MADs that the guest dropped before rxe saw them.
    lost=$(awk '$1 % 10 == 1 { n += $2 } END { print n + 0 }' "$dir/cmdrops.txt")
  fi
  [[ -n $why ]] && return 0
  local expect_client expect_server=
  local bad_re='rdma_get_cm_event|Bad file descriptor|RDMA_CM_EVENT_(REJECTED|UNREACHABLE|CONNECT_ERROR|ADDR_ERROR|ROUTE_ERROR)'
  case $prog in
    rping) expect_client='^ping data: rdma-ping-99: ' expect_server='^server ping data: rdma-ping-99: ' ;;
    ucmatose | udaddy) expect_client='^data transfers complete' expect_server=$expect_client ;;
    rdma_server) expect_client='^rdma_client: end 0$' expect_server='^rdma_server: end 0$' ;;
    # cmtime's table comes whatever happened (a failed step only prints "error" or "failure"
    # lines), and its server prints nothing: the CM MADs are counted below.
    cmtime) expect_client='^disconnect +: +[0-9.]+' bad_re+='|failure|failing' ;;
    qperf) expect_client='^ *(bw|latency) += +[0-9.]+ ' bad_re+='|unexpected event' ;;
    *) expect_client=$pt_result ;;
  esac
  local cm=1
  check_run "$scmd" "$ccmd"
  [[ -z $why && $prog == cmtime ]] && check_cmtime "$ccmd"
  return 0
}

# cmtime -c N: every one of the N connections was established and torn down, as the CM MADs
# show: the client sent N REQs, RTUs and DREQs, the server N REPs and DREPs (or more: a MAD may
# be retransmitted). Reads run_cm_once's dir, server, h_ip and v_ip.
check_cmtime() { # CLIENT_COMMAND
  local n=${1##*-c } client_ip=$h_ip server_ip=$v_ip k side mad got line
  n=${n%% *}
  [[ $server == host ]] && { client_ip=$v_ip server_ip=$h_ip; }
  for k in client:REQ client:RTU client:DREQ server:REP server:DREP; do
    side=${k%%:*} mad=${k#*:}
    [[ $side == client ]] && line=$(grep "^$client_ip " "$dir/packets-cm.txt")
    [[ $side == server ]] && line=$(grep "^$server_ip " "$dir/packets-cm.txt")
    got=0
    [[ $line =~ (^|[ ,])$mad:([0-9]+) ]] && got=${BASH_REMATCH[2]}
    ((got >= n)) || { case_fail "cmtime -c $n, but its $side sent $got ${mad}s"; return 0; }
  done
}

# cm_both NAME KIND LIMIT ipv4|ipv6 'SERVER COMMAND' 'CLIENT COMMAND': both directions.
cm_both() {
  local name=$1
  shift
  runner=run_cm_once run_case "$name.uroce_server" host "$@"
  runner=run_cm_once run_case "$name.uroce_client" vm "$@"
}

# perftest: -F (no cpufreq check: the VM has none), one size per run, few iterations (the VM
# is emulated: rxe moves ~20 MB/s and an exchange takes about a millisecond).
perftest_cases() { # MTU
  local t k s n
  for t in send write read; do
    for k in bw lat; do
      for s in 1 65536 1048576; do
        [[ $k == lat && $s == 65536 ]] && continue
        n=100
        ((s >= 65536)) && n=10
        both "ib_${t}_$k.m$1.s$s" clean 120 "ib_${t}_$k" -F -m "$1" -s "$s" -n "$n"
      done
    done
  done
  for k in bw lat; do
    both "ib_atomic_$k.m$1" clean 120 "ib_atomic_$k" -F -m "$1" -n 100
  done
}

note "group $group"
case $group in
  pingpong)
    for m in 1024 4096; do
      set_mtu "$m"
      for t in rc uc srq; do
        both "ibv_${t}_pingpong.m$m.s1" clean 90 "ibv_${t}_pingpong" -m "$m" -s 1 -n 20 --chk
        # srq_pingpong runs 16 QPs on one SRQ and stops when it has counted `-n` sends and
        # receives over all of them, with up to 15 more sends still outstanding: the side that
        # finishes last retries those against a peer that is gone (retry count 7: forever on
        # rxe; 7 retries on uroce, as IBTA and hardware, then RETRY_EXC_ERR) until it destroys
        # its QPs. With 1 MiB messages that is a flood
        # (rxe in the VM once soft-locked its CPU in it, at MTU 4096): one QP there.
        local_q=()
        [[ $t == srq ]] && local_q=(-q 1)
        both "ibv_${t}_pingpong.m$m.s1048576" clean 120 "ibv_${t}_pingpong" -m "$m" -s 1048576 \
          -n 5 --chk "${local_q[@]}"
      done
      # UD: one packet per message, at most the MTU; no -m (the port's MTU applies).
      both "ibv_ud_pingpong.m$m.s1" clean 90 ibv_ud_pingpong -s 1 -n 20 --chk
      both "ibv_ud_pingpong.m$m.s$m" clean 90 ibv_ud_pingpong -s "$m" -n 20 --chk
    done
    ;;
  perftest_1024 | perftest_4096)
    set_mtu "${group#perftest_}"
    perftest_cases "$mtu"
    ;;
  verbs)
    for m in 1024 4096; do
      set_mtu "$m"
      both "verbs_check.m$m" clean 300 uroce_verbs_check -m "$m" --timeout 60
    done
    # Memory windows (issue 41; rxe has had them since 5.14): a type 2 window bound, written
    # through and invalidated by SEND with Invalidate, at every size, both directions.
    both verbs_check.mw clean 300 uroce_verbs_check -o mw -m 4096 --timeout 60
    ;;
  ibta15)
    # ATOMIC WRITE both ways (rdma-core 44's rxe provider has ibv_wr_atomic_write), FLUSH with
    # uroce the requester only: the provider has no ibv_wr_flush before rdma-core 47, while the
    # kernel's responder has FLUSH since 6.2 (the MR and the QP with IBV_ACCESS_FLUSH_GLOBAL).
    # uroce's FLUSH carries rxe's ICRC (UROCE_RXE_FLUSH_PEERS, above), rxe's answer (a READ
    # Response Only) the IBTA's. The other direction (rxe's FLUSH, which a uroce receiver
    # accepts in either form) needs a VM with rdma-core 47 or later.
    set_mtu 1024
    note "guest kernel: $(vm 30 'uname -r' 2>/dev/null | tr -d '\r' | tail -1)"
    both verbs_check.atomic_write clean 300 uroce_verbs_check -o atomic_write -m 1024 --timeout 60
    run_case verbs_check.flush.uroce_client vm clean 60 uroce_verbs_check -o flush -m 1024 \
      -s 1,1024,1025,4096,65536 -n 5 --timeout 30
    ;;
  rdmacm)
    set_mtu 1024
    for f in ipv4 ipv6; do
      cm_both "rping.$f" clean 60 "$f" 'rping -s -a @S@ -p @P@ -C 100 -v' \
        'rping -c -a @S@ -p @P@ -C 100 -v'
    done
    # Several connections on one channel (ucmatose), UD over SIDR (udaddy).
    for f in ipv4 ipv6; do
      cm_both "ucmatose.$f" clean 60 "$f" 'ucmatose -b @S@ -p @P@ -c 2 -C 10' \
        'ucmatose -s @S@ -p @P@ -c 2 -C 10'
      cm_both "udaddy.$f" clean 60 "$f" 'udaddy -b @S@ -c 2 -C 10' 'udaddy -s @S@ -c 2 -C 10'
      # Synchronous endpoints (rdma_getaddrinfo, rdma_create_ep, rdma_get_request, one SEND
      # each way).
      cm_both "rdma_server.$f" clean 60 "$f" 'rdma_server -s @S@ -p @P@' \
        'rdma_client -s @S@ -p @P@'
    done
    # 10 connections set up and torn down at once (cmtime: its server serves until killed).
    cm_both cmtime.ipv4 clean 60 ipv4 'cmtime -b @S@ -p @P@' 'cmtime -s @S@ -p @P@ -c 10'
    # qperf's RC tests over rdma_cm (-cm1), one test per client run. rc_bw sends a number of
    # messages (-n), not for a time (-t): a timed rc_bw stops with up to 1024 messages
    # outstanding and disconnects, so that the ACKs of the last ones reach a QP in the error
    # state, which rxe does not count (nor can the tap tell which they were). rc_lat ignores -n
    # (it would never end): 1 s, with one message outstanding at most. qperf 0.4.11's rdma_cm
    # is IPv4 only (its client resolves the server as AF_INET, its server binds INADDR_ANY).
    cm_both qperf.rc_bw clean 60 ipv4 'qperf -lp @P@' 'qperf -cm1 -lp @P@ -n 200 @S@ rc_bw'
    cm_both qperf.rc_lat clean 60 ipv4 'qperf -lp @P@' 'qperf -cm1 -lp @P@ -t 1 @S@ rc_lat'
    # perftest with -R: rdma_cm finds the device and connects the QPs (rdma_getaddrinfo). Over
    # IPv4 only: Debian 12's perftest (4.5-0.17) asks for AF_INET in every rdma_cm path (client,
    # server, rdma_getaddrinfo) whatever --ipv6 says (that option chooses the GID of the
    # non-CM exchange); IPv6 over rdma_cm came with perftest 23.07's --ipv6-addr.
    for t in ib_send_bw ib_write_bw ib_read_lat; do
      cm_both "$t.R" clean 90 ipv4 "$t -R -F -n 100 -p @P@" "$t -R -F -n 100 -p @P@ @S@"
    done
    # Lost CM MADs, each retransmitted by its sender as the CMs' timers say (seconds each: the
    # REQ after 2 * 2^(18-8) + 2^(20-8) ms from uroce, about that from rxe; the REP after
    # 2^(20-8) ms from either). rxe's RTU is lost and uroce's REP timer brings it again; uroce's
    # RTU is lost and rxe's REP timer does. rxe's DREQ is dropped only where its program waits
    # for the DREP (ucmatose's server): the kernel stops retrying a DREQ once its ID is
    # destroyed, and rping's client destroys it as soon as it has sent it.
    runner=run_cm_once run_case cmdrop.rping.uroce_client vm \
      cmdrop:uroce-REQ,rxe-REP,uroce-RTU,uroce-DREQ 90 ipv4 \
      'rping -s -a @S@ -p @P@ -C 100 -v' 'rping -c -a @S@ -p @P@ -C 100 -v'
    runner=run_cm_once run_case cmdrop.rping.uroce_server host cmdrop:rxe-REQ,uroce-REP,rxe-RTU \
      90 ipv4 'rping -s -a @S@ -p @P@ -C 100 -v' 'rping -c -a @S@ -p @P@ -C 100 -v'
    runner=run_cm_once run_case cmdrop.ucmatose.uroce_server host cmdrop:uroce-DREQ 90 ipv4 \
      'ucmatose -b @S@ -p @P@ -c 2 -C 10' 'ucmatose -s @S@ -p @P@ -c 2 -C 10'
    runner=run_cm_once run_case cmdrop.ucmatose.uroce_client vm cmdrop:rxe-DREQ 90 ipv4 \
      'ucmatose -b @S@ -p @P@ -c 2 -C 10' 'ucmatose -s @S@ -p @P@ -c 2 -C 10'
    ;;
  faults)
    set_mtu 1024
    # CI runs one program per fault class and direction; UROCE_INTEROP_FULL=1 (bench/interop_full.sh)
    # adds the other programs of each class, which go through the same recovery paths with other
    # opcodes (about two minutes more).
    full() { [[ -n ${UROCE_INTEROP_FULL:-} ]] && "$@"; return 0; }
    # Enough packets from the VM in either direction (data, or one ACK per message) that
    # netem drops some even at 1%: 4 KiB messages (4 packets at MTU 1024), 1000 of them.
    # At 1% only uroce_verbs_check (every operation, UD too); perftest's tools at 1% took ~47 s
    # a run and went through the same recovery paths as at 5%.
    both loss1.verbs_check loss1 300 uroce_verbs_check -m 1024 -n 2 --timeout 120
    both loss5.ib_write_bw loss5 180 ib_write_bw -F -m 1024 -s 4096 -n 1000
    both loss5.ib_read_bw loss5 180 ib_read_bw -F -m 1024 -s 4096 -n 1000
    both loss5.ib_send_bw loss5 180 ib_send_bw -F -m 1024 -s 4096 -n 1000
    full both loss5.ib_send_lat loss5 180 ib_send_lat -F -m 1024 -s 4096 -n 500
    both loss5.ib_atomic_bw loss5 180 ib_atomic_bw -F -m 1024 -n 1000
    # UD too: uroce_verbs_check's server asks again for a UD message that did not come.
    both loss5.verbs_check loss5 300 uroce_verbs_check -m 1024 -n 2 --timeout 120
    # The other way: the VM loses 5% of uroce's packets as they arrive (uroce's requester
    # retries, its responder answers re-requests: READs from their middle, atomics replayed).
    for t in ib_write_bw ib_send_bw; do
      full both "iloss5.$t" iloss5 180 "$t" -F -m 1024 -s 4096 -n 1000
    done
    both "iloss5.ib_read_bw" iloss5 180 ib_read_bw -F -m 1024 -s 4096 -n 1000
    both "iloss5.ib_atomic_bw" iloss5 180 ib_atomic_bw -F -m 1024 -n 1000
    full both "iloss5.ib_send_lat" iloss5 180 ib_send_lat -F -m 1024 -s 4096 -n 500
    both "iloss5.verbs_check" iloss5 300 uroce_verbs_check -m 1024 -n 2 --timeout 120
    both "rnr.verbs_check" rnr 300 uroce_verbs_check -m 1024 -n 2 --rnr --timeout 120
    # uroce's own fault stage (UROCE_FAULTS in the host's program; the VM runs no netem): 5% of
    # one class of what uroce sends, where uroce sends that class: its requests as the requester
    # (perftest's client; its server too with -b, both sides sending), its atomic requests, its
    # ACKs and atomic ACKs as the responder, its READ responses; then 5% of everything it sends
    # (uroce_verbs_check) and of everything it receives.
    local_args=(-F -m 1024 -s 4096 -n 1000)
    run_case "ureq5.ib_write_bw.uroce_client" vm ureq5 180 ib_write_bw "${local_args[@]}"
    full run_case "ureq5.ib_send_bw.uroce_client" vm ureq5 180 ib_send_bw "${local_args[@]}"
    run_case "ureq5.ib_read_bw.uroce_client" vm ureq5 180 ib_read_bw "${local_args[@]}"
    full run_case "ureq5.ib_write_bw.b.uroce_server" host ureq5 180 ib_write_bw -b "${local_args[@]}"
    run_case "ureq5.ib_send_bw.b.uroce_server" host ureq5 180 ib_send_bw -b "${local_args[@]}"
    run_case uatomic5.ib_atomic_bw.uroce_client vm uatomic5 180 ib_atomic_bw -F -m 1024 -n 1000
    run_case uack5.ib_write_bw.uroce_server host uack5 180 ib_write_bw "${local_args[@]}"
    full run_case uack5.ib_send_bw.uroce_server host uack5 180 ib_send_bw "${local_args[@]}"
    run_case uack5.ib_atomic_bw.uroce_server host uack5 180 ib_atomic_bw -F -m 1024 -n 1000
    run_case uread5.ib_read_bw.uroce_server host uread5 180 ib_read_bw "${local_args[@]}"
    both utx5.verbs_check utx5 300 uroce_verbs_check -m 1024 -n 2 --timeout 120
    both urx5.ib_write_bw urx5 180 ib_write_bw "${local_args[@]}"
    full both urx5.ib_read_bw urx5 180 ib_read_bw "${local_args[@]}"
    both urx5.verbs_check urx5 300 uroce_verbs_check -m 1024 -n 2 --timeout 120
    ;;
esac
set_netem none

note "results ($group):"
printf '%s\n' "${results[@]}" | tee "$out/summary.txt"
note "$n_pass passed, $n_fail failed, $n_known known failures; $n_wedged case(s) ran once more after the guest's network died; per-case folders in $out"
((${#results[@]} > 0)) || fail "no case matched UROCE_INTEROP_CASES=$cases_re"
((n_fail == 0)) || fail "$n_fail case(s) failed: $(grep -c 'FAIL:' "$out/summary.txt") listed above"
note "PASS: group $group"
