"""The upstreams of bench/soak_hostile.py, on loopback: exporter endpoints and a Prometheus that answer badly on
purpose, and a Kubernetes API stand-in that reviews the tokens shown to the soak's exporter.

    python bench/soak_upstreams.py --ready FILE [--bench-pods 200]

serves the Prometheus and the API stand-in in a process of their own (so that the attackers' work does not slow the
sound answers the legitimate HPA depends on), writes {"prometheus": URL, "kube": URL} to FILE once they serve, and
runs until SIGTERM; `GET <prometheus>/soak/pathological` says how many pathological answers it gave.

- `HostileExporters`: four `/pods` endpoints the direct-source adapter is pointed at (an endless chunked body, garbage,
  an answer after 30 s, a redirect to a counter that must never be asked);
- `HostilePrometheus`: `/api/v1/query` answering soundly for the namespace the legitimate HPA asks about (`bench`),
  and for any other namespace, in turn, what costs a decoder memory: 15 MiB of `"result":[[],[],...]`, more minimal
  series than the adapter's size cap allows, a result nested 100,000 levels deep, one label set of 1 MiB, an endless
  body;
- `TokenReviews`: the API stand-in, knowing the adapter's token for the exporters (audience gpu-pulse-exporter) and a
  tenant's (a user the exporter does not serve `/pods` to).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

from adapter_cluster import NAMESPACE, bench_pod_name, serve_until_terminated
from aiohttp import web

from simulation.kubeapi import KubeApiServer, TokenUser

ADAPTER_USER = "system:serviceaccount:gpu-pulse:gpu-pulse-adapter"
ADAPTER_TOKEN = "soak-adapter-token-for-the-exporters"
TENANT_TOKEN = "soak-tenant-token"
AUDIENCE = "gpu-pulse-exporter"


async def _serve(handler: Callable[[web.Request], object]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)  # type: ignore[arg-type]
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # the port it bound, read back
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def _endless(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    chunk = b" " * 65_536
    try:
        await response.prepare(request)
        while True:
            await response.write(chunk)
    except ConnectionError:  # the reader hung up, as it should
        return response


class HostileExporters:
    """Loopback endpoints that answer `/pods` badly, and a redirect target that counts what reaches it."""

    def __init__(self) -> None:
        self.redirected = 0
        self._runners: list[web.AppRunner] = []
        self.urls: dict[str, str] = {}

    async def start(self) -> None:
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

        runner, target = await _serve(counted)
        self._runners.append(runner)

        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"{target}/pods")

        for name, handler in (("endless", _endless), ("garbage", garbage), ("slow", slow), ("redirect", redirect)):
            runner, self.urls[name] = await _serve(handler)
            self._runners.append(runner)

    def replace_four(self, exporters: dict[str, str], loopback: Callable[[str], str]) -> dict[str, str]:
        """The adapter's exporter map with the first four nodes' endpoints made hostile."""
        changed = dict(exporters)
        for node, name in zip(sorted(exporters)[:4], ("endless", "garbage", "slow", "redirect"), strict=True):
            changed[node] = self.urls[name]
        return {node: loopback(url) for node, url in changed.items()}

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


def _vector(result: bytes) -> bytes:
    return b'{"status":"success","data":{"resultType":"vector","result":' + result + b"}}"


def pathological_answers() -> list[tuple[str, bytes | None]]:
    """(name, body) of what the hostile Prometheus answers other namespaces with, in turn; None: an endless body."""
    series = b'{"metric":{},"value":[1,"1"]}'
    # a pod the attackers ask about (bench/adapter_cluster.py: team-00 holds svc-00-000), so that its labels are read
    huge_labels = json.dumps(
        {"namespace": "team-00", "pod": "svc-00-000", **{f"label_{i}": "x" * 40 for i in range(20_000)}}
    ).encode()
    return [
        ("15 MiB of empty lists", _vector(b"[" + b",".join([b"[]"] * 5_000_000) + b"]")),
        ("more series than the size allows", _vector(b"[" + b",".join([series] * 200_000) + b"]")),
        ("nested 100,000 deep", _vector(b"[" * 100_000 + b"]" * 100_000)),
        ("a label set of 1 MiB", _vector(b'[{"metric":' + huge_labels + b',"value":[1,"1"]}]')),
        ("an endless body", None),
    ]


class HostilePrometheus:
    """`/api/v1/query`: sound for namespace `bench` (the legitimate HPA's), pathological for any other namespace."""

    def __init__(self, bench_pods: int) -> None:
        self._pods = [bench_pod_name(i) for i in range(bench_pods)]
        self._bad = itertools.cycle(pathological_answers())
        self.pathological = 0  # answers of the pathological kind sent
        self._runner: web.AppRunner | None = None
        self.url = ""

    def _sound(self, query: str) -> bytes:
        now = time.time()
        times = "timestamp(" in query  # the sample-time query: each pod's figure a second old

        def value(index: int) -> str:
            return f"{now - 1:.3f}" if times else f"{50 + index % 40}.5"

        result = [
            {"metric": {"namespace": NAMESPACE, "pod": pod, "gpu": "0"}, "value": [now, value(i)]}
            for i, pod in enumerate(self._pods)
        ]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    async def start(self) -> None:
        async def query(request: web.Request) -> web.StreamResponse:
            promql = request.query.get("query", "")
            if f'namespace="{NAMESPACE}"' in promql:
                return web.Response(body=self._sound(promql), content_type="application/json")
            self.pathological += 1
            _, body = next(self._bad)
            if body is None:
                return await _endless(request)
            return web.Response(body=body, content_type="application/json")

        async def answered(request: web.Request) -> web.Response:
            return web.json_response({"pathological": self.pathological})

        async def route(request: web.Request) -> web.StreamResponse:
            return await (answered(request) if request.path == "/soak/pathological" else query(request))

        self._runner, self.url = await _serve(route)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class TokenReviews:
    """The Kubernetes API stand-in the soak's exporter asks who shows which token (--auth-allowed-users)."""

    def __init__(self) -> None:
        self._kube = KubeApiServer()
        self.url = ""

    async def start(self) -> None:
        self.url = await self._kube.start()
        self._kube.set_token(ADAPTER_TOKEN, TokenUser(ADAPTER_USER, audiences=(AUDIENCE,)))
        self._kube.set_token(TENANT_TOKEN, TokenUser("system:serviceaccount:ml:default", audiences=(AUDIENCE,)))

    async def stop(self) -> None:
        await self._kube.stop()


async def serve(ready: Path, bench_pods: int) -> None:
    prometheus, reviews = HostilePrometheus(bench_pods), TokenReviews()
    await prometheus.start()
    await reviews.start()
    await serve_until_terminated(ready, {"prometheus": prometheus.url, "kube": reviews.url})
    await prometheus.stop()
    await reviews.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--bench-pods", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(serve(args.ready, args.bench_pods))


if __name__ == "__main__":
    main()
