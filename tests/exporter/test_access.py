"""Who may read the exporter (exporter/access.py), against the Kubernetes API stand-in: the adapter's audience-bound
ServiceAccount token checked by TokenReview reads `/pods`; nobody else takes the stream slots it needs; `/metrics`
and the page stay open; a token that is not ASCII is a 401, never a 500 (issue 21, items 1 and 6)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.access import (
    DEFAULT_TOKEN_AUDIENCE,
    BasicAccess,
    BearerAccess,
    ReviewedAccess,
    load_access,
    load_reviewed_access,
)
from exporter.server import build_app
from simulation.kubeapi import KubeApiServer, TokenUser
from tests.support.clocks import ManualClock
from tests.support.loopback import refused_port
from tests.support.snapshots import SimulatedNode
from toolkit.kubeclient import api_client
from toolkit.pods_contract import MAX_STREAMS, parse_stream_event
from toolkit.tokenreview import NEW_BURST, TokenReviewer

ADAPTER = "system:serviceaccount:gpu-pulse:gpu-pulse-adapter"
Client = Any  # aiohttp's TestClient


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    server = KubeApiServer()
    await server.start()
    server.set_token("adapter-token", TokenUser(ADAPTER, audiences=(DEFAULT_TOKEN_AUDIENCE,)))
    server.set_token("adapter-api-token", TokenUser(ADAPTER))  # the same account's token for the API server
    server.set_token("tenant-token", TokenUser("system:serviceaccount:ml:default", audiences=(DEFAULT_TOKEN_AUDIENCE,)))
    yield server
    await server.stop()


def reviewed(kube_url: str) -> ReviewedAccess:
    reviewer = TokenReviewer(api_client(base_url=kube_url), audiences=(DEFAULT_TOKEN_AUDIENCE,))
    return ReviewedAccess(reviewer, [ADAPTER])


@pytest.fixture
async def client(node: SimulatedNode, kube: KubeApiServer, aiohttp_client: Any) -> Client:
    node.loop.poll_once()
    return await aiohttp_client(build_app(node.loop, access=reviewed(kube.url), run_poll_loop=False))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_only_the_adapters_audience_bound_token_reads_pods(client: Client) -> None:
    assert (await client.get("/pods", headers=bearer("adapter-token"))).status == 200
    for headers, status in (
        ({}, 401),
        (bearer("adapter-api-token"), 401),  # the adapter's token for the API server: another audience
        (bearer("no-such-token"), 401),
        (bearer("tenant-token"), 403),  # a token the cluster vouches for, of a user not allowed
    ):
        response = await client.get("/pods", headers=headers)
        assert response.status == status, headers
        if status == 401:
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_metrics_and_the_page_stay_open(client: Client) -> None:
    assert (await client.get("/metrics")).status == 200
    assert (await client.get("/")).status == 200
    assert (await client.get("/healthz")).status == 200


async def test_without_the_adapters_token_no_stream_slot_can_be_taken(client: Client) -> None:
    """Issue 21, item 1: a client that held every stream slot blinded the adapter. Without the adapter's token a
    client gets no stream at all, so however many it asks for, the adapter's stream is served."""
    hogs = [await client.get("/pods", params={"watch": "1"}) for _ in range(MAX_STREAMS + 4)]
    assert {h.status for h in hogs} == {401}
    adapter = await client.get("/pods", params={"watch": "1"}, headers=bearer("adapter-token"))
    assert adapter.status == 200
    _, document = parse_stream_event(await asyncio.wait_for(adapter.content.readline(), 5))
    assert document.node == "sim-node"
    adapter.close()


async def test_a_non_ascii_token_is_401_without_a_traceback(
    node: SimulatedNode, client: Client, aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`Authorization: Bearer \\xe9` (aiohttp decodes it with a surrogate) gave a 500 and a traceback per request."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cr3t\n")
    users = tmp_path / "users"
    users.write_text("local:plain:hunter2\n")
    clients = [
        client,
        await aiohttp_client(build_app(node.loop, access=load_access(token_file, None), run_poll_loop=False)),
        await aiohttp_client(build_app(node.loop, access=load_access(None, users), run_poll_loop=False)),
    ]
    caplog.set_level(logging.DEBUG)
    for each in clients:
        for scheme in ("Bearer", "Basic"):
            reader, writer = await asyncio.open_connection(each.host, each.port)
            writer.write(
                b"GET /pods HTTP/1.1\r\nHost: x\r\nAuthorization: %s \xe9\xff\r\nConnection: close\r\n\r\n"
                % scheme.encode()
            )
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:60]
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


