#!/bin/bash
# The installed tree works without the build tree (cmake/install.cmake):
#
#   install_test.sh BUILD_DIR CONSUMER_SRC CXX ADDRESS RUN_PAIR TCP_PORT
#
# installs BUILD_DIR into a temporary prefix, checks the layout (the drop-ins in their private
# directory, liburoce with its SONAME, headers, uroce.pc, the CMake package, the manual pages
# uroce(1), uroce(7) and uroce-devd(8)), builds
# CONSUMER_SRC/main.cc against the prefix with pkg-config and with find_package(uroce), runs both
# builds (the second opens a device on ADDRESS, which must start the installed uroce-devd, found
# from liburoce's own place), and runs rdma-core's ibv_devices and an ibv_rc_pingpong pair
# (RUN_PAIR: tests/compat/run_pair.sh, on TCP_PORT) over the installed drop-ins: their device, on
# ADDRESS + 1, must start the installed uroce-devd too.
set -u
build=$1 consumer=$2 cxx=$3 addr=$4 pair=$5 tcp_port=$6
addr2=${addr%.*}.$((${addr##*.} + 1))
tmp=$(mktemp -d)
p=$tmp/prefix
fail() {
  echo "FAIL: $*"
  exit 1
}
# Every coordinator started from the prefix (ours alone: the prefix is new), then the tree.
cleanup() {
  local e
  for e in /proc/[0-9]*/exe; do
    [ "$(readlink "$e" 2>/dev/null)" = "$p/bin/uroce-devd" ] || continue
    e=${e#/proc/}
    kill "${e%/exe}" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install"; }

# The layout.
lib=$(dirname "$(find "$p" -name liburoce.so.0 -print -quit)")
[ -n "$lib" ] && [ "$lib" != . ] || fail "no liburoce.so.0 under $p"
for f in bin/uroce bin/uroce-devd; do [ -x "$p/$f" ] || fail "no $f"; done
for f in "$lib/uroce/libibverbs.so.1" "$lib/uroce/librdmacm.so.1" \
  "$p/include/uroce/verbs.h" "$p/include/uroce/version.h" \
  "$p/include/uroce/internal/device/udp_device.h" "$lib/pkgconfig/uroce.pc" \
  "$lib/cmake/uroce/uroce-config.cmake" "$p/share/man/man1/uroce.1.gz" \
  "$p/share/man/man7/uroce.7.gz" "$p/share/man/man8/uroce-devd.8.gz"; do
  [ -e "$f" ] || fail "no ${f#"$p"/}"
done
# The manual pages are roff that groff renders without a warning (where groff is installed).
command -v groff >/dev/null && for f in "$p"/share/man/man*/*.gz; do
  w=$(zcat "$f" | groff -man -ww -z 2>&1) || fail "groff on ${f#"$p"/}"
  [ -z "$w" ] || fail "${f#"$p"/}: $w"
done
# Nothing that would shadow rdma-core's libraries on the loader's path.
ls "$lib" | grep -E '^lib(ibverbs|rdmacm)' && fail "a drop-in directly in ${lib#"$p"/}"
readelf -d "$lib/liburoce.so.0" | grep -q 'SONAME.*\[liburoce.so.0\]' || fail "liburoce's SONAME"
echo "layout: ok (libdir ${lib#"$p"/})"

# A sanitizer build's libraries need the runtime loaded first in programs built without it.
run_env=(env -u UROCE_DEVD -u UROCE_DEVICES -u UROCE_CONFIG -u LD_PRELOAD)
if readelf -d "$lib/liburoce.so.0" | grep -Eq 'libasan|libtsan'; then
  run_env+=(LD_PRELOAD="${UROCE_TEST_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0)
fi

# pkg-config, then find_package.
flags=$(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --cflags --libs uroce) || fail "pkg-config uroce"
"$cxx" -std=c++20 -o "$tmp/consumer_pc" "$consumer/main.cc" $flags ||
  fail "building against uroce.pc ($flags)"
cmake -S "$consumer" -B "$tmp/cb" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_CXX_COMPILER="$cxx" \
  >"$tmp/cb.log" 2>&1 && cmake --build "$tmp/cb" >>"$tmp/cb.log" 2>&1 ||
  { cat "$tmp/cb.log"; fail "building with find_package(uroce)"; }

out=$("${run_env[@]}" LD_LIBRARY_PATH="$lib" "$tmp/consumer_pc" 2>&1) || fail "consumer_pc: $out"
echo "$out"
grep -qx "liburoce $(sed -n 's/^Version: //p' "$lib/pkgconfig/uroce.pc")" <<<"$out" ||
  fail "the version"
out=$("${run_env[@]}" LD_LIBRARY_PATH="$lib" "$tmp/cb/consumer" "$addr" 2>&1) ||
  fail "consumer $addr: $out"
echo "$out"
grep -qx "coordinator $p/bin/uroce-devd" <<<"$out" || fail "the installed uroce-devd did not start"

# The installed uroce and the drop-ins with rdma-core's tools.
"$p/bin/uroce" --version || fail "uroce --version"
if ! command -v ibv_rc_pingpong >/dev/null; then
  echo "SKIP: ibverbs-utils is not installed"
  exit 77
fi
out=$("${run_env[@]}" LD_LIBRARY_PATH="$lib/uroce" ibv_devices 2>&1) || fail "ibv_devices: $out"
echo "$out"
grep -q 'uroce0' <<<"$out" || fail "ibv_devices lists no uroce0"
# `uroce run` finds the installed drop-ins from the installed uroce.
out=$("${run_env[@]}" "$p/bin/uroce" run -- sh -c 'echo "$LD_LIBRARY_PATH"') || fail "uroce run: $out"
[ "$(cd "${out%%:*}" && pwd -P)" = "$(cd "$lib/uroce" && pwd -P)" ] ||
  fail "uroce run put ${out%%:*} on LD_LIBRARY_PATH, not $lib/uroce"
out=$("${run_env[@]}" "$p/bin/uroce" run -- ibv_devices 2>&1) || fail "uroce run -- ibv_devices: $out"
grep -q 'uroce0' <<<"$out" || fail "uroce run -- ibv_devices lists no uroce0"
echo "uroce run -- ibv_devices: uroce0"
# `uroce doctor` finds the installed drop-ins and coordinator (the host's state aside).
out=$("${run_env[@]}" "$p/bin/uroce" doctor 2>&1)
grep -q "^ok: the drop-ins are in $p/bin/.*/uroce " <<<"$out" || fail "doctor: $out"
grep -qx "ok: the coordinator is $p/bin/uroce-devd" <<<"$out" || fail "doctor: $out"
# A pair of ibv_rc_pingpong on one device over the installed drop-ins (tests/compat's harness):
# the drop-in starts the device's coordinator, which must be the installed one.
UROCE_DEVD_LINGER_MS=60000 "${run_env[@]}" "$pair" "$lib/uroce" "$tcp_port" "$addr2" "$addr2" 60 \
  "iters in" -- ibv_rc_pingpong -g 0 --chk || fail "ibv_rc_pingpong over the installed drop-ins"
found=0
for e in /proc/[0-9]*/exe; do
  [ "$(readlink "$e" 2>/dev/null)" = "$p/bin/uroce-devd" ] || continue
  grep -qz "^$addr2\$" "${e%exe}cmdline" && found=1
done
[ "$found" = 1 ] || fail "the drop-in did not start the installed uroce-devd for $addr2"
echo "PASS"
