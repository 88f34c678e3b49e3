"""The KEDA port under issue 42's attack, against the demo as `gpu-pulse-adapter --demo --keda-listen` runs it.

    PYTHONPATH=. python bench/keda_hostile.py [--streams 1300] [--silent 1050] [--seconds 20]

The demo (the adapter, its Kubernetes API stand-in and three simulated nodes' exporters) starts with a soft open-file
limit of 1,024, the usual default. KEDA's operator connects first, as a long-running operator does. Then, for
`--seconds`, `--streams` HTTP/2 streams that send their headers and never a message and `--silent` TCP connections
that never send a byte are held against the KEDA port (with `--churn`, each one the port ends is opened again at once),
while KEDA's own calls (IsActive, GetMetrics and the first answer of StreamIsActive, through a client that owes
nothing to the adapter's stubs: tests/support/keda.py) and the HPA's question on custom.metrics.k8s.io (kubectl get
--raw, through the stand-in's aggregator) are asked in turn.

Prints how many of each answered and the slowest, the adapter's descriptors at their peak against its limit, and how
the port ended the silent streams; exits 1 when a question went unanswered or the descriptors reached the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import yaml

from tests.support import keda

SOFT_LIMIT = 1024
KEDA_LINE = re.compile(r"KEDA external scaler \(gRPC externalscaler\.ExternalScaler\) on (\S+), plaintext; a trigger:")
STAMP = re.compile(r"^\S+Z ")
REPO = Path(__file__).resolve().parents[1]
IS_ACTIVE = "/externalscaler.ExternalScaler/IsActive"


def start_demo(workdir: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    kubeconfig, log = workdir / "demo.kubeconfig", workdir / "demo.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "adapter", "--demo", "--listen", "127.0.0.1:0", "--demo-kubeconfig",
             str(kubeconfig), "--keda-listen", "127.0.0.1:0"],
            cwd=workdir, env={**os.environ, "PYTHONPATH": str(REPO)},  # this checkout's code, from any directory
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_LIMIT, hard)),
        )  # fmt: skip
    return process, kubeconfig, log


def printed_trigger(log: Path, timeout: float = 120) -> tuple[str, dict[str, str]]:
    """The KEDA port and the trigger the demo printed under it."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [STAMP.sub("", line, count=1) for line in log.read_text(errors="replace").splitlines()]
        starts = [i for i, line in enumerate(lines) if KEDA_LINE.search(line)]
        if starts:
            block = []
            for line in lines[starts[0] + 1 :]:
                if not line.startswith("  "):
                    break
                block.append(line)
            if block and len(lines) > starts[0] + len(block) + 1:
                found = KEDA_LINE.search(lines[starts[0]])
                assert found is not None
                (trigger,) = yaml.safe_load("\n".join(block))
                return found.group(1), {str(k): str(v) for k, v in trigger["metadata"].items()}
        if time.monotonic() > deadline:
            raise SystemExit(f"the demo did not print its KEDA trigger: {log.read_text()[-2000:]}")
        time.sleep(0.2)


