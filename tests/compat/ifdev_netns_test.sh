#!/bin/bash
# Devices without configuration (issue 42): in a network namespace whose only address is
# 10.77.0.100 (on a veth named eth0; lo down, so not even 127.0.0.1), with no UROCE_DEVICES and
# no config file, the drop-in's ibv_devices lists uroce0 first and uroce_eth0, and an
# ibv_rc_pingpong pair on uroce_eth0 runs between that namespace and a second one
# (10.77.0.101), joined by the veth pair.
#
#   ifdev_netns_test.sh LIBDIR TCP_PORT
#
# Skipped (77) when not root or when ibverbs-utils is not installed. The namespaces are named
# uroce-ifdev-PID-a/-b and removed at exit (netns_lib.sh).
set -u
libdir=$1 port=$2
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root for network namespaces; CI runs as root"
  exit 77
fi
for p in ip ibv_devices ibv_rc_pingpong; do
  command -v "$p" >/dev/null || {
    echo "SKIP: $p is not installed"
    exit 77
  }
done
fail() {
  echo "FAIL: $*"
  exit 1
}

source "$(dirname "$0")/netns_lib.sh"
netns_reap uroce-ifdev
tmp=$(mktemp -d)
trap 'netns_pair_del; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

NS_A=uroce-ifdev-$$-a NS_B=uroce-ifdev-$$-b
ip netns add "$NS_A" || fail "ip netns add"
ip netns add "$NS_B" || fail "ip netns add"
ip link add eth0 netns "$NS_A" type veth peer name eth0 netns "$NS_B" || fail "ip link add veth"
ip -n "$NS_A" addr add 10.77.0.100/24 dev eth0 || fail "addr add"
ip -n "$NS_B" addr add 10.77.0.101/24 dev eth0 || fail "addr add"
ip -n "$NS_A" link set eth0 up || fail "link up"
ip -n "$NS_B" link set eth0 up || fail "link up"
ip -n "$NS_B" link set lo up || fail "link up"
addrs=$(ip -n "$NS_A" -br addr show | awk '{ for (i = 3; i <= NF; i++) print $i }' |
  grep -v '^fe80:')
[ "$addrs" = 10.77.0.100/24 ] || fail "namespace A has other addresses: $addrs"
# Bounded wait until both ends' carrier is up (a veth's comes up asynchronously).
for _ in $(seq 1 100); do
  [[ $(ip -n "$NS_A" -br link show eth0) == *LOWER_UP* &&
    $(ip -n "$NS_B" -br link show eth0) == *LOWER_UP* ]] && break
  sleep 0.1
done

# Nothing configured: no UROCE_DEVICES or UROCE_CONFIG, and a config file that does not exist
# (UROCE_CONFIG cannot say "none", so /etc/uroce/devices.conf must be absent on this host).
[ -e /etc/uroce/devices.conf ] && {
  echo "SKIP: /etc/uroce/devices.conf exists on this host: it would be the configuration"
  exit 77
}
run=(env -u UROCE_DEVICES -u UROCE_CONFIG "LD_LIBRARY_PATH=$libdir")
# A sanitizer build of the library needs its runtime loaded first (the programs are not
# instrumented); leaks of the programs themselves are not ours to report.
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  run+=("LD_PRELOAD=${UROCE_TEST_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0)
fi

out=$(ip netns exec "$NS_A" "${run[@]}" timeout 20 ibv_devices 2>&1) || fail "ibv_devices: $out"
echo "$out"
# The device rows in order: uroce0 first (a program that takes the first device still gets it),
# then the interface's.
rows=$(awk 'NR > 2 { print $1 }' <<<"$out" | tr '\n' ' ')
[ "$rows" = "uroce0 uroce_eth0 " ] || fail "ibv_devices lists '$rows', not 'uroce0 uroce_eth0'"

# An ibv_rc_pingpong pair on uroce_eth0 across the veth, nothing configured on either side.
ip netns exec "$NS_A" "${run[@]}" timeout -k 5 60 ibv_rc_pingpong -d uroce_eth0 -g 0 -n 200 --chk \
  -p "$port" >"$tmp/server" 2>&1 &
spid=$!
# Wait (bounded) until the server listens; a probe connection would consume its one accept.
for _ in $(seq 1 200); do
  ip netns exec "$NS_A" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
ip netns exec "$NS_B" "${run[@]}" timeout -k 5 60 ibv_rc_pingpong -d uroce_eth0 -g 0 -n 200 --chk \
  -p "$port" 10.77.0.100 >"$tmp/client" 2>&1
crc=$?
wait "$spid"
src=$?
ok=1
[ "$src" -eq 0 ] && [ "$crc" -eq 0 ] || ok=0
grep -q 'iters in' "$tmp/client" || ok=0
grep -Eqi 'failed|couldn.t|error|mismatch|unable' "$tmp/server" "$tmp/client" && ok=0
if [ "$ok" -ne 1 ]; then
  echo "----- server (namespace A, 10.77.0.100) -----"
  cat "$tmp/server"
  echo "----- client (namespace B, 10.77.0.101) -----"
  cat "$tmp/client"
  fail "ibv_rc_pingpong on uroce_eth0 (server exit $src, client exit $crc)"
fi
grep 'iters in' "$tmp/client"
echo PASS
