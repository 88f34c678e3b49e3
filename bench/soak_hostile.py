"""A soak under mixed hostile load, against both services as their CLIs run them, on loopback only.

    PYTHONPATH=. python bench/soak_hostile.py [--minutes 10]

What runs: an exporter (`python -m exporter --simulate h100x8`), and the adapter CLI over a simulated cluster
(bench/adapter_cluster.py: the Kubernetes API stand-in, 2,000 pods, exporter endpoints for the nodes of namespace
`bench`), both with `--max-connections 128`. Four of the adapter's exporter endpoints are hostile: one streams an
endless chunked body, one answers garbage, one answers after 30 s, one redirects to a counter that must never be asked.

What attacks, all the time: 200 clients per service that send half a request head and stall (each reopened when the
server closes it), 10 malformed requests a second per service, 20 connections a second per service opened and closed
at once (churn), and 5 adapter queries a second each with a label selector never seen before.

What is measured: a scrape of the exporter's `/metrics` and an HPA query of the adapter every second (lost: anything
but a 200 with the expected content), first for `BASELINE_SECONDS` without any attack (the baseline of their
latency), then under attack; each service's RSS every 15 s, and the size of each service's log. The legitimate
clients run in a process of their own, apart from the attackers, but share this machine's cores with the attackers and
both services: latency under attack includes the attackers' own CPU. The exit code is 1 when a stated bound is missed:

- lost scrapes and lost HPA answers: at most 1 % each (a scrape may meet the cap while stalled clients are evicted);
- RSS: at most 16 MiB growth per service between the end of the first quarter (warm) and the end;
- log: at most 64 KiB per minute per service (a repeated error is one line a second, toolkit.logthrottle);
- the redirect target: never asked.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import random
import signal
import ssl
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import REPO, Launched, free_port, launch

CAP = 128
STALLED = 200
GARBAGE_PER_SECOND = 10
CHURN_PER_SECOND = 20
SELECTORS_PER_SECOND = 5
RSS_EVERY = 15.0
BASELINE_SECONDS = 20.0
BOUND_LOST = 0.01
BOUND_RSS_GROWTH = 16 * 2**20
BOUND_LOG_PER_MINUTE = 64 * 1024
GARBAGE = (
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\x00: 1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage-tls-to-a-plain-port\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"BREW /pot HTTP/9.9\r\n\r\n",
)


def loopback(url: str) -> str:
    """`url`, after checking that it points at 127.0.0.0/8: this soak never sends anything elsewhere."""
    host = urlsplit(url).hostname or ""
    if ipaddress.ip_address(host) not in ipaddress.ip_network("127.0.0.0/8"):
        raise SystemExit(f"refusing a non-loopback address: {url}")
    return url


@dataclass
class Tally:
    ok: int = 0
    lost: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)  # of the answers that came

    def percentile(self, share: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")

    def lose(self, reason: str) -> None:
        self.lost += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    @property
    def lost_share(self) -> float:
        return self.lost / max(1, self.ok + self.lost)


# ---- hostile exporter endpoints --------------------------------------------------------------------------------------
class HostileExporters:
    """Loopback endpoints that answer `/pods` badly, and a redirect target that counts what reaches it."""

    def __init__(self) -> None:
        self.redirected = 0
        self._runners: list[web.AppRunner] = []
        self.urls: dict[str, str] = {}

    async def _serve(self, name: str, handler: Callable[[web.Request], object]) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)  # type: ignore[arg-type]
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self._runners.append(runner)
        self.urls[name] = f"http://127.0.0.1:{port}"
        return self.urls[name]

    async def start(self) -> None:
        async def endless(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            chunk = b" " * 65_536
            try:
                await response.prepare(request)
                while True:
                    await response.write(chunk)
            except ConnectionError:  # the adapter hung up, as it should
                return response

        async def garbage(request: web.Request) -> web.Response:
            return web.Response(
                text='{"api_version": "gpu-pulse.dev/v1", "pods": [[[[', content_type="application/json"
            )

        async def slow(request: web.Request) -> web.Response:
            await asyncio.sleep(30)
            return web.Response(text="{}", content_type="application/json")

        async def counted(request: web.Request) -> web.Response:
            self.redirected += 1
            return web.Response(text="{}", content_type="application/json")

        target = await self._serve("target", counted)

        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"{target}/pods")

        for name, handler in (("endless", endless), ("garbage", garbage), ("slow", slow), ("redirect", redirect)):
            await self._serve(name, handler)

    def replace_four(self, exporters: dict[str, str]) -> dict[str, str]:
        """The adapter's exporter map with the first four nodes' endpoints made hostile."""
        changed = dict(exporters)
        for node, name in zip(sorted(exporters)[:4], ("endless", "garbage", "slow", "redirect"), strict=True):
            changed[node] = self.urls[name]
        return {node: loopback(url) for node, url in changed.items()}

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


# ---- attackers -------------------------------------------------------------------------------------------------------
async def stalled_clients(host: str, port: int, ssl_context: ssl.SSLContext | None, stop: asyncio.Event) -> None:
    """Keep STALLED connections open that each sent half a request head; reopen one whenever the server closes it."""

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                await writer.drain()
                while await reader.read(4096):
                    pass
                writer.close()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.1)

    await asyncio.gather(*(one() for _ in range(STALLED)))


async def garbage_and_churn(host: str, port: int, ssl_context: ssl.SSLContext | None, stop: asyncio.Event) -> None:
    while not stop.is_set():
        for payload in random.choices(GARBAGE, k=GARBAGE_PER_SECOND):
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ssl_context), 5)
                writer.write(payload)
                await asyncio.wait_for(reader.read(1024), 5)
                writer.close()
            except (OSError, ssl.SSLError, TimeoutError):
                pass
        for _ in range(CHURN_PER_SECOND):
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
                writer.close()
            except (OSError, TimeoutError):
                pass
        await asyncio.sleep(1.0)


async def distinct_selectors(session: aiohttp.ClientSession, launched: Launched, stop: asyncio.Event) -> None:
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization"
    while not stop.is_set():
        for _ in range(SELECTORS_PER_SECOND):
            label = "".join(random.choices(string.ascii_lowercase, k=12))
            try:
                async with session.get(
                    f"{launched.url}{path}", params={"labelSelector": f"app=infer,{label}=x"}, ssl=launched.client_ssl
                ) as response:
                    await response.read()
            except (aiohttp.ClientError, TimeoutError):
                pass
        await asyncio.sleep(1.0)


# ---- the legitimate clients ------------------------------------------------------------------------------------------
async def scrapes(session: aiohttp.ClientSession, url: str, tally: Tally, stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as response:
                body = await response.read()
                tally.seconds.append(time.perf_counter() - started)
                if response.status == 200 and b"gpu_pulse_exporter_build_info" in body:
                    tally.ok += 1
                else:
                    tally.lose(f"HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as error:
            tally.lose(type(error).__name__)
        await asyncio.sleep(1.0)


async def hpa_queries(
    session: aiohttp.ClientSession, url: str, client_ssl: ssl.SSLContext, tally: Tally, stop: asyncio.Event
) -> None:
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer"
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with session.get(f"{url}{path}", ssl=client_ssl, timeout=aiohttp.ClientTimeout(total=5)) as response:
                body = await response.json()
                tally.seconds.append(time.perf_counter() - started)
                if response.status == 200 and body.get("items"):
                    tally.ok += 1
                else:
                    tally.lose(f"HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            tally.lose(type(error).__name__)
        await asyncio.sleep(1.0)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def sample_rss(pids: dict[str, int], samples: dict[str, list[tuple[float, int]]], stop: asyncio.Event) -> None:
    started = time.monotonic()
    while not stop.is_set():
        for name, pid in pids.items():
            samples[name].append((time.monotonic() - started, rss(pid)))
        try:
            await asyncio.wait_for(stop.wait(), RSS_EVERY)
        except TimeoutError:
            pass


# ---- the run ---------------------------------------------------------------------------------------------------------
def start_exporter(workdir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = workdir / "exporter.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--simulate=h100x8",
            f"--listen=127.0.0.1:{port}",
            f"--max-connections={CAP}",
            "--log-level=warning",
        ],
        cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}, "PYTHONPATH": str(REPO)},
        stderr=log.open("wb"),
    )
    return process, loopback(f"http://127.0.0.1:{port}"), log


async def wait_serving(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            try:
                async with session.get(f"{url}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("the exporter never became ready")


async def legitimate_clients(
    exporter_url: str, adapter_url: str, client_ssl: ssl.SSLContext, seconds: float
) -> tuple[Tally, Tally]:
    """A scraper and an HPA, each asking once a second for `seconds`."""
    stop = asyncio.Event()
    scraped, answered = Tally(), Tally()
    async with aiohttp.ClientSession() as session:
        tasks = [
            asyncio.create_task(scrapes(session, exporter_url, scraped, stop)),
            asyncio.create_task(hpa_queries(session, adapter_url, client_ssl, answered, stop)),
        ]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return scraped, answered


def probe(
    exporter_url: str,
    adapter_url: str,
    workdir: str,
    attack_seconds: float,
    attack: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[list[dict[str, object]]],
) -> None:
    """The legitimate clients, in a process of their own (the attackers' work does not slow them): first alone for
    BASELINE_SECONDS, then (having set `attack`) for `attack_seconds`; their tallies go to `results`."""
    client_ssl = ssl.create_default_context(cafile=str(Path(workdir) / "client-ca.crt"))
    client_ssl.load_cert_chain(Path(workdir) / "client.crt", Path(workdir) / "client.key")
    quiet = asyncio.run(legitimate_clients(exporter_url, adapter_url, client_ssl, BASELINE_SECONDS))
    attack.set()
    loud = asyncio.run(legitimate_clients(exporter_url, adapter_url, client_ssl, attack_seconds))
    results.put([vars(tally) for tally in (*quiet, *loud)])  # plain data: this module is __mp_main__ here


async def attack_and_measure(
    minutes: float, exporter_url: str, launched: Launched, pids: dict[str, int]
) -> dict[str, list[tuple[float, int]]]:
    stop = asyncio.Event()
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
    adapter_host, adapter_port = urlsplit(launched.url).hostname or "", urlsplit(launched.url).port or 0
    exporter_host, exporter_port = urlsplit(exporter_url).hostname or "", urlsplit(exporter_url).port or 0
    attack_ssl = ssl.create_default_context()
    attack_ssl.check_hostname, attack_ssl.verify_mode = False, ssl.CERT_NONE  # no client certificate: an outsider
    connector = aiohttp.TCPConnector(limit=50)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [
            asyncio.create_task(stalled_clients(exporter_host, exporter_port, None, stop)),
            asyncio.create_task(stalled_clients(adapter_host, adapter_port, attack_ssl, stop)),
            asyncio.create_task(garbage_and_churn(exporter_host, exporter_port, None, stop)),
            asyncio.create_task(garbage_and_churn(adapter_host, adapter_port, attack_ssl, stop)),
            asyncio.create_task(distinct_selectors(session, launched, stop)),
            asyncio.create_task(sample_rss(pids, samples, stop)),
        ]
        await asyncio.sleep(minutes * 60)
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return samples


def report(
    minutes: float,
    quiet: tuple[Tally, Tally],
    scraped: Tally,
    answered: Tally,
    samples: dict[str, list[tuple[float, int]]],
    logs: dict[str, Path],
    redirected: int,
) -> bool:
    ok = True
    print(f"soak: {minutes:g} min, loopback only, cap {CAP} connections per service, {STALLED} stalled clients each")
    for (name, tally), calm in zip(
        (("exporter scrapes", scraped), ("adapter HPA answers", answered)), quiet, strict=True
    ):
        within = tally.lost_share <= BOUND_LOST
        ok &= within
        print(
            f"  {name}: {tally.ok} ok, {tally.lost} lost ({tally.lost_share:.2%}; bound {BOUND_LOST:.0%})"
            f"{'' if within else '  <-- over'} {tally.reasons or ''}"
        )
        print(
            f"    latency under attack p50 {tally.percentile(0.5) * 1000:.0f} ms, "
            f"p99 {tally.percentile(0.99) * 1000:.0f} ms; baseline (no attack, {calm.ok} answers) "
            f"p50 {calm.percentile(0.5) * 1000:.0f} ms, p99 {calm.percentile(0.99) * 1000:.0f} ms; "
            f"p50 ratio {tally.percentile(0.5) / calm.percentile(0.5):.1f}"
        )
    for name, series in samples.items():
        warm = [value for at, value in series if at >= minutes * 60 / 4] or [value for _, value in series]
        growth = series[-1][1] - warm[0] if series else 0
        within = growth <= BOUND_RSS_GROWTH
        ok &= within
        trail = " ".join(f"{at / 60:.1f}m:{value / 2**20:.1f}" for at, value in series)
        print(f"  {name} RSS MiB over time: {trail}")
        print(
            f"  {name} RSS growth after warm-up: {growth / 2**20:+.1f} MiB (bound {BOUND_RSS_GROWTH / 2**20:.0f} MiB)"
            f"{'' if within else '  <-- over'}"
        )
    for name, path in logs.items():
        size = path.stat().st_size if path.exists() else 0
        per_minute = size / max(minutes, 1e-9)
        within = per_minute <= BOUND_LOG_PER_MINUTE
        ok &= within
        print(
            f"  {name} log: {size} bytes, {per_minute / 1024:.1f} KiB/min "
            f"(bound {BOUND_LOG_PER_MINUTE // 1024} KiB/min){'' if within else '  <-- over'}"
        )
    print(f"  requests that reached the redirect target: {redirected} (bound 0)")
    ok &= redirected == 0
    print("  all bounds held" if ok else "  a bound was missed")
    return ok


async def hostile_endpoints() -> HostileExporters:
    hostile = HostileExporters()
    await hostile.start()
    return hostile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to attack (default 10)")
    args = parser.parse_args()
    if not 0 < args.minutes <= 120:
        parser.error("--minutes: from more than 0 to 120")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    hostile = loop.run_until_complete(hostile_endpoints())
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-soak-") as tmp:
        workdir = Path(tmp)
        exporter, exporter_url, exporter_log = start_exporter(workdir)
        adapter_log = workdir / "adapter.log"
        launched: Launched | None = None
        try:
            loop.run_until_complete(wait_serving(exporter_url))
            # launch() waits in a loop of its own: run it beside ours, which keeps serving the hostile endpoints
            launched = loop.run_until_complete(
                asyncio.to_thread(
                    launch,
                    2_000,
                    200,
                    workdir,
                    f"--max-connections={CAP}",
                    exporter_map=hostile.replace_four,
                    log=adapter_log,
                )
            )
            loopback(launched.url)
            assert launched.adapter is not None
            pids = {"exporter": exporter.pid, "adapter": launched.adapter.pid}
            spawn = multiprocessing.get_context("spawn")
            attack, results = spawn.Event(), spawn.Queue()
            prober = spawn.Process(
                target=probe,
                args=(exporter_url, launched.url, str(workdir), args.minutes * 60, attack, results),
                daemon=True,
            )
            prober.start()
            if not attack.wait(BASELINE_SECONDS + 120):
                raise SystemExit("the legitimate clients never started")
            samples = loop.run_until_complete(attack_and_measure(args.minutes, exporter_url, launched, pids))
            quiet_scraped, quiet_answered, scraped, answered = (Tally(**t) for t in results.get(timeout=120))
            prober.join(30)
            quiet = (quiet_scraped, quiet_answered)
            logs = {"exporter": exporter_log, "adapter": adapter_log}
            ok = report(args.minutes, quiet, scraped, answered, samples, logs, hostile.redirected)
            print(
                json.dumps(
                    {name: {"ok": t.ok, "lost": t.lost} for name, t in (("scraped", scraped), ("answered", answered))}
                )
            )
        finally:
            if launched is not None:
                launched.stop()
            exporter.send_signal(signal.SIGTERM)
            try:
                exporter.wait(20)
            except subprocess.TimeoutExpired:
                exporter.kill()
            loop.run_until_complete(hostile.stop())
            leftover = asyncio.all_tasks(loop)
            for task in leftover:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
