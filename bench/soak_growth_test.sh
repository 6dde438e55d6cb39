#!/bin/bash
# bench/soak.sh's growth rule on made-up samples (`soak.sh --check-growth CSV`): a series grows
# when the maximum of its last third of samples exceeds that of its middle third by more than
# the margin (RSS: 5% + 4096 kB; fds: 2; QPs and QPN blocks: 8); the first third is warm-up.
set -u
soak=$(dirname "$0")/soak.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# expect STATUS NAME: the CSV on stdin, judged STATUS (0: levels off, 1: grows).
expect() {
  cat >"$tmp/$2.csv"
  "$soak" --check-growth "$tmp/$2.csv" >"$tmp/$2.out"
  local rc=$?
  if ((rc == $1)); then
    echo "ok: $2 ($rc)"
  else
    echo "FAIL: $2: status $rc, wanted $1"
    cat "$tmp/$2.out"
    fail=1
  fi
}
# rows T RSS FDS QPS: 12 samples, each column an awk expression of the sample index i (0..11).
rows() {
  echo "t_s,a_rss_kb,a_fds,qps,a_pkts"
  awk -v r="$1" -v f="$2" -v q="$3" '
    function ev(e, i) {
      if (e == "lin") return 50000 + 2000 * i
      if (e == "step") return i < 3 ? 40000 : 60000
      if (e == "fdup") return 10 + (i >= 8 ? 3 : 0)
      if (e == "fdjit") return 10 + i % 2
      if (e == "qjit") return 20 + (i * 7) % 9
      if (e == "qleak") return 20 + 3 * i
      return e
    }
    BEGIN { for (i = 0; i < 12; i++) printf "%d,%d,%d,%d,%d\n", 5 * i, ev(r, i), ev(f, i), ev(q, i), 1000 * i }'
}
expect 0 levels_off_after_warmup < <(rows step fdjit qjit)
expect 0 flat < <(rows 60000 10 20)
expect 1 rss_grows_linearly < <(rows lin 10 20)
expect 1 fds_grow_by_three < <(rows 60000 fdup 20)
expect 1 qps_grow < <(rows 60000 10 qleak)
# Packet counters always grow: not judged.
expect 0 counters_not_judged < <(rows 60000 10 20 | sed 's/^t_s.*/t_s,a_rss_kb,a_fds,qps,b_pkts/')
[ $fail -eq 0 ] && echo PASS
exit $fail
