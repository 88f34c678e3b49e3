"""The real `gpu-pulse-adapter` process over TLS, asked by the real `kubectl get --raw` with a client certificate.

The adapter watches the Kubernetes API test server, reads figures from simulated node endpoints, authenticates kubectl
by its client certificate and authorizes it by SubjectAccessReview, as an aggregated API server in a cluster does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapter.quantity import parse_quantity
from simulation.kubeapi import AccessGrant
from simulation.kubeconfig import write_kubeconfig
from tests.adapter.simcluster import Cluster
from tests.support.exporters import SERVING_LINE
from tests.support.tools import require_tool
from tests.support.waiting import patience
from toolkit.certs import CertificateAuthority

REPO = Path(__file__).resolve().parents[2]
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
POLICY = [
    AccessGrant(user=HPA_USER, api_group="custom.metrics.k8s.io", verb="get"),
    AccessGrant(user=HPA_USER, api_group="external.metrics.k8s.io"),
    AccessGrant(group="system:authenticated", path="/apis*", verb="get"),
    AccessGrant(group="system:authenticated", path="/openapi/*", verb="get"),
]


@dataclass
class RunningAdapter:
    url: str
    workdir: Path
    ca: CertificateAuthority
    process: asyncio.subprocess.Process

    def kubeconfig(self, user: str, groups: tuple[str, ...] = (), ca: CertificateAuthority | None = None) -> Path:
        client = (ca or self.ca).issue_client(user, groups)
        return write_kubeconfig(
            self.workdir / f"{user.replace(':', '_')}.kubeconfig",
            server=self.url,
            ca_pem=self.ca.cert_pem,
            client_cert_pem=client.cert_pem,
            client_key_pem=client.key_pem,
        )

    async def kubectl(self, kubeconfig: Path, path: str) -> tuple[int, Any, str]:
        process = await asyncio.create_subprocess_exec(
            require_tool("kubectl"),
            "--kubeconfig",
            str(kubeconfig),
            "get",
            "--raw",
            path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        code = await process.wait()
        return code, json.loads(out) if code == 0 else None, err.decode()


@pytest.fixture
async def adapter(cluster: Cluster, tmp_path: Path) -> AsyncIterator[RunningAdapter]:
    cluster.kube.set_authorization(POLICY)
    ca = CertificateAuthority.create("test-ca")
    serving = ca.issue_server(["127.0.0.1", "localhost"])
    serving.write(tmp_path / "serving.crt", tmp_path / "serving.key")
    (tmp_path / "client-ca.crt").write_bytes(ca.cert_pem)
    write_kubeconfig(tmp_path / "adapter.kubeconfig", server=cluster.kube.url)
    endpoints = ",".join(f"{name}={node.url}" for name, node in cluster.nodes.items())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["GPU_PULSE_ADAPTER_EXPORTER_ENDPOINTS"] = endpoints  # a variable, beside the flags
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adapter.cli",
        "--listen=127.0.0.1:0",  # its "serving" line says which port it bound
        "--log-level=info",
        f"--kubeconfig={tmp_path / 'adapter.kubeconfig'}",
        f"--tls-cert-file={tmp_path / 'serving.crt'}",
        f"--tls-private-key-file={tmp_path / 'serving.key'}",
        f"--client-ca-file={tmp_path / 'client-ca.crt'}",
        f"--requestheader-client-ca-file={tmp_path / 'client-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        cwd=REPO,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    log: list[str] = []

    async def serving_address(stderr: asyncio.StreamReader) -> str:
        while line := (await stderr.readline()).decode(errors="replace"):
            log.append(line)
            if found := re.search(SERVING_LINE, line):
                return found.group(1)
        pytest.fail(f"the adapter exited: {''.join(log)}")

    async def drain(stderr: asyncio.StreamReader) -> None:  # so that its log never fills the pipe
        while line := await stderr.readline():
            log.append(line.decode(errors="replace"))

    url = await asyncio.wait_for(serving_address(process.stderr), patience(60))
    draining = asyncio.create_task(drain(process.stderr))
    running = RunningAdapter(url, tmp_path, ca, process)
    trust = ssl.create_default_context(cadata=ca.cert_pem.decode())
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            if process.returncode is not None:
                await draining
                pytest.fail(f"the adapter exited: {''.join(log)}")
            try:
                async with session.get(f"{running.url}/readyz", ssl=trust) as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the adapter never became ready")
    try:
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0  # a clean stop on SIGTERM
        await draining


async def test_kubectl_reads_custom_and_external_metrics_and_discovery(adapter: RunningAdapter) -> None:
    kubeconfig = adapter.kubeconfig(HPA_USER)
    query = "namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dinfer"
    code, body, err = await adapter.kubectl(kubeconfig, f"/apis/custom.metrics.k8s.io/v1beta2/{query}")
    assert code == 0, err
    assert body["kind"] == "MetricValueList"
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == {"infer-a": "80", "infer-b": "50250m"}
    code, body, err = await adapter.kubectl(kubeconfig, f"/apis/custom.metrics.k8s.io/v1beta1/{query}")
    assert code == 0, err
    assert [i["metricName"] for i in body["items"]] == ["gpu_utilization", "gpu_utilization"]
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/namespace_gpu_utilization?labelSelector=app%3Dinfer"
    code, body, err = await adapter.kubectl(kubeconfig, path)
    assert code == 0, err
    assert parse_quantity(body["items"][0]["value"]) == Decimal("60.167")  # (80 + 40 + 60.5) / 3, to the milli
    code, body, err = await adapter.kubectl(kubeconfig, "/apis/custom.metrics.k8s.io/v1beta2")
    assert code == 0, err
    assert "pods/gpu_utilization" in {r["name"] for r in body["resources"]}
    code, body, err = await adapter.kubectl(kubeconfig, "/apis")
    assert code == 0, err
    assert {g["name"] for g in body["groups"]} == {"custom.metrics.k8s.io", "external.metrics.k8s.io"}
    code, body, err = await adapter.kubectl(kubeconfig, "/openapi/v2")
    assert code == 0, err
    assert body["swagger"] == "2.0"


async def test_kubectl_is_refused_without_credentials_or_permission(adapter: RunningAdapter) -> None:
    wildcard = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization"
    curious = adapter.kubeconfig("curious-user", ("developers",))
    code, _, err = await adapter.kubectl(curious, wildcard)
    assert code != 0
    assert "Forbidden" in err
    assert "curious-user" in err
    assert "pods/gpu_utilization" in err
    code, _, err = await adapter.kubectl(curious, "/apis/custom.metrics.k8s.io/v1beta2")  # discovery is allowed
    assert code == 0, err
    stranger = adapter.kubeconfig(HPA_USER, ca=CertificateAuthority.create("another-ca"))
    code, _, err = await adapter.kubectl(stranger, wildcard)
    assert code != 0  # a certificate from an unknown CA does not get through the TLS handshake
    anonymous = write_kubeconfig(
        adapter.workdir / "anonymous.kubeconfig", server=adapter.url, ca_pem=adapter.ca.cert_pem, token="not-a-token"
    )
    code, _, err = await adapter.kubectl(anonymous, wildcard)
    assert code != 0
    assert "Unauthorized" in err
    trust = ssl.create_default_context(cadata=adapter.ca.cert_pem.decode())
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{adapter.url}/metrics", ssl=trust) as response:  # always allowed, by default
            assert response.status == 200
            assert "gpu_pulse_adapter_request_duration_seconds" in await response.text()
