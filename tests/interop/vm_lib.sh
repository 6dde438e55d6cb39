# shellcheck shell=bash
# Shared by the interop harnesses (rxe_interop_test.sh, rxe_matrix_test.sh); sourced, not run.
# A network namespace of its own holds a bridge (10.123.0.1/24 and fd00:123::1/64, where uroce
# binds) and a tap device for a qemu VM (Debian 12's kernel, rdma_rxe's rxe0 on its eth0,
# 10.123.0.2 and fd00:123::2), built by build-vm-image.sh. Nothing routes out of the namespace.
# The VM and the namespace are removed on exit, whatever happens; every wait is bounded.
#
# The sourcing script sets `out` (an existing, absolute folder) and `here` (this folder), then
# calls vm_prerequisites, vm_image, vm_network, vm_boot [EXTRA_CPIO_GZ] and vm_gids.
# Environment: UROCE_INTEROP_BOOT_TIMEOUT (s, default 180), UROCE_INTEROP_CACHE (image cache),
# UROCE_INTEROP_KERNEL (another kernel: tests of the failure paths).

boot_timeout=${UROCE_INTEROP_BOOT_TIMEOUT:-180}
ns=uroce-ix-$$
host_ip=10.123.0.1
vm_ip=10.123.0.2
host_ip6=fd00:123::1
vm_ip6=fd00:123::2
sock=$out/console.sock
console_log=$out/console.log
qemu_pid=
tcpdump_pid=
host_pid=  # a host-side program the harness runs in the background
v4gid=::ffff:$vm_ip

note() { printf '[interop %3ds] %s\n' "$SECONDS" "$*"; }
fail() {
  note "FAIL: $*"
  note "logs and captures are in $out"
  exit 1
}

# Stops qemu: SIGTERM, up to 5 s for it to exit, then SIGKILL.
vm_stop() {
  if [[ -z $qemu_pid && -f $out/qemu.pid ]]; then qemu_pid=$(cat "$out/qemu.pid"); fi
  if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$qemu_pid" 2>/dev/null || true
  fi
}

vm_cleanup() {
  local rc=$?
  set +e
  [[ -n $host_pid ]] && kill "$host_pid" 2>/dev/null
  [[ -n $tcpdump_pid ]] && kill -INT "$tcpdump_pid" 2>/dev/null && wait "$tcpdump_pid" 2>/dev/null
  vm_stop
  # Host programs still running in the namespace (a timed-out client) go with it.
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  if ((rc != 0)); then
    note "exit $rc; logs and captures are in $out"
    [[ -f $console_log ]] && { note "last console lines:"; tail -n 15 "$console_log"; }
  fi
  exit $rc
}

vm_prerequisites() {
  ((EUID == 0)) || fail "needs root (network namespace, tap device, qemu)"
  for tool in qemu-system-x86_64 tcpdump ip python3 cpio; do
    command -v "$tool" >/dev/null 2>&1 || fail "missing '$tool' (scripts/install-deps installs it)"
  done
  [[ -c /dev/net/tun ]] || fail "no /dev/net/tun: cannot create the VM's tap device"
  # The interpreter itself, found once: a version manager's `python3` (pyenv's shim) is a
  # script that costs up to a second a call, and a case makes about ten.
  py=$(python3 -c 'import sys; print(sys.executable)') || fail "python3 does not run"
}

# Sets kernel and initrd.
vm_image() {
  note "VM image (cached under ${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop})"
  local image
  image=$("$here/build-vm-image.sh" 2>"$out/build-vm-image.log" | tail -1) ||
    { cat "$out/build-vm-image.log"; fail "building the VM image failed"; }
  read -r kernel initrd <<<"$image"
  kernel=${UROCE_INTEROP_KERNEL:-$kernel}  # tests: a kernel that does not boot
}

