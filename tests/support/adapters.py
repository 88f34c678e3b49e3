"""Real `gpu-pulse-adapter` processes over TLS, and clients that talk to them as the aggregator, the HPA or kubectl
would: with a client certificate from the test cluster's CA. Each binds port 0 (`--listen`, and `--keda-listen` when
given one) and its addresses are read back from its log (tests/support/loopback.py says why)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from simulation.kubeapi import AccessGrant
from simulation.kubeconfig import write_kubeconfig
from tests.support.exporters import SERVING_LINE
from tests.support.processes import ChildProcesses, python_module
from tests.support.waiting import patience
from toolkit.certs import CertificateAuthority

HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
KEDA_USER = "system:serviceaccount:keda:keda-operator"  # the user KEDA's client certificate names
# what a cluster's RBAC grants the HPA on the metrics APIs, KEDA's scaler calls what the chart's ClusterRole
# gpu-pulse-keda-scaler grants them (get on custom.metrics.k8s.io), and discovery to everyone authenticated
METRICS_POLICY = (
    AccessGrant(user=HPA_USER, api_group="custom.metrics.k8s.io", verb="get"),
    AccessGrant(user=KEDA_USER, api_group="custom.metrics.k8s.io", verb="get"),
    AccessGrant(user=HPA_USER, api_group="external.metrics.k8s.io", verb="list"),
    AccessGrant(group="system:authenticated", path="/apis*", verb="get"),
    AccessGrant(group="system:authenticated", path="/openapi/*", verb="get"),
)


@dataclass(frozen=True)
class ClientIdentity:
    user: str
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class ClusterTrust:
    """The test cluster's CA (client CA and front-proxy CA at once) and the adapters' serving certificate."""

    workdir: Path
    ca: CertificateAuthority
    ca_file: Path
    serving_cert: Path
    serving_key: Path

    @classmethod
    def create(cls, workdir: Path) -> ClusterTrust:
        workdir.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority.create("gpu-pulse-test-ca")
        ca_file = workdir / "ca.crt"
        ca_file.write_bytes(ca.cert_pem)
        serving = ca.issue_server(["127.0.0.1", "localhost"])
        serving.write(workdir / "serving.crt", workdir / "serving.key")
        return cls(workdir, ca, ca_file, workdir / "serving.crt", workdir / "serving.key")

    def client(self, user: str, groups: Sequence[str] = ()) -> ClientIdentity:
        issued = self.ca.issue_client(user, groups)
        stem = user.replace(":", "_")
        issued.write(self.workdir / f"{stem}.crt", self.workdir / f"{stem}.key")
        return ClientIdentity(user, self.workdir / f"{stem}.crt", self.workdir / f"{stem}.key")

    def kubeconfig(self, identity: ClientIdentity, server: str, name: str) -> Path:
        return write_kubeconfig(
            self.workdir / f"{name}.kubeconfig",
            server=server,
            ca_pem=self.ca.cert_pem,
            client_cert_pem=identity.cert_file.read_bytes(),
            client_key_pem=identity.key_file.read_bytes(),
        )

    def context(self, identity: ClientIdentity | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if identity is not None:
            context.load_cert_chain(identity.cert_file, identity.key_file)
        return context


# adapter/server.py logs where KEDA's external scaler listens once it serves
KEDA_SERVING_LINE = r"serving KEDA's external scaler \S+ on ([0-9.]+:[0-9]+)"


@dataclass(frozen=True)
class AdapterProcess:
    name: str
    processes: ChildProcesses = field(repr=False, compare=False)
    max_age: float
    trust: ClusterTrust

    @cached_property
    def url(self) -> str:
        """Its address, from its log once it serves (waits for that)."""
        return self.processes.wait_for_line(self.name, SERVING_LINE, patience(60)).group(1)

    @cached_property
    def keda_address(self) -> str:
        """host:port of KEDA's external scaler (started with `--keda-listen=127.0.0.1:0`), once it serves."""
        return self.processes.wait_for_line(self.name, KEDA_SERVING_LINE, patience(60)).group(1)

    def get(self, path: str, identity: ClientIdentity | None = None, timeout: float = 10) -> tuple[int, Any]:
        """(HTTP status, body): parsed JSON when it is JSON, else the text."""
        request = urllib.request.Request(f"{self.url}{path}", headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.trust.context(identity)) as response:
                return response.status, _body(response.read(), response.headers.get_content_type())
        except urllib.error.HTTPError as error:
            return error.code, _body(error.read(), error.headers.get_content_type())

    def ready(self) -> bool:
        status, _ = self.get("/readyz", timeout=2)
        return status == 200


def _body(data: bytes, content_type: str) -> Any:
    return json.loads(data) if content_type == "application/json" else data.decode(errors="replace")


def adapter_ready(processes: ChildProcesses, adapter: AdapterProcess) -> bool:
    """Whether the adapter answers /readyz with 200 (AssertionError with its log if it exited)."""
    processes.check_running(adapter.name)
    return adapter.ready()


def start_adapter(
    processes: ChildProcesses,
    name: str,
    trust: ClusterTrust,
    kube_api_url: str,
    *,
    max_age: float,
    port: int | None = None,
    args: Sequence[str] = (),
) -> AdapterProcess:
    """Start the adapter CLI against the Kubernetes API test server, serving TLS with the cluster's certificates,
    authenticating client certificates of the cluster CA (the aggregator's front proxy by its CN). Without `port` it
    binds port 0; it logs at level info, where its "serving" line says where it listens."""
    kube_config = write_kubeconfig(trust.workdir / f"{name}-kube-api.kubeconfig", server=kube_api_url)
    argv = python_module(
        "adapter.cli",
        f"--listen=127.0.0.1:{port or 0}",
        f"--kubeconfig={kube_config}",
        f"--tls-cert-file={trust.serving_cert}",
        f"--tls-private-key-file={trust.serving_key}",
        f"--client-ca-file={trust.ca_file}",
        f"--requestheader-client-ca-file={trust.ca_file}",
        "--requestheader-allowed-names=front-proxy-client",
        f"--max-age={max_age:g}",
        "--log-level=info",
        *args,
    )
    processes.start(name, argv)
    return AdapterProcess(name, processes, max_age, trust)
