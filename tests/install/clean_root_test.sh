#!/bin/bash
# The Debian packages on a clean Debian 12 (issue 42's acceptance): builds uroce and uroce-dev
# from the build tree under test, makes a minimal bookworm root with mmdebstrap from
# deb.debian.org holding only what a user brings (perftest, rdmacm-utils, g++, cmake, make:
# their RDMA programs and build tools, none of uroce's build dependencies), installs the packages
# there with apt-get (which fetches their dependencies from the registry), and then, with only
# installed files:
#   - `uroce doctor` in a network namespace: exit 0, or its problems printed and named here;
#   - `uroce run -d uroce_uv0 -- ib_write_bw`, server and client in two network namespaces
#     joined by a veth pair (10.42.0.1 and 10.42.0.2, uv0: the device per interface);
#   - `uroce run -- rping` the same way, 10 pings with their data verified (-V);
#   - a find_package(uroce) build of write_consumer/ (an RDMA WRITE with the native API),
#     run in a namespace;
# then purges both packages and checks that none of their files is left (dpkg -L before).
#
#   clean_root_test.sh BUILD_DIR STATE_DIR WRITE_CONSUMER_SRC
#
# Root only; skips (77) when not root, when a tool is missing, or when deb.debian.org cannot be
# reached (the packages' dependencies come from it). The root's tarball is cached under
# ${UROCE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uroce}, keyed by what it holds, with the
# .debs apt fetched for it: a machine downloads the root once. The root is unpacked in
# STATE_DIR/root; clean_root_cleanup.sh (the EXIT trap, and the ctest fixture cleanup should the
# test be killed) ends its processes, removes the namespaces, unmounts and deletes it.
set -u
build=$1 state=$2 program=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the clean root needs root (mmdebstrap, chroot, mounts, network namespaces)"
  exit 77
fi
for t in mmdebstrap cpack chroot ip ss mount; do
  command -v "$t" >/dev/null || { echo "SKIP: no $t (scripts/install-deps installs mmdebstrap)"; exit 77; }
done
mirror=http://deb.debian.org/debian
if ! timeout 10 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80' 2>/dev/null; then
  echo "SKIP: deb.debian.org:80 is unreachable: no clean root without the Debian registry"
  exit 77
fi
fail() {
  echo "FAIL: $*"
  exit 1
}
step() { echo "[$((SECONDS))s] $*"; }

root=$state/root
mkdir -p "$state"
"$here/clean_root_cleanup.sh" "$state" || fail "a previous run's root is still mounted"
trap '"$here/clean_root_cleanup.sh" "$state"' EXIT
trap 'exit 1' INT TERM
SECONDS=0

# The packages, from the build tree under test.
rm -rf "$state/pkg"
timeout 400 cpack -G DEB --config "$build/CPackConfig.cmake" -B "$state/pkg" >"$state/cpack.log" 2>&1 ||
  { cat "$state/cpack.log"; fail "cpack -G DEB"; }
debs=("$state"/pkg/uroce_*.deb "$state"/pkg/uroce-dev_*.deb)
[ -f "${debs[0]}" ] && [ -f "${debs[1]}" ] || fail "cpack made no uroce and uroce-dev packages"
step "built $(basename "${debs[0]}") and $(basename "${debs[1]}")"

# The root's tarball, cached by what it holds.
include=perftest,rdmacm-utils,g++,cmake,make
cache=${UROCE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uroce}
key=$(echo "bookworm apt $include $mirror lists" | sha256sum | cut -c1-16)
tarball=$cache/bookworm-$key.tar
mkdir -p "$cache/archives/partial"
if [ ! -f "$tarball" ]; then
  step "no cached root: mmdebstrap bookworm --variant=apt --include=$include (once)"
  # Written aside and renamed when complete, so that a killed run leaves no partial tarball
  # (--format: mmdebstrap would take the format from the name's extension).
  timeout 780 mmdebstrap --variant=apt --format=tar --include="$include" \
    --skip=cleanup/apt/lists bookworm "$tarball.part" "$mirror" >"$state/mmdebstrap.log" 2>&1 ||
    { tail -n 30 "$state/mmdebstrap.log"; rm -f "$tarball.part"; fail "mmdebstrap"; }
  mv -T "$tarball.part" "$tarball" || fail "mv $tarball.part $tarball"
