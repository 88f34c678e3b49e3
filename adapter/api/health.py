"""`/healthz` and `/livez` (the process serves), `/readyz` (the pod cache has synced and the source is started).

Plain text as kube-apiserver answers them; `?verbose` lists each check."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

Check = tuple[str, Callable[[], bool]]


class Health:
    def __init__(self, readiness: list[Check]) -> None:
        self._readiness = readiness

    async def live(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def ready(self, request: web.Request) -> web.Response:
        results = [(name, check()) for name, check in self._readiness]
        healthy = all(ok for _, ok in results)
        if "verbose" in request.query or not healthy:
            lines = [f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed'}" for name, ok in results]
            lines.append("readyz check passed" if healthy else "readyz check failed")
            return web.Response(status=200 if healthy else 503, text="\n".join(lines) + "\n")
        return web.Response(text="ok")
