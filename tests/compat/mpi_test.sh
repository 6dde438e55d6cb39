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
# At scale (issue 43): MPI_HOSTS=N (default 2) namespaces, MPI_RANKS_PER_HOST=R (default 2) ranks
# each, MPI_CHECK_ARGS passed to MPI_CHECK (MAX_BYTES BARRIERS), MPI_TIMEOUT mpirun's limit in
# seconds (150). With more than two hosts the namespaces are uroce-mpi43-PID-0 .. N-1 (NET.1 ..
# NET.N), joined by a bridge in uroce-mpi43-PID-br (netns_star); ranks are placed by slot, R to a
# host, so that rank r's ping-pong partner r + N*R/2 is on another host (for an even N). Every
# host's device must show its R processes and at least the bytes its R ranks' ping-pongs moved
# each way; with LOSS each device loses that share of what it sends to every other host (a fault
# rule per peer).
#
# MPI_RANK_ENV="VAR=VALUE ..." is exported to every rank (mpirun -x), e.g.
# UCX_ADAPTIVE_PROGRESS=n (bench/mpi_scale.sh's runs with UCX's adaptive progress off).
#
# With MPI_VIA_UROCE_RUN=1 the ranks are started as `mpirun ... uroce run -- MPI_CHECK`, the way
# the README's Open MPI section shows: no LD_LIBRARY_PATH is exported, so only `uroce run` (in every
# rank, on both "hosts") puts the drop-ins in front of the program, and the counters prove that
# uroce carried the traffic.
#
# With UROCE_TEST_AEAD=MODE (what follows aead= on a config line: "encrypt psk=HEX"), every
# namespace's uroce0 is at aead=MODE, from a config file instead of UROCE_DEVICES (issue 44): UCX
# connects its QPs itself, so its packets are sealed with the pre-shared key. Then each
# namespace's devices must also have sealed packets and opened sealed ones, taken no plain packet
# and dropped none (stats_sealed), while mpi_check verifies every byte it received.
set -u
libdir=$1 uroce=$2 mpi_check=$3 net=$4 loss=${5:-}
hosts=${MPI_HOSTS:-2} per=${MPI_RANKS_PER_HOST:-2}
read -ra check_args <<<"${MPI_CHECK_ARGS:-}"

source "$(dirname "$0")/require_lib.sh"
require_programs "openmpi-bin ucx-utils iproute2" mpirun ucx_info ip
require_root "(network namespaces, uroce setup)"
require_setup "$uroce"

tmp=$(mktemp -d)
source "$(dirname "$0")/netns_lib.sh"
source "$(dirname "$0")/stats_lib.sh"
if ((hosts == 2)); then
  netns_reap uroce-mpi
  trap 'netns_pair_del; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM
  netns_pair "uroce-mpi-$$" "$net" || exit 1
  NS=("$NS_A" "$NS_B") ADDR=("$ADDR_A" "$ADDR_B")
else
  netns_reap uroce-mpi43
  trap 'netns_star_del; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM
  netns_star "uroce-mpi43-$$" "$net" "$hosts" || exit 1
fi

