#!/usr/bin/env python3
"""The probe of issue 16 against a running server: open N idle TCP connections, then time
GET /health on a new connection P times. Loopback only; every wait is bounded.

  python3 tests/serve/idle_probe.py --port 8000 [--idle 300] [--probes 50] [--timeout 10]

Prints p50 / p99 / max in ms, how many probes were refused (503: the server's
--max-connections were open) and how many got no answer within --timeout (those count as
--timeout). Exit code 1 when p99 >= --p99-limit-ms (default 100) or a probe got no 200.
"""
import argparse
import socket
import sys
import time


def probe(host, port, timeout):
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(max(0.001, timeout - (time.monotonic() - t0)))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
    except (OSError, ValueError):
        status = 0
    ms = (time.monotonic() - t0) * 1000
    return (ms if status else timeout * 1000), status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--p99-limit-ms", type=float, default=100.0)
    a = ap.parse_args()
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("idle_probe.py: loopback only (--host %s)" % a.host)
    idle = []
    for i in range(a.idle):
        try:
            idle.append(socket.create_connection((a.host, a.port), timeout=a.timeout))
        except OSError as e:
            sys.exit("idle_probe.py: idle connection %d: %s" % (i, e))
    time.sleep(0.2)  # let the server accept them all
    times, refused, unanswered = [], 0, 0
    for _ in range(a.probes):
        ms, status = probe(a.host, a.port, a.timeout)
        times.append(ms)
        refused += status == 503
        unanswered += status == 0
    times.sort()
    p = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    print("idle %d, probes %d: p50 %.2f ms, p99 %.2f ms, max %.2f ms, refused (503) %d, unanswered %d"
          % (a.idle, a.probes, p(0.5), p(0.99), times[-1], refused, unanswered))
    for s in idle:
        s.close()
    return 1 if p(0.99) >= a.p99_limit_ms or refused or unanswered else 0


if __name__ == "__main__":
    sys.exit(main())