fi
step "root: $tarball ($(du -h "$tarball" | cut -f1))"
mkdir "$root" && tar -C "$root" -xf "$tarball" || fail "unpacking $tarball"
# The tarball has /dev's nodes (null, zero, urandom ...); the root gets its own /proc and
# /dev/shm, nothing else of the host's.
mount -t proc proc "$root/proc" && mount -t tmpfs tmpfs "$root/dev/shm" ||
  fail "mounting /proc and /dev/shm in the root"
mount --bind "$cache/archives" "$root/var/cache/apt/archives" || fail "mount the .deb cache"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A command in the root, with a clean environment (nothing of the host's or of ctest's).
in_root=(chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
step "root unpacked and mounted"

# Install: apt resolves the packages' dependencies from the registry (the lists in the tarball
# may be older than the registry: update them once if that fails).
cp "${debs[@]}" "$root/tmp/"
install=(apt-get install -y --no-install-recommends /tmp/"${debs[0]##*/}" /tmp/"${debs[1]##*/}")
if ! timeout 300 "${in_root[@]}" DEBIAN_FRONTEND=noninteractive "${install[@]}" >"$state/apt.log" 2>&1; then
  step "apt-get install failed with the cached lists: apt-get update"
  timeout 300 "${in_root[@]}" apt-get update >>"$state/apt.log" 2>&1 &&
    timeout 300 "${in_root[@]}" DEBIAN_FRONTEND=noninteractive "${install[@]}" >>"$state/apt.log" 2>&1 ||
    { tail -n 30 "$state/apt.log"; fail "apt-get install ${debs[*]##*/} in the root"; }
fi
rm -f "$root"/tmp/*.deb
grep -E '^(Get:[0-9]+ http|Setting up )' "$state/apt.log" | cut -c1-100
"${in_root[@]}" dpkg -L uroce uroce-dev | sort -u >"$state/files" || fail "dpkg -L"
step "installed: $(wc -l <"$state/files") paths"

# Two namespaces joined by a veth pair; the device per interface is uroce_uv0 on each side.
ns_a=uroce-cr-$$-a ns_b=uroce-cr-$$-b
printf '%s\n' "$ns_a" "$ns_b" >"$state/netns"
ip netns add "$ns_a" && ip netns add "$ns_b" || fail "ip netns add"
ip link add uv0 netns "$ns_a" type veth peer name uv0 netns "$ns_b" || fail "ip link add veth"
ip -n "$ns_a" addr add 10.42.0.1/24 dev uv0 && ip -n "$ns_b" addr add 10.42.0.2/24 dev uv0 ||
  fail "ip addr add"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up && ip -n "$ns" link set uv0 up || fail "link up"; done
# A sanitizer build (the CI's) links its runtimes: the uninstrumented programs need them first.
san=()
if "${in_root[@]}" ldd /usr/bin/uroce | grep -q libasan; then
  san=(LD_PRELOAD="${UROCE_TEST_PRELOAD:-}" ASAN_OPTIONS=detect_leaks=0)
fi
# for_ns NS: ns_root becomes what runs a command in the root inside network namespace NS.
for_ns() { ns_root=(ip netns exec "$1" "${in_root[@]}" "${san[@]}"); }

# uroce doctor.
for_ns "$ns_a"
out=$(timeout 60 "${ns_root[@]}" uroce doctor 2>&1)
rc=$?
echo "$out" | sed 's/^/  doctor: /'
grep -qx "ok: the coordinator is /usr/bin/uroce-devd" <<<"$out" || fail "uroce doctor: no coordinator"
if [ "$rc" != 0 ]; then
  # In a bare namespace the host's sysctls are what they are: a problem must be one of those
  # the host's set-up explains, not a missing installed file.
  grep '^problem:' <<<"$out" | grep -Eqv 'rmem_max|wmem_max|ECN|firewall' &&
    fail "uroce doctor (exit $rc) names a problem of the installation"
  step "uroce doctor: exit $rc, only the host's settings (above)"
else
  step "uroce doctor: exit 0"
fi

# serve NAME NS READY_CMD... -- SERVER_CMD...: starts the server in NS, waits (bounded) until
# READY_CMD succeeds on the host. Then client NAME NS CMD...: runs, and checks both exited 0.
serve() {
  local name=$1 ns=$2
  shift 2
  local ready=()
  while [ "$1" != -- ]; do ready+=("$1"); shift; done
  shift
  for_ns "$ns"
  timeout -k 5 120 "${ns_root[@]}" "$@" >"$state/$name.server" 2>&1 &
  spid=$!
  for _ in $(seq 1 300); do
    "${ready[@]}" && return 0
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$state/$name.server"
  fail "$name: the server never got ready"
}
client() {
  local name=$1 ns=$2
  shift 2
  for_ns "$ns"
  timeout -k 5 120 "${ns_root[@]}" "$@" >"$state/$name.client" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [ "$src" != 0 ] || [ "$crc" != 0 ]; then
    echo "----- server -----"; cat "$state/$name.server"
    echo "----- client -----"; cat "$state/$name.client"
    fail "$name: server exit $src, client exit $crc"
  fi
}

listening_tcp() { ip netns exec "$ns_a" ss -Hltn "sport = :$1" | grep -q .; }
serve ib_write_bw "$ns_a" listening_tcp 18515 -- \
  uroce run -d uroce_uv0 -- ib_write_bw -n 2000 -s 65536 -p 18515
client ib_write_bw "$ns_b" uroce run -d uroce_uv0 -- ib_write_bw -n 2000 -s 65536 -p 18515 10.42.0.1
grep -A3 'BW peak' "$state/ib_write_bw.client" | sed 's/^/  /'
grep -Eq '^ *65536 +2000 ' "$state/ib_write_bw.client" || fail "ib_write_bw: no result line"
step "uroce run -- ib_write_bw: 2000 x 64 KiB from 10.42.0.2 to 10.42.0.1"

listening_cm() {
  ip netns exec "$ns_a" "${in_root[@]}" uroce stats 2>/dev/null |
    grep -Eq "^cm_id 10\.42\.0\.1:4791 pid [0-9]+ ps tcp port $1 state listening"
}
serve rping "$ns_a" listening_cm 7542 -- uroce run -- rping -s -a 10.42.0.1 -p 7542 -C 10 -V
client rping "$ns_b" uroce run -- rping -c -a 10.42.0.1 -p 7542 -C 10 -V -v
[ "$(grep -c '^ping data: rdma-ping-' "$state/rping.client")" = 10 ] ||
  { cat "$state/rping.client"; fail "rping: not 10 pings"; }
step "uroce run -- rping: 10 pings verified (-V)"

# The user's C++ program: find_package(uroce) in the root, then its RDMA WRITE in a namespace.
mkdir -p "$root/tmp/write" && cp "$program"/CMakeLists.txt "$program"/main.cc "$root/tmp/write/"
timeout 300 "${in_root[@]}" sh -c 'cmake -S /tmp/write -B /tmp/write/b && cmake --build /tmp/write/b' \
  >"$state/write.log" 2>&1 || { cat "$state/write.log"; fail "find_package(uroce) build"; }
for_ns "$ns_a"
out=$(timeout 60 "${ns_root[@]}" /tmp/write/b/write 10.42.0.1 2>&1) || fail "the RDMA WRITE: $out"
echo "  $out"
step "find_package(uroce) build of write_consumer/, and its RDMA WRITE on 10.42.0.1"

# Removal: nothing of the packages' files is left (directories other packages share stay).
# The coordinators (uroce-devd) the programs started linger a while after them: ended first.
while read -r ns; do ip netns pids "$ns" | xargs -r kill -KILL; done <"$state/netns"
timeout 120 "${in_root[@]}" apt-get purge -y uroce-dev uroce >"$state/purge.log" 2>&1 ||
  { cat "$state/purge.log"; fail "apt-get purge"; }
left=0
while read -r f; do
  [ -e "$root$f" ] || [ -L "$root$f" ] || continue
  # A directory is the packages' own when its name says uroce (/usr/lib/<triplet>/uroce ...);
  # the others (/usr/bin) belong to every package.
  if [ -d "$root$f" ] && [ ! -L "$root$f" ]; then
    case $f in */uroce*) ;; *) continue ;; esac
  fi
  echo "left behind: $f"
  left=1
done <"$state/files"
[ "$left" = 0 ] || fail "purging left files behind"
"${in_root[@]}" ldconfig -p | grep -q 'liburoce' && fail "ldconfig still knows liburoce"
step "purged: none of the $(wc -l <"$state/files") paths is left"
echo "PASS (${SECONDS}s)"
