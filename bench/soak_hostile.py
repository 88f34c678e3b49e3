"""A soak under mixed hostile load, against both services as their CLIs run them, on loopback only.

    PYTHONPATH=. python bench/soak_hostile.py [--minutes 10]

What runs, each service with `--max-connections 128` and the open-file limit it would raise itself to for that cap
(toolkit.connections.files_needed: 384; a descriptor the cap does not count shows as failed scrapes, as in issue 21):
- an exporter (`python -m exporter --simulate h100x8`) serving `/pods` to the adapter's ServiceAccount only
  (`--auth-allowed-users`, tokens reviewed by a Kubernetes API stand-in, bench/soak_upstreams.py);
- the adapter CLI over a simulated cluster (bench/adapter_cluster.py: the Kubernetes API stand-in, 2,000 pods,
  exporter endpoints for the nodes of namespace `bench`), direct source; four of its exporter endpoints are hostile
  (endless, garbage, slow, a redirect to a counter that must never be asked);
- a second adapter on the same cluster with `--source prometheus`, reading a Prometheus stand-in that answers soundly
  for `bench` and pathologically for every other namespace (15 MiB of empty lists, more series than the size allows,
  100,000 levels of nesting, a 1 MiB label set, an endless body); it and the API stand-in run in a process of their
  own (bench/soak_upstreams.py).

What attacks, all the time (bench/soak_attacks.py): per service 200 clients that send half a request head and stall,
10 malformed requests a second and 20 connections a second opened and closed at once, 30 connections sending request
heads that never end, 32 connections every 5 s that pipeline 20 requests and never read; on the adapters 20 TLS
connections a second that never start their handshake; on the direct adapter 5 queries a second with a label
selector never seen before; on the exporter 24 `/pods` stream hogs (no token, or a tenant's); on the prometheus
adapter 2 queries a second that make Prometheus answer pathologically.

What is measured: in a process of their own, a scrape of the exporter's `/metrics`, an HPA query of each adapter and
the adapter's feed (a `/pods` stream of the exporter, opened with the adapter's token) every second, first for
`BASELINE_SECONDS` without attack, then under attack (lost: anything but the expected answer); each service's RSS
every 15 s and its open descriptors every second; the size of each service's log. The exit code is 1 when a stated
bound is missed:

- lost scrapes, HPA answers and feed documents: none (issue 21: at 100 % through the soak);
- RSS: at most 16 MiB growth per service between the end of the first quarter (warm) and the end;
- open descriptors: never more than the open-file limit, and their median over the last quarter at most 16 above
  their median over the second (they rise and fall with the attackers' rounds);
- log: at most 64 KiB per minute per service (a repeated error is one line a second, toolkit.logthrottle);
- the redirect target never asked; no stream hog ever served a stream.
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
import resource
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak_attacks as attacks
from adapter_cluster import (
    REPO,
    AdapterCredentials,
    Launched,
    launch,
    served_url,
    wait_adapter_ready,
    wait_for_ready_file,
)
from soak_upstreams import ADAPTER_TOKEN, AUDIENCE, TENANT_TOKEN, HostileExporters

from simulation.kubeconfig import write_kubeconfig
from toolkit.connections import ConnectionLimits, files_needed

CAP = 128
FILE_LIMIT = files_needed(ConnectionLimits(max_connections=CAP))  # as the services raise their own limit to
SAMPLE_EVERY = 15.0
BASELINE_SECONDS = 20.0
BOUND_LOST = 0.0
BOUND_RSS_GROWTH = 16 * 2**20
BOUND_FD_GROWTH = 16
BOUND_LOG_PER_MINUTE = 64 * 1024
BENCH_PODS = 200
HPA_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/bench/pods/*/gpu_utilization?labelSelector=app%3Dinfer"
TEAMS = [f"team-{i:02d}" for i in range(18)]  # bench/adapter_cluster.py: the 1,800 other pods, 100 a namespace


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


# ---- the legitimate clients ------------------------------------------------------------------------------------------
async def every_second(check: object, tally: Tally, stop: asyncio.Event) -> None:
    """Run `check()` (a coroutine function giving "" for a good answer, else why it was lost) once a second."""
    assert callable(check)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            problem = await check()
            tally.seconds.append(time.perf_counter() - started)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            problem = type(error).__name__
        if problem:
            tally.lose(problem)
        else:
            tally.ok += 1
        await asyncio.sleep(1.0)


async def legitimate_clients(urls: dict[str, str], contexts: dict[str, ssl.SSLContext], seconds: float) -> list[Tally]:
    """A scraper, an HPA per adapter and the adapter's feed of the exporter, each asking once a second."""
    stop = asyncio.Event()
    tallies = [Tally() for _ in range(4)]
    limit = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession() as session:

        async def scrape() -> str:
            async with session.get(f"{urls['exporter']}/metrics", timeout=limit) as response:
                body = await response.read()
                good = response.status == 200 and b"gpu_pulse_exporter_build_info" in body
                return "" if good else f"HTTP {response.status}"

        def hpa(name: str) -> object:
            async def ask() -> str:
                async with session.get(f"{urls[name]}{HPA_PATH}", ssl=contexts[name], timeout=limit) as response:
                    body = await response.json()
                    return "" if response.status == 200 and body.get("items") else f"HTTP {response.status}"

            return ask

        async def feed() -> str:
            headers = {"Authorization": f"Bearer {ADAPTER_TOKEN}"}
            async with session.get(
                f"{urls['exporter']}/pods", params={"watch": "1"}, headers=headers, timeout=limit
            ) as response:
                if response.status != 200:
                    return f"HTTP {response.status}"
                line = await response.content.readline()
                return "" if line.startswith(b'{"answered_at"') else "no document"

        checks = (scrape, hpa("adapter"), hpa("prometheus-adapter"), feed)
        tasks = [asyncio.create_task(every_second(c, t, stop)) for c, t in zip(checks, tallies, strict=True)]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tallies


