#!/bin/bash
# `uroce doctor` in two network namespaces (issue 42's acceptance): each problem is provoked and
# named on its own line with exit status 1, and a healthy set-up exits 0 with the peer's RTT and
# path MTU:
#   - a low MTU (576 on the veth: RoCE MTU 256);
#   - a firewall rule dropping UDP 4791 (nft; skipped with a message where nft is missing);
#   - a small net.core.rmem_max (an injected sysctl dir, for a process without CAP_NET_ADMIN);
#   - a coordinator of another user (a `uroce ping` server run as nobody holds the address);
#   - an unreachable peer (10.42.0.9: no host behind it);
#   - healthy: a `uroce ping` server on 10.42.0.2 (namespace b), whose coordinator answers the
#     doctor's CM REQ from 10.42.0.1 (namespace a) with a REJ (invalid service ID).
#
#   doctor_netns_test.sh UROCE
#
# Skipped (77) when not root. The namespaces are uroce-dr42-PID-a/-b, removed at exit.
set -u
uroce=$1
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root for network namespaces; CI runs as root"
  exit 77
fi
command -v ip >/dev/null || {
  echo "SKIP: ip (iproute2) is not installed"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
source "$(dirname "$0")/../compat/netns_lib.sh"
source "$(dirname "$0")/doctor_lib.sh"
netns_reap uroce-dr42
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'netns_pair_del; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
netns_pair "uroce-dr42-$$" 10.42.0 || fail "netns_pair"
mkdir -p "$tmp/big" "$tmp/small" "$tmp/ib"
printf '%s\n' 16777216 >"$tmp/big/rmem_max"
printf '%s\n' 212992 >"$tmp/small/rmem_max"
for d in big small; do
  echo 212992 >"$tmp/$d/wmem_max"
  echo 212992 >"$tmp/$d/wmem_default"
done
ln -s /dev/null "$tmp/ib/uverbs0"

# doctor NS STATUS REGEX [ENV...] -- [ARGS...]: `uroce doctor` in namespace NS, for the device
# on that namespace's address, exits STATUS and prints a line matching REGEX (grep -E).
doctor() {
  local ns=$1 want=$2 re=$3
  shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local addr=$ADDR_A
  [ "$ns" = "$NS_B" ] && addr=$ADDR_B
  ip netns exec "$ns" env -u UROCE_CONFIG -u UROCE_DEVD -u UROCE_CC UROCE_DEVICES="$addr" \
    "${envs[@]}" $wrap "$uroce" doctor --ib-dir "$tmp/ib" --sysctl-dir "$tmp/big" "$@" \
    >"$tmp/out" 2>&1
  doctor_expect $? "$want" "$re" "$tmp/out" "doctor $* in $ns"
}
wrap=
# wait_coordinator NS ADDR: until the coordinator for ADDR listens in NS (bounded).
wait_coordinator() {
  for _ in $(seq 1 300); do
    ip netns exec "$1" grep -q "@uroce-devd/$2/4791\$" /proc/net/unix && return 0
    sleep 0.1
  done
  fail "no coordinator for $2 came up in $1"
}

# ---- healthy: a uroce peer (a ping server, waiting for its client) in namespace b ----
ip netns exec "$NS_B" env -u UROCE_CONFIG UROCE_DEVICES="$ADDR_B" UROCE_DEVD_LINGER_MS=60000 \
  timeout 120 "$uroce" ping -a "$ADDR_B" -p 18942 >"$tmp/ping_b" 2>&1 &
wait_coordinator "$NS_B" "$ADDR_B"
doctor "$NS_A" 0 '^all well$' -- "$ADDR_B"
doctor "$NS_A" 0 "^ok: peer $ADDR_B: answered on UDP port 4791 from $ADDR_A: RTT [0-9]+\.[0-9]{3} ms \(a CM REQ to QP 1, try [1-3], REJ invalid_service_id\), path MTU 1500 \(RoCE MTU 1024\)\$" -- "$ADDR_B"
doctor "$NS_A" 0 "^note: uroce0 on $ADDR_A: interface uv0, MTU 1500: RoCE MTU 1024\$" --
doctor "$NS_A" 0 "^ok: uroce0 on $ADDR_A: a datagram sent to UDP port 4791 from this host arrives" --
doctor "$NS_A" 0 "^note: uroce0 on $ADDR_A: congestion control dcqcn-aimd \(default\): its packets carry ECT\(0\)" --
doctor "$NS_A" 0 "^note: uroce0 on $ADDR_A: congestion control none \(UROCE_CC\): its packets are not ECN-capable" UROCE_CC=none --
doctor "$NS_A" 0 '^note: CRC-32 \(ICRC\) kernel of this CPU: [a-zA-Z]' --
doctor "$NS_A" 0 '^ok: net.core.wmem_max is 212992' --

# ---- an unreachable peer: an address of the namespaces' network with no host behind it ----
doctor "$NS_A" 1 '^problem: peer 10.42.0.9: no answer on UDP port 4791 from 10.42.0.1 \(a CM REQ, 3 tries of 300 ms; path MTU 1500 \(RoCE MTU 1024\)\): no host there.*fix: ' -- 10.42.0.9

# ---- a low MTU ----
ip -n "$NS_A" link set uv0 mtu 576 || fail "ip link set mtu 576"
doctor "$NS_A" 1 "^problem: uroce0 on $ADDR_A: interface uv0 has MTU 576, which gives RoCE MTU 256 .*fix: ip link set uv0 mtu 1500" --
ip -n "$NS_A" link set uv0 mtu 1500 || fail "ip link set mtu 1500"

# ---- a small rmem_max, for a process without CAP_NET_ADMIN ----
if command -v setpriv >/dev/null; then
  wrap="setpriv --bounding-set=-net_admin --inh-caps=-net_admin"
  doctor "$NS_A" 1 '^problem: net.core.rmem_max is 212992, below the 16777216 .*fix: sysctl -w' \
    -- --sysctl-dir "$tmp/small"
  wrap=
else
  echo "SKIP (case): small rmem_max: no setpriv to drop CAP_NET_ADMIN"
fi

# ---- a firewall rule dropping UDP 4791 ----
if command -v nft >/dev/null && ip netns exec "$NS_A" nft list ruleset >/dev/null 2>&1; then
  ip netns exec "$NS_A" nft -f - <<'NFT' || fail "nft -f"
table inet dr42 {
  chain input {
    type filter hook input priority 0; policy accept;
    udp dport 4791 drop
  }
}
NFT
  doctor "$NS_A" 1 "^problem: uroce0 on $ADDR_A: a datagram sent to UDP port 4791 from this host did not arrive: the host firewall drops RoCEv2 \(udp dport 4791 drop\); fix: nft delete rule inet dr42 input handle [0-9]+\$" --
  # A rule for other hosts' traffic only: this host's own datagram passes, the rule is named.
  ip netns exec "$NS_A" nft flush chain inet dr42 input || fail "nft flush"
  ip netns exec "$NS_A" nft add rule inet dr42 input iifname uv0 udp dport 4791 reject ||
    fail "nft add rule"
  doctor "$NS_A" 1 '^problem: the firewall rule `iifname "uv0" udp dport 4791 reject` drops RoCEv2 .*fix: nft delete rule inet dr42 input handle [0-9]+$' --
  # The peer behind it (namespace b's doctor towards a) gets no answer.
  ip netns exec "$NS_A" nft flush chain inet dr42 input || fail "nft flush"
  ip netns exec "$NS_A" nft delete table inet dr42 || fail "nft delete table"
  doctor "$NS_A" 0 '^ok: no nftables rule drops or rejects UDP port 4791$' --
else
  echo "SKIP (case): firewall rule dropping 4791: nft is not installed (or cannot run here)"
  doctor "$NS_A" 0 '^note: cannot read the firewall.s rules: no nft' --
fi

# ---- a coordinator of another user on namespace a's address ----
ip netns exec "$NS_A" runuser -u nobody -- env -u UROCE_CONFIG UROCE_DEVICES="$ADDR_A" \
  UROCE_DEVD_LINGER_MS=60000 timeout 120 "$uroce" ping -a "$ADDR_A" -p 18942 \
  >"$tmp/ping_nobody" 2>&1 &
wait_coordinator "$NS_A" "$ADDR_A"
doctor "$NS_A" 1 "^problem: uroce0 on $ADDR_A: UDP port 4791 is held by the device's coordinator \(uroce-devd, pid [0-9]+\) of uid [0-9]+ \(nobody\), another user: .*fix: that user restarts it with UROCE_SHARE=all" --
# The pid named is the coordinator's.
pid=$(sed -n 's/^problem: .*coordinator (uroce-devd, pid \([0-9]*\)).*/\1/p' "$tmp/out")
tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "uroce-devd --ip $ADDR_A --port 4791" ||
  fail "pid $pid is not the coordinator: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
# The same coordinator shared with every user (UROCE_SHARE=all) is no problem.
ip netns pids "$NS_A" | xargs -r kill -KILL
for _ in $(seq 1 100); do
  ip netns exec "$NS_A" grep -q "@uroce-devd/$ADDR_A/4791\$" /proc/net/unix || break
  sleep 0.1
done
ip netns exec "$NS_A" runuser -u nobody -- env -u UROCE_CONFIG UROCE_DEVICES="$ADDR_A" \
  UROCE_SHARE=all UROCE_DEVD_LINGER_MS=60000 timeout 120 "$uroce" ping -a "$ADDR_A" -p 18943 \
  >"$tmp/ping_nobody_all" 2>&1 &
wait_coordinator "$NS_A" "$ADDR_A"
doctor "$NS_A" 0 "^ok: uroce0 on $ADDR_A: UDP port 4791 is held by the device's coordinator \(uroce-devd, pid [0-9]+, uid [0-9]+ \(nobody\), shared with every user\): in use\$" --
echo PASS
