#!/bin/bash
# Debian's libfabric (1.17, libfabric-bin) over the drop-in libibverbs.so.1 and librdmacm.so.1
# (issue 16), between two network namespaces standing in for two hosts.
#
#   libfabric_test.sh LIBDIR NET CTRL_PORT
#
# Makes namespaces uroce-fab-PID-a and -b joined by a veth pair, NET.1/24 and NET.2/24 (NET: three
# octets, e.g. 10.126.0; netns_lib.sh), with uroce0 of each namespace on its own address
# (UROCE_DEVICES).
# Skipped (77) when not root or when libfabric-bin is not installed.
#
# - `fi_info -p verbs` in a namespace lists the verbs provider's three kinds of endpoint on
#   uroce0: FI_EP_MSG (domain uroce0: libfabric finds it by binding an rdma_cm ID to each
#   interface's address, so it needs librdmacm and an interface other than lo), FI_EP_DGRAM
#   (uroce0-dgram, UD) and FI_EP_RDM over UD (verbs;ofi_rxd).
# - `fi_pingpong -c` (data checked) between the namespaces over FI_EP_MSG (verbs: RC connected
#   by rdma_cm), over FI_EP_DGRAM (verbs) and over FI_EP_RDM (verbs;ofi_rxd, libfabric's
#   reliability layer over UD), at several sizes up to 1 MiB (MSG, RDM) and up to the port's MTU
#   (DGRAM): both sides exit 0, the client prints the size's result line, and uroce's counters
#   (UROCE_STATS_FILE) show each side received at least the bytes it was sent (size x
#   iterations). Over MSG the server asks the verbs provider for "localhost": the provider binds
#   an rdma_cm ID to 127.0.0.1 (bound as the wildcard, no device attached, as the kernel's
#   rdma_cm does) and then listens on the device's own address; it moves each accepted ID to the
#   channel it is already on (rdma_migrate_id).
set -u
libdir=$1 net=$2 port=$3

for prog in fi_info fi_pingpong; do
  if ! command -v "$prog" >/dev/null; then
    echo "SKIP: $prog is not installed (apt-get install libfabric-bin)"
    exit 77
  fi
done
if ((EUID != 0)); then
  echo "SKIP: needs root for the network namespaces; CI runs as root"
  exit 77
fi

export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
# Nothing from the user's libfabric configuration.
for v in $(env | sed -n 's/^\(FI_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
# Under ThreadSanitizer, without libfabric's memory monitor: its madvise hook, called by glibc as
# a thread exits, takes a lock through ThreadSanitizer's interceptor after the thread's state is
# gone (UCX's hooks do the same, ucx_test.sh).
if readelf -d "$libdir/libibverbs.so.1" | grep -q libtsan; then
  export FI_MR_CACHE_MONITOR=disabled
fi

tmp=$(mktemp -d)
# The namespaces and their veth pair: netns_lib.sh, as the UCX and MPI tests make theirs.
source "$(dirname "$0")/netns_lib.sh"
netns_reap uroce-fab
trap 'netns_pair_del; rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
netns_pair "uroce-fab-$$" "$net" || fail "cannot make the network namespaces"
a=$NS_A b=$NS_B ip_a=$ADDR_A ip_b=$ADDR_B

in_a() { ip netns exec "$a" env UROCE_DEVICES="uroce0=$ip_a" "$@"; }
in_b() { ip netns exec "$b" env UROCE_DEVICES="uroce0=$ip_b" "$@"; }

# ---- fi_info ----
in_a timeout -k 5 60 fi_info -p verbs >"$tmp/info" 2>&1 || {
  cat "$tmp/info"
  fail "fi_info -p verbs exited non-zero"
}
# Each entry: "provider: P", "fabric: F", "domain: D", "version: V", "type: T".
found=$(awk '/^provider:/ {p = $2} /^ *domain:/ {d = $2} /^ *type:/ {print p " " d " " $2}' \
  "$tmp/info")
for want in "verbs uroce0 FI_EP_MSG" "verbs uroce0-dgram FI_EP_DGRAM" \
  "verbs;ofi_rxd uroce0-dgram FI_EP_RDM"; do
  grep -qxF "$want" <<<"$found" || {
    cat "$tmp/info"
    fail "fi_info -p verbs does not list: $want"
  }
done
echo "fi_info -p verbs lists:"
sed 's/^/  /' <<<"$found"

# ---- fi_pingpong ----
source "$(dirname "$0")/stats_lib.sh"
run=0
pingpong() { # EP_TYPE PROVIDER SIZE ITERS
  local ep=$1 prov=$2 size=$3 iters=$4 srv rc_s rc_c
  run=$((run + 1))
  local d=$tmp/run$run
  mkdir "$d"
  in_a UROCE_STATS_FILE="$d/a.stats" timeout -k 5 120 \
    fi_pingpong -p "$prov" -e "$ep" -B "$port" -I "$iters" -S "$size" -c >"$d/server" 2>&1 &
  srv=$!
  # Bounded wait until the server's control socket listens.
  for _ in $(seq 300); do
    ip netns exec "$a" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  in_b UROCE_STATS_FILE="$d/b.stats" timeout -k 5 120 \
    fi_pingpong -p "$prov" -e "$ep" -P "$port" -I "$iters" -S "$size" -c "$ip_a" \
    >"$d/client" 2>&1
  rc_c=$?
  wait "$srv"
  rc_s=$?
  local what="fi_pingpong -p '$prov' -e $ep -S $size -I $iters"
  if ((rc_s != 0 || rc_c != 0)); then
    echo "--- server"; cat "$d/server"; echo "--- client"; cat "$d/client"
    fail "$what: server exit $rc_s, client exit $rc_c"
  fi
  # The result line: bytes, #sent, #ack, total, time, MB/sec, usec/xfer, Mxfers/sec.
  local line
  line=$(awk -v n="$iters" '$2 == n && $3 == "=" n {print; exit}' "$d/client")
  [[ -n $line ]] || { cat "$d/client"; fail "$what: the client printed no result line"; }
  local moved=$((size * iters)) side
  for side in a b; do
    [[ -s $d/$side.stats ]] || fail "$what: no counters from namespace $side"
    local rcvd
    rcvd=$(stats_sum rcvd_bytes link "$d/$side.stats")
    ((rcvd >= moved)) ||
      fail "$what: uroce in namespace $side received $rcvd bytes, fewer than the $moved sent to it"
  done
  printf '  %-34s %s | uroce: a rcvd %s B, b rcvd %s B\n' "$prov $ep $size B" \
    "$(awk '{print $7 " us/xfer"}' <<<"$line")" "$(stats_sum rcvd_bytes link "$d/a.stats")" \
    "$(stats_sum rcvd_bytes link "$d/b.stats")"
}

echo "fi_pingpong between $ip_b and $ip_a:"
for size in 1 4096 65536 1048576; do pingpong msg verbs "$size" 10; done
for size in 1 256 1024; do pingpong dgram verbs "$size" 20; done
for size in 1 4096 65536 1048576; do pingpong rdm 'verbs;ofi_rxd' "$size" 10; done
echo "PASS"
