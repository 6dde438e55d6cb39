#!/bin/bash
# Undoes what install.clean_root (clean_root_test.sh) sets up under STATE, on every way out of
# that test (its EXIT trap) and as its ctest fixture cleanup (install.clean_root_cleanup), which
# runs even when the test was killed at its timeout:
#
#   clean_root_cleanup.sh STATE
#
# Ends the processes in the test's network namespaces (listed in STATE/netns) and those whose
# root is STATE/root, removes the namespaces (their veth pair goes with them), unmounts every
# mount point at or below STATE/root, deepest first, and removes STATE/root, but only once no
# mount is left below it (rm -rf would otherwise reach into the host's /proc, /dev or cache).
# Idempotent; exits 1 when a mount could not be removed.
set -u
state=$1
root=$state/root
if [ -f "$state/netns" ]; then
  while read -r ns; do
    [ -n "$ns" ] || continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done <"$state/netns"
  rm -f "$state/netns"
fi
[ -d "$root" ] || exit 0
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -KILL "${p#/proc/}" 2>/dev/null
done
mounts() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts; }
for _ in 1 2 3; do
  m=$(mounts | sort -r)
  [ -n "$m" ] || break
  while read -r d; do umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null; done <<<"$m"
done
if [ -n "$(mounts)" ]; then
  echo "clean_root_cleanup: still mounted below $root, not removing it:" >&2
  mounts >&2
  exit 1
fi
rm -rf --one-file-system "$root" "$state/pkg"
exit 0