# The environment each namespace's processes get: their device, their counters, their faults
# (with LOSS, a rule for each other host), and a TMPDIR of their own: every namespace's orted
# takes the same host name, and Open MPI's session directories under one TMPDIR then race (seen
# with four: "ORTE_ERROR_LOG: Error in file session_dir.c").
ns_env() { # ns_env K
  local j rules=()
  mkdir -p "$tmp/tmpdir.$1"
  echo "TMPDIR=$tmp/tmpdir.$1"
  device_env "uroce0=${ADDR[$1]}" "${UROCE_TEST_AEAD:-}" "$tmp"
  echo "UROCE_STATS_FILE=$tmp/${ADDR[$1]}.stats"
  if [[ -n $loss ]]; then
    for ((j = 0; j < hosts; j++)); do
      ((j == $1)) || rules+=("dir=tx,peer=${ADDR[j]},loss=$loss")
    done
    rules[0]+=,seed=16 # one seed for the whole spec
    echo "UROCE_FAULTS=$(IFS=';' && echo "${rules[*]}")"
  fi
}
# The rsh agent: `agent HOST COMMAND...` as ssh is called, the command run by a shell in the
# namespace that holds HOST, with that namespace's environment.
{
  printf '#!/bin/bash\nhost=$1\nshift\ncase $host in\n'
  for ((k = 0; k < hosts; k++)); do
    printf '  %s) exec ip netns exec %s env %s /bin/sh -c "$*" ;;\n' "${ADDR[k]}" "${NS[k]}" \
      "$(ns_env $k | sed "s/.*/'&'/" | tr '\n' ' ')"
  done
  printf 'esac\necho "agent: no namespace for host $host" >&2\nexit 255\n'
} >"$tmp/agent"
chmod +x "$tmp/agent"
printf "%s slots=$per\n" "${ADDR[@]}" >"$tmp/hosts"

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
read -ra rank_env <<<"${MPI_RANK_ENV:-}"
for kv in "${rank_env[@]}"; do lossy+=(-x "$kv"); done
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
  # mpirun and the first host's ranks in the first namespace, with its environment.
  while read -r kv; do export "${kv?}"; done < <(ns_env 0)
  exec ip netns exec "${NS[0]}" timeout -k 5 "${MPI_TIMEOUT:-150}" mpirun --allow-run-as-root \
    -np $((hosts * per)) --hostfile "$tmp/hosts" --map-by slot "${mca[@]}" \
    -x UCX_TLS=self,rc_verbs,ud_verbs -x UCX_NET_DEVICES=uroce0:1 "${libpath[@]}" \
    "${preload[@]}" "${lossy[@]}" "${rank[@]}" "${check_args[@]}"
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

read -r each_way pairs < <(sed -n 's/^mpi_check: ping-pong moved \([0-9]*\) bytes each way per pair, \([0-9]*\) pairs$/\1 \2/p' "$tmp/out")
((pairs == hosts * per / 2)) || fail "mpi_check reported $pairs ping-pong pairs"
crossing=$((each_way * per)) # bytes the ping-pong took out of a namespace, and into it
retransmitted=0 implied=0
for addr in "${ADDR[@]}"; do
  f=$tmp/$addr.stats
  [[ -s $f ]] || fail "no counters from the devices at $addr"
  pids=$(awk '$1 == "link" { for (i = 2; i < NF; i++) if ($i == "pid") print $(i + 1) }' "$f" |
    sort -u | wc -l)
  sent=$(stats_sum sent_bytes link "$f") rcvd=$(stats_sum rcvd_bytes link "$f")
  echo "uroce0 at $addr: $pids processes, sent_bytes $sent, rcvd_bytes $rcvd" \
    "(the ping-pong alone: $crossing bytes each way)"
  ((pids == per)) || fail "expected the $per ranks of the namespace on uroce0 at $addr, saw $pids"
  ((sent >= crossing && rcvd >= crossing)) ||
    fail "uroce0 at $addr did not carry the ping-pong's bytes"
  if [[ -n ${UROCE_TEST_AEAD:-} ]]; then
    sealed=$(stats_sealed "$f") || fail "uroce0 at $addr: $sealed"
    echo "uroce0 at $addr, aead=${UROCE_TEST_AEAD%% *}: $sealed"
  fi
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
  # The rendezvous READs lost responses, and got them again without waiting for a timeout (with
  # mpi_check's full sizes: MPI_CHECK_ARGS's small ones may all go eagerly).
  ((implied > 0 || ${#check_args[@]} > 0)) ||
    fail "no READ response was lost and asked for again (implied NAK)"
fi
aead=${UROCE_TEST_AEAD:-}
echo "PASS: Open MPI, pml ucx over uroce, $((hosts * per)) ranks on $hosts namespaces${loss:+, $loss loss}${aead:+, aead=${aead%% *}}"
