"""`inference_saturation`: the largest of a pod's engine signals over their targets, in percent (adapter.saturation).

The arithmetic against its definition (hypothesis): the value is the largest term, monotone in every signal, the idle
floor and cap as configured, a missing signal's term left out and no value at all with none left. The configuration:
presets, overrides and one-line refusals. The direct source: each pod's value, its driving term as a label, the
workload's mean, and the self-metric that counts the pods each term drives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from adapter.metrics_config import MetricDefinition, MetricsConfigError, default_metrics_config, parse_metrics_config
from adapter.saturation import (
    IDLE,
    INTER_TOKEN_LATENCY,
    KV_CACHE_UTILIZATION,
    PRESETS,
    QUEUED_REQUESTS,
    TIME_TO_FIRST_TOKEN,
    GpuCap,
    LatencySlo,
    SaturationSpec,
    Signals,
    saturation,
)
from adapter.selectors import parse_selector
from adapter.sources.aggregation import served_value
from adapter.sources.direct import DirectSource
from adapter.sources.exporters import StaticExporters
from adapter.sources.feedmetrics import NodeFeedsCollector
from tests.adapter.scriptedfeeds import Figure as PodFigure
from tests.adapter.scriptedfeeds import ScriptedFeeds, node_document
from tests.adapter.simnodes import engine
from tests.support.clocks import ManualClock
from toolkit.pods import Pod

HUNDRED = Decimal(100)
FULL = SaturationSpec(
    queued_requests=Decimal(5),
    kv_cache_utilization=Decimal("0.8"),
    time_to_first_token=LatencySlo(slo_seconds=Decimal(2)),
    inter_token_latency=LatencySlo(slo_seconds=Decimal("0.1")),
)

_amounts = st.decimals(min_value=0, max_value=1000, places=3)
_fractions = st.decimals(min_value=0, max_value=1, places=6)
_percents = st.decimals(min_value=0, max_value=100, places=2)
signals = st.builds(
    Signals,
    queued_requests=st.none() | _amounts,
    kv_cache_utilization=st.none() | _fractions,
    time_to_first_token_seconds=st.none() | _amounts,
    inter_token_latency_seconds=st.none() | _amounts,
    gpu_utilization_percent=st.none() | _percents,
)
specs = st.builds(
    SaturationSpec,
    queued_requests=st.decimals(min_value="0.5", max_value=100, places=1),  # a spec has some term (else refused)
    kv_cache_utilization=st.none() | st.decimals(min_value="0.05", max_value=1, places=2),
    time_to_first_token=st.none() | st.builds(LatencySlo, slo_seconds=st.decimals(min_value="0.01", max_value=10)),
    inter_token_latency=st.none() | st.builds(LatencySlo, slo_seconds=st.decimals(min_value="0.001", max_value=1)),
    idle_gpu_utilization_percent=_percents,
    cap=st.none() | st.builds(GpuCap, gpu_utilization_below_percent=st.decimals(min_value=1, max_value=100)),
)


def terms_of(signals: Signals, spec: SaturationSpec) -> dict[str, Decimal]:
    """Each term the spec computes and the pod has a signal for, percent of its target: the definition, written out."""
    found: dict[str, Decimal] = {}
    pairs = (
        (QUEUED_REQUESTS, signals.queued_requests, spec.queued_requests),
        (KV_CACHE_UTILIZATION, signals.kv_cache_utilization, spec.kv_cache_utilization),
        (TIME_TO_FIRST_TOKEN, signals.time_to_first_token_seconds, spec.time_to_first_token),
        (INTER_TOKEN_LATENCY, signals.inter_token_latency_seconds, spec.inter_token_latency),
    )
    for term, signal, target in pairs:
        if signal is None or target is None:
            continue
        over = target.slo_seconds if isinstance(target, LatencySlo) else target
        found[term] = signal / over * HUNDRED
    return found


def idle(signals: Signals, spec: SaturationSpec) -> bool:
    gpu = signals.gpu_utilization_percent
    return gpu is not None and signals.queued_requests == 0 and gpu < spec.idle_gpu_utilization_percent


# ---- the arithmetic -------------------------------------------------------------------------------------------------
@given(signals, specs)
def test_the_value_is_the_largest_term_and_says_which(signals: Signals, spec: SaturationSpec) -> None:
    reading = saturation(signals, spec)
    terms = terms_of(signals, spec)
    if not terms:
        assert reading is None  # no term left: no value, never 0 by accident
        return
    assert reading is not None
    if idle(signals, spec):
        assert (reading.percent, reading.driver) == (Decimal(0), IDLE)
        return
    assert terms[reading.driver] == max(terms.values())
    expected = max(terms.values())
    gpu = signals.gpu_utilization_percent
    if spec.cap is not None and gpu is not None and gpu < spec.cap.gpu_utilization_below_percent:
        expected = min(expected, spec.cap.percent)
    # the reference works to 28 digits, the figure to 34
    assert abs(reading.percent - expected) <= expected * Decimal("1e-24")


_FIELDS = ("queued_requests", "kv_cache_utilization", "time_to_first_token_seconds", "inter_token_latency_seconds")


@given(signals, specs, st.sampled_from((*_FIELDS, "gpu_utilization_percent")), st.decimals(min_value=0, max_value=50))
def test_the_value_never_falls_as_a_signal_rises(
    signals: Signals, spec: SaturationSpec, field: str, more: Decimal
) -> None:
    before = getattr(signals, field)
    if before is None:
        return
    rising = replace(signals, **{field: before + more})
    if field == "kv_cache_utilization":
        rising = replace(signals, kv_cache_utilization=min(Decimal(1), before + more))
    if field == "gpu_utilization_percent":
        rising = replace(signals, gpu_utilization_percent=min(HUNDRED, before + more))
    low, high = saturation(signals, spec), saturation(rising, spec)
    if low is None:  # no term has its signal: a GPU busier or a signal higher gives none either
        assert high is None
        return
    assert high is not None
    assert high.percent >= low.percent


def test_an_idle_gpu_with_an_empty_queue_reads_idle_whatever_else_reads() -> None:
    busy_latency = Signals(
        queued_requests=Decimal(0),
        kv_cache_utilization=Decimal("0.95"),
        time_to_first_token_seconds=Decimal(9),
        gpu_utilization_percent=Decimal(2),
    )
    reading = saturation(busy_latency, FULL)
    assert reading is not None and (reading.percent, reading.driver) == (Decimal(0), IDLE)
    # a request waiting, or the GPU at work, or its utilization unknown (a MIG instance): no floor
    for pod in (
        replace(busy_latency, queued_requests=Decimal(1)),
        replace(busy_latency, gpu_utilization_percent=Decimal(5)),
        replace(busy_latency, gpu_utilization_percent=None),
    ):
        reading = saturation(pod, FULL)
        assert reading is not None and reading.driver == TIME_TO_FIRST_TOKEN and reading.percent == 450
    assert saturation(busy_latency, FULL.model_copy(update={"idle_gpu_utilization_percent": Decimal(0)})) is not None


def test_the_cap_holds_a_pod_whose_gpu_has_headroom() -> None:
    spec = FULL.model_copy(update={"cap": GpuCap(gpu_utilization_below_percent=Decimal(40), percent=Decimal(90))})
    slow = Signals(
        queued_requests=Decimal(1), time_to_first_token_seconds=Decimal(4), gpu_utilization_percent=Decimal(30)
    )
    capped = saturation(slow, spec)
    assert capped is not None and (capped.percent, capped.driver) == (Decimal(90), TIME_TO_FIRST_TOKEN)
    uncapped = saturation(replace(slow, gpu_utilization_percent=Decimal(40)), spec)
    assert uncapped is not None and uncapped.percent == 200


def test_latency_terms_apply_only_where_an_slo_is_given() -> None:
    spec = SaturationSpec(preset="vllm")
    pod = Signals(
        queued_requests=Decimal(1), kv_cache_utilization=Decimal("0.4"), time_to_first_token_seconds=Decimal(60)
    )
    reading = saturation(pod, spec.resolved())
    assert reading is not None and (reading.percent, reading.driver) == (Decimal(50), KV_CACHE_UTILIZATION)


# ---- the configuration ----------------------------------------------------------------------------------------------
def one_metric(block: str, extra: str = "") -> MetricDefinition:
    text = f"metrics:\n  - name: s\n    figure: saturation\n    combine: mean\n{extra}    saturation: {block}\n"
    return parse_metrics_config(text).metrics[0]


def test_a_preset_gives_llm_d_s_thresholds_and_fields_beside_it_override_it() -> None:
    spec = one_metric("{preset: vllm}").saturation
    assert spec is not None and (spec.queued_requests, spec.kv_cache_utilization) == (Decimal(5), Decimal("0.8"))
    spec = one_metric("{preset: vllm, queued_requests: 2, time_to_first_token: {slo_seconds: 1.5}}").saturation
    assert spec is not None and (spec.queued_requests, spec.kv_cache_utilization) == (Decimal(2), Decimal("0.8"))
    assert spec.time_to_first_token == LatencySlo(slo_seconds=Decimal("1.5"), percentile="p90")
    without_kv = one_metric("{preset: vllm, kv_cache_utilization: null}").saturation  # a term left out by name
    assert without_kv is not None and without_kv.terms() == (QUEUED_REQUESTS,)
    tgi = one_metric("{preset: tgi}").saturation
    assert tgi is not None and tgi.kv_cache_utilization is None  # TGI reports no KV cache (exporter/engines)
    assert set(PRESETS) == {"vllm", "sglang", "nim", "triton-trtllm", "dynamo", "tgi"}


@pytest.mark.parametrize(
    ("block", "extra", "problem"),
    [
        ("{}", "", "no term"),
        ("{preset: tgi, queued_requests: null}", "", "no term"),
        ("{queued_requests: 0}", "", "saturation.queued_requests: Input should be greater than 0"),
        ("{kv_cache_utilization: 80}", "", "saturation.kv_cache_utilization: Input should be less than or equal to 1"),
        ("{preset: llamacpp}", "", "saturation.preset"),
        ("{preset: vllm, target: 3}", "", "saturation.target: Extra inputs are not permitted"),
        ("{time_to_first_token: {slo_seconds: 1, percentile: p95}}", "", "percentile"),
        (
            "{preset: vllm}",
            "    prometheus: {query: 'x{$namespace_matcher}', sample_time_query: 'y{$namespace_matcher}'}\n",
            "built from its terms",
        ),
    ],
)
def test_a_bad_saturation_block_is_refused_in_one_line(block: str, extra: str, problem: str) -> None:
    with pytest.raises(MetricsConfigError) as refused:
        one_metric(block, extra)
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_only_a_saturation_figure_has_terms_and_it_needs_them() -> None:
    with pytest.raises(MetricsConfigError, match="only a saturation figure has terms"):
        parse_metrics_config(
            "metrics:\n  - name: q\n    figure: queued_requests\n    combine: sum\n    saturation: {preset: vllm}\n"
        )
    with pytest.raises(MetricsConfigError, match="needs a saturation block"):
        parse_metrics_config("metrics:\n  - name: s\n    figure: saturation\n    combine: mean\n")


def test_the_shipped_metric_is_served_by_both_sources_in_both_apis() -> None:
    config = default_metrics_config()
    custom, external = config.custom("inference_saturation"), config.external_metric("inference_saturation")
    assert custom is not None and custom == external
    assert custom.combine == "mean" and custom.unit == "percent"
    assert custom.prometheus is not None and "topk by (namespace, pod)" in custom.prometheus.query
    assert config.without_prometheus_queries() == []


# ---- the direct source ----------------------------------------------------------------------------------------------
NODE, URL = "gpu-node-1", "http://gpu-node-1.exporters"


@dataclass
class Scripted:
    clock: ManualClock
    cache: ScriptedFeeds
    source: DirectSource

    async def send(self, pods: dict[str, PodFigure]) -> None:
        document = node_document(NODE, {("ml", name): figure for name, figure in pods.items()}, self.clock.now)
        await self.cache.send(URL, document)

    def pods(self, *names: str) -> list[Pod]:
        return [Pod(namespace="ml", name=name, uid="", node=NODE, phase="Running") for name in names]


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    clock = ManualClock()
    cache = ScriptedFeeds(clock)
    await cache.start()
    try:
        yield Scripted(clock, cache, DirectSource(StaticExporters({NODE: URL}), cache, clock=clock.time))
    finally:
        await cache.close()


def shipped() -> MetricDefinition:
    metric = default_metrics_config().custom("inference_saturation")
    assert metric is not None
    return metric


async def test_each_pod_serves_its_largest_term_and_the_workload_their_mean(scripted: Scripted) -> None:
    await scripted.send(
        {
            "queueing": PodFigure(utilization=99, inference=engine(queued=12, kv=0.5)),  # 240 % (queue)
            "filling": PodFigure(utilization=80, inference=engine(queued=1, kv=0.72)),  # 90 % (KV cache)
            "idle": PodFigure(utilization=1, inference=engine(queued=0, kv=0.6)),  # 0: idle floor
            "warming": PodFigure(utilization=50, inference=engine(queued=50, state="warming")),
            "plain": PodFigure(),
            "blind": PodFigure(inference=engine(queued=None, kv=None)),  # no term has its signal
        }
    )
    metric = shipped()
    names = ("queueing", "filling", "idle", "warming", "plain", "blind")
    values = await scripted.source.pod_values(metric, scripted.pods(*names))
    assert [None if v is None else v.value for v in values] == [240, 90, 0, None, None, None]
    samples = await scripted.source.samples(metric, scripted.pods(*names))
    assert {name: s.devices[0].labels["term"] for (_, name), s in samples.items()} == {
        "queueing": QUEUED_REQUESTS,
        "filling": KV_CACHE_UTILIZATION,
        "idle": IDLE,
    }
    workload = served_value(metric, samples.values(), parse_selector(""))
    assert workload is not None and workload.value == 110  # (240 + 90 + 0) / 3: what an HPA averaging the pods reads
    driven = served_value(metric, samples.values(), parse_selector("term=queued_requests"))
    assert driven is not None and driven.value == 240


async def test_the_self_metric_counts_the_pods_each_term_drives(scripted: Scripted) -> None:
    metric = shipped()
    registry = CollectorRegistry()
    registry.register(NodeFeedsCollector(scripted.cache, [metric]))
    await scripted.send(
        {
            "a": PodFigure(utilization=90, inference=engine(queued=12)),
            "b": PodFigure(utilization=90, inference=engine(queued=9)),
            "c": PodFigure(utilization=1, inference=engine(queued=0)),
        }
    )
    await scripted.source.pod_values(metric, scripted.pods("a", "b", "c"))  # the HPA asks: the metric is worked out
    text = generate_latest(registry).decode()
    assert 'gpu_pulse_adapter_saturation_driving_pods{metric="inference_saturation",term="queued_requests"} 2.0' in text
    assert 'gpu_pulse_adapter_saturation_driving_pods{metric="inference_saturation",term="idle"} 1.0' in text
    assert (
        'gpu_pulse_adapter_saturation_driving_pods{metric="inference_saturation",term="kv_cache_utilization"} 0.0'
        in text
    )
