"""Serving the external scaler: TLS with the adapter's certificate renewed in place, client certificates when a CA is
given, a port in use named in one line, and the --keda-* flags."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from adapter.auth.identity import Decision, RequestAttributes, ResourceAttributes, UserInfo
from adapter.cli import _keda_flags, main
from adapter.keda.activity import Hysteresis
from adapter.keda.callers import NamespaceAccess
from adapter.keda.followed_workloads import ActivityBoard
from adapter.keda.selfmetrics import KedaMetrics
from adapter.keda.servicer import ExternalScaler
from adapter.keda.serving import ExternalScalerServer, ScalerTls
from adapter.keda.workload import WorkloadReader
from adapter.metrics_config import default_metrics_config
from adapter.settings import load_settings
from adapter.sources.direct import DirectSource
from adapter.sources.nodefeeds import NodeFeeds
from tests.adapter.simcluster import Cluster
from tests.support import keda
from toolkit.certs import CertificateAuthority
from toolkit.serving import ListenError
from toolkit.settings import ListenAddress, SettingsError
from toolkit.tls import TLSConfigError

METADATA = {"metric": "gpu_utilization", "podSelector": "app=infer", "target": "60"}


def _servicer(cluster: Cluster, access: NamespaceAccess | None = None) -> ExternalScaler:
    source = DirectSource(cluster.locator(), NodeFeeds(timeout=1.0))
    reader = WorkloadReader(default_metrics_config(), cluster.pods, source)
    metrics = KedaMetrics(CollectorRegistry())
    return ExternalScaler(reader, ActivityBoard(reader, Hysteresis()), metrics, access=access)


class NamespaceRoles:
    """An Authorizer as RBAC would answer: `grants` maps a user or group to the namespaces it may read."""

    def __init__(self, grants: dict[str, set[str]]) -> None:
        self.grants = grants
        self.asked: list[tuple[UserInfo, ResourceAttributes]] = []

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        assert isinstance(attributes, ResourceAttributes)
        self.asked.append((user, attributes))
        subjects = (user.name, *user.groups)
        allowed = any(attributes.namespace in self.grants.get(subject, set()) for subject in subjects)
        return Decision(allowed, "" if allowed else "no RBAC policy matched")


def _pair(ca: CertificateAuthority, directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    ca.issue_server(["127.0.0.1", "localhost"], common_name=name).write(cert, key)
    return cert, key


async def _spec(port: int, credentials: grpc.ChannelCredentials) -> str:
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        answer = await keda.ScalerClient.on(channel).get_metric_spec(keda.scaled_object("ml", METADATA), timeout=10)
        return str(answer.metricSpecs[0].metricName)


async def test_tls_serves_the_certificate_and_its_renewal(cluster: Cluster, tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    cert, key = _pair(ca, tmp_path, "first")
    server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), tls=ScalerTls(cert, key))
    await server.start()
    try:
        trusted = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem)
        assert await _spec(server.port, trusted) == "gpu_utilization"
        other = CertificateAuthority.create("another-ca")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _spec(server.port, grpc.ssl_channel_credentials(root_certificates=other.cert_pem))
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        # cert-manager renews the pair in place, signed by another CA this time: the next handshake presents it
        renewed_cert, renewed_key = _pair(other, tmp_path, "second")
        cert.write_bytes(renewed_cert.read_bytes())
        key.write_bytes(renewed_key.read_bytes())
        assert await _spec(server.port, grpc.ssl_channel_credentials(root_certificates=other.cert_pem))
        with pytest.raises(grpc.aio.AioRpcError):
            await _spec(server.port, trusted)
    finally:
        await server.stop(grace=0.5)


async def test_client_certificates_of_the_ca_are_required(cluster: Cluster, tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    cert, key = _pair(ca, tmp_path, "serving")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    tls = ScalerTls(cert, key, client_ca_file=ca_file)
    server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), tls=tls)
    await server.start()
    try:
        keda_operator = ca.issue_client("keda-operator")
        with_certificate = grpc.ssl_channel_credentials(
            root_certificates=ca.cert_pem, private_key=keda_operator.key_pem, certificate_chain=keda_operator.cert_pem
        )
        assert await _spec(server.port, with_certificate) == "gpu_utilization"
        stranger = CertificateAuthority.create("stranger-ca").issue_client("mallory")
        for credentials in (
            grpc.ssl_channel_credentials(root_certificates=ca.cert_pem),
            grpc.ssl_channel_credentials(ca.cert_pem, stranger.key_pem, stranger.cert_pem),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _spec(server.port, credentials)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(grace=0.5)


async def test_each_call_is_authorized_for_its_namespace_as_the_certificates_user(
    cluster: Cluster, tmp_path: Path
) -> None:
    ca = CertificateAuthority.create("test-ca")
    cert, key = _pair(ca, tmp_path, "serving")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    roles = NamespaceRoles({"keda-operator": {"ml"}, "team-b": {"other"}, "ml-admins": {"ml"}})
    server = ExternalScalerServer(
        _servicer(cluster, NamespaceAccess(roles)),
        ListenAddress("127.0.0.1", 0),
        tls=ScalerTls(cert, key, client_ca_file=ca_file),
    )
    await server.start()

    def credentials(user: str, groups: tuple[str, ...] = ()) -> grpc.ChannelCredentials:
        issued = ca.issue_client(user, groups)
        return grpc.ssl_channel_credentials(ca.cert_pem, issued.key_pem, issued.cert_pem)

    try:
        assert await _spec(server.port, credentials("keda-operator")) == "gpu_utilization"
        user, attributes = roles.asked[-1]
        assert user.name == "keda-operator" and "system:authenticated" in user.groups
        assert attributes == ResourceAttributes(
            verb="get",
            group="custom.metrics.k8s.io",
            resource="pods",
            name="*",
            subresource="gpu_utilization",
            namespace="ml",
        )
        # the same CA signs the adapter's own serving certificate: its name may read nothing
        for refused_user in (credentials("mallory"), credentials("gpu-pulse-adapter"), credentials("bob", ("team-b",))):
            async with grpc.aio.secure_channel(f"127.0.0.1:{server.port}", refused_user) as channel:
                client = keda.ScalerClient.on(channel)
                for call in (
                    client.get_metric_spec(keda.scaled_object("ml", METADATA), timeout=10),
                    client.is_active(keda.scaled_object("ml", METADATA), timeout=10),
                    client.get_metrics(keda.metrics_request("ml", METADATA, "gpu_utilization"), timeout=10),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as denied:
                        await call
                    assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED, denied.value
                    assert 'in the namespace "ml"' in (denied.value.details() or "")
                stream = client.stream_is_active(keda.scaled_object("ml", METADATA), timeout=10)
                with pytest.raises(grpc.aio.AioRpcError) as denied:
                    await stream.read()
                assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        # a group (the certificate's O) is granted as RBAC grants it
        assert await _spec(server.port, credentials("carol", ("ml-admins",))) == "gpu_utilization"
    finally:
        await server.stop(grace=0.5)


def test_an_unusable_certificate_is_one_line_naming_the_flags(cluster: Cluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate")
    with pytest.raises(TLSConfigError, match="--tls-cert-file") as refused:
        ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", 0), tls=ScalerTls(bad, bad))
    assert "\n" not in str(refused.value)


async def test_a_port_in_use_is_a_listen_error_naming_the_flag(cluster: Cluster) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ExternalScalerServer(_servicer(cluster), ListenAddress("127.0.0.1", port))
        with pytest.raises(ListenError, match=rf"^--keda-listen 127\.0\.0\.1:{port}: cannot listen"):
            await server.start()
    await asyncio.sleep(0)


def test_the_demo_refuses_a_keda_port_in_use_in_one_line_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--demo", f"--keda-listen=127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err == f"gpu-pulse-adapter: error: --keda-listen 127.0.0.1:{port}: cannot listen: Address already in use\n"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--keda-tls"], "--keda-tls needs --keda-listen"),
        (["--keda-listen=:9443", "--keda-client-ca-file=ca.crt"], "--keda-client-ca-file needs --keda-tls"),
        (["--keda-listen=nowhere"], "--keda-listen: expected host:port"),
        (["--keda-listen=:9443", "--keda-deactivate-after=-1"], "--keda-deactivate-after"),
        (["--keda-listen=:9443", "--keda-max-streams=0"], "--keda-max-streams"),
        (["--keda-listen=:9443", "--max-connections=64"], "--keda-max-connections 64: must be less than --max-conn"),
    ],
)
def test_flags_that_cannot_work_are_refused(argv: list[str], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_settings(argv, {})


def test_defaults_and_the_demos_copy_of_the_flags() -> None:
    settings = load_settings([], {})
    assert settings.keda_listen is None and not settings.keda_tls
    assert (settings.keda_activate_after, settings.keda_deactivate_after) == (0.0, 60.0)
    chosen = load_settings(["--keda-listen=127.0.0.1:9443", "--keda-tls", "--keda-deactivate-after=5"], {})
    assert _keda_flags(chosen) == ("--keda-deactivate-after=5.0", "--keda-listen=127.0.0.1:9443", "--keda-tls")
    assert load_settings(list(_keda_flags(chosen)), {}) == chosen
    from_environment = load_settings([], {"GPU_PULSE_ADAPTER_KEDA_LISTEN": "127.0.0.1:9443"})
    assert from_environment.keda_listen == ListenAddress("127.0.0.1", 9443)


def test_the_adapter_imports_grpc_only_to_serve_kedas_scaler() -> None:
    """gRPC costs tens of milliseconds and megabytes to import: an adapter without --keda-listen does without."""
    code = "import sys; import adapter.server, adapter.cli; print('grpc' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "False"
