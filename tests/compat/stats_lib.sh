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