def probe(
    urls: dict[str, str],
    credentials: dict[str, str],
    attack_seconds: float,
    attack: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[list[dict[str, object]]],
) -> None:
    """The legitimate clients, in a process of their own (the attackers' work does not slow them): first alone for
    BASELINE_SECONDS, then (having set `attack`) for `attack_seconds`; their tallies go to `results`."""
    contexts = {}
    for name, workdir in credentials.items():
        context = ssl.create_default_context(cafile=str(Path(workdir) / "client-ca.crt"))
        context.load_cert_chain(Path(workdir) / "client.crt", Path(workdir) / "client.key")
        contexts[name] = context
    quiet = asyncio.run(legitimate_clients(urls, contexts, BASELINE_SECONDS))
    attack.set()
    loud = asyncio.run(legitimate_clients(urls, contexts, attack_seconds))
    results.put([vars(tally) for tally in (*quiet, *loud)])  # plain data: this module is __mp_main__ here


# ---- the services --------------------------------------------------------------------------------------------------
def _limited_files() -> None:
    """In a child before it runs a service: the open-file limit the soak holds it to."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, hard))


def _environment() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}, "PYTHONPATH": str(REPO)}


def _service(program: str, flags: list[str], log: Path) -> subprocess.Popen[bytes]:
    """`python -m <program> <flags>`, its log in `log`, under the soak's open-file limit."""
    return subprocess.Popen(
        [sys.executable, "-m", program, f"--max-connections={CAP}", *flags],
        cwd=REPO,
        env=_environment(),
        stderr=log.open("wb"),
        preexec_fn=_limited_files,
    )


def start_exporter(workdir: Path, kubeconfig: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The exporter on port 0; its address is read from its "serving" line (hence level info)."""
    log = workdir / "exporter.log"
    flags = [
        "--simulate=h100x8",
        "--listen=127.0.0.1:0",
        "--log-level=info",
        "--auth-allowed-users=system:serviceaccount:gpu-pulse:gpu-pulse-adapter",
        f"--auth-token-audience={AUDIENCE}",
        f"--kubeconfig={kubeconfig}",
    ]
    process = _service("exporter", flags, log)
    return process, loopback(served_url(process, log)), log


def start_upstreams(workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """The hostile Prometheus and the API stand-in of the exporter's token reviews, in a process of their own."""
    ready = workdir / "upstreams.json"
    script = Path(__file__).parent / "soak_upstreams.py"
    process = subprocess.Popen(
        [sys.executable, str(script), f"--ready={ready}", f"--bench-pods={BENCH_PODS}"], cwd=REPO, env=_environment()
    )
    info = wait_for_ready_file(process, ready, "the soak's upstreams")
    return process, {name: loopback(str(url)) for name, url in info.items()}


async def pathological_answers(prometheus_url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"{prometheus_url}/soak/pathological") as response:
        count: int = (await response.json())["pathological"]
        return count


def start_prometheus_adapter(
    workdir: Path, kube_url: str, prometheus_url: str
) -> tuple[subprocess.Popen[bytes], str, Path, AdapterCredentials]:
    """A second adapter on the simulated cluster, reading the hostile Prometheus."""
    workdir.mkdir()
    credentials = AdapterCredentials.write(workdir, kube_url)
    log = workdir / "adapter.log"
    flags = [*credentials.flags(), "--source=prometheus", f"--prometheus-url={loopback(prometheus_url)}"]
    process = _service("adapter.cli", flags, log)
    return process, loopback(served_url(process, log)), log, credentials


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


# ---- what is measured of the services --------------------------------------------------------------------------------
def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Sampled:
    """What is measured of one service: RSS every SAMPLE_EVERY seconds, open descriptors every second."""

    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds into the attack, bytes)
    descriptors: list[tuple[float, int]] = field(default_factory=list)

    def descriptors_between(self, start: float, end: float) -> list[int]:
        return [count for at, count in self.descriptors if start <= at < end] or [c for _, c in self.descriptors]


