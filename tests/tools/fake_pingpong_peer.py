#!/usr/bin/env python3
"""A misbehaving ibv_rc_pingpong peer for uroce ping's bad-input tests (loopback only).

usage: fake_pingpong_peer.py MODE PORT [ARG]
  garbage    serve: read the client's address, answer with a malformed one
  silent     serve: accept and read, never answer
  ghost IP   serve: answer with a well-formed address whose GID is ::ffff:IP, where nobody
             runs RoCE (the client's packets go unanswered)
  gid HEX32  serve: answer with a well-formed address carrying this GID (32 hex digits)
Prints "listening" once the socket listens; serves one client, then exits.
"""
import socket
import sys
import time


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen(1)
    s.settimeout(60)
    print('listening', flush=True)
    conn, _ = s.accept()
    conn.settimeout(60)
    msg = b''
    while len(msg) < 52:
        chunk = conn.recv(52 - len(msg))
        if not chunk:
            break
        msg += chunk
    if mode == 'garbage':
        conn.sendall(b'zzzz:000011:000000:' + b'q' * 32 + b'\0')
    elif mode == 'silent':
        time.sleep(30)
    elif mode == 'gid':
        conn.sendall(('0000:000123:000456:%s' % sys.argv[3]).encode() + b'\0')
        conn.recv(5)
    elif mode == 'ghost':
        a, b, c, d = (int(x) for x in sys.argv[3].split('.'))
        gid = '00000000000000000000ffff%02x%02x%02x%02x' % (a, b, c, d)
        conn.sendall(('0000:000123:000456:%s' % gid).encode() + b'\0')
        conn.recv(5)
        time.sleep(30)
    conn.close()


if __name__ == '__main__':
    main()
