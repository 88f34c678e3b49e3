"""The HTTP server on the real pipeline (simulated GPUs): negotiation, gzip, /pods, health, readiness, auth, TLS."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.access import load_access
from exporter.server import build_app
from tests.support.snapshots import SimulatedNode
from toolkit.pods_contract import ANSWERED_AT_HEADER, parse_answered_at
from toolkit.serving import start_server
from toolkit.settings import ListenAddress
from toolkit.tls import server_context

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
Client = Any  # aiohttp's TestClient


@pytest.fixture
async def client(node: SimulatedNode, aiohttp_client: Any) -> AsyncIterator[Client]:
    """A client of the app; the test drives the poll loop with poll_once() (no worker thread)."""
    yield await aiohttp_client(build_app(node.loop, run_poll_loop=False), auto_decompress=False)


async def test_before_the_first_poll(client: Client) -> None:
    for path in ("/metrics", "/pods", "/readyz"):
        response = await client.get(path)
        assert response.status == 503, path
        assert "no snapshot yet" in await response.text()
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/")).status == 200


async def test_metrics_plain_text(node: SimulatedNode, client: Client) -> None:
    published = node.loop.poll_once()
    assert published is not None
    response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in response.headers
    body = await response.read()
    assert body == published.text
    assert list(text_string_to_metric_families(body.decode()))


async def test_metrics_openmetrics_and_gzip_as_prometheus_asks(node: SimulatedNode, client: Client) -> None:
    published = node.loop.poll_once()
    assert published is not None
    response = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    assert response.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert response.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in response.headers["Vary"]
    body = gzip.decompress(await response.read())
    assert body == published.openmetrics
    assert list(parse_openmetrics(body.decode()))
    again = await client.get("/metrics", headers={"Accept-Encoding": "gzip, deflate"})
    assert gzip.decompress(await again.read()) == published.text


async def test_pods_document_and_namespace_filter(node: SimulatedNode, client: Client) -> None:
    node.loop.poll_once()
    response = await client.get("/pods")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/json")
    document = json.loads(await response.read())
    assert document["api_version"] == "gpu-pulse.dev/v1"
    assert document["node"] == "sim-node"
    filtered = json.loads(await (await client.get("/pods", params={"namespace": "ml"})).read())
    assert all(p["namespace"] == "ml" for p in filtered["pods"])
    bad = await client.get("/pods", params={"namespace": "Not_A/Namespace"})
    assert bad.status == 400
    assert "namespace" in await bad.text()


async def test_pods_answers_state_the_exporters_clock(node: SimulatedNode, aiohttp_client: Any) -> None:
    """Readers measure the age of figures against the exporter's own "now" (clock skew between nodes)."""
    client = await aiohttp_client(build_app(node.loop, run_poll_loop=False, clock=lambda: 1_760_000_123.25))
    node.loop.poll_once()
    response = await client.get("/pods")
    assert response.headers[ANSWERED_AT_HEADER] == "1760000123.250"
    assert parse_answered_at(response.headers[ANSWERED_AT_HEADER]) == 1_760_000_123.25


async def test_readyz_transitions(node: SimulatedNode, client: Client) -> None:
    clock = node.clock
    assert clock is not None
    not_yet = await client.get("/readyz")
    assert not_yet.status == 503
    node.loop.poll_once()
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.text()).startswith("ok")
    clock.now += 3.5  # interval 1 s: older than 3 intervals
    stale = await client.get("/readyz")
    assert stale.status == 503
    assert "old" in await stale.text()
    assert (await client.get("/healthz")).status == 200  # alive all along
    node.loop.poll_once()
    assert (await client.get("/readyz")).status == 200


async def test_a_scrape_never_touches_nvml(node: SimulatedNode, client: Client) -> None:
    node.loop.poll_once()
    before = dict(node.simulator.call_counts)
    for _ in range(5):
        assert (await client.get("/metrics", headers={"Accept-Encoding": "gzip"})).status == 200
        assert (await client.get("/pods")).status == 200
        assert (await client.get("/readyz")).status == 200
    assert dict(node.simulator.call_counts) == before


