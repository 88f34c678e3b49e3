"""`gpu-pulse-adapter --demo --keda-listen ...`: the demo prints where KEDA's external scaler serves and a trigger, and
a client that owes nothing to the adapter's stubs (tests.support.keda) drives it as KEDA would: the spec, a value equal
to the sum of the same pods' custom-metrics values at the same moment (one workload on whole GPUs, MIG and a shared
GPU; one only on a shared GPU), and an idle workload's activity going false, as KEDA needs to scale it to zero."""

from __future__ import annotations

import json
import re
import shlex
import signal
import time
import urllib.parse
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from adapter.quantity import parse_quantity
from tests.adapter.test_demo_run import RunningDemo, running_demo, stops_cleanly
from tests.support import keda
from tests.support.kubectl import kubectl_get_raw
from tests.support.tools import require_tool
from tests.support.waiting import holds_within, patience

pytestmark = pytest.mark.timeout(180)

KEDA_LINE = re.compile(r"KEDA external scaler \(gRPC externalscaler\.ExternalScaler\) on (\S+), plaintext; a trigger:")
STAMP = re.compile(r"^\S+Z ")


def printed_trigger(demo: RunningDemo) -> tuple[dict[str, Any], str]:
    """The trigger the demo printed under its KEDA line, as YAML to paste (no time stamp on its lines, unlike the log
    lines around it), and the line after it, which says how to call the scaler."""
    lines = demo.output().splitlines()
    start = next(i for i, line in enumerate(lines) if KEDA_LINE.search(line)) + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(line)
    (trigger,) = yaml.safe_load("\n".join(block))
    return dict(trigger), STAMP.sub("", lines[start + len(block)], count=1)


def printed_call(line: str) -> tuple[str, dict[str, Any]]:
    """The grpcurl command the demo prints: its address and the ScaledObjectRef it sends to IsActive."""
    words = shlex.split(line.partition("grpcurl ")[2])
    assert words[-1] == "externalscaler.ExternalScaler/IsActive" and "-plaintext" in words, words
    request: dict[str, Any] = json.loads(words[words.index("-d") + 1])
    proto = Path(words[words.index("-import-path") + 1]) / words[words.index("-proto") + 1]
    assert proto.is_file(), proto
    return words[-2], request


def custom_values(demo: RunningDemo, selector: str) -> dict[str, tuple[str, Decimal]]:
    """Each selected pod's gpu_utilization, as the HPA's question gets it: name -> (timestamp, value)."""
    query = urllib.parse.quote(selector, safe="")
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/gpu_utilization?labelSelector={query}"
    result = kubectl_get_raw(demo.kubeconfig, path)
    assert result.code == 0, result.stderr
    return {i["describedObject"]["name"]: (i["timestamp"], parse_quantity(i["value"])) for i in result.body["items"]}


def equals_the_custom_metrics_sum(
    demo: RunningDemo, client: keda.ScalerClient, metadata: dict[str, str], pods: int
) -> None:
    """GetMetrics between two identical custom-metrics answers that list `pods` pods (the figures did not move in
    between) equals their sum. A pod whose figure is not fresh at that moment (on a busy machine an exporter's poll can
    run later than the freshness bound, adapter/sources/freshness.py) is left out of an answer, so answers are asked
    until a pair lists all the pods, and that pair is judged."""
    counted: list[int] = []
    deadline = time.monotonic() + patience(30)
    while time.monotonic() < deadline:
        before = custom_values(demo, metadata["podSelector"])
        answer = client.get_metrics(keda.metrics_request("demo", metadata, metadata["metric"]))
        after = custom_values(demo, metadata["podSelector"])
        counted.append(len(after))
        if before == after and len(before) == pods:
            (value,) = answer.metricValues
            assert value.metricValueFloat == float(sum(v for _, v in before.values()))
            return
        time.sleep(0.2)
    pytest.fail(f"no two equal custom-metrics answers listing {pods} pods; the answers listed {counted}")


def test_the_demo_serves_kedas_external_scaler(tmp_path: Path) -> None:
    require_tool("kubectl")
    # port 0: the demo prints the port its scaler bound
    flags = ("--keda-listen=127.0.0.1:0", "--keda-deactivate-after=3", "--keda-activity-interval=0.5")
    with running_demo(tmp_path, *flags) as demo:
        found = KEDA_LINE.search(demo.output())
        assert found and re.fullmatch(r"127\.0\.0\.1:[1-9][0-9]*", found.group(1)), demo.output()
        trigger, call = printed_trigger(demo)
        assert trigger["type"] == "external-push"
        metadata = trigger["metadata"]
        assert metadata["scalerAddress"] == found.group(1)
        address, request = printed_call(call)
        assert address == found.group(1) and request["scalerMetadata"] == metadata
        with grpc.insecure_channel(metadata["scalerAddress"]) as channel:
            client = keda.ScalerClient.on(channel)
            (spec,) = client.get_metric_spec(keda.scaled_object("demo", metadata)).metricSpecs
            assert (spec.metricName, spec.targetSizeFloat) == ("gpu_utilization", 60.0)
            # llm-inference: whole GPUs, a MIG instance and a time-sliced GPU; embeddings: only the time-sliced GPU
            equals_the_custom_metrics_sum(demo, client, metadata, pods=4)
            shared = metadata | {"podSelector": "app=embeddings", "activationTarget": "30"}
            equals_the_custom_metrics_sum(demo, client, shared, pods=2)
            assert client.is_active(keda.scaled_object("demo", metadata)).result is True
            asked = keda.scaled_object(request["namespace"], request["scalerMetadata"], request["name"])
            assert client.is_active(asked).result is True  # what the printed command sends
            # the live summary says what the scaler says of the printed trigger
            assert holds_within(lambda: "KEDA trigger (activationTarget 5): active" in demo.output(), within=30)
            # embeddings run at 5-17 %, below their activation target: first seen, they count as active until they
            # have been quiet for --keda-deactivate-after; then KEDA may scale them to zero
            stream = client.stream_is_active(keda.scaled_object("demo", shared), timeout=60)
            assert next(stream).result is True
            assert next(stream).result is False
            stream.cancel()
            assert client.is_active(keda.scaled_object("demo", shared)).result is False
            # scaled to zero: no pod is left to be busy, so the trigger is inactive at once and its value is 0
            gone = metadata | {"podSelector": "app=scaled-to-zero"}
            assert client.is_active(keda.scaled_object("demo", gone)).result is False
            assert client.get_metrics(keda.metrics_request("demo", gone, "")).metricValues[0].metricValueFloat == 0
        stops_cleanly(demo, signal.SIGTERM)
