# shellcheck shell=bash
# Reading uroce's counters as the drop-in's tests get them: UROCE_STATS_FILE, where every device
# appends a line per kind at close ("link uroce0/1 pid 42 sent_pkts 10 ...", "faults ...";
# src/device/stats.h). Sourced by the tests of tests/compat.

# stats_sum NAME KIND FILE: NAME's values on FILE's lines of KIND (link, faults, qp), summed; 0
# when there are none.
stats_sum() {
  awk -v n="$1" -v k="$2" '$1 == k { for (i = 2; i < NF; i++) if ($i == n) s += $(i + 1) }
                           END { print s + 0 }' "$3"
}

# stats_sealed FILE: what FILE's devices sealed and opened (issue 44, docs/SECURITY.md), as one
# line; status 1 (after the line) unless they sealed packets and opened sealed packets, took no
# plain one, and dropped none (forged or with the wrong key, replayed, plain under require, over
# a source's budget) and failed to seal none.
stats_sealed() {
  local f=$1 n v bad=0 line
  local tx rx
  tx=$(stats_sum aead_tx_pkts link "$f") rx=$(stats_sum aead_rx_pkts link "$f")
  line="sealed $tx, opened $rx"
  ((tx > 0 && rx > 0)) || bad=1
  for n in aead_plain_rx aead_auth_drops aead_replay_drops aead_plain_drops aead_src_limited \
    aead_tx_errors; do
    v=$(stats_sum "$n" link "$f")
    line+=", $n $v"
    ((v == 0)) || bad=1
  done
  echo "$line"
  return $bad
}

# device_env SPEC MODE DIR: the environment (one VAR=VALUE) that gives a process the one
# device SPEC (ADDR or NAME=ADDR, as UROCE_DEVICES takes it): UROCE_DEVICES=SPEC, or with a MODE
# (what follows aead= on a config line, "encrypt psk=HEX") a config file written in DIR.
device_env() {
  local spec=$1 mode=$2 dir=$3 name=uroce0 addr=$1
  if [[ -z $mode ]]; then
    echo "UROCE_DEVICES=$spec"
    return
  fi
  if [[ $spec == *=* ]]; then
    name=${spec%%=*} addr=${spec#*=}
  fi
  echo "$name $addr aead=$mode" >"$dir/devices-$addr.conf"
  echo "UROCE_CONFIG=$dir/devices-$addr.conf"
}
