"""Serving TLS (given or self-signed certificates), kubeconfigs and API connections, checked by real TLS clients."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import stat
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes.client import CoreV1Api

from adapter.podcache.cache import PodCache
from simulation.kubeapi import KubeApiServer
from simulation.kubeconfig import write_kubeconfig
from toolkit.certs import CertificateAuthority
from toolkit.kubeclient import KubeConnectionError, api_client
from toolkit.selfsigned import build_server_ssl_context, service_hostnames
from toolkit.tls import TLSConfigError


def sans(cert_file: Path) -> set[str]:
    certificate = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n) for n in names.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in names.get_values_for_type(x509.IPAddress)
    }


async def handshake(context: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str) -> str:
    """Serve one tiny app with `context`; fetch `/` with `client`, checking the name `server_hostname`."""

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=server_hostname)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = await reader.read()
        writer.close()
        return reply.decode().rsplit("\r\n", 1)[-1]
    finally:
        await runner.cleanup()


async def test_self_signed_certificate_serves_and_is_kept(tmp_path: Path) -> None:
    names = service_hostnames("gpu-pulse-adapter", "gpu-pulse")
    context = build_server_ssl_context(None, None, tmp_path, [], alt_names=names)
    cert_file, key_file = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert sans(cert_file) == {"localhost", "127.0.0.1", *names}
    assert "gpu-pulse-adapter.gpu-pulse.svc" in names

    client = ssl.create_default_context(cafile=cert_file)
    for host in ("localhost", "127.0.0.1", "gpu-pulse-adapter.gpu-pulse.svc"):
        assert await handshake(context, client, host) == "hello"
    with pytest.raises(ssl.SSLCertVerificationError):
        await handshake(context, client, "elsewhere.example")

    # a restart reuses the certificate (the APIService caBundle stays valid)...
    before = cert_file.read_bytes()
    build_server_ssl_context(None, None, tmp_path, [], alt_names=names)
    assert cert_file.read_bytes() == before
    # ...unless it lacks a name now asked for, or is about to expire
    build_server_ssl_context(None, None, tmp_path, [], alt_names=[*names, "extra.example"])
    assert "extra.example" in sans(cert_file)
    renewed = cert_file.read_bytes()
    build_server_ssl_context(
        None,
        None,
        tmp_path,
        [],
        alt_names=[*names, "extra.example"],
        clock=lambda: datetime.now(UTC) + timedelta(days=365),
    )
    assert cert_file.read_bytes() != renewed


async def test_given_certificate_and_client_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("serving-ca")
    ca.issue_server(["adapter.example", "127.0.0.1"]).write(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ca = CertificateAuthority.create("client-ca")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    context = build_server_ssl_context(
        tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "unused", [tmp_path / "client-ca.crt"]
    )
    assert context.verify_mode == ssl.CERT_OPTIONAL  # requested, not required
    assert not (tmp_path / "unused").exists()

    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    assert await handshake(context, client, "adapter.example") == "hello"  # no client certificate: still served
    client_ca.issue_client("bob").write(tmp_path / "bob.crt", tmp_path / "bob.key")
    client.load_cert_chain(tmp_path / "bob.crt", tmp_path / "bob.key")
    assert await handshake(context, client, "adapter.example") == "hello"


def test_bad_tls_configuration_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="must be given together"):
        build_server_ssl_context(tmp_path / "tls.crt", None, tmp_path, [])
    with pytest.raises(TLSConfigError, match=r"^--tls-cert-file .*missing\.crt: cannot read: No such file") as caught:
        build_server_ssl_context(tmp_path / "missing.crt", tmp_path / "missing.key", tmp_path, [])
    assert "\n" not in str(caught.value)
    with pytest.raises(TLSConfigError, match=r"^--client-ca-file .*no-ca\.crt: cannot read"):
        build_server_ssl_context(None, None, tmp_path, [tmp_path / "no-ca.crt"])
    (tmp_path / "garbage-ca.crt").write_text("not a certificate")
    with pytest.raises(TLSConfigError, match="cannot load the client CA file"):
        build_server_ssl_context(None, None, tmp_path, [tmp_path / "garbage-ca.crt"])
    with pytest.raises(TLSConfigError, match="cannot load a client CA bundle"):
        build_server_ssl_context(None, None, tmp_path, [], client_ca_data=["-----BEGIN CERTIFICATE-----\nAAAA\n"])


@pytest.fixture
async def tls_kube(tmp_path: Path) -> AsyncIterator[tuple[KubeApiServer, CertificateAuthority]]:
    ca = CertificateAuthority.create("cluster-ca")
    ca.issue_server(["127.0.0.1", "localhost"]).write(tmp_path / "kube.crt", tmp_path / "kube.key")
    context = build_server_ssl_context(tmp_path / "kube.crt", tmp_path / "kube.key", tmp_path, [])
    server = KubeApiServer(client_token="adapter-token")
    await server.start(ssl_context=context)
    server.put_pod("ml", "infer-0", node="gpu-1", labels={"app": "infer"})
    yield server, ca
    await server.stop()


async def test_kubeconfig_drives_the_real_client_over_tls(
    tls_kube: tuple[KubeApiServer, CertificateAuthority], tmp_path: Path
) -> None:
    server, ca = tls_kube
    kubeconfig = write_kubeconfig(tmp_path / "config", server=server.url, ca_pem=ca.cert_pem, token="adapter-token")
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    cache = PodCache(api_client(kubeconfig=kubeconfig))
    await cache.start()
    try:
        assert await cache.wait_synced(10)
        assert [p.name for p in cache.pods_on_node("gpu-1")] == ["infer-0"]
    finally:
        await cache.stop()

    direct = CoreV1Api(api_client(base_url=server.url, token="adapter-token", ca_file=tmp_path / "kube-ca.crt"))
    (tmp_path / "kube-ca.crt").write_bytes(ca.cert_pem)
    listed = await asyncio.to_thread(direct.list_pod_for_all_namespaces)
    assert [p.metadata.name for p in listed.items] == ["infer-0"]

    wrong = write_kubeconfig(tmp_path / "wrong", server=server.url, ca_pem=ca.cert_pem, token="nope")
    pods = CoreV1Api(api_client(kubeconfig=wrong))
    with pytest.raises(Exception, match="401"):
        await asyncio.to_thread(pods.list_pod_for_all_namespaces)


async def test_kubectl_reads_the_test_server(
    tls_kube: tuple[KubeApiServer, CertificateAuthority], tmp_path: Path
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI")
        pytest.skip("kubectl is not installed")
    server, ca = tls_kube
    kubeconfig = write_kubeconfig(tmp_path / "config", server=server.url, ca_pem=ca.cert_pem, token="adapter-token")
    process = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "pods",
        "--all-namespaces",
        "--selector",
        "app=infer",
        "--output",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}@{.spec.nodeName}{end}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert out.decode() == "ml/infer-0@gpu-1"


def test_connection_errors_are_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(KubeConnectionError, match="in-cluster configuration"):
        api_client()  # no service account here
    (tmp_path / "bad").write_text("kind: Config\nclusters: []\n")
    with pytest.raises(KubeConnectionError, match=r"kubeconfig .*bad"):
        api_client(kubeconfig=tmp_path / "bad")


async def test_client_certificates_are_requested_and_any_chain_reaches_the_authenticators(tmp_path: Path) -> None:
    from toolkit.clientcerts import request_unverified_client_certificates

    ca = CertificateAuthority.create("serving-ca")
    ca.issue_server(["adapter.example"]).write(tmp_path / "tls.crt", tmp_path / "tls.key")
    known = CertificateAuthority.create("known-ca")
    context = build_server_ssl_context(
        tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path, [], client_ca_data=[known.cert_pem]
    )
    stranger = CertificateAuthority.create("stranger-ca").issue_client("mallory")
    stranger.write(tmp_path / "m.crt", tmp_path / "m.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    client.load_cert_chain(tmp_path / "m.crt", tmp_path / "m.key")
    try:  # verified in the handshake: refused there (TLS 1.3 clients learn it only when they read)
        refused = await handshake(context, client, "adapter.example") != "hello"
    except (ssl.SSLError, ConnectionError):
        refused = True
    assert refused
    assert request_unverified_client_certificates(context)
    assert context.verify_mode == ssl.CERT_OPTIONAL
    context.verify_mode = ssl.CERT_OPTIONAL  # setting it again (as ssl users do) keeps the callback
    assert await handshake(context, client, "adapter.example") == "hello"


def test_a_passphrase_protected_key_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    issued = CertificateAuthority.create("ca").issue_server(["localhost"])
    (tmp_path / "tls.crt").write_bytes(issued.cert_pem)
    encrypted = serialization.BestAvailableEncryption(b"secret")
    key = issued.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encrypted)
    (tmp_path / "tls.key").write_bytes(key)
    with pytest.raises(
        TLSConfigError, match=r"^--tls-private-key-file .*tls.key: the key is protected by a passphrase"
    ):
        build_server_ssl_context(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path, ())