vm_network() {
  trap vm_cleanup EXIT
  trap 'exit 130' INT TERM
  # A run killed without its cleanup (SIGKILL, a ctest timeout) leaves its namespace and VM
  # behind: remove those of runs whose harness is gone (the namespace is named after its pid).
  for stale in $(ip netns list | awk '/^uroce-ix-[0-9]+/ {print $1}'); do
    kill -0 "${stale#uroce-ix-}" 2>/dev/null && continue
    note "removing $stale, left by a run that did not clean up"
    for p in $(ip netns pids "$stale" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$stale" 2>/dev/null || true
  done
  note "namespace $ns: bridge br0 $host_ip/24 $host_ip6/64, tap0"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add br0 type bridge
  ip -n "$ns" addr add "$host_ip/24" dev br0
  ip -n "$ns" addr add "$host_ip6/64" dev br0 nodad
  ip -n "$ns" tuntap add tap0 mode tap
  # The tap's queue towards qemu holds tx_queue_len frames, and tun drops what does not fit
  # (tap0's TX dropped). A 1 MiB READ's responses from uroce, or a full window of requests,
  # arrive in one burst of up to 1024 frames per message, faster than a TCG guest takes them:
  # with the default 1000, ib_read_bw -s 1M lost 2334 of 15771 frames there (2026-12-06), and
  # the matrix, which requires rxe to accept every packet uroce sent, failed. The link under
  # test is the bridge, not qemu's intake, so the queue is made deep enough for the bursts.
  ip -n "$ns" link set tap0 txqueuelen 20000
  ip -n "$ns" link set tap0 master br0
  ip -n "$ns" link set tap0 up
  ip -n "$ns" link set br0 up
}
inns() { ip netns exec "$ns" "$@"; }

vm_boot() { # [initrd to boot instead of the image's]
  note "booting the VM (qemu tcg, rxe0 on eth0 $vm_ip)"
  # Started with `ip netns exec` directly (not through a shell function) so that $! is qemu's
  # own pid, which the cleanup kills.
  ip netns exec "$ns" qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 1 -nodefaults \
    -no-user-config -display none -no-reboot \
    -kernel "$kernel" -initrd "${1:-$initrd}" \
    -append "console=ttyS0 quiet panic=-1 uroce_ip=$vm_ip/24 uroce_ip6=$vm_ip6/64" \
    -chardev "socket,id=con,path=$sock,server=on,wait=off,logfile=$console_log" \
    -serial chardev:con \
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:12:30:02 -pidfile "$out/qemu.pid" \
    >"$out/qemu.log" 2>&1 &
  qemu_pid=$!
  if ! "$py" "$here/vm_console.py" wait-ready "$console_log" "$boot_timeout" "$qemu_pid"; then
    if ! kill -0 "$qemu_pid" 2>/dev/null; then
      cat "$out/qemu.log"
      fail "qemu exited before the VM was ready (see qemu.log, console.log)"
    fi
    fail "the VM did not boot within ${boot_timeout}s"
  fi
  note "VM ready"
}

# Stops the VM (qemu killed, as the cleanup does) and boots it again from the same initrd; the
# console's log of the stopped VM is kept as console.log.N. The caller sets up again what it had
# set in the guest (MTU, qdiscs) and calls vm_gids.
vm_reboot() { # [initrd, as vm_boot's]
  local n=1
  vm_stop
  if [[ -n $qemu_pid ]]; then wait "$qemu_pid" 2>/dev/null || true; fi
  qemu_pid=
  while [[ -e $console_log.$n ]]; do n=$((n + 1)); done
  if [[ -e $console_log ]]; then mv "$console_log" "$console_log.$n"; fi
  rm -f "$sock" "$out/qemu.pid"
  vm_boot "$@"
}

vm() { # vm TIMEOUT 'command' -> output on stdout, exit status of the command
  "$py" "$here/vm_console.py" run "$sock" "$1" "$2"
}

# Waits until rxe0's GID table holds both addresses; writes vm-devinfo.txt; sets vm4_gidx and
# vm6_gidx.
vm_gids() {
  # The GID table fills in the background (address events): wait, bounded.
  for _ in $(seq 30); do
    vm 60 'ibv_devinfo -d rxe0 -v; ibv_devices; rdma link show' >"$out/vm-devinfo.txt" ||
      fail "ibv_devinfo in the VM failed"
    grep -q "::ffff:$vm_ip, RoCE v2" "$out/vm-devinfo.txt" &&
      grep -q "[[:space:]]$vm_ip6, RoCE v2" "$out/vm-devinfo.txt" && break
    sleep 0.5
  done
  grep -q 'PORT_ACTIVE' "$out/vm-devinfo.txt" || fail "rxe0's port is not active"
  # rxe's GID table: usually index 0 the link-local IPv6 address, 1 the IPv4-mapped one, then
  # the global IPv6 address; but the kernel fills it from address events in the background and
  # the link-local entry sometimes appears twice, shifting the others. Look the indices up.
  vm4_gidx=$(gid_index "::ffff:$vm_ip")
  vm6_gidx=$(gid_index "$vm_ip6")
  [[ -n $vm4_gidx ]] || fail "rxe0 has no IPv4-mapped GID ::ffff:$vm_ip (see vm-devinfo.txt)"
  [[ -n $vm6_gidx ]] || fail "rxe0 has no GID for $vm_ip6 (see vm-devinfo.txt)"
  ((vm4_gidx == 1)) || note "rxe0's IPv4-mapped GID is at index $vm4_gidx (usually 1)"
}
gid_index() { # address -> its RoCE v2 GID index in rxe0's table
  sed -n "s/^[[:space:]]*GID\[ *\([0-9]*\)\]:[[:space:]]*$1, RoCE v2.*/\1/p" \
    "$out/vm-devinfo.txt" | head -1
}

# rxe's per-port counters (hw_counters) as NAME=VALUE lines: one process in the guest (a fork
# per counter costs seconds under TCG), its `grep -H` lines turned into NAME=VALUE here.
rxe_counters_cmd='grep -H "" /sys/class/infiniband/rxe0/ports/1/hw_counters/*'
counters_of() { sed -n 's|^.*/hw_counters/\([^:]*\):|\1=|p'; }
rxe_counters() {
  local text
  text=$(vm 30 "$rxe_counters_cmd") || return 1
  counters_of <<<"$text"
}
# Before a case: the guest's kernel log emptied and rxe's counters (FILE), in one console call.
vm_case_begin() { # COUNTERS_FILE
  local text
  text=$(vm 30 "dmesg -c >/dev/null; $rxe_counters_cmd") || return 1
  counters_of <<<"$text" >"$1"
}
# After a case: rxe's counters (FILE) and the guest's kernel log since vm_case_begin (FILE).
vm_case_end() { # COUNTERS_FILE DMESG_FILE
  local text
  text=$(vm 30 "$rxe_counters_cmd; echo @@dmesg@@; dmesg -c") || return 1
  sed '/^@@dmesg@@$/q' <<<"$text" | counters_of >"$1"
  sed '1,/^@@dmesg@@$/d' <<<"$text" >"$2"
}
counter() { grep "^$1=" "$2" | cut -d= -f2; }
delta() { echo $(($(counter "$1" "$3") - $(counter "$1" "$2"))); }

start_tcpdump() { # PCAP_FILE LOG_FILE
  # --immediate-mode: without it packets still in the kernel's capture block when tcpdump is
  # stopped are lost. -B: a 256 MiB capture buffer, so that a burst (a go-back-N
  # retransmission, a 1 MiB READ while another process keeps both CPUs busy: 32 MiB once lost
  # packets then) is not dropped. -Z root: write the file without dropping privileges.
  ip netns exec "$ns" tcpdump --immediate-mode -B 262144 -Z root -i tap0 -s 0 -U \
    -w "$1" udp port 4791 >"$2" 2>&1 &
  tcpdump_pid=$!
  # tcpdump prints "listening on tap0" once its capture is open.
  for _ in $(seq 100); do grep -qs 'listening on' "$2" && return 0; sleep 0.1; done
  fail "tcpdump did not start (see $2)"
}
stop_tcpdump() { # LOG_FILE -> fails when tcpdump lost packets
  kill -INT "$tcpdump_pid"
  wait "$tcpdump_pid" || true
  tcpdump_pid=
  # The wire capture is the reference: it must be complete.
  grep -q '^0 packets dropped by kernel' "$1" ||
    fail "tcpdump lost packets ($(grep 'dropped by kernel' "$1")); see $1"
}
