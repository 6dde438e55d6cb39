#!/usr/bin/env python3
"""Runs shell commands on the interop VM through its serial console (qemu's unix-socket chardev).

usage: vm_console.py wait-ready LOGFILE TIMEOUT_S [PID]
                                                   exit 0 once the console log shows the guest's
                                                     "uroce-vm: READY" line, 1 on "FAILED", on
                                                     timeout (the VM did not boot) or when the
                                                     process PID (qemu) is gone
       vm_console.py run SOCKET TIMEOUT_S 'cmd'    runs 'cmd' in the guest shell, prints its output,
                                                     exits with its status (124 on timeout)

The console serves one client at a time and one command at a time. Each command is followed by
a marker line carrying its exit status, so the output ends exactly where the command did.
"""
import os
import re
import socket
import sys
import time


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited too.
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().split(')')[-1].split()[0] != 'Z'
    except OSError:
        return False


def wait_ready(log, timeout, pid=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is not None and not alive(pid):
            sys.stderr.write('vm_console: qemu (pid %d) exited before the guest was ready\n' % pid)
            return 1
        try:
            with open(log, 'rb') as f:
                text = f.read()
        except FileNotFoundError:
            text = b''
        if b'uroce-vm: READY' in text:
            return 0
        if b'uroce-vm: FAILED' in text or b'Kernel panic' in text:
            sys.stderr.write('vm_console: the guest reported a failure (see %s)\n' % log)
            return 1
        time.sleep(0.1)
    sys.stderr.write('vm_console: no "uroce-vm: READY" in %s after %.0f s\n' % (log, timeout))
    return 1


def run(sock_path, timeout, cmd):
    deadline = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock_path)
    s.settimeout(0.1)

    # A fresh prompt, and no echo so that the output holds only what the command printed; then
    # everything up to a marker of this call's own is discarded (the prompt, what an earlier
    # command left behind). The marker is split in the command so that only its output, not its
    # echo, matches.
    tag = 'U%d_%d' % (os.getpid(), int(time.monotonic() * 1000))
    s.sendall(('\nstty -echo 2>/dev/null; echo "@@sync""%s@@"\n' % tag).encode())
    synced = re.compile(rb'@@sync' + tag.encode() + rb'@@\r?\n')
    pending = b''
    while True:
        if time.monotonic() >= deadline:
            sys.stderr.write('vm_console: the guest shell did not answer within %.0f s\n' % timeout)
            return 124
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            sys.stderr.write('vm_console: the console closed\n')
            return 124
        pending += chunk
        if synced.search(pending):
            break
    s.sendall(('%s\necho "@@%s:$?@@"\n' % (cmd, tag)).encode())
    marker = re.compile(rb'@@' + tag.encode() + rb':(\d+)@@')
    out = b''
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        out += chunk
        m = marker.search(out)
        if m:
            text = out[:m.start()].replace(b'\r\n', b'\n')
            text = re.sub(rb'(^|\n)vm# ', rb'\1', text).strip(b'\n')
            if text:
                sys.stdout.write(text.decode(errors='replace') + '\n')
            return int(m.group(1))
    # Interrupt the command so that the console is usable for the next one.
    s.sendall(b'\x03\n')
    sys.stdout.write(out.decode(errors='replace') + '\n')
    sys.stderr.write('vm_console: "%s" did not finish within %.0f s\n' % (cmd, timeout))
    return 124


def main(argv):
    if len(argv) in (4, 5) and argv[1] == 'wait-ready':
        return wait_ready(argv[2], float(argv[3]), int(argv[4]) if len(argv) == 5 else None)
    if len(argv) == 5 and argv[1] == 'run':
        return run(argv[2], float(argv[3]), argv[4])
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