async def test_an_api_server_that_cannot_be_reached_is_401_and_logged_once_a_second(
    node: SimulatedNode, aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    node.loop.poll_once()
    with refused_port() as port:
        client = await aiohttp_client(
            build_app(node.loop, access=reviewed(f"http://127.0.0.1:{port}"), run_poll_loop=False)
        )
        caplog.set_level(logging.INFO)
        for number in range(20):
            assert (await client.get("/pods", headers=bearer(f"token-{number}"))).status == 401
    warnings = [r for r in caplog.records if r.name == "exporter.access" and r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) and all("answering 401" in r.getMessage() for r in warnings)
    assert all(r.exc_info is None for r in warnings)


async def test_a_flood_of_new_tokens_is_not_the_api_servers_load_and_the_adapter_still_reads(
    node: SimulatedNode, kube: KubeApiServer, aiohttp_client: Any
) -> None:
    """2,000 random bearer tokens were 2,000 TokenReviews in 5 s (issue 42): new tokens are reviewed at a bounded rate,
    the others refused (401) without a review, and a token the cluster accepted lately is reviewed despite the flood."""
    node.loop.poll_once()
    clock = ManualClock()
    reviewer = TokenReviewer(api_client(base_url=kube.url), audiences=(DEFAULT_TOKEN_AUDIENCE,), clock=clock)
    client = await aiohttp_client(build_app(node.loop, access=ReviewedAccess(reviewer, [ADAPTER]), run_poll_loop=False))
    assert (await client.get("/pods", headers=bearer("adapter-token"))).status == 200
    for number in range(300):
        assert (await client.get("/pods", headers=bearer(f"random-{number}"))).status == 401
    assert reviewer.reviews == NEW_BURST and reviewer.rate_limited == 300 - (NEW_BURST - 1)  # the adapter's was one
    clock.advance(61)  # every answer cached has expired, the budget is full again, and the adapter's token known
    for number in range(300, 400):
        assert (await client.get("/pods", headers=bearer(f"random-{number}"))).status == 401
    assert reviewer.reviews == 2 * NEW_BURST
    assert (await client.get("/pods", headers=bearer("adapter-token"))).status == 200, "reviewed despite the flood"
    assert reviewer.reviews == 2 * NEW_BURST + 1


async def test_the_command_line_builds_the_check_from_a_kubeconfig(
    node: SimulatedNode, kube: KubeApiServer, aiohttp_client: Any, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: '{kube.url}'}}}}]\n"
        "users: [{name: t, user: {token: exporter}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    access = load_reviewed_access(f" {ADAPTER} , ", DEFAULT_TOKEN_AUDIENCE, kubeconfig)
    assert access.allowed == {ADAPTER}
    node.loop.poll_once()
    client = await aiohttp_client(build_app(node.loop, access=access, run_poll_loop=False))
    assert (await client.get("/pods", headers=bearer("adapter-token"))).status == 200
    assert (await client.get("/pods", headers=bearer("tenant-token"))).status == 403
    with pytest.raises(ValueError, match=r"^--auth-allowed-users: give at least one user name$"):
        load_reviewed_access(" , ", DEFAULT_TOKEN_AUDIENCE, kubeconfig)


GOOD_HEADERS = ["Bearer s3cr3t", "bearer  s3cr3t ", "Basic bG9jYWw6aHVudGVyMg=="]


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=40), st.sampled_from(GOOD_HEADERS)))
async def test_any_authorization_header_is_a_decision_never_an_error(header: str) -> None:
    """Whatever a client puts in `Authorization` (aiohttp hands over any text, surrogates included), the checks
    answer 200 or 401; 200 only for the exact credentials."""
    bearer = BearerAccess(hashlib.sha256(b"s3cr3t").digest())
    basic = BasicAccess({"local": hashlib.sha256(b"hunter2").digest()})
    for access, good in ((bearer, ("bearer", "s3cr3t")), (basic, ("basic", "bG9jYWw6aHVudGVyMg=="))):
        decision = await access.decide(header)
        scheme, _, credentials = header.strip().partition(" ")
        assert decision.status == (200 if (scheme.lower(), credentials.strip()) == good else 401), header
    for surrogate in ("\udce9", "\udcff\udcfe"):
        assert (await bearer.decide(f"Bearer {surrogate}")).status == 401
        assert (await basic.decide(f"Basic {surrogate}")).status == 401
