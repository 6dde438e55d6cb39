#!/bin/bash
# The Debian packages (cmake/install.cmake, scripts/package), uroce and uroce-dev, built from the
# build tree under test, installed with apt-get, checked, and purged:
#
#   package_test.sh BUILD_DIR MARKER
#
# Root only (it installs into /usr): skips otherwise, and skips when a uroce package is
# installed already (it would replace and purge it). Checks `uroce --version`, the drop-ins in
# /usr/lib/<triplet>/uroce/ (rdma-core's libibverbs.so.1 untouched), `uroce run -- ibv_devices`,
# what `uroce doctor` finds, /etc/uroce/devices.conf (a conffile naming no device), the manual
# pages in uroce and the development files in uroce-dev
# (and not in uroce), then that purging leaves none of the packages' files. It purges the package on every way out
# (trap); MARKER exists while the package is installed, for the ctest fixture cleanup
# (package_cleanup.sh) that runs even when this test is killed at its timeout. Every step is
# bounded well inside the test's ctest timeout.
set -u
build=$1 marker=$2
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: installing a package needs root"
  exit 77
fi
for t in cpack dpkg-shlibdeps apt-get dpkg-architecture; do
  command -v "$t" >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
for p in uroce uroce-dev; do
  status=$(dpkg-query -W -f='${db:Status-Status}' $p 2>/dev/null)
  if [ -n "$status" ] && [ "$status" != not-installed ]; then
    echo "SKIP: a $p package is on this machine already ($status): not replacing it"
    exit 77
  fi
done
tmp=$(mktemp -d)
cleanup() {
  if [ -e "$marker" ]; then
    timeout 120 dpkg --purge uroce-dev uroce >/dev/null 2>&1 && rm -f "$marker"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*"
  exit 1
}

SECONDS=0
timeout 400 cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
deb=$(ls "$tmp"/pkg/uroce_*.deb)
dev=$(ls "$tmp"/pkg/uroce-dev_*.deb)
echo "built $(basename "$deb") and $(basename "$dev") in ${SECONDS}s"
dpkg-deb -f "$deb" Depends
dpkg-deb -f "$deb" Depends | grep -Eq 'ibverbs|rdmacm' && fail "it depends on rdma-core"
dpkg-deb -f "$dev" Depends | grep -qx "uroce (= $(dpkg-deb -f "$deb" Version))" ||
  fail "uroce-dev does not depend on its uroce: $(dpkg-deb -f "$dev" Depends)"
# What goes where: the development files in uroce-dev only, the manual pages in uroce.
dpkg-deb -c "$deb" | awk '{ print $6 }' >"$tmp/runtime-files"
dpkg-deb -c "$dev" | awk '{ print $6 }' >"$tmp/dev-files"
for f in ./usr/include/uroce/verbs.h ./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/pkgconfig/uroce.pc \
  ./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/cmake/uroce/uroce-config.cmake \
  ./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/liburoce.so; do
  grep -qx -- "$f" "$tmp/dev-files" || fail "uroce-dev has no $f"
done
grep -E '^\./usr/include/|\.pc$|/cmake/|liburoce\.so$' "$tmp/runtime-files" &&
  fail "uroce holds development files"
for f in ./usr/share/man/man1/uroce.1.gz ./usr/share/man/man7/uroce.7.gz \
  ./usr/share/man/man8/uroce-devd.8.gz; do
  grep -qx -- "$f" "$tmp/runtime-files" || fail "uroce has no $f"
done

touch "$marker"
timeout 180 apt-get install -y --no-install-recommends "$deb" "$dev" >"$tmp/apt.log" 2>&1 ||
  { cat "$tmp/apt.log"; fail "apt-get install $deb $dev"; }
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
/usr/bin/uroce --version | grep -qx "uroce $(dpkg-deb -f "$deb" Version | sed 's/-.*//')" ||
  fail "uroce --version"
for f in libibverbs.so.1 librdmacm.so.1; do
  [ -e "/usr/lib/$triplet/uroce/$f" ] || fail "no /usr/lib/$triplet/uroce/$f"
  if [ -e "/usr/lib/$triplet/$f" ]; then
    dpkg -S "/usr/lib/$triplet/$f" | grep -q '^uroce:' && fail "/usr/lib/$triplet/$f is uroce's"
  fi
done
ldconfig -p | grep -q 'liburoce.so.0 ' || fail "ldconfig does not know liburoce.so.0"
# The device configuration: a conffile, installed as an example that names no device (the
# default list stays: ibv_devices below still lists uroce0).
[ -f /etc/uroce/devices.conf ] || fail "no /etc/uroce/devices.conf"
dpkg-query -W -f='${Conffiles}\n' uroce | grep -q '^ */etc/uroce/devices.conf ' ||
  fail "/etc/uroce/devices.conf is not a conffile: $(dpkg-query -W -f='${Conffiles}' uroce)"
grep -Ev '^[[:space:]]*(#|$)' /etc/uroce/devices.conf && fail "devices.conf names a device"
if command -v ibv_devices >/dev/null; then
  run_env=(env -u UROCE_DEVICES -u UROCE_CONFIG -u UROCE_DEVD)
  if readelf -d /usr/bin/uroce | grep -Eq 'libasan|libtsan'; then
    run_env+=(LD_PRELOAD="${UROCE_TEST_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0)
  fi
  out=$("${run_env[@]}" /usr/bin/uroce run -- ibv_devices 2>&1) || fail "uroce run -- ibv_devices: $out"
  grep -q uroce0 <<<"$out" || fail "uroce run -- ibv_devices lists no uroce0: $out"
  echo "uroce run -- ibv_devices: uroce0"
fi
out=$(/usr/bin/uroce doctor 2>&1)
grep -q "^ok: the drop-ins are in /usr/bin/.*/uroce " <<<"$out" || fail "uroce doctor: $out"
grep -qx "ok: the coordinator is /usr/bin/uroce-devd" <<<"$out" || fail "uroce doctor: $out"

if command -v man >/dev/null; then
  man -w uroce-devd | grep -qx /usr/share/man/man8/uroce-devd.8.gz || fail "man -w uroce-devd"
fi

{ dpkg -L uroce; dpkg -L uroce-dev; } >"$tmp/files"
timeout 120 apt-get purge -y uroce-dev uroce >"$tmp/apt.log" 2>&1 ||
  { cat "$tmp/apt.log"; fail "apt-get purge"; }
rm -f "$marker"
left=0
while read -r f; do
  case $f in */uroce*) ;; *) continue ;; esac # the package's own (/etc/uroce too); /usr/bin stays
  if [ -e "$f" ] || [ -L "$f" ]; then
    echo "left behind: $f"
    left=1
  fi
done <"$tmp/files"
[ "$left" = 0 ] || fail "purging left files behind"
ldconfig -p | grep -q 'liburoce.so.0 ' && fail "ldconfig still knows liburoce.so.0"
echo "PASS ($(wc -l <"$tmp/files") paths installed and removed, ${SECONDS}s)"
