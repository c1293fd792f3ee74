"""Benchmark: bytes through the egress proxy's CONNECT tunnel vs a direct loopback connection,
and small HTTP requests through it (one run, ratios).

    python bench/egress_proxy.py [--mib 256] [-n 200]

Both sides push ``--mib`` MiB to a loopback sink that reads and discards; the proxied side goes
CONNECT -> the proxy's sniff (opaque bytes, a scheme-less allow entry) -> the back-pressured copy.
Then ``-n`` absolute-form GETs (each a new connection, parsed strictly, relayed with its framing).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mur.manifest.network import parse_allow_list  # noqa: E402
from mur.sandbox.egress import EgressProxy  # noqa: E402


def sink() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    def drain(conn: socket.socket) -> None:
        with conn:
            first = conn.recv(65536)
            if first.startswith(b"GET "):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                return
            while conn.recv(1 << 20):
                pass
            conn.sendall(b"done")

    threading.Thread(target=serve, daemon=True).start()
    return server


def push(address, mib: int, preface: bytes = b"") -> float:
    block = b"\0" * (1 << 20)
    started = time.perf_counter()
    with socket.create_connection(address) as c:
        if preface:
            c.sendall(preface)
            assert c.recv(100).startswith(b"HTTP/1.1 200")
        for _ in range(mib):
            c.sendall(block)
        c.shutdown(socket.SHUT_WR)
        assert c.recv(100) == b"done"
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    server = sink()
    port = server.getsockname()[1]
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = EgressProxy(listener, parse_allow_list([f"bench.test:{port}"]), resolve=lambda h: ["127.0.0.1"])
    proxy.start()
    try:
        direct = push(("127.0.0.1", port), args.mib)
        target = f"bench.test:{port}"
        tunneled = push(listener.getsockname(), args.mib, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        print(f"tunnel: direct {args.mib / direct:.0f} MiB/s, through the proxy {args.mib / tunneled:.0f} MiB/s "
              f"(ratio {tunneled / direct:.2f}x the time)")
        get = f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
        times = []
        for _ in range(args.n):
            started = time.perf_counter()
            with socket.create_connection(listener.getsockname()) as c:
                c.sendall(get)
                reply = b""
                while data := c.recv(65536):
                    reply += data
            assert reply.endswith(b"ok"), reply
            times.append(time.perf_counter() - started)
        times.sort()
        print(f"requests: {args.n} GETs through the proxy, median {times[len(times) // 2] * 1000:.2f} ms")
    finally:
        proxy.close()
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