async def sample(pids: dict[str, int], samples: dict[str, Sampled], stop: asyncio.Event) -> None:
    started = time.monotonic()
    ticks = 0
    while not stop.is_set():
        at = time.monotonic() - started
        for name, pid in pids.items():
            samples[name].descriptors.append((at, descriptors(pid)))
            if ticks % int(SAMPLE_EVERY) == 0:
                samples[name].rss.append((at, rss(pid)))
        ticks += 1
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


# ---- the run ---------------------------------------------------------------------------------------------------------
async def attack_and_measure(
    minutes: float, urls: dict[str, str], launched: Launched, prometheus_ssl: ssl.SSLContext, pids: dict[str, int]
) -> tuple[dict[str, Sampled], dict[int, int]]:
    stop = asyncio.Event()
    samples = {name: Sampled() for name in pids}
    outsider = ssl.create_default_context()
    outsider.check_hostname, outsider.verify_mode = False, ssl.CERT_NONE  # no client certificate
    targets = {}
    for name, url in urls.items():
        parts = urlsplit(url)
        context = outsider if parts.scheme == "https" else None
        targets[name] = attacks.Target(parts.hostname or "", parts.port or 0, context)
    adapters = [targets["adapter"], targets["prometheus-adapter"]]
    pipelined = {
        "exporter": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "adapter": b"GET /openapi/v2 HTTP/1.1\r\nHost: x\r\n\r\n",
        "prometheus-adapter": b"GET /openapi/v2 HTTP/1.1\r\nHost: x\r\n\r\n",
    }
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session:
        hogs = asyncio.create_task(attacks.stream_hogs(urls["exporter"], TENANT_TOKEN, stop))
        tasks = [
            *(asyncio.create_task(attacks.stalled_clients(t, stop)) for t in targets.values()),
            *(asyncio.create_task(attacks.garbage_and_churn(t, stop)) for t in targets.values()),
            *(asyncio.create_task(attacks.unfinished_heads(t, stop)) for t in targets.values()),
            *(asyncio.create_task(attacks.pipelining_non_readers(t, pipelined[n], stop)) for n, t in targets.items()),
            *(asyncio.create_task(attacks.handshake_churn(t, stop)) for t in adapters),
            asyncio.create_task(attacks.distinct_selectors(session, urls["adapter"], launched.client_ssl, stop)),
            asyncio.create_task(
                attacks.pathological_prometheus_queries(
                    session, urls["prometheus-adapter"], prometheus_ssl, TEAMS, stop
                )
            ),
            asyncio.create_task(sample(pids, samples, stop)),
        ]
        await asyncio.sleep(minutes * 60)
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        statuses = await asyncio.wait_for(hogs, 30)
    return samples, statuses


