#!/usr/bin/env bash
# pyverbs' test_rdmacm over the drop-in (manual, root; docs/COMPAT.md "rdma-core's pyverbs suite").
# The suite finds a device's IP address only through sysfs (/sys/class/infiniband/DEV/device/net/
# NETDEV, then `ip addr show NETDEV`), which a user-space device has not. This runs the module in
# a private mount namespace whose /sys/class holds, besides the host's own classes, one node
# /sys/class/infiniband/uroce0/device/net/lo, so that the suite takes 127.0.0.1, the device's
# address here. Nothing outside the namespace changes.
#   sudo tests/compat/pyverbs_rdmacm_sysfs.sh BUILD_DIR [TEST...]   (default: test_rdmacm)
set -euo pipefail
if [[ ${1:-} == --inside ]]; then
  shift
  build=$1
  shift
  keep=$(mktemp -d)
  mount --make-rprivate /
  mount --rbind /sys/class "$keep"
  mount -t tmpfs uroce-sysfs /sys/class
  for e in "$keep"/*; do
    mkdir -p "/sys/class/${e##*/}"
    mount --rbind "$e" "/sys/class/${e##*/}"
  done
  mkdir -p /sys/class/infiniband/uroce0/device/net/lo
  exec "$(dirname "$0")/pyverbs_suite.py" --lib "$build/compat" --address 127.0.0.1 "$@"
fi
build=$(realpath "${1:?usage: $0 BUILD_DIR [TEST...]}")
shift
(($# > 0)) || set -- test_rdmacm
if readelf -d "$build/compat/libibverbs.so.1" | grep -q libasan; then
  export UROCE_TEST_PRELOAD=${UROCE_TEST_PRELOAD:-"$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"}
fi
exec unshare -m "$0" --inside "$build" "$@"
