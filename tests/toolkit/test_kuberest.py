"""Requests to the Kubernetes API on the event loop: the client's credentials (CA, client certificate, bearer token with
its refresh hook), and every way an answer can be unusable as one KubeRequestError line."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes.client import ApiClient, Configuration

from toolkit.certs import CertificateAuthority
from toolkit.kuberest import KubeRequestError, KubeRequests

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
seen: list[dict[str, Any]] = []


async def _serve(handler: Handler, context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"{'https' if context else 'http'}://127.0.0.1:{port}"


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        seen.append(
            {"path": request.path, "headers": dict(request.headers), "body": await request.json(), "peer": peer}
        )
        return web.json_response({"kind": "Echo", "status": {"allowed": True}}, status=201)

    seen.clear()
    runner, url = await _serve(answer)
    yield url
    await runner.cleanup()


def _configuration(url: str, **fields: Any) -> Configuration:
    configuration = ApiClient().configuration
    configuration.host = url
    for name, value in fields.items():
        setattr(configuration, name, value)
    return configuration


async def test_a_post_carries_the_token_and_reads_the_object(echo: str) -> None:
    refreshed: list[int] = []

    def refresh(configuration: Configuration) -> None:  # as the in-cluster loader re-reads a rotated token
        refreshed.append(1)
        configuration.api_key = {"BearerToken": f"Bearer token-{len(refreshed)}"}

    requests = KubeRequests(_configuration(echo, refresh_api_key_hook=refresh))
    try:
        assert await requests.post("/apis/x/v1/reviews", {"spec": {"user": "a"}}, timeout=5) == {
            "kind": "Echo",
            "status": {"allowed": True},
        }
        await requests.post("/apis/x/v1/reviews", {"spec": {}}, timeout=5)
    finally:
        await requests.close()
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer token-1", "Bearer token-2"]
    assert seen[0]["path"] == "/apis/x/v1/reviews" and seen[0]["body"] == {"spec": {"user": "a"}}
    assert seen[0]["headers"]["Content-Type"] == "application/json"


async def test_a_token_with_its_prefix_apart_is_sent_whole(echo: str) -> None:
    configuration = _configuration(echo, api_key={"authorization": "t0k"}, api_key_prefix={"authorization": "Bearer"})
    requests = KubeRequests(configuration)
    try:
        await requests.post("/p", {}, timeout=5)
    finally:
        await requests.close()
    assert seen[-1]["headers"]["Authorization"] == "Bearer t0k"


async def test_tls_with_the_clients_ca_and_certificate(tmp_path: Path) -> None:
    authority = CertificateAuthority.create("test-ca")
    (tmp_path / "ca.crt").write_bytes(authority.cert_pem)
    authority.issue_server(["127.0.0.1"]).write(tmp_path / "server.crt", tmp_path / "server.key")
    authority.issue_client("adapter").write(tmp_path / "client.crt", tmp_path / "client.key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    subjects: list[object] = []

    async def answer(request: web.Request) -> web.Response:
        subjects.append(request.transport.get_extra_info("peercert")["subject"] if request.transport else None)
        return web.json_response({"ok": True})

    runner, url = await _serve(answer, context)
    configuration = _configuration(
        url,
        ssl_ca_cert=str(tmp_path / "ca.crt"),
        cert_file=str(tmp_path / "client.crt"),
        key_file=str(tmp_path / "client.key"),
    )
    requests = KubeRequests(configuration)
    strangers = KubeRequests(_configuration(url))  # the system's CAs only: the test CA is not among them
    try:
        assert await requests.post("/p", {}, timeout=5) == {"ok": True}
        assert subjects == [((("commonName", "adapter"),),)]
        with pytest.raises(KubeRequestError, match="certificate verify failed"):
            await strangers.post("/p", {}, timeout=5)
    finally:
        await requests.close()
        await strangers.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("status", "body", "problem", "has_status"),
    [
        (403, b'{"kind":"Status","code":403}', "HTTP 403 Forbidden", True),
        (500, b"<html>oops</html>", "HTTP 500 Internal Server Error", True),
        (201, b"[1, 2]", "the answer is not a JSON object", True),
        (201, b"not json", "the answer is not JSON", True),
        (201, b"[" * 50_000 + b"]" * 50_000, "the answer is JSON nested too deep", True),
        (201, b"[" + b"0," * 100_000 + b"0]", "more than 150000", False),
    ],
    ids=["refused", "broken", "a-list", "not-json", "deep", "too-large"],
)
async def test_an_unusable_answer_is_one_line(status: int, body: bytes, problem: str, has_status: bool) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, status=status, content_type="application/json")

    runner, url = await _serve(answer)
    requests = KubeRequests(_configuration(url), max_answer_bytes=150_000)
    try:
        with pytest.raises(KubeRequestError, match=problem) as raised:
            await requests.post("/p", {}, timeout=5)
    finally:
        await requests.close()
        await runner.cleanup()
    assert "\n" not in str(raised.value)
    assert (raised.value.status == status) if has_status else raised.value.status is None


async def test_no_server_and_a_silent_server_are_errors_without_a_status() -> None:
    async def silent(request: web.Request) -> web.Response:
        await asyncio.sleep(2)  # past the client's timeout; the server's cleanup waits for it
        return web.json_response({})

    runner, url = await _serve(silent)
    port = url.rsplit(":", 1)[1]
    await runner.cleanup()  # nothing listens there now
    nobody = KubeRequests(_configuration(url))
    runner, url = await _serve(silent)
    slow = KubeRequests(_configuration(url))
    try:
        with pytest.raises(KubeRequestError, match=r"ClientConnectorError|Cannot connect") as refused:
            await nobody.post("/p", {}, timeout=5)
        with pytest.raises(KubeRequestError, match=r"no answer within 0.2 s") as late:
            await slow.post("/p", {}, timeout=0.2)
    finally:
        await nobody.close()
        await slow.close()
        await runner.cleanup()
    assert refused.value.status is None and late.value.status is None and port