class Descriptors(threading.Thread):
    """The process's open descriptors, sampled every 50 ms: the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, len(os.listdir(f"/proc/{self.pid}/fd")))


class SilentConnections(threading.Thread):
    """`count` connections that never send a byte, each opened again as soon as the port closes it."""

    def __init__(self, address: str, count: int, reopen: bool) -> None:
        super().__init__(daemon=True)
        host, port = address.rsplit(":", 1)
        self.target, self.count, self.reopen, self.stop = (host, int(port)), count, reopen, threading.Event()
        self.opened = 0

    def run(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            kept = []
            for sock in held:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    data = b"-"  # nothing to read: still open
                except OSError:
                    data = b""
                if data:  # open (the port's SETTINGS frame read and dropped)
                    kept.append(sock)
                else:  # closed by the port: opened again below
                    sock.close()
            held = kept
            while len(held) < self.count and (self.reopen or self.opened < self.count) and not self.stop.is_set():
                try:
                    sock = socket.create_connection(self.target, timeout=2)
                except OSError:
                    break
                sock.setblocking(False)
                held.append(sock)
                self.opened += 1
            self.stop.wait(0.1)
        for sock in held:
            sock.close()


async def headers_only(hold: asyncio.Event) -> AsyncIterator[bytes]:
    await hold.wait()
    yield b""  # pragma: no cover


def hpa_question(kubeconfig: Path, selector: str) -> bool:
    query = urllib.parse.quote(selector, safe="")
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/gpu_utilization?labelSelector={query}"
    done = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", path], capture_output=True,
                          timeout=30, check=False)  # fmt: skip
    return done.returncode == 0 and b'"items"' in done.stdout


async def attack_and_ask(
    args: argparse.Namespace, address: str, metadata: dict[str, str], kubeconfig: Path
) -> dict[str, Any]:
    ref = keda.scaled_object("demo", metadata)
    answered: dict[str, list[float]] = {"IsActive": [], "GetMetrics": [], "StreamIsActive": [], "HPA": []}
    failed: dict[str, list[str]] = {name: [] for name in answered}
    async with grpc.aio.insecure_channel(address) as kedas, grpc.aio.insecure_channel(address) as stranger:
        client = keda.ScalerClient.on(kedas)
        await client.get_metric_spec(ref, timeout=30)  # KEDA's operator is connected before the attack
        silent = SilentConnections(address, args.silent, args.churn)
        silent.start()
        hold = asyncio.Event()
        open_stream = stranger.stream_unary(IS_ACTIVE, request_serializer=bytes, response_deserializer=bytes)
        streams = [open_stream(headers_only(hold)) for _ in range(args.streams)]
        ended: dict[str, int] = {}

        async def keep_streams_open() -> None:  # with --churn, each silent stream the port ends is opened again
            counted: set[int] = set()
            while not hold.is_set():
                for i, call in enumerate(streams):
                    if call.done() and (args.churn or i not in counted):
                        code = (await call.code()).name
                        ended[code] = ended.get(code, 0) + 1
                        counted.add(i)
                        if args.churn:
                            streams[i] = open_stream(headers_only(hold))
                await asyncio.sleep(0.05)

        keeper = asyncio.create_task(keep_streams_open())
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            for name, ask in (
                ("IsActive", lambda: client.is_active(ref, timeout=10)),
                (
                    "GetMetrics",
                    lambda: client.get_metrics(keda.metrics_request("demo", metadata, metadata["metric"]), timeout=10),
                ),
                ("StreamIsActive", lambda: client.stream_is_active(ref, timeout=10).read()),
                ("HPA", lambda: asyncio.to_thread(hpa_question, kubeconfig, metadata["podSelector"])),
            ):
                started = time.perf_counter()
                try:
                    result = await ask()
                    if result is False:
                        raise RuntimeError("no answer")
                    answered[name].append(time.perf_counter() - started)
                except (grpc.aio.AioRpcError, RuntimeError) as exc:
                    failed[name].append(str(exc)[:200])
        hold.set()
        silent.stop.set()
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        for call in streams:
            call.cancel()
        silent.join(timeout=10)
        return {"answered": answered, "failed": failed, "streams_ended": ended, "silent_opened": silent.opened}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1300)
    parser.add_argument("--silent", type=int, default=1050)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--churn", action="store_true", help="open each stream and connection again once it ends")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))  # the attacker's own sockets
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-keda-hostile-") as tmp:
        process, kubeconfig, log = start_demo(Path(tmp))
        try:
            address, metadata = printed_trigger(log)
            descriptors = Descriptors(process.pid)
            descriptors.start()
            measured = asyncio.run(attack_and_ask(args, address, metadata, kubeconfig))
            descriptors.stop.set()
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    ok = True
    for name, times in measured["answered"].items():
        failures = measured["failed"][name]
        slowest = max(times) if times else float("nan")
        print(f"{name}: {len(times)} answered, {len(failures)} failed, slowest {slowest * 1000:.0f} ms"
              + (f" (first failure: {failures[0]})" if failures else ""))  # fmt: skip
        ok = ok and bool(times) and not failures
    print(f"adapter descriptors: peak {descriptors.peak} of a limit of {SOFT_LIMIT}")
    print(f"silent connections opened: {measured['silent_opened']}; silent streams ended by the port: "
          f"{measured['streams_ended']}")  # fmt: skip
    ok = ok and descriptors.peak < SOFT_LIMIT
    print("met" if ok else "MISSED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
