"""HTTP/2 floods against the KEDA port (issue 42, item 5), against the demo as `gpu-pulse-adapter --demo --keda-listen`
runs it.

    PYTHONPATH=. python bench/keda_floods.py [--seconds 10]

For each flood, one connection sends, for `--seconds` or until the port closes it: `rapid-reset` a request's HEADERS
then its RST_STREAM, over and over (CVE-2023-44487); `settings` empty SETTINGS frames. Frames are written with h2
(the client's side of the protocol), in batches. Prints, per flood, the frames written before the connection failed
(those the kernel's buffers took after the port closed it count too), the GOAWAY it sent (error code and debug
text), the adapter's CPU seconds and resident memory over the flood, and whether KEDA's GetMetrics still answers
after it; exits 1 when a flood was not cut off.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import stop
from keda_hostile import printed_trigger, start_demo

from tests.support import keda

BATCH = 200
REQUEST_HEADERS = keda.request_headers("IsActive")
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@dataclass
class Outcome:
    frames: int
    goaway: str
    cpu_seconds: float
    rss_before_mib: float
    rss_after_mib: float
    keda_answers_after: bool


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rapid_reset(connection: h2.connection.H2Connection) -> tuple[bytes, int]:
    for _ in range(BATCH):
        stream = connection.get_next_available_stream_id()
        connection.send_headers(stream, REQUEST_HEADERS)
        connection.reset_stream(stream)
    return connection.data_to_send(), 2 * BATCH


def settings(connection: h2.connection.H2Connection) -> tuple[bytes, int]:
    return EMPTY_SETTINGS * BATCH, BATCH


def flood(
    address: str, frames: Callable[[h2.connection.H2Connection], tuple[bytes, int]], seconds: float
) -> tuple[int, str]:
    """Frames written until the connection failed (the port closed it; what the kernel's buffers still took counts)
    or `seconds` passed, and the GOAWAY the port sent."""
    host, port = address.rsplit(":", 1)
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    sent, goaway = 0, "none"
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(connection.data_to_send())
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                data, count = frames(connection)
                sock.sendall(data)
                sent += count
        except OSError:
            pass  # closed by the port
        sock.settimeout(5)
        try:
            while data := sock.recv(65536):
                try:
                    events = connection.receive_data(data)
                except h2.exceptions.ProtocolError:
                    continue
                for event in events:
                    if isinstance(event, h2.events.ConnectionTerminated):
                        debug = (event.additional_data or b"").decode(errors="replace")
                        code = event.error_code
                        name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
                        goaway = f"{name} ({debug})"
        except OSError:
            pass
    return sent, goaway


async def keda_answers(address: str, metadata: dict[str, str]) -> bool:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            request = keda.metrics_request("demo", metadata, metadata["metric"])
            await keda.ScalerClient.on(channel).get_metrics(request, timeout=10)
        except grpc.aio.AioRpcError:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="the longest each flood lasts")
    args = parser.parse_args()
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-keda-floods-") as tmp:
        process, _, log = start_demo(Path(tmp))
        try:
            address, metadata = printed_trigger(log)
            for name, frames in (("rapid-reset", rapid_reset), ("settings", settings)):
                before_cpu, before_rss = cpu_seconds(process.pid), rss_mib(process.pid)
                sent, goaway = flood(address, frames, args.seconds)
                time.sleep(1.0)  # what the adapter still does after the connection closed
                outcomes[name] = Outcome(
                    frames=sent,
                    goaway=goaway,
                    cpu_seconds=cpu_seconds(process.pid) - before_cpu,
                    rss_before_mib=before_rss,
                    rss_after_mib=rss_mib(process.pid),
                    keda_answers_after=asyncio.run(keda_answers(address, metadata)),
                )
        finally:
            stop([process])
    ok = True
    for name, outcome in outcomes.items():
        print(f"{name}: {outcome.frames:,} frames written before the connection failed, GOAWAY {outcome.goaway}, "
              "adapter "
              f"{outcome.cpu_seconds:.2f} CPU-seconds, RSS {outcome.rss_before_mib:.0f} -> {outcome.rss_after_mib:.0f} "
              f"MiB, KEDA answered after: {outcome.keda_answers_after}")  # fmt: skip
        ok = ok and outcome.goaway.startswith("ENHANCE_YOUR_CALM") and outcome.keda_answers_after
    print("met" if ok else "MISSED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
