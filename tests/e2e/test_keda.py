"""KEDA's external scaler on the end-to-end cluster: the direct adapter serves it over TLS, requiring client
certificates of the cluster CA, and a client that owes nothing to the adapter's stubs (tests.support.keda) drives it
as KEDA's operator would: the spec, values equal to the sum of the same pods' custom-metrics values at the same moment
(a workload on a time-sliced GPU and a whole one, one on MIG instances, one on DRA claims), and a workload whose
activity goes false while idle and stays false once KEDA has scaled it to zero."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import grpc
import pytest

from tests.e2e.answers import hpa_path
from tests.e2e.checks import answer
from tests.e2e.cluster import CHAT, EMBED, NOTEBOOK, RERANK, Workload
from tests.e2e.stack import E2EStack
from tests.support import keda
from tests.support.adapters import KEDA_USER
from tests.support.waiting import patience, wait_for

pytestmark = pytest.mark.e2e

TARGET = "60"


def metadata(workload: Workload, **more: str) -> dict[str, str]:
    return {"scalerAddress": "unused", "metric": "gpu_utilization", "podSelector": workload.selector,
            "target": TARGET} | more  # fmt: skip


@pytest.fixture(scope="module")
def client(stack: E2EStack) -> Iterator[keda.ScalerClient]:
    identity = stack.direct.trust.client(KEDA_USER)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=stack.direct.trust.ca_file.read_bytes(),
        private_key=identity.key_file.read_bytes(),
        certificate_chain=identity.cert_file.read_bytes(),
    )
    with grpc.secure_channel(stack.keda, credentials) as channel:
        yield keda.ScalerClient.on(channel)


def _custom_sum(stack: E2EStack, workload: Workload) -> tuple[dict[str, Any], Decimal]:
    items = answer(stack.direct, stack, hpa_path(workload))
    return {n: (s.timestamp, s.value) for n, s in items.items()}, sum((s.value for s in items.values()), Decimal(0))


def _sum_matches(stack: E2EStack, client: keda.ScalerClient, workload: Workload) -> int:
    """GetMetrics between two identical custom-metrics answers equals their sum; returns how many pods it summed."""
    request = keda.metrics_request(workload.namespace, metadata(workload), "gpu_utilization")
    for _ in range(30):
        before, total = _custom_sum(stack, workload)
        (value,) = client.get_metrics(request, timeout=10).metricValues
        after, _ = _custom_sum(stack, workload)
        if before == after:
            assert value.metricValueFloat == float(total), (workload.name, before)
            return len(before)
    pytest.fail(f"{workload.name}: the figures moved between every pair of custom-metrics answers")


def test_the_spec_is_the_trigger_metric_and_target(stack: E2EStack, client: keda.ScalerClient) -> None:
    (spec,) = client.get_metric_spec(keda.scaled_object("serving", metadata(CHAT)), timeout=10).metricSpecs
    assert (spec.metricName, spec.targetSizeFloat) == ("gpu_utilization", 60.0)


@pytest.mark.parametrize(
    ("workload", "pods"),
    [(CHAT, 4), (EMBED, 2), (RERANK, 2)],
    ids=["time-sliced-and-whole", "mig", "dra"],
)
def test_values_are_the_sum_of_the_custom_metrics_values(
    stack: E2EStack, client: keda.ScalerClient, workload: Workload, pods: int
) -> None:
    assert _sum_matches(stack, client, workload) == pods


def test_an_idle_workload_goes_inactive_and_stays_so_at_zero(stack: E2EStack, client: keda.ScalerClient) -> None:
    """notebook-dana runs at 5 % of a time-sliced GPU: below its activation target of 10 %, it is inactive after
    --keda-deactivate-after (3 s here); KEDA then scales it to zero, and with no pod left it stays inactive."""
    trigger = keda.scaled_object(NOTEBOOK.namespace, metadata(NOTEBOOK, activationTarget="10"))
    stream = client.stream_is_active(trigger, timeout=60)
    assert next(stream).result is True  # first seen quiet: active until it has been quiet long enough
    assert next(stream).result is False
    assert client.is_active(trigger, timeout=10).result is False
    busy = keda.scaled_object("serving", metadata(CHAT, activationTarget="10"))
    assert client.is_active(busy, timeout=10).result is True
    # KEDA scales the notebook to zero: its pod goes away (and comes back afterwards, for the tests after this one)
    pod = stack.kube.get_object("pods", NOTEBOOK.namespace, "notebook-dana")
    assert pod is not None
    stack.kube.delete_pod(NOTEBOOK.namespace, "notebook-dana")
    request = keda.metrics_request(NOTEBOOK.namespace, metadata(NOTEBOOK, activationTarget="10"), "")

    def summed() -> float:
        return client.get_metrics(request, timeout=10).metricValues[0].metricValueFloat

    try:
        wait_for(lambda: summed() == 0.0, "the adapter's pod cache without the notebook", patience(20))
        # without pods it is inactive as soon as the activity board has observed the workload again
        wait_for(lambda: client.is_active(trigger, timeout=10).result is False, "the trigger inactive", patience(10))
        stream.cancel()
    finally:
        stack.kube.put_object("pods", pod)  # the same uid: the exporter's attribution still names it
        wait_for(lambda: summed() > 0.0, "the notebook back in the adapter's pod cache", patience(20))


def test_a_client_without_a_certificate_of_the_ca_is_refused(stack: E2EStack) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=stack.direct.trust.ca_file.read_bytes())
    with grpc.secure_channel(stack.keda, credentials) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            keda.ScalerClient.on(channel).is_active(keda.scaled_object("serving", metadata(CHAT)), timeout=10)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
