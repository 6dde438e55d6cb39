#!/bin/bash
# `uroce setup` and `uroce setup --undo`, in a directory of the test's own (--dir), so that
# /dev/infiniband, which other tests use, is left alone:
#   setup_test.sh UROCE
# setup makes uverbs0..N-1 links to /dev/null (N: the configured devices, or --count); a second
# run keeps them; it refuses a name that something else holds and leaves that alone; --undo
# removes only its links, and the directory only when that leaves it empty. Not as root:
# setup of /dev/infiniband itself fails with a message saying it needs root.
set -u
uroce=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$tmp/infiniband
fail() {
  echo "FAIL: $*"
  exit 1
}

UROCE_DEVICES=127.77.183.1,127.77.183.2 "$uroce" setup --dir "$dir" || fail "setup"
for i in 0 1; do
  [ "$(readlink "$dir/uverbs$i")" = /dev/null ] || fail "uverbs$i is not a link to /dev/null"
  # What UCX checks (uct_ib_device_is_accessible): a character device, readable and writable.
  [ -c "$dir/uverbs$i" ] && [ -r "$dir/uverbs$i" ] && [ -w "$dir/uverbs$i" ] ||
    fail "uverbs$i is not an accessible character device"
done
[ -e "$dir/uverbs2" ] && fail "uverbs2: more links than devices"
"$uroce" setup --dir "$dir" --count 3 >"$tmp/out" || fail "second setup"
grep -q "uverbs0 -> /dev/null (already there)" "$tmp/out" || fail "second setup: $(cat "$tmp/out")"
[ "$(readlink "$dir/uverbs2")" = /dev/null ] || fail "--count 3 made no uverbs2"

# A name held by something else: refused, left as it is.
rm "$dir/uverbs1"
echo other >"$dir/uverbs1"
"$uroce" setup --dir "$dir" --count 2 2>"$tmp/err" && fail "setup replaced a file not its own"
grep -q "not uroce's" "$tmp/err" || fail "no message for the name taken: $(cat "$tmp/err")"
[ "$(cat "$dir/uverbs1")" = other ] || fail "the other file was changed"

# --undo: its links go, the other file and so the directory stay; then all of it.
"$uroce" setup --dir "$dir" --undo || fail "undo"
[ -e "$dir/uverbs0" ] || [ -L "$dir/uverbs0" ] && fail "undo left uverbs0"
[ -L "$dir/uverbs2" ] && fail "undo left uverbs2"
[ "$(cat "$dir/uverbs1")" = other ] || fail "undo removed a file not its own"
rm "$dir/uverbs1"
"$uroce" setup --dir "$dir" --count 1 >/dev/null || fail "setup"
"$uroce" setup --dir "$dir" --undo >/dev/null || fail "undo"
[ -d "$dir" ] && fail "undo left the empty directory"
"$uroce" setup --dir "$dir" --undo || fail "undo of nothing"

if ((EUID != 0)); then
  "$uroce" setup 2>"$tmp/err" && fail "setup of /dev/infiniband passed without root"
  grep -q "needs root" "$tmp/err" || fail "no root message: $(cat "$tmp/err")"
fi
echo "PASS: uroce setup"