def report(
    minutes: float,
    tallies: list[Tally],
    samples: dict[str, Sampled],
    logs: dict[str, Path],
    redirected: int,
    hog_statuses: dict[int, int],
    pathological: int,
) -> bool:
    ok = True
    print(f"soak: {minutes:g} min, loopback only, cap {CAP} connections and {FILE_LIMIT} open files per service")
    names = ("exporter scrapes", "adapter HPA answers", "prometheus-adapter HPA answers", "adapter feed documents")
    quiet, loud = tallies[:4], tallies[4:]
    for name, tally, calm in zip(names, loud, quiet, strict=True):
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
    seconds = minutes * 60
    for name, sampled in samples.items():
        series = sampled.rss
        warm = [value for at, value in series if at >= seconds / 4] or [value for _, value in series]
        growth = series[-1][1] - warm[0] if series else 0
        # descriptors come and go with the attackers' rounds: the median of the second quarter against the last's
        warm_fds = statistics.median(sampled.descriptors_between(seconds / 4, seconds / 2))
        last_fds = statistics.median(sampled.descriptors_between(seconds * 3 / 4, seconds + 1))
        fd_peak = max((count for _, count in sampled.descriptors), default=0)
        fd_growth = last_fds - warm_fds
        within = growth <= BOUND_RSS_GROWTH and fd_peak <= FILE_LIMIT and fd_growth <= BOUND_FD_GROWTH
        ok &= within
        trail = " ".join(f"{at / 60:.1f}m:{value / 2**20:.1f}" for at, value in series)
        print(f"  {name} RSS MiB over time: {trail}")
        print(
            f"  {name} after warm-up: RSS {growth / 2**20:+.1f} MiB (bound {BOUND_RSS_GROWTH / 2**20:.0f}); open "
            f"descriptors, median {warm_fds:.0f} -> {last_fds:.0f} ({fd_growth:+.0f}, bound {BOUND_FD_GROWTH}), "
            f"peak {fd_peak} (bound {FILE_LIMIT}){'' if within else '  <-- over'}"
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
    print(f"  stream hogs' answers by status: {dict(sorted(hog_statuses.items()))} (bound: no 200)")
    ok &= 200 not in hog_statuses
    print(f"  pathological Prometheus answers sent: {pathological}")
    print("  all bounds held" if ok else "  a bound was missed")
    return ok


async def _hostile_exporters() -> HostileExporters:
    hostile = HostileExporters()
    await hostile.start()
    return hostile


def _raise_own_file_limit() -> None:
    """The attackers hold thousands of sockets: this process may open as many files as the hard limit allows."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65_536, hard))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to attack (default 10)")
    args = parser.parse_args()
    if not 0 < args.minutes <= 120:
        parser.error("--minutes: from more than 0 to 120")
    _raise_own_file_limit()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    hostile = loop.run_until_complete(_hostile_exporters())
    ok = False
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-soak-") as tmp:
        workdir = Path(tmp)
        launched: Launched | None = None
        try:
            upstreams, upstream_urls = start_upstreams(workdir)
            processes.append(upstreams)
            kubeconfig = write_kubeconfig(workdir / "kubeconfig", server=upstream_urls["kube"], token="soak-exporter")
            exporter, exporter_url, exporter_log = start_exporter(workdir, kubeconfig)
            processes.append(exporter)
            loop.run_until_complete(wait_serving(exporter_url))
            adapter_log = workdir / "adapter.log"
            # launch() waits in a loop of its own: run it beside ours, which keeps serving the hostile upstreams. The
            # processes it starts inherit this one's open-file limit: the service's, for as long as it takes
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, hard))
            try:
                launched = loop.run_until_complete(
                    asyncio.to_thread(
                        launch,
                        2_000,
                        BENCH_PODS,
                        workdir,
                        f"--max-connections={CAP}",
                        exporter_map=lambda exporters: hostile.replace_four(exporters, loopback),
                        log=adapter_log,
                    )
                )
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert launched.adapter is not None
            loopback(launched.url)
            prom, prom_url, prom_log, prom_credentials = start_prometheus_adapter(
                workdir / "prometheus-adapter", launched.kube_url, upstream_urls["prometheus"]
            )
            processes.append(prom)
            prom_ssl = prom_credentials.client_ssl()
            loop.run_until_complete(wait_adapter_ready(prom, prom_url, prom_ssl))
            pids = {"exporter": exporter.pid, "adapter": launched.adapter.pid, "prometheus-adapter": prom.pid}
            urls = {"exporter": exporter_url, "adapter": launched.url, "prometheus-adapter": prom_url}
            spawn = multiprocessing.get_context("spawn")
            attack, results = spawn.Event(), spawn.Queue()
            credentials = {"adapter": str(workdir), "prometheus-adapter": str(prom_credentials.workdir)}
            prober = spawn.Process(
                target=probe, args=(urls, credentials, args.minutes * 60, attack, results), daemon=True
            )
            prober.start()
            # waited for in a thread: this loop keeps serving the hostile exporters meanwhile
            if not loop.run_until_complete(asyncio.to_thread(attack.wait, BASELINE_SECONDS + 120)):
                raise SystemExit("the legitimate clients never started")
            samples, hog_statuses = loop.run_until_complete(
                attack_and_measure(args.minutes, urls, launched, prom_ssl, pids)
            )
            tallies = [Tally(**t) for t in results.get(timeout=120)]  # type: ignore[arg-type]
            prober.join(30)
            logs = {"exporter": exporter_log, "adapter": adapter_log, "prometheus-adapter": prom_log}
            pathological = loop.run_until_complete(pathological_answers(upstream_urls["prometheus"]))
            ok = report(args.minutes, tallies, samples, logs, hostile.redirected, hog_statuses, pathological)
            names = ("scraped", "answered", "answered_prometheus", "fed")
            print(json.dumps({name: {"ok": t.ok, "lost": t.lost} for name, t in zip(names, tallies[4:], strict=True)}))
        finally:
            if launched is not None:
                launched.stop()
            for process in processes:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
            loop.run_until_complete(hostile.stop())
            leftover = asyncio.all_tasks(loop)
            for task in leftover:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
