# Two network namespaces standing in for two hosts, for the UCX, MPI and libfabric tests
# (issue 16): sourced, not run.
#
#   netns_pair PREFIX NET    # PREFIX-a with NET.1/24, PREFIX-b with NET.2/24 (NET: a.b.c)
#   netns_pair_del           # both removed (and what still runs in them ended); idempotent
#   netns_star PREFIX NET N  # N namespaces PREFIX-0 .. PREFIX-(N-1) with NET.1 .. NET.N/24, each
#                            # a veth ("uv0") into a bridge in namespace PREFIX-br (no address)
#   netns_star_del           # all of them removed; idempotent
#
# netns_pair sets NS_A, NS_B, ADDR_A, ADDR_B. The namespaces are joined by a veth pair (one end
# in each, named PREFIX-a/-b's "uv0") and have their loopback up; nothing else reaches them.
# The caller names them with its pid (e.g. uroce-ucx-$$) and calls netns_pair_del from its EXIT
# trap. A namespace of the same prefix family left behind by a test that was killed (SIGKILL
# runs no trap: ctest's timeout) is removed when its pid is gone: netns_reap FAMILY.
# netns_star sets NS (the namespaces, an array) and ADDR (their addresses, in the same order).

NS_A='' NS_B='' ADDR_A='' ADDR_B=''
NS=() ADDR=() NS_HUB=''

# netns_reap FAMILY: namespaces named FAMILY-PID-a/-b whose PID no longer runs.
netns_reap() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ $ns =~ ^$1-([0-9]+)-([ab]|br|[0-9]+)$ ]] || continue
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

netns_star() {
  local prefix=$1 net=$2 n=$3 k
  NS_HUB=$prefix-br
  ip netns add "$NS_HUB" || return 1
  ip -n "$NS_HUB" link add br0 type bridge || return 1
  ip -n "$NS_HUB" link set br0 up || return 1
  for ((k = 0; k < n; k++)); do
    NS+=("$prefix-$k")
    ADDR+=("$net.$((k + 1))")
    ip netns add "${NS[k]}" || return 1
    ip link add uv0 netns "${NS[k]}" type veth peer name "p$k" netns "$NS_HUB" || return 1
    ip -n "$NS_HUB" link set "p$k" master br0 up || return 1
    ip -n "${NS[k]}" addr add "${ADDR[k]}/24" dev uv0 || return 1
    ip -n "${NS[k]}" link set lo up || return 1
    ip -n "${NS[k]}" link set uv0 up || return 1
  done
  # Bounded wait until every end's carrier is up.
  local _ up
  for _ in $(seq 1 100); do
    up=0
    for ((k = 0; k < n; k++)); do
      [[ $(ip -n "${NS[k]}" -br link show uv0) == *LOWER_UP* ]] && up=$((up + 1))
    done
    ((up == n)) && return 0
    sleep 0.1
  done
  echo "netns_star: the veths into $NS_HUB did not come up" >&2
  return 1
}

netns_star_del() {
  local ns
  for ns in "${NS[@]}" $NS_HUB; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  NS=() ADDR=() NS_HUB=''
}
