"""KEDA's GetMetrics for a 1,000-pod workload at fleet size, against the custom metrics path in the same run.

    PYTHONPATH=. python bench/keda_fleet.py [--duration 120] [--nodes 2000] [--gpu-pods 20000] [--other-pods 30000]

Sets the fleet up as bench/fleet.py does (bench/fleet_cluster.py: the Kubernetes API stand-in with the fleet's pods
and their churn, one streaming exporter endpoint per GPU node) and starts one real adapter process (TLS, client
certificates, SubjectAccessReview, the pod cache by list and watch) with `--keda-listen`. Every GPU Deployment's HPA
asks its question every 15 s as in the fleet benchmark (bench/fleet.py's `hpa`), so the adapter works as it would in
that fleet. Meanwhile, for `--duration` seconds, the largest Deployment (1,000 pods over many nodes) is asked twice in
turn, `--rate` rounds a second: by KEDA's GetMetrics (gRPC, plaintext, by a client that owes nothing to the adapter's
stubs: tests/support/keda.py) and by the HPA's own question on custom.metrics.k8s.io (HTTPS, authenticated). Both
answers come from the same pods and the same source (`pod_values`); KEDA's adds a sum, the custom metrics path renders
1,000 items and authorizes the request.

Prints each path's p50 and p99 and their ratio, checks that the KEDA value is the sum of the same pods' values where
the custom-metrics answers before and after it were identical, and exits 1 when the goal is missed:
GetMetrics p99 <= 1.25 x the custom metrics p99 (stretch: <= 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import ssl
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import Run, Target, hpa, percentile, start_fleet, start_replicas, stop, wait_ready

from adapter.quantity import parse_quantity
from tests.support import keda
from tests.support.adapters import KEDA_SERVING_LINE

GOAL, STRETCH = 1.25, 1.0
WARMUP = 15.0


async def measure(
    args: argparse.Namespace, info: dict[str, Any], url: str, scaler: str, context: ssl.SSLContext
) -> dict[str, Any]:
    deployments = info["deployments"]
    largest = max(deployments, key=lambda d: d["pods"])
    rng = random.Random(7)
    run = Run()  # the fleet's HPAs load the adapter; their answers are not measured here
    timeout = aiohttp.ClientTimeout(total=30)
    connector = aiohttp.TCPConnector(limit=0)
    path = (
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{largest['namespace']}/pods/*/gpu_utilization"
        f"?labelSelector=app%3D{largest['name']}"
    )
    metadata = {"metric": "gpu_utilization", "podSelector": f"app={largest['name']}", "target": "60"}
    request = keda.metrics_request(largest["namespace"], metadata, "gpu_utilization")
    custom_seconds: list[float] = []
    keda_seconds: list[float] = []
    spec_seconds: list[float] = []  # GetMetricSpec asks no source: what the gRPC path costs on this loaded loop
    checked = mismatched = errors = 0
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        grpc.aio.insecure_channel(scaler) as channel,
    ):
        client = keda.ScalerClient.on(channel)
        replica = [Target(0, url, session)]
        background = [asyncio.create_task(hpa(d, replica, run, rng, context)) for d in deployments]

        async def custom() -> tuple[float, Any]:
            started = time.perf_counter()
            async with session.get(url + path, ssl=context) as response:
                body = await response.read()
                status = response.status
            seconds = time.perf_counter() - started
            if status != 200:
                raise RuntimeError(f"custom metrics answered {status}: {body[:200]!r}")
            items = json.loads(body)["items"]
            return seconds, {i["describedObject"]["name"]: (i["timestamp"], i["value"]) for i in items}

        async def spec() -> float:
            started = time.perf_counter()
            await client.get_metric_spec(keda.scaled_object(largest["namespace"], metadata), timeout=30)
            return time.perf_counter() - started

        async def scaled() -> tuple[float, float]:
            started = time.perf_counter()
            answer = await client.get_metrics(request, timeout=30)
            return time.perf_counter() - started, answer.metricValues[0].metricValueFloat

        try:
            print(f"warming up {WARMUP:g} s (every Deployment's HPA asks once per 15 s) ...", flush=True)
            deadline = time.monotonic() + WARMUP
            while time.monotonic() < deadline:
                await custom()
                await scaled()
                await asyncio.sleep(1 / args.rate)
            _background_asked(background)
            print(f"measuring {args.duration:g} s: {largest['pods']} pods of {largest['name']} ...", flush=True)
            deadline = time.monotonic() + args.duration
            while time.monotonic() < deadline:
                try:
                    before_seconds, before = await custom()
                    keda_took, value = await scaled()
                    _, after = await custom()  # only to check the sum: was the answer the same after?
                    spec_took = await spec()
                except (aiohttp.ClientError, grpc.aio.AioRpcError, RuntimeError, TimeoutError) as failure:
                    errors += 1
                    print(f"error: {failure}", flush=True)
                    continue
                custom_seconds.append(before_seconds)  # one of each a round, taken under the same load
                keda_seconds.append(keda_took)
                spec_seconds.append(spec_took)
                if before == after:
                    checked += 1
                    total = sum((parse_quantity(v) for _, v in before.values()), Decimal(0))
                    mismatched += value != float(total)
                await asyncio.sleep(1 / args.rate)
            _background_asked(background)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
    return {
        "pods": largest["pods"],
        "custom": custom_seconds,
        "keda": keda_seconds,
        "spec": spec_seconds,
        "checked": checked,
        "mismatched": mismatched,
        "errors": errors,
    }


def _background_asked(background: list[asyncio.Task[None]]) -> None:
    """The fleet's HPAs ask until they are cancelled (fleet.hpa counts a failed answer and goes on): one that ended
    raised, and the adapter was measured without the load it stands for, so the run failed (SystemExit)."""
    ended = [task for task in background if task.done()]
    if ended:
        raise SystemExit(f"{len(ended)} of the fleet's {len(background)} HPAs stopped asking: {ended[0].exception()!r}")


def summary(args: argparse.Namespace, measured: dict[str, Any]) -> bool:
    custom, scaled = measured["custom"], measured["keda"]
    rows = [
        ("custom metrics (HTTPS, one item a pod)", custom),
        ("KEDA GetMetrics (gRPC, one sum)", scaled),
        ("KEDA GetMetricSpec (gRPC, no source)", measured["spec"]),
    ]
    print(f"\nKEDA's GetMetrics against the custom metrics path, {measured['pods']} pods, fleet of {args.nodes} "
          f"nodes / {args.gpu_pods} GPU pods / {args.other_pods} others, {args.duration:g} s")  # fmt: skip
    print(f"{'path':40} {'answers':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for what, values in rows:
        p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
        print(f"{what:40} {len(values):8d} {p50:8.1f} {p99:8.1f}")
    ratio = percentile(scaled, 0.99) / percentile(custom, 0.99)
    met = ratio <= GOAL and measured["mismatched"] == 0 and measured["errors"] == 0 and measured["checked"] > 0
    print(f"GetMetrics p99 / custom metrics p99 = {ratio:.2f} (goal <= {GOAL}, stretch <= {STRETCH}): "
          f"{'met' if ratio <= GOAL else 'MISSED'}{', stretch met' if ratio <= STRETCH else ''}")  # fmt: skip
    print(f"sums checked against identical custom-metrics answers: {measured['checked']}, wrong: "
          f"{measured['mismatched']}; errors: {measured['errors']}")  # fmt: skip
    return met


def keda_address(log: Path, timeout: float = 60) -> str:
    """host:port of KEDA's external scaler, from the adapter's log (it logs it once the scaler serves)."""
    deadline = time.monotonic() + timeout
    while (found := re.search(KEDA_SERVING_LINE, log.read_text(errors="replace"))) is None:
        if time.monotonic() > deadline:
            raise SystemExit("the adapter did not say where KEDA's external scaler listens")
        time.sleep(0.1)
    return found.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds measured, after warm-up")
    parser.add_argument("--rate", type=float, default=4.0, help="rounds (one of each question) a second, at most")
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        help="the adapter's --exporter-refresh (2: the KEDA fleet figures were measured at it; its default is 1)",
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpu-pods", type=int, default=20_000)
    parser.add_argument("--other-pods", type=int, default=30_000)
    parser.add_argument("--churn", type=float, default=4.0, help="pods replaced a second")
    parser.add_argument("--port", type=int, default=9400, help="the exporters' port on each node's address")
    parser.add_argument("--fleet-nice", type=int, default=10, help="the simulated fleet's niceness (bench/fleet.py)")
    parser.add_argument("--adapter-flag", action="append", default=[], help="another flag for the adapter")
    args = parser.parse_args()
    args.replicas, args.own_cores = 1, False  # bench/fleet.py start_replicas reads both
    args.adapter_flag = [*args.adapter_flag, "--keda-listen=127.0.0.1:0"]  # the port it bound is in its log
    processes = []
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-keda-fleet-") as tmp:
        workdir = Path(tmp)
        try:
            print(f"starting the fleet: {args.nodes} GPU nodes, {args.gpu_pods} GPU pods, {args.other_pods} others ...",
                  flush=True)  # fmt: skip
            fleet, info = start_fleet(args, workdir)
            processes.append(fleet)
            print("starting the adapter ...", flush=True)
            replicas, context = start_replicas(args, workdir, info["kube"])
            processes.extend(r.process for r in replicas)
            asyncio.run(wait_ready(replicas, context))
            scaler = keda_address(replicas[0].log)
            measured = asyncio.run(measure(args, info, replicas[0].url, scaler, context))
        except SystemExit as failure:
            for log in sorted(workdir.glob("adapter-*.log")):
                sys.stderr.write(f"--- {log.name}\n{log.read_text()[-3000:]}\n")
            stop(processes)
            print(f"keda_fleet: {failure}", file=sys.stderr)
            sys.exit(2)
        finally:
            stop(processes)
    sys.exit(0 if summary(args, measured) else 1)


if __name__ == "__main__":
    main()
