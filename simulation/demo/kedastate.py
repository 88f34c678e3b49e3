"""The demo's KEDA trigger as KEDA sees it: the printed trigger's metadata, and whether the scaler calls it active
(externalscaler.ExternalScaler/IsActive, asked over gRPC as KEDA asks it), for the live summary."""

from __future__ import annotations

from pathlib import Path

import grpc

from adapter.keda.proto import externalscaler_pb2, externalscaler_pb2_grpc
from simulation.demo.scenarios import DEPLOYMENT, NAMESPACE, SELECTOR

TARGET = "60"
ACTIVATION_TARGET = "5"
ASK_TIMEOUT_SECONDS = 2.0


def trigger_metadata(address: str) -> dict[str, str]:
    """The metadata of the demo's trigger on its Deployment (what the demo prints, and what it asks the scaler)."""
    return {
        "scalerAddress": address,
        "metric": "gpu_utilization",
        "podSelector": SELECTOR,
        "target": TARGET,
        "activationTarget": ACTIVATION_TARGET,
    }


async def trigger_state(address: str, tls: bool, ca_file: Path) -> str:
    """ "active", "inactive", or "no answer: ..." (the summary goes on without it)."""
    if tls:
        credentials = grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes())
        channel = grpc.aio.secure_channel(address, credentials)
    else:
        channel = grpc.aio.insecure_channel(address)
    request = externalscaler_pb2.ScaledObjectRef(
        name=DEPLOYMENT, namespace=NAMESPACE, scalerMetadata=trigger_metadata(address)
    )
    try:
        async with channel:
            stub = externalscaler_pb2_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            answer = await stub.IsActive(request, timeout=ASK_TIMEOUT_SECONDS)
    except grpc.aio.AioRpcError as error:
        return f"no answer: {error.code().name}"
    return "active" if answer.result else "inactive"
