#!/bin/bash
# `uroce doctor` (src/tools/doctor_cmd.h): a healthy set-up exits 0; each problem is named on its
# own line with exit status 1; notes do not fail. The host's settings come from the test
# (--sysctl-dir, --ib-dir, --proc-net-unix), the devices from UROCE_DEVICES on 127.79.0.2x.
#   doctor_test.sh UROCE
set -u
uroce=$1
tmp=$(mktemp -d)
holder=
cleanup() {
  [ -n "$holder" ] && kill "$holder" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
source "$(dirname "$0")/doctor_lib.sh"
mkdir -p "$tmp/big" "$tmp/small" "$tmp/ib" "$tmp/noib"
echo 16777216 >"$tmp/big/rmem_max"
echo 212992 >"$tmp/small/rmem_max"
for d in big small; do
  echo 4194304 >"$tmp/$d/wmem_max"
  echo 212992 >"$tmp/$d/wmem_default"
done
ln -s /dev/null "$tmp/ib/uverbs0"
: >"$tmp/unix"
# doctor STATUS REGEX [ENV...] -- [OPTIONS...]: `uroce doctor` exits STATUS, its output matches
# REGEX (grep -E), and every line is ok:, problem:, note: or the summary.
doctor() {
  local want=$1 re=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env -u UROCE_CONFIG -u UROCE_DEVD "${envs[@]}" "$uroce" doctor --ib-dir "$tmp/ib" \
    --proc-net-unix "$tmp/unix" --sysctl-dir "$tmp/big" "$@" >"$tmp/out" 2>&1
  doctor_expect $? "$want" "$re" "$tmp/out" "doctor $*"
}

doctor 0 '^all well$' UROCE_DEVICES=127.79.0.20 --
doctor 0 '^ok: uroce0 on 127.79.0.20: UDP port 4791 is free' UROCE_DEVICES=127.79.0.20 --
doctor 0 '^ok: uroce0 on 127.79.0.20: a datagram sent to UDP port 4791 from this host arrives' \
  UROCE_DEVICES=127.79.0.20 --
doctor 0 '^note: uroce0 on 127.79.0.20: interface lo, MTU [0-9]+: RoCE MTU 4096$' \
  UROCE_DEVICES=127.79.0.20 --
doctor 0 '^ok: net.core.wmem_max is 4194304: .*net.core.wmem_default, 212992' \
  UROCE_DEVICES=127.79.0.20 --
doctor 0 '^note: CRC-32 \(ICRC\) kernel of this CPU: ' UROCE_DEVICES=127.79.0.20 --
doctor 1 '^problem: peer not-an-ip: not an IP address' UROCE_DEVICES=127.79.0.20 -- not-an-ip
doctor 0 '^note: uroce0 on 127.79.0.20: UCX will not use it .*uroce setup' \
  UROCE_DEVICES=127.79.0.20 -- --ib-dir "$tmp/noib"
doctor 1 '^problem: uroce0 on 192.0.2.1: not an address of this host' UROCE_DEVICES=192.0.2.1 --
doctor 1 '^problem: the device configuration: ' 'UROCE_DEVICES=x=not-an-address' --

# Port 4791 held by another program, then (as /proc/net/unix tells) by the device's coordinator.
mkfifo "$tmp/ready"
python3 -c '
import signal, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.79.0.21", 4791))
open(sys.argv[1], "w").write("bound\n")
signal.pause()' "$tmp/ready" &
holder=$!
read -r line <"$tmp/ready"
[ "$line" = bound ] || fail "the port holder did not bind"
doctor 1 '^problem: uroce0 on 127.79.0.21: UDP port 4791 is taken by a program other than uroce' \
  UROCE_DEVICES=127.79.0.21 --
echo "0000000000000000: 00000002 00000000 00010000 0001 01 12345 @uroce-devd/127.79.0.21/4791" \
  >"$tmp/unix"
doctor 0 'held by the device.s coordinator' UROCE_DEVICES=127.79.0.21 --

# A small rmem_max: a problem for a process without CAP_NET_ADMIN, not for one with it.
if [ "$(id -u)" = 0 ]; then
  doctor 0 'rmem_max is 212992 \(this process has CAP_NET_ADMIN' UROCE_DEVICES=127.79.0.20 -- \
    --sysctl-dir "$tmp/small"
  if command -v setpriv >/dev/null; then
    uroce_root=$uroce
    uroce="$tmp/nocap"
    printf '#!/bin/sh\nexec setpriv --bounding-set=-net_admin --inh-caps=-net_admin %s "$@"\n' \
      "$uroce_root" >"$uroce" && chmod +x "$uroce"
    doctor 1 '^problem: net.core.rmem_max is 212992, below the 16777216 .*sysctl -w' \
      UROCE_DEVICES=127.79.0.20 -- --sysctl-dir "$tmp/small"
    uroce=$uroce_root
  fi
else
  doctor 1 '^problem: net.core.rmem_max is 212992' UROCE_DEVICES=127.79.0.20 -- \
    --sysctl-dir "$tmp/small"
fi

# A uroce without its drop-ins beside it.
mkdir "$tmp/bin" && cp "$uroce" "$tmp/bin/uroce"
uroce=$tmp/bin/uroce
doctor 1 '^problem: no drop-in libibverbs.so.1' UROCE_DEVICES=127.79.0.20 --
echo PASS
