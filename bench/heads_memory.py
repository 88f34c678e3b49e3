"""What unfinished request heads under the size bound cost each service, and whether it comes back when they close.

    PYTHONPATH=. python bench/heads_memory.py [--connections 512] [--service exporter|adapter|both]

Starts the exporter (`python -m exporter --simulate h100x8`, plain HTTP) and the demo's adapter (`python -m adapter
--demo`, HTTPS), each with `--max-connections` at `--connections` (default 512, the services' default cap). Then
opens that many connections to each and sends each a request head of about 30 KiB, under the 32 KiB bound
(toolkit/connections.py), without its final CRLF; holds them until the service has read them all; closes them.
Prints the service's resident memory (VmRSS) before, with the heads held, and `--settle` seconds after they closed
(issue 42: the exporter 76 -> 122-143 MiB, the adapter 117 -> 313 MiB, kept after the close).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIELD = b"X-Filler-%d: " + b"a" * 3800 + b"\r\n"
FIELDS = 8  # 8 x ~3.8 KiB: about 30 KiB


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def wait_for_line(log: Path, pattern: str, timeout: float = 120) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while (found := re.search(pattern, log.read_text(errors="replace"))) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"no line matching {pattern!r}: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return found


def heads(host: str, port: int, count: int, tls: bool) -> list[socket.socket]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    held = []
    for number in range(count):
        sock = socket.create_connection((host, port), timeout=10)
        if tls:
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n" + b"".join(FIELD % i for i in range(FIELDS)))
        held.append(sock)
        if number % 64 == 63:
            time.sleep(0.05)  # the service's loop takes them in
    return held


def measure(name: str, command: list[str], serving: str, count: int, tls: bool, settle: float) -> None:
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-heads-") as tmp:
        log = Path(tmp) / "log"
        with log.open("wb") as out:
            # this checkout's code, whatever PYTHONPATH says relative to the bench's directory or an install elsewhere
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            process = subprocess.Popen(
                command, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            found = wait_for_line(log, serving)
            host, port = found.group(1), int(found.group(2))
            time.sleep(3)  # the first polls and documents
            before = rss_mib(process.pid)
            held = heads(host, port, count, tls)
            time.sleep(2)
            peak = rss_mib(process.pid)
            for sock in held:
                sock.close()
            time.sleep(settle)
            after = rss_mib(process.pid)
            print(f"{name}: {count} heads of {len(FIELD) * FIELDS // 1024} KiB: RSS {before:.0f} MiB before, "
                  f"{peak:.0f} MiB held (+{peak - before:.0f}), {after:.0f} MiB {settle:g} s after they closed "
                  f"(+{after - before:.0f})", flush=True)  # fmt: skip
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=512)
    parser.add_argument("--service", choices=("exporter", "adapter", "both"), default="both")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds after the close before the last figure")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    cap = f"--max-connections={args.connections + 8}"  # room for the heads and the service's own clients
    if args.service in ("exporter", "both"):
        measure("exporter", [sys.executable, "-m", "exporter", "--simulate", "h100x8", "--listen", "127.0.0.1:0", cap],
                r"on http://(127\.0\.0\.1):(\d+)", args.connections, False, args.settle)  # fmt: skip
    if args.service in ("adapter", "both"):
        measure("adapter", [sys.executable, "-m", "adapter", "--demo", "--listen", "127.0.0.1:0", cap],
                r"https://(127\.0\.0\.1):(\d+)", args.connections, True, args.settle)  # fmt: skip


if __name__ == "__main__":
    main()
