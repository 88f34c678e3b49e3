"""A stand-in for the inference gateway's endpoint picker (EPP) in front of a pool: it holds requests while the pool
has no ready endpoint, and serves its flow-control queue on /metrics as the EPP does.

What it copies from kubernetes-sigs/gateway-api-inference-extension (release-1.3):
- the gauge `inference_extension_flow_control_queue_size`, labelled `fairness_id`, `priority`, `inference_pool`,
  `model_name`, `target_model_name` (pkg/epp/metrics/metrics.go, flowControlQueueSize, with ModelLabels), counting a
  request from the moment it enters the flow controller (EnqueueAndWait) until its final outcome: dispatched, evicted
  by its TTL, or its client gone (site-src/guides/metrics-and-observability.md, "Flow Control Metrics");
- client_golang's text output: `# HELP` with the `[ALPHA]` stability prefix, `# TYPE ... gauge`, labels in name order,
  and no line at all for a labelled gauge until its first child exists (a child stays, at 0, once created);
- /metrics asks for a bearer token (the EPP's metrics need `get` on the nonResourceURL /metrics; same guide, "Scrape
  Metrics"): with `token` set, a request without it is answered 401;
- a request that outlives its TTL is answered 503 "request timed out in queue" (pkg/epp/requestcontrol/admission.go,
  translateFlowControlOutcome: QueueOutcomeEvictedTTL -> ServiceUnavailable); a client that goes away leaves the queue;
- a request's flow is its `x-gateway-inference-fairness-id` header, `default-flow` without one
  (pkg/epp/metadata/consts.go FlowFairnessIDKey, pkg/epp/handlers/request.go defaultFairnessID); its priority is its
  InferenceObjective's, 0 here.

Requests come as `POST /v1/completions` (or `/v1/chat/completions`) with a JSON body naming a `model`, as the EPP
requires (site-src/guides/troubleshooting.md); the model names the pool. A held request is answered once the pool
has a ready endpoint (this stand-in does not proxy to an engine: it answers 200 naming the pool).
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field

from aiohttp import web

QUEUE_SIZE = "inference_extension_flow_control_queue_size"
QUEUE_HELP = (
    "[ALPHA] Current number of requests being actively managed by the EPP flow control layer, from the start of "
    "the EnqueueAndWait call until a final outcome is reached."
)
DEFAULT_FAIRNESS_ID = "default-flow"
DEFAULT_PRIORITY = "0"
DEFAULT_TTL = 60.0


@dataclass
class _Pool:
    name: str
    model: str
    ready_endpoints: int = 0
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)  # (fairness_id, priority) -> held
    dispatch: asyncio.Event = field(default_factory=asyncio.Event)


class SimulatedGateway:
    """Pools by the model they serve; each holds requests while it has no ready endpoint."""

    def __init__(self, pools: dict[str, str], *, ttl: float = DEFAULT_TTL, token: str | None = None) -> None:
        """`pools`: pool name -> model name. `ttl`: seconds a request is held before a 503. `token`: the bearer
        token /metrics asks for (None: none)."""
        self._pools = {name: _Pool(name, model) for name, model in pools.items()}
        self._by_model = {model: name for name, model in pools.items()}
        self._ttl = ttl
        self._token = token
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.url = ""

    # ---- the pools --------------------------------------------------------------------------------------------------
    def set_ready_endpoints(self, pool: str, count: int) -> None:
        """The pool's ready endpoints now; from none to some, every held request is dispatched."""
        state = self._pools[pool]
        state.ready_endpoints = count
        if count > 0:
            state.dispatch.set()
            state.dispatch = asyncio.Event()

    def waiting(self, pool: str) -> int:
        return sum(self._pools[pool].waiting.values())

    async def hold(self, pool: str, fairness_id: str = DEFAULT_FAIRNESS_ID, priority: str = DEFAULT_PRIORITY) -> bool:
        """One request through the pool's flow control: True once dispatched, False when its TTL ran out. Counted in
        the queue until then (or until the caller is cancelled: the client went away)."""
        state = self._pools[pool]
        key = (fairness_id, priority)
        state.waiting[key] = state.waiting.get(key, 0) + 1
        try:
            if state.ready_endpoints > 0:
                return True
            try:
                async with asyncio.timeout(self._ttl):
                    await state.dispatch.wait()
            except TimeoutError:
                return False
            return not self._closing
        finally:
            state.waiting[key] -= 1  # the child stays, at 0, as a client_golang GaugeVec child does

    def exposition(self) -> str:
        """/metrics as the EPP prints the family: nothing until the first request created a child."""
        lines = []
        for pool in self._pools.values():
            for (fairness_id, priority), held in sorted(pool.waiting.items()):
                labels = (
                    f'fairness_id="{fairness_id}",inference_pool="{pool.name}",model_name="{pool.model}",'
                    f'priority="{priority}",target_model_name="{pool.model}"'
                )
                lines.append(f"{QUEUE_SIZE}{{{labels}}} {held}")
        if not lines:
            return ""
        return f"# HELP {QUEUE_SIZE} {QUEUE_HELP}\n# TYPE {QUEUE_SIZE} gauge\n" + "\n".join(lines) + "\n"

    # ---- HTTP -------------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._request)
        app.router.add_post("/v1/chat/completions", self._request)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on `host`:`port` (0: the kernel's choice); returns the base URL."""
        self._runner = web.AppRunner(self.app(), handle_signals=False)
        await self._runner.setup()
        sock = socket.create_server((host, port))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        """Stop serving; held requests are answered 503 at once (the gateway going away), not left to their TTL."""
        self._closing = True
        for pool in self._pools.values():
            pool.dispatch.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._token is not None and request.headers.get("Authorization") != f"Bearer {self._token}":
            return web.Response(status=401, text="Unauthorized\n")
        # client_golang's promhttp answers a text-format scrape with this Content-Type (expfmt.FmtText)
        headers = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        return web.Response(body=self.exposition().encode(), headers=headers)

    async def _request(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
            model = body["model"]
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400, text="model not found in request body\n")
        pool = self._by_model.get(model) if isinstance(model, str) else None
        if pool is None:
            return web.Response(status=404, text=f"no InferencePool serves model {model!r}\n")
        fairness_id = request.headers.get("x-gateway-inference-fairness-id", DEFAULT_FAIRNESS_ID)
        if not await self.hold(pool, fairness_id[:63]):
            return web.Response(status=503, text="request timed out in queue\n")
        return web.json_response({"dispatched": {"inference_pool": pool, "model": model}})
