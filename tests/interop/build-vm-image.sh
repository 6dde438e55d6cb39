#!/usr/bin/env bash
# Builds the interop VM: Debian 12's own kernel plus a busybox initramfs that loads the
# Soft-RoCE driver (rdma_rxe) and carries rdma-core's ibv_* tools. Everything comes from plain
# Debian packages fetched with `apt-get download` and unpacked with `dpkg -x` (nothing is
# installed on the host).
#
# usage: build-vm-image.sh [CACHE_DIR]      (default: $UROCE_INTEROP_CACHE or /var/cache/uroce-interop)
# UROCE_INTEROP_KERNEL_SUITE=bookworm-backports: the kernel from Debian 12's backports (6.12 in
# 2026; rxe has had ATOMIC WRITE and FLUSH since 6.2), everything else as before. Its package
# lists are fetched into the cache with an apt configuration of their own: the host's apt
# sources are not touched.
# output: CACHE_DIR/image-HASH/vmlinuz, CACHE_DIR/image-HASH/initramfs.cpio.gz (paths printed on
# the last line), HASH that of this script and the guest init
#
# Reruns are fast: the downloaded .debs and the unpacked tree are kept (in CACHE_DIR/tree-HASH,
# HASH that of the package list), and an image is built once for each version of this script and
# the guest init. Versions live side by side, so that test runs of different branches sharing one
# cache (at the same time, or one after the other) neither rebuild each other's image nor boot it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${1:-${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop}}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

die() { echo "build-vm-image: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg cpio gzip xz objdump depmod flock; do
  command -v "$tool" >/dev/null 2>&1 || die "missing host tool '$tool' (scripts/install-deps installs it)"
done

# One build at a time per cache (two test runs may start together); bounded wait.
exec 9>"$cache/.lock"
flock -w 900 9 || die "another build holds $cache/.lock for more than 900 s"

suite=${UROCE_INTEROP_KERNEL_SUITE:-}
case $suite in
  '' | bookworm-backports) ;;
  *) die "UROCE_INTEROP_KERNEL_SUITE: '$suite' is not bookworm-backports (or empty)" ;;
esac
stamp_want=$( (cat "${BASH_SOURCE[0]}" "$here/vm-init.sh"; [[ -z $suite ]] || echo "$suite") |
              sha256sum | cut -c1-16)
image=$cache/image-$stamp_want
if [[ -f $image/stamp && $(cat "$image/stamp") == "$stamp_want" && -f $image/vmlinuz &&
      -f $image/initramfs.cpio.gz ]]; then
  echo "build-vm-image: cached image is current"
  echo "$image/vmlinuz $image/initramfs.cpio.gz"
  exit 0
fi

# User-space packages: busybox for the shell, rdma-core's verbs library, the rxe provider and
# the ibv_* tools, perftest (ib_{send,write,read,atomic}_{bw,lat}), librdmacm, rdmacm-utils
# (rping, udaddy, ucmatose, rdma_server, rdma_client, cmtime) and qperf over the kernel's
# rdma_cm, iproute2 for `rdma link add`, and the shared libraries they link against (checked
# below with objdump; a missing one fails the build with its name).
packages=(busybox-static libc6 libgcc-s1 libibverbs1 ibverbs-providers ibverbs-utils perftest
          libibumad3 librdmacm1 rdmacm-utils qperf iproute2 libnl-3-200 libnl-route-3-200 libmnl0
          libbsd0 libmd0 libcap2 libelf1 libbpf1 zlib1g libxtables12 libpci3 libudev1)

# The unpacked tree is reused while the package list is the same.
tree_want=$(echo "${packages[*]}${suite:+ $suite}" | sha256sum | cut -c1-16)
debs=$cache/tree-$tree_want.debs
tree=$cache/tree-$tree_want
if [[ ! -f $tree/.complete || $(cat "$tree/.complete") != "$tree_want" ]]; then
  # linux-image-amd64 is a metapackage; the real image is the package it depends on. With a
  # suite, its lists are kept in the cache and read by this script's apt calls only, fetched
  # afresh each time the tree is built.
  kapt=()
  if [[ -n $suite ]]; then
    bp=$cache/apt-$suite
    mkdir -p "$bp/lists/partial"
    echo "deb http://deb.debian.org/debian $suite main" >"$bp/sources.list"
    kapt=(-o "Dir::Etc::SourceList=$bp/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$bp/lists")
    apt-get -q -o DPkg::Lock::Timeout=300 "${kapt[@]}" update >/dev/null ||
      die "apt-get update of $suite failed"
  fi
  kernel_package() {
    apt-cache "${kapt[@]}" depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
  }
  kpkg=$(kernel_package)
  if [[ -z $kpkg && -z $suite ]]; then
    echo "build-vm-image: apt-cache knows no linux-image-amd64; running apt-get update"
    apt-get -q -o DPkg::Lock::Timeout=300 update >/dev/null || die "apt-get update failed"
    kpkg=$(kernel_package)
  fi
  [[ -n $kpkg ]] || die "${suite:-the package archive} has no linux-image-amd64"
  rm -rf "$debs"
  mkdir -p "$debs"
  echo "build-vm-image: downloading $kpkg and ${#packages[@]} user-space packages into $debs"
  (cd "$debs" && apt-get download -q "${kapt[@]}" "$kpkg") || die "apt-get download of $kpkg failed"
  (cd "$debs" && apt-get download -q "${packages[@]}") || die "apt-get download failed"
  rm -rf "$tree"
  mkdir -p "$tree"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$tree"; done
  echo "$tree_want" >"$tree/.complete"