async def test_home_page(node: SimulatedNode, client: Client) -> None:
    for _ in range(3):
        node.loop.poll_once()
    response = await client.get("/")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    page = await response.text()
    assert "sim-node" in page and "NVIDIA H100 80GB HBM3" in page
    assert page.count("<svg") >= 8  # sparklines from the collector's sample buffers
    assert 'href="/metrics"' in page and 'href="/pods"' in page
    assert "<script" not in page


# ---- authentication -------------------------------------------------------------------------------------------------
async def test_bearer_token(node: SimulatedNode, aiohttp_client: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cr3t-token\n")
    node.loop.poll_once()
    client = await aiohttp_client(build_app(node.loop, access=load_access(token_file, None), run_poll_loop=False))
    for path in ("/metrics", "/pods", "/"):
        denied = await client.get(path)
        assert denied.status == 401, path
        assert denied.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await client.get(path, headers={"Authorization": "Bearer wrong"})).status == 401
        assert (await client.get(path, headers={"Authorization": "Bearer s3cr3t-token"})).status == 200
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_basic_auth(node: SimulatedNode, aiohttp_client: Any, tmp_path: Path) -> None:
    users = tmp_path / "users"
    digest = hashlib.sha256(b"pa:ss").hexdigest()
    users.write_text(f"# scrapers\nprometheus:sha256:{digest}\nlocal:plain:hunter2\n")
    node.loop.poll_once()
    client = await aiohttp_client(build_app(node.loop, access=load_access(None, users), run_poll_loop=False))

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    assert (await client.get("/metrics", headers=basic("prometheus", "pa:ss"))).status == 200
    assert (await client.get("/metrics", headers=basic("local", "hunter2"))).status == 200
    for headers in (basic("prometheus", "wrong"), basic("nobody", "pa:ss"), {"Authorization": "Basic !!"}, {}):
        response = await client.get("/metrics", headers=headers)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Basic")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no users"),
        ("alice\n", "expected user:sha256"),
        ("alice:md5:abc\n", "unknown scheme 'md5'"),
        ("alice:sha256:abcd\n", "64 hexadecimal digits"),
    ],
)
def test_bad_basic_auth_file_is_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    users = tmp_path / "users"
    users.write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        load_access(None, users)
    assert "\n" not in str(error.value)


# ---- TLS -------------------------------------------------------------------------------------------------------------
def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


async def test_tls(node: SimulatedNode, tmp_path: Path) -> None:
    cert_file, key_file = _self_signed(tmp_path)
    node.loop.poll_once()
    app = build_app(node.loop, run_poll_loop=False)
    server = await start_server(app, ListenAddress("127.0.0.1", 0), ssl_context=server_context(cert_file, key_file))
    try:
        assert server.url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(cert_file))
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/metrics", ssl=trust) as response:
                assert response.status == 200
                assert b"DCGM_FI_DEV_GPU_UTIL" in await response.read()
            with pytest.raises(aiohttp.ClientError):
                await session.get(server.url.replace("https", "http") + "/metrics")
    finally:
        await server.stop()


def test_bad_tls_files_are_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "c").write_text("not a certificate")
    with pytest.raises(ValueError, match=r"^--tls-private-key-file .*/k: cannot read: No such file") as missing:
        server_context(tmp_path / "c", tmp_path / "k")
    (tmp_path / "k").write_text("not a key")
    with pytest.raises(ValueError, match=r"^--tls-cert-file .* / --tls-private-key-file .*: cannot load") as error:
        server_context(tmp_path / "c", tmp_path / "k")
    assert "\n" not in str(error.value) and "\n" not in str(missing.value)


async def test_the_app_runs_and_stops_the_poll_loop(node: SimulatedNode) -> None:
    app = build_app(node.loop)
    server = await start_server(app, ListenAddress("127.0.0.1", 0))
    try:
        assert node.loop.running
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                async with session.get(server.url + "/metrics") as response:
                    if response.status == 200:
                        break
                await __import__("asyncio").sleep(0.02)
            assert response.status == 200
    finally:
        await server.stop()
    assert not node.loop.running


async def test_listen_on_a_busy_port_fails_cleanly(node: SimulatedNode) -> None:
    first = await start_server(web.Application(), ListenAddress("127.0.0.1", 0))
    try:
        with pytest.raises(OSError):
            await start_server(build_app(node.loop), ListenAddress("127.0.0.1", first.port))
        assert not node.loop.running
    finally:
        await first.stop()
