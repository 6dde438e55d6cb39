#!/bin/bash
# ibv_devices and ibv_devinfo (unmodified) over the drop-in libibverbs.so.1.
#   run_devinfo.sh LIBDIR ADDR1 ADDR2 TCP_PORT [UROCE]
# - ibv_devices lists both configured devices with their node GUIDs;
# - ibv_devinfo -v shows the device as rxe would (port active, Ethernet, IPv4-mapped RoCE v2 GID);
# - ibv_devinfo works while another process uses the device (its UDP port 4791 bound): queries
#   never open the network;
# - with UROCE (the uroce tool): `ibv_devinfo -v` prints what `uroce devinfo -v` prints, line for
#   line (the tool reads the Device directly; the drop-in converts it to libibverbs' structs),
#   apart from the extended attributes only ibv_devinfo shows.
set -u
libdir=$1 a1=$2 a2=$3 port=$4 uroce=${5:-}
export LD_LIBRARY_PATH=$libdir
if readelf -d "$libdir/libibverbs.so.1" | grep -Eq 'libasan|libtsan'; then
  export LD_PRELOAD="${UROCE_TEST_PRELOAD:-}"
  export ASAN_OPTIONS=detect_leaks=0
fi
fail=0
expect() {  # expect NAME OUTPUT REGEX
  if ! grep -Eq -- "$3" <<<"$2"; then
    echo "FAIL: $1: no line matches /$3/ in:"
    echo "$2"
    fail=1
  fi
}

out=$(UROCE_DEVICES="left=$a1,right=$a2" timeout 20 ibv_devices 2>&1)
echo "$out"
expect ibv_devices "$out" '^\s+left\s+[0-9a-f]{16}$'
expect ibv_devices "$out" '^\s+right\s+[0-9a-f]{16}$'

out=$(UROCE_DEVICES="left=$a1,right=$a2" timeout 20 ibv_devinfo -v -d right 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: ibv_devinfo exit $rc"; fail=1; }
expect ibv_devinfo "$out" '^hca_id:\s+right$'
expect ibv_devinfo "$out" 'state:\s+PORT_ACTIVE \(4\)'
expect ibv_devinfo "$out" 'link_layer:\s+Ethernet'
expect ibv_devinfo "$out" 'vendor_id:\s+0xffffff'
expect ibv_devinfo "$out" "GID\[  0\]:\s+::ffff:$a2, RoCE v2"

# An address no interface holds (TEST-NET-1): listed, its port down.
out=$(UROCE_DEVICES=192.0.2.1 timeout 20 ibv_devinfo 2>&1)
expect "ibv_devinfo (address not local)" "$out" 'state:\s+PORT_DOWN \(1\)'

if [ -n "$uroce" ]; then
  want=$(UROCE_DEVICES=$a2 ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD= timeout 20 "$uroce" devinfo -v 2>&1)
  got=$(UROCE_DEVICES=$a2 timeout 20 ibv_devinfo -v 2>&1 |
    sed '/^\tgeneral_odp_caps:/,/^\ttag matching/d')
  if [ "$want" != "$got" ]; then
    echo "FAIL: ibv_devinfo -v over the drop-in differs from uroce devinfo -v:"
    diff <(echo "$want") <(echo "$got")
    fail=1
  fi
fi

tmpd=$(mktemp -d)
mkfifo "$tmpd/in"
# Another program holds the device's port without sharing it (a plain UDP socket, as another
# RDMA stack would): querying still works, and a process that needs the network fails cleanly,
# saying why. (Other uroce processes share the device: tests/compat/shared_device_test.sh.)
env -u LD_PRELOAD python3 -c "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('$a1',4791)); print('bound',flush=True); sys.stdin.read()" <"$tmpd/in" >"$tmpd/holder" 2>&1 &
holder=$!
exec 7>"$tmpd/in"
bound=0
for _ in $(seq 1 100); do
  if grep -q bound "$tmpd/holder"; then bound=1; break; fi
  sleep 0.1
done
[ $bound -eq 1 ] || { echo "FAIL: the holder never bound $a1:4791"; cat "$tmpd/holder"; fail=1; }
out=$(UROCE_DEVICES=$a1 timeout 20 ibv_devinfo -v 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: ibv_devinfo while the port is held: exit $rc"; echo "$out"; fail=1; }
expect "ibv_devinfo (port held)" "$out" "GID\[  0\]:\s+::ffff:$a1, RoCE v2"
out=$(UROCE_DEVICES=$a1 timeout 20 ibv_rc_pingpong -g 0 -p $((port + 1)) 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: a user of the held port $a1 exited $rc"; fail=1; }
expect "user of the held port" "$out" "uroce libibverbs: cannot open device uroce0 \\($a1\\).*port in use"
exec 7>&-
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
rm -rf "$tmpd"
[ $fail -eq 0 ] && echo PASS
exit $fail