fi

kver=$(ls "$tree/lib/modules" | head -1)
[[ -n $kver && -f $tree/boot/vmlinuz-$kver ]] || die "no kernel found in $tree"
[[ -f $tree/lib/modules/$kver/modules.dep ]] || depmod -b "$tree" "$kver"

# Built under a temporary name, renamed when complete.
rm -rf "$image.tmp"
mkdir -p "$image.tmp"
root=$image.tmp/root
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,run,root,lib64,usr/bin,usr/sbin}
mkdir -p "$root/etc/libibverbs.d" "$root/lib/modules/$kver"
cp "$tree/bin/busybox" "$root/bin/busybox"

# Kernel modules in load order: virtio NIC, the CRC32 the ICRC needs, the UDP tunnel helpers,
# the RDMA core, the connection manager and its user-space interface (rdma_ucm:
# /dev/infiniband/rdma_cm, which devtmpfs creates), rdma_rxe itself, and netem with prio and u32
# (loss injection on the guest's egress, for some packets only: the host kernel may have no
# netem), the ingress qdisc, mirred and ifb (the same on the guest's ingress: netem on ifb0,
# where the RoCE packets arriving on eth0 are redirected), and police (drops the first CM MAD of
# a kind: a token bucket that holds one packet and refills over minutes).
modules=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover
         net_failover virtio_net crc32_generic crc32-pclmul udp_tunnel ip6_udp_tunnel configfs
         ib_core ib_uverbs ib_cm iw_cm rdma_cm rdma_ucm rdma_rxe sch_netem sch_prio cls_u32
         sch_ingress act_mirred ifb act_police)
moddir=$tree/lib/modules/$kver
: >"$root/modorder"
for m in "${modules[@]}"; do
  rel=$(grep -E "(^|/)$m\.ko(\.xz)?:" "$moddir/modules.dep" | head -1 | cut -d: -f1 || true)
  if [[ -z $rel ]]; then
    # Newer kernels build some of these in (6.12: the virtio core and PCI transport).
    grep -qE "(^|/)$m\.ko\$" "$moddir/modules.builtin" 2>/dev/null && continue
    die "kernel module $m not found in $kver"
  fi
  mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
  # busybox's insmod takes a plain module: 6.12's come xz-compressed.
  case $rel in
    *.xz) xz -dc "$moddir/$rel" >"$root/lib/modules/$kver/${rel%.xz}"; rel=${rel%.xz} ;;
    *) cp "$moddir/$rel" "$root/lib/modules/$kver/$rel" ;;
  esac
  echo "/lib/modules/$kver/$rel" >>"$root/modorder"
done

# Binaries and, recursively, the libraries named in their DT_NEEDED entries.
declare -A copied
find_lib() {
  local d
  for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu; do
    if [[ -e $tree/$d/$1 ]]; then echo "$d/$1"; return 0; fi
  done
  return 1
}
copy_with_libs() {
  local f=$1 lib need
  [[ -n ${copied[$f]:-} ]] && return 0
  copied[$f]=1
  [[ -e $tree/$f ]] || die "$f is not in the unpacked packages"
  mkdir -p "$root/$(dirname "$f")"
  cp -L "$tree/$f" "$root/$f"
  for need in $(objdump -p "$tree/$f" 2>/dev/null | awk '/NEEDED/ {print $2}'); do
    [[ $need == ld-linux-x86-64.so.2 ]] && continue
    lib=$(find_lib "$need") || die "library $need (needed by $f) is in none of the packages"
    copy_with_libs "$lib"
  done
}
provider=$(cd "$tree" && ls usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so | head -1)
[[ -n $provider ]] || die "rxe provider library not found"
for f in usr/bin/ibv_devinfo usr/bin/ibv_devices usr/bin/ibv_{rc,uc,ud,srq}_pingpong \
         usr/bin/ib_{send,write,read,atomic}_{bw,lat} usr/bin/rping usr/bin/udaddy \
         usr/bin/ucmatose usr/bin/rdma_server usr/bin/rdma_client usr/bin/cmtime usr/bin/qperf \
         usr/bin/rdma sbin/tc "$provider" \
         lib/x86_64-linux-gnu/libgcc_s.so.1; do
  copy_with_libs "$f"
done
cp -L "$tree/lib64/ld-linux-x86-64.so.2" "$root/lib64/" 2>/dev/null ||
  cp -L "$tree/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$root/lib64/"
cp "$tree/etc/libibverbs.d/rxe.driver" "$root/etc/libibverbs.d/"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
echo '127.0.0.1 localhost' >"$root/etc/hosts"
install -m 755 "$here/vm-init.sh" "$root/init"

cp "$tree/boot/vmlinuz-$kver" "$image.tmp/vmlinuz"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -6) >"$image.tmp/initramfs.cpio.gz"
echo "$stamp_want" >"$image.tmp/stamp"
rm -rf "$image"
mv "$image.tmp" "$image"
echo "build-vm-image: kernel $kver, initramfs $(du -h "$image/initramfs.cpio.gz" | cut -f1)"
echo "$image/vmlinuz $image/initramfs.cpio.gz"
