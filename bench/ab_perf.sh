#!/bin/bash
# Interleaved A/B of `uroce perf` between two trees' Release builds (issue 40's loop): ROUNDS
# rounds (6), in each a 64 B message-rate run (write_bw -s 64 -t 1024 -D 3), an 8 B WRITE
# latency run (write_lat -n 20000) and a 64 KiB write_bw (-D 3) per tree, the trees alternating,
# each side pinned to one CPU; prints each tree's figures and the median (low-high) of the
# rounds' own ratios, HEAD over BASE. Loopback 127.0.0.1/127.0.0.2, TCP port 18515.
#   BASE_TREE=/work/base76 HEAD_TREE=$PWD bench/ab_perf.sh [ROUNDS]
set -u
rounds=${1:-6}
base=${BASE_TREE:?BASE_TREE: a tree with build-release/src/tools/uroce}
head=${HEAD_TREE:-$(cd "$(dirname "$0")/.." && pwd)}
out=$(mktemp -d)
run() {
  local arm=$1 tree=$2 name=$3 R=$4
  shift 4
  local U=$tree/build-release/src/tools/uroce
  taskset -c 0 "$U" perf "$@" --ip 127.0.0.1 -p 18515 --json >/dev/null &
  local s=$!
  taskset -c 1 "$U" perf "$@" --ip 127.0.0.2 -p 18515 --json --connect_timeout 30 127.0.0.1 \
    >"$out/$arm.$name.$R.json"
  wait $s
}
for R in $(seq 1 "$rounds"); do
  for arm in base head; do
    t=$head
    [[ $arm == base ]] && t=$base
    run $arm "$t" msgrate "$R" write_bw -s 64 -t 1024 -D 3
    run $arm "$t" write_lat "$R" write_lat -s 8 -n 20000
    run $arm "$t" write_bw "$R" write_bw -s 65536 -D 3
  done
done
python3 - "$out" "$rounds" <<'P'
import json, statistics as st, sys
out, n = sys.argv[1], int(sys.argv[2])
for name, key in [('msgrate', 'msg_rate_mpps'), ('write_lat', 't_typical_us'), ('write_bw', 'bw_avg_gbit_s')]:
    v = {a: [json.load(open(f'{out}/{a}.{name}.{r}.json'))[key] for r in range(1, n + 1)] for a in ('base', 'head')}
    r = [h / b for h, b in zip(v['head'], v['base'])]
    print(name, 'base', [round(x, 3) for x in v['base']], 'head', [round(x, 3) for x in v['head']],
          'ratio median', round(st.median(r), 3), 'low-high', round(min(r), 3), round(max(r), 3))
P
