#!/usr/bin/env bash
# The drop-in library exports what the distribution's does, and nothing else: the same dynamic
# symbols (name, symbol version, binding, kind) and the same version definitions (each with its
# parent), compared as `objdump -T` and `objdump -p` print them. Addresses and sizes differ and
# are not compared.
#
#     check_exports.sh OURS REAL
#
# Exit 77 (skip) when REAL is not installed, 1 on any difference (printed as a diff: `-` only in
# REAL, `+` only in OURS).
set -euo pipefail
ours=$1
real=$2
if [[ ! -e $real ]]; then
  echo "SKIP: $real not installed"
  exit 77
fi
if [[ ! -e $ours ]]; then
  echo "$ours: not built" >&2
  exit 1
fi

# Defined dynamic symbols: "version name flags", e.g. "RDMACM_1.0 rsend gDF". objdump
# prints a hidden (non-default) version in parentheses; that is kept, so it is compared too.
symbols() {
  # objdump's columns: a 16-digit address, a space, 7 flag characters (binding, kind: "g    DF").
  objdump -T "$1" | awk '
    /\*UND\*/ { next }
    length($1) == 16 && $1 ~ /^[0-9a-f]+$/ {
      flags = substr($0, 18, 7)
      gsub(/ /, "", flags)
      print $(NF - 1), $NF, flags
    }' | LC_ALL=C sort
}

# Version definitions with their parents ("RDMACM_1.1 RDMACM_1.0"), and the soname.
versions() {
  objdump -p "$1" | awk '
    /^Version definitions:/ { on = 1; next }
    /^Version References:/ || /^$/ { if (on) on = 0 }
    on && $1 ~ /^[0-9]+$/ { if (line) print line; line = $4; next }
    on && NF == 1 { line = line " " $1 }
    END { if (line) print line }'
  objdump -p "$1" | awk '$1 == "SONAME" { print "SONAME", $2 }'
}

status=0
if ! diff -u --label "$real (symbols)" --label "$ours (symbols)" <(symbols "$real") \
  <(symbols "$ours"); then
  status=1
fi
if ! diff -u --label "$real (versions)" --label "$ours (versions)" <(versions "$real") \
  <(versions "$ours"); then
  status=1
fi
if ((status == 0)); then
  echo "$(symbols "$ours" | wc -l) symbols and $(versions "$ours" | wc -l) version lines as in $real"
fi
exit $status
