#!/bin/busybox sh
# /init of the uroce interop VM (Debian 12 kernel + rdma_rxe + rdma-core tools).
# Kernel command line: uroce_ip=A.B.C.D/NN sets eth0's address, uroce_ip6=X::Y/NN an IPv6 one
# (rxe adds a GID for it), uroce_mtu=N its MTU.
# Prints "uroce-vm: READY" on the console once rxe0 exists, then serves a shell there.
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
echo "export PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH PS1='vm# '" >/etc/profile
for m in $(cat /modorder); do
  insmod "$m" || echo "uroce-vm: insmod $m failed"
done
ip=; ip6=; mtu=
for arg in $(cat /proc/cmdline); do
  case $arg in
    uroce_ip=*) ip=${arg#uroce_ip=} ;;
    uroce_ip6=*) ip6=${arg#uroce_ip6=} ;;
    uroce_mtu=*) mtu=${arg#uroce_mtu=} ;;
  esac
done
ip link set lo up
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
[ -n "$mtu" ] && ip link set eth0 mtu "$mtu"
ip addr add "$ip" dev eth0
if [ -n "$ip6" ]; then
  # No duplicate address detection (busybox ip has no "nodad"): usable at once.
  echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad
  ip -6 addr add "$ip6" dev eth0
fi
ip link set eth0 up
if rdma link add rxe0 type rxe netdev eth0; then
  echo "uroce-vm: READY rxe0 on eth0 $ip $ip6"
else
  echo "uroce-vm: FAILED to create rxe0"
fi
dmesg -n 1
while true; do setsid cttyhack sh -l; sleep 0.1; done
