#!/bin/bash
# Open MPI 4.1 (Debian's openmpi-bin) with pml ucx over uroce, between two network namespaces
# standing in for two hosts (issue 16):
#
#   mpi_test.sh LIBDIR UROCE MPI_CHECK NET [LOSS]
#
# Makes namespaces uroce-mpi-PID-a (NET.1) and -b (NET.2) joined by a veth pair
# (netns_lib.sh), and runs MPI_CHECK (tests/compat/mpi_check.c) as 4 ranks, 2 per namespace:
# mpirun runs in the first; it reaches the second ("host" NET.2 in the hostfile) through an rsh
# agent written here that enters that namespace with `ip netns exec`. Each namespace's ranks
# share its uroce0 (UROCE_DEVICES=uroce0=<its veth address>) through that namespace's
# uroce-devd. UCX_TLS=self,rc_verbs,ud_verbs: nothing but uroce between ranks (no shared memory,
# no TCP), also between the two ranks of a namespace.
#
# Passes when mpirun exits 0, mpi_check printed PASS (it verifies every result itself), and
# uroce's counters (UROCE_STATS_FILE, one file per namespace) show: two processes on each
# namespace's device, and each namespace's devices sent and received at least the bytes the
# ping-pong moved between the namespaces each way. With LOSS (a percentage, e.g. 1%), every
# rank's uroce device loses that share of the packets it sends to the other namespace (its
# fault stage: UROCE_FAULTS=dir=tx,peer=<other end>,loss=LOSS); then the counters must also show
# packets lost on both sides and RC packets retransmitted. Skipped (77) when not root (network
# namespaces, `uroce setup`) or when Open MPI or UCX is missing.
#
# With MPI_VIA_UROCE_RUN=1 the ranks are started as `mpirun ... uroce run -- MPI_CHECK`, the way
# the README's Open MPI section shows: no LD_LIBRARY_PATH is exported, so only `uroce run` (in every
# rank, on both "hosts") puts the drop-ins in front of the program, and the counters prove that
# uroce carried the traffic.
set -u
libdir=$1 uroce=$2 mpi_check=$3 net=$4 loss=${5:-}

source "$(dirname "$0")/require_lib.sh"
require_programs "openmpi-bin ucx-utils iproute2" mpirun ucx_info ip
require_root "(network namespaces, uroce setup)"
require_setup "$uroce"

tmp=$(mktemp -d)
source "$(dirname "$0")/netns_lib.sh"
netns_reap uroce-mpi
trap 'netns_pair_del; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
netns_pair "uroce-mpi-$$" "$net" || exit 1

# The environment each namespace's processes get: their device, their counters, their faults.
ns_env() { # ns_env ADDR OTHER_ADDR
  echo "UROCE_DEVICES=uroce0=$1"
  echo "UROCE_STATS_FILE=$tmp/$1.stats"
  [[ -n $loss ]] && echo "UROCE_FAULTS=dir=tx,peer=$2,loss=$loss,seed=16"
}
# The rsh agent: `agent HOST COMMAND...` as ssh is called, the command run by a shell in the
# namespace that holds HOST, with that namespace's environment.
cat >"$tmp/agent" <<EOF
#!/bin/bash
host=\$1
shift
case \$host in
  $ADDR_A) exec ip netns exec $NS_A env $(ns_env "$ADDR_A" "$ADDR_B" | tr '\n' ' ') /bin/sh -c "\$*" ;;
  $ADDR_B) exec ip netns exec $NS_B env $(ns_env "$ADDR_B" "$ADDR_A" | tr '\n' ' ') /bin/sh -c "\$*" ;;
esac
echo "agent: no namespace for host \$host" >&2
exit 255
EOF
chmod +x "$tmp/agent"
printf '%s slots=2\n' "$ADDR_A" "$ADDR_B" >"$tmp/hosts"

# The ranks only: a sanitizer build of the library needs its runtime loaded first (Open MPI and
# UCX are not instrumented), leaks of the programs themselves are not ours to report. mpirun and
# orted stay without it (with it, each takes some 20 s to start).
preload=()
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  preload=(-x "LD_PRELOAD=${UROCE_TEST_PRELOAD:-}" -x ASAN_OPTIONS=detect_leaks=0)
fi
if readelf -d "$libdir/libibverbs.so.1" | grep -q libtsan; then
  # UCX's memory hooks crash under ThreadSanitizer as a thread exits (ucx_test.sh says how), and
  # so does Open MPI's (its memory patcher), at the end of a run that passed.
  preload+=(-x UCX_MEM_MALLOC_HOOKS=no -x UCX_MEM_MMAP_HOOK_MODE=none -x UCX_MEM_EVENTS=no
    --mca memory '^patcher')
