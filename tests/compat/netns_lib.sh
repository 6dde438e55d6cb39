# Two network namespaces standing in for two hosts, for the UCX, MPI and libfabric tests
# (issue 16): sourced, not run.
#
#   netns_pair PREFIX NET    # PREFIX-a with NET.1/24, PREFIX-b with NET.2/24 (NET: a.b.c)
#   netns_pair_del           # both removed (and what still runs in them ended); idempotent
#
# netns_pair sets NS_A, NS_B, ADDR_A, ADDR_B. The namespaces are joined by a veth pair (one end
# in each, named PREFIX-a/-b's "uv0") and have their loopback up; nothing else reaches them.
# The caller names them with its pid (e.g. uroce-ucx-$$) and calls netns_pair_del from its EXIT
# trap. A namespace of the same prefix family left behind by a test that was killed (SIGKILL
# runs no trap: ctest's timeout) is removed when its pid is gone: netns_reap FAMILY.

NS_A='' NS_B='' ADDR_A='' ADDR_B=''

# netns_reap FAMILY: namespaces named FAMILY-PID-a/-b whose PID no longer runs.
netns_reap() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ $ns =~ ^$1-([0-9]+)-[ab]$ ]] || continue
    pid=${BASH_REMATCH[1]}
    kill -0 "$pid" 2>/dev/null && continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

netns_pair() {
  local prefix=$1 net=$2
  NS_A=$prefix-a NS_B=$prefix-b ADDR_A=$net.1 ADDR_B=$net.2
  ip netns add "$NS_A" || return 1
  ip netns add "$NS_B" || return 1
  ip link add uv0 netns "$NS_A" type veth peer name uv0 netns "$NS_B" || return 1
  ip -n "$NS_A" addr add "$ADDR_A/24" dev uv0 || return 1
  ip -n "$NS_B" addr add "$ADDR_B/24" dev uv0 || return 1
  local ns
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" link set uv0 up || return 1
  done
  # Bounded wait until both ends' carrier is up (a veth's comes up asynchronously).
  local _
  for _ in $(seq 1 100); do
    if [[ $(ip -n "$NS_A" -br link show uv0) == *LOWER_UP* &&
      $(ip -n "$NS_B" -br link show uv0) == *LOWER_UP* ]]; then
      return 0
    fi
    sleep 0.1
  done
  echo "netns_pair: the veth between $NS_A and $NS_B did not come up" >&2
  return 1
}

# The processes still in a namespace are the test's own (its programs and the uroce-devd they
# started, which lingers after its last client): ended by pid, then the namespaces removed (the
# veth pair goes with them).
netns_pair_del() {
  local ns
  for ns in $NS_A $NS_B; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  NS_A='' NS_B=''
}
