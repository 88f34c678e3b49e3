"""A source per metric: each metric answered by the source it names, the rest by --source; both side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from adapter.api.selfmetrics import AdapterMetrics
from adapter.application import build_app
from adapter.metrics_config import MetricDefinition, MetricsConfigError, parse_metrics_config
from adapter.parts import build_source, served_configuration
from adapter.settings import load_settings
from adapter.sources.aggregation import pod_value
from adapter.sources.direct import DirectSource
from adapter.sources.metricsource import DeviceValue, PodKey, PodSample, ServedValue
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.routing import SourcesByMetric
from tests.adapter.simcluster import Cluster
from toolkit.pods import Pod

MIXED = """
metrics:
  - name: gpu_utilization
    figure: utilization_percent
    combine: mean
  - name: gpu_power_watts
    figure: power_watts
    combine: sum
    source: prometheus
    prometheus:
      query: gpu_pulse_pod_gpu_power_watts{$namespace_matcher}
      sample_time_query: max by (namespace, pod) (timestamp(gpu_pulse_pod_gpu_power_watts{$namespace_matcher}))
"""


class Constant:
    """A source answering every pod with one value, and saying whether it is ready."""

    def __init__(self, name: str, value: Decimal, ready: bool = True) -> None:
        self.name = name
        self.value = value
        self._ready = ready
        self.asked: list[str] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def ready(self) -> bool:
        return self._ready

    def serves(self, metric: MetricDefinition) -> bool:
        return True

    async def samples(self, metric: MetricDefinition, pods: Sequence[Pod]) -> Mapping[PodKey, PodSample]:
        self.asked.append(metric.name)
        return {p.key: PodSample(p.namespace, p.name, (DeviceValue(self.value, {}),), 1e9, 60.0) for p in pods}

    async def pod_values(self, metric: MetricDefinition, pods: Sequence[Pod]) -> list[ServedValue | None]:
        samples = await self.samples(metric, pods)
        return [pod_value(metric, samples[p.key]) for p in pods]


async def test_each_metric_is_answered_by_its_source(cluster: Cluster, aiohttp_client: Any) -> None:
    config = parse_metrics_config(MIXED)
    direct, prometheus = Constant("direct", Decimal(42)), Constant("prometheus", Decimal(7), ready=False)
    source = SourcesByMetric({"direct": direct, "prometheus": prometheus}, default="direct")
    app = build_app(config=config, pods=cluster.pods, source=source, metrics=AdapterMetrics("direct"))
    client = await aiohttp_client(app)
    v2 = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/infer-a"
    assert (await (await client.get(f"{v2}/gpu_utilization")).json())["items"][0]["value"] == "42"
    assert (await (await client.get(f"{v2}/gpu_power_watts")).json())["items"][0]["value"] == "7"
    assert direct.asked == ["gpu_utilization"] and prometheus.asked == ["gpu_power_watts"]
    # each source its own readiness check
    ready = await client.get("/readyz?verbose")
    text = await ready.text()
    assert ready.status == 503
    assert "metrics-source-direct ok" in text and "metrics-source-prometheus failed" in text


def test_the_global_source_is_the_default_for_metrics_that_do_not_say(tmp_path: Path) -> None:
    file = tmp_path / "metrics.yaml"
    file.write_text(MIXED)
    settings = load_settings([f"--config={file}", "--prometheus-url=http://prometheus:9090"], {})
    config, rules = served_configuration(settings)
    assert rules is None
    assert config.source_names(settings.source) == {"direct", "prometheus"}
    source = build_source(settings, _NoPods(), AdapterMetrics("direct"), config)
    assert isinstance(source, SourcesByMetric)
    assert isinstance(source.source_for(config.metrics[0]), DirectSource)
    assert isinstance(source.source_for(config.metrics[1]), PrometheusSource)
    # with --source prometheus the one without a prometheus query cannot be answered: refused at start
    settings = load_settings([f"--config={file}", "--prometheus-url=http://p:9090", "--source=prometheus"], {})
    with pytest.raises(MetricsConfigError, match="needs a prometheus query for gpu_utilization"):
        served_configuration(settings)


def test_a_metric_naming_prometheus_needs_its_query_and_url(tmp_path: Path) -> None:
    with pytest.raises(MetricsConfigError, match="source: prometheus needs a prometheus block"):
        parse_metrics_config("metrics: [{name: m, figure: power_watts, combine: sum, source: prometheus}]")
    file = tmp_path / "metrics.yaml"
    file.write_text(MIXED)
    with pytest.raises(MetricsConfigError, match="gpu_power_watts say source: prometheus: give --prometheus-url"):
        served_configuration(load_settings([f"--config={file}"], {}))


class _NoPods:
    synced = True
    size = 0

    def pods_in_namespace(self, namespace: str, selector: Any = None) -> Sequence[Pod]:
        return ()

    def all_pods(self) -> Sequence[Pod]:
        return ()

    def get(self, namespace: str, name: str) -> Pod | None:
        return None

    def get_many(self, keys: Sequence[PodKey]) -> list[Pod | None]:
        return [None for _ in keys]

    def pods_on_node(self, node: str) -> Sequence[Pod]:
        return ()

    def pods_owned_by(self, namespace: str, kind: str, name: str) -> Sequence[Pod]:
        return ()
