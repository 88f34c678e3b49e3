"""The report's Prometheus client against hostile or picky servers: a bearer token sent, an answer too large, the
wrong shape, an error status, a slow answer: each one line naming the query, never a hang or a traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from report.prometheus import Connection, PrometheusClient, PrometheusError
from toolkit.credentials import BearerToken


async def serve(aiohttp_server: Any, handler: Any) -> str:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = await aiohttp_server(app)
    return f"http://127.0.0.1:{server.port}"


async def test_the_bearer_token_is_sent_and_posts_carry_the_query(aiohttp_server: Any, tmp_path: Path) -> None:
    seen: list[tuple[str, str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append((request.method, request.headers.get("Authorization", ""), str(form.get("query", ""))))
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})

    token = tmp_path / "token"
    token.write_text("s3cret\n", encoding="utf-8")
    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(url, token=BearerToken(token, "--prometheus-token-file"))) as client:
        assert await client.instant_query("up" * 3000, 1.0) == []  # longer than any URL may be
    assert seen == [("POST", "Bearer s3cret", "up" * 3000)]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"status": "error", "errorType": "execution", "error": "query processing would load too many samples"}',
         422, "HTTP 422: query processing would load too many samples"),
        (b"<html>bad gateway</html>", 502, "HTTP 502: <html>bad gateway</html>"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}}', 200, "not a vector"),
        (b"not json", 200, "not a Prometheus API answer"),
        # 30,000 arrays deep (issue 42: a RecursionError's traceback), in the data and in an error's body
        (b'{"status": "success", "data": {"resultType": "vector", "result": ' + b"[" * 30_000 + b"]" * 30_000 + b"}}",
         200, "nested too deeply"),
        (b'{"status": "error", "error": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", 400, r"HTTP 400: \{"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": []}}' + b" " * 70_000, 200,
         "more than 65536"),
    ],
)  # fmt: skip
async def test_a_bad_answer_is_one_line(aiohttp_server: Any, body: bytes, status: int, message: str) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, status=status, content_type="application/json")

    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(url, max_response_bytes=65_536)) as client:
        with pytest.raises(PrometheusError, match=message) as caught:
            await client.instant_query("sum(up)", 1.0)
    assert "\n" not in str(caught.value) and "sum(up)" in str(caught.value)


async def test_a_slow_answer_times_out(aiohttp_server: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(url, timeout=0.2)) as client:
        with pytest.raises(PrometheusError, match=r"no answer within 0\.2 s"):
            await client.range_query("up", 0, 60, 60)


async def test_a_redirect_is_not_followed(aiohttp_server: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://192.0.2.1/elsewhere")

    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(url)) as client:
        with pytest.raises(PrometheusError, match="HTTP 302"):
            await client.label_values("namespace", "up", 0, 60)


async def test_a_path_prefix_is_kept_as_mimir_wants_it(aiohttp_server: Any) -> None:
    paths: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        paths.append(request.path)
        if not request.path.startswith("/prometheus/api/v1/"):
            return web.Response(status=404)
        return web.json_response({"status": "success", "data": ["ml"]})

    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(f"{url}/prometheus/")) as client:
        assert await client.label_values("namespace", "up", 0, 60) == ["ml"]
    assert paths == ["/prometheus/api/v1/label/namespace/values"]


async def test_an_address_without_the_api_says_so_in_one_line(aiohttp_server: Any) -> None:
    """--prometheus-url pointed at an exporter (aiohttp answers "404: Not Found") or without Mimir's prefix."""

    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    url = await serve(aiohttp_server, handler)
    async with PrometheusClient(Connection(url)) as client:
        with pytest.raises(PrometheusError) as caught:
            await client.label_values("namespace", "gpu_pulse_pod_gpu_sharing_pods", 0, 60)
    message = str(caught.value)
    assert f"{url} has no Prometheus HTTP API" in message and "--prometheus-url" in message
    assert "404: Not Found" not in message and "\n" not in message