fi
unset UCX_TLS UCX_NET_DEVICES LD_PRELOAD
# --mca pml ucx: pml ucx or fail (no silent ob1); pml_ucx_devices any: Open MPI 4.1 takes UCX
# only for devices whose sysfs driver name matches mlx* unless told otherwise. btl ^openib:
# Open MPI's own verbs BTL stays out (it would open uroce0 beside UCX). btl ofi and mtl ofi
# (libfabric) stay out as well: unused under pml ucx, and with ASan's runtime preloaded into the
# ranks btl ofi's provider selection takes ~10 s of MPI_Init (hwloc's PCI topology: libpciaccess
# reads the PCI ID database with growing reallocs; ~0.45 s without ASan). mpi_yield_when_idle: four
# ranks and their devices' progress threads share this machine's few cores; a rank waiting in
# MPI yields.
mca=(--mca plm_rsh_agent "$tmp/agent" --mca pml ucx --mca pml_ucx_devices any
  --mca btl '^openib,ofi' --mca mtl '^ofi' --mca mpi_yield_when_idle 1)
lossy=()
if [[ -n $loss ]]; then
  # UCX's RC ACK timeout is 1 s by default (UCX_RC_TIMEOUT): each lost last packet of a burst
  # costs one, some 100 here. 100 ms keeps the run short and leaves a retry budget of 0.8 s.
  # The rendezvous of large messages is UCX's default here, RDMA READ (get_zcopy): lost READ
  # responses with several READs outstanding, each asked for again at once (implied NAK).
  lossy=(-x UCX_RC_TIMEOUT=100ms)
else
  # Without loss, the rendezvous by RDMA WRITE (put_zcopy), so that both schemes run.
  lossy=(-x UCX_RNDV_SCHEME=put_zcopy)
fi
rank=("$mpi_check")
if [[ ${MPI_VIA_UROCE_RUN:-0} == 1 ]]; then
  # `uroce run` finds the drop-ins next to itself (here: the build's compat directory).
  rank=("$uroce" run -- "$mpi_check")
fi
(
  if [[ ${MPI_VIA_UROCE_RUN:-0} == 1 ]]; then
    unset LD_LIBRARY_PATH
    libpath=()
  else
    export LD_LIBRARY_PATH=$libdir
    libpath=(-x LD_LIBRARY_PATH)
  fi
  # mpirun and its two local ranks in the first namespace, with its environment.
  while read -r kv; do export "${kv?}"; done < <(ns_env "$ADDR_A" "$ADDR_B")
  exec ip netns exec "$NS_A" timeout -k 5 150 mpirun --allow-run-as-root -np 4 \
    --hostfile "$tmp/hosts" --map-by slot "${mca[@]}" \
    -x UCX_TLS=self,rc_verbs,ud_verbs -x UCX_NET_DEVICES=uroce0:1 "${libpath[@]}" \
    "${preload[@]}" "${lossy[@]}" "${rank[@]}"
) >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.stats; do
    echo "----- $f -----"
    cat "$f"
  done
  exit 1
}
((rc == 0)) || fail "mpirun exited $rc"
grep -q '^mpi_check: PASS' "$tmp/out" || fail "mpi_check did not pass"

source "$(dirname "$0")/stats_lib.sh"
read -r each_way pairs < <(sed -n 's/^mpi_check: ping-pong moved \([0-9]*\) bytes each way per pair, \([0-9]*\) pairs$/\1 \2/p' "$tmp/out")
crossing=$((each_way * pairs)) # bytes from one namespace to the other, either way
retransmitted=0 implied=0
for addr in "$ADDR_A" "$ADDR_B"; do
  f=$tmp/$addr.stats
  [[ -s $f ]] || fail "no counters from the devices at $addr"
  pids=$(awk '$1 == "link" { for (i = 2; i < NF; i++) if ($i == "pid") print $(i + 1) }' "$f" |
    sort -u | wc -l)
  sent=$(stats_sum sent_bytes link "$f") rcvd=$(stats_sum rcvd_bytes link "$f")
  echo "uroce0 at $addr: $pids processes, sent_bytes $sent, rcvd_bytes $rcvd" \
    "(the ping-pong alone: $crossing bytes each way)"
  ((pids == 2)) || fail "expected the 2 ranks of the namespace on uroce0 at $addr, saw $pids"
  ((sent >= crossing && rcvd >= crossing)) ||
    fail "uroce0 at $addr did not carry the ping-pong's bytes"
  if [[ -n $loss ]]; then
    lost=$(stats_sum tx_loss faults "$f")
    echo "uroce0 at $addr: $lost packets lost on transmit (UROCE_FAULTS)," \
      "$(stats_sum retransmitted_pkts link "$f") retransmitted," \
      "$(stats_sum implied_nak_seq_err link "$f") READ responses asked for again (implied NAK)"
    ((lost > 0)) || fail "no packet was lost at $addr"
    retransmitted=$((retransmitted + $(stats_sum retransmitted_pkts link "$f")))
    implied=$((implied + $(stats_sum implied_nak_seq_err link "$f")))
  fi
done
if [[ -n $loss ]]; then
  ((retransmitted > 0)) || fail "packets were lost and none retransmitted"
  # The rendezvous READs lost responses, and got them again without waiting for a timeout.
  ((implied > 0)) || fail "no READ response was lost and asked for again (implied NAK)"
fi
echo "PASS: Open MPI, pml ucx over uroce, 4 ranks on two namespaces${loss:+, $loss loss}"
