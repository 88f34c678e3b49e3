"""One pod's engine read after read: the engine recognised from its names, its series combined into the normalised
figures of toolkit.pods_contract.InferenceFigures, its histograms and counters kept over the window.

Every figure is checked against what its unit allows before it is published: a NaN, an infinity, a negative count, a
KV-cache use above 1 or a gauge served as another type gives None for that figure and a reason, never a number that
would mislead an autoscaler (or a document a reader refuses).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from exporter.engines.mappings import WANTED, EngineMapping, GaugeSource, recognise
from exporter.engines.window import BucketLayout, CounterTotal, HistogramWindow, bucket_layout
from exporter.snapshot import PodInference
from toolkit.pods_contract import (
    MAX_ENGINE_MODEL_CHARS,
    MAX_LATENCY_SECONDS,
    MAX_RATE_PER_SECOND,
    MAX_REASON_CHARS,
    MAX_REQUESTS,
    InferenceFigures,
    LatencyQuantiles,
)
from toolkit.textparse import Exposition, Labels, Sample

QUANTILES = (0.5, 0.9, 0.99)
DEFAULT_WINDOW_SECONDS = 60.0
_GAUGE_TYPES = frozenset(("gauge", "untyped", "unknown"))
_COUNTER_TYPES = frozenset(("counter", "untyped", "unknown"))
_LABELS = operator.itemgetter(1)  # of a Sample
_VALUE = operator.itemgetter(2)
_AT_LEAST_ZERO = (0.0).__le__
_BELOW_INF = math.inf.__gt__


def bounded_reason(reasons: Iterable[str]) -> str | None:
    """The reasons in one line of at most MAX_REASON_CHARS, wrong values before missing names ("no x"): a value that
    is there and wrong says more than one an engine does not serve."""
    given = [r for r in reasons if r]
    ordered = [r for r in given if not r.startswith("no ")] + [r for r in given if r.startswith("no ")]
    text = "; ".join(ordered)
    if not text:
        return None
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


_FAMILIES: dict[str, frozenset[str]] = {}  # by engine: the families its mapping reads


def _of(mapping: EngineMapping, family: str) -> bool:
    """Whether `family` is one the mapping reads."""
    families = _FAMILIES.get(mapping.engine)
    if families is None:
        gauges = (n for g in mapping.gauges() for n in g.names)
        families = frozenset((*gauges, *mapping.histograms(), *mapping.requests, *mapping.generated_tokens))
        _FAMILIES[mapping.engine] = families
    return family in families


def _matches(sample: Sample, only: Mapping[str, str]) -> bool:
    return not only or all((sample.label(key) or "") == value for key, value in only.items())


def _wrong_type(exposition: Exposition, family: str, allowed: frozenset[str]) -> str | None:
    declared = exposition.types.get(family)
    return None if declared is None or declared in allowed else f"{family} is a {declared}"


class EngineFigures:
    """The figures of one pod's engine; `read` once per read of its endpoint (one caller at a time)."""

    def __init__(self, *, interval: float, window: float = DEFAULT_WINDOW_SECONDS) -> None:
        self.interval = interval
        self.window = max(window, interval)
        self._max_points = math.ceil(self.window / interval) + 2
        self.mapping: EngineMapping | None = None
        self._histograms: dict[str, HistogramWindow] = {}
        self._layouts: dict[str, tuple[tuple[Labels, ...], BucketLayout | str]] = {}
        self._counters: dict[str, CounterTotal] = {}

    def _start(self, mapping: EngineMapping | None) -> None:
        self.mapping = mapping
        self._histograms = {}
        self._layouts = {}
        self._counters = {}

    def read(self, at: float, exposition: Exposition) -> PodInference:
        """The figures of one read taken at wall-clock time `at`."""
        mapping = recognise(exposition.mark)
        if mapping is not self.mapping:  # another engine (or none) now answers there: nothing of before applies
            self._start(mapping)
        sampled_at = datetime.fromtimestamp(at, UTC)
        if mapping is None:
            return PodInference(
                InferenceFigures(
                    state="unrecognised",
                    reason="no family of a known engine (vLLM, SGLang, NIM, Triton TensorRT-LLM, Dynamo, TGI)",
                    sampled_at=sampled_at,
                    window_seconds=self.interval,
                )
            )
        reasons: list[str] = []
        model: list[str] = []
        queued = self._gauge(mapping.queued, mapping, exposition, reasons, model, MAX_REQUESTS)
        running = self._gauge(mapping.running, mapping, exposition, reasons, model, MAX_REQUESTS)
        kv = self._gauge(mapping.kv_cache, mapping, exposition, reasons, model, 1.0)
        ttft = self._latency(mapping.ttft, mapping, exposition, at, reasons)
        itl = self._latency(mapping.itl, mapping, exposition, at, reasons)
        requests = self._counter(mapping.requests, mapping, exposition, at, reasons)
        tokens = self._counter(mapping.generated_tokens, mapping, exposition, at, reasons)
        if not any(_of(mapping, WANTED[name]) for name in exposition.samples):
            names = ", ".join(n for g in mapping.gauges() for n in g.names[:1])
            return PodInference(
                InferenceFigures(
                    state="unrecognised",
                    engine=mapping.engine,
                    reason=bounded_reason([f"{mapping.engine}: none of the names read ({names}) is served", *reasons]),
                    sampled_at=sampled_at,
                    window_seconds=self.interval,
                )
            )
        spans = [h.span() for h in self._histograms.values()] + [c.span() for c in self._counters.values()]
        window = round(min(self.window, max([self.interval, *spans])), 3)
        return PodInference(
            InferenceFigures(
                state="ready",
                reason=bounded_reason(reasons),
                engine=mapping.engine,
                model=model[0][:MAX_ENGINE_MODEL_CHARS] if model else None,
                sampled_at=sampled_at,
                window_seconds=window,
                queued_requests=queued,
                running_requests=running,
                kv_cache_utilization=kv,
                time_to_first_token_seconds=ttft,
                inter_token_latency_seconds=itl,
                requests_per_second=self._rate(mapping.requests, reasons),
                generated_tokens_per_second=self._rate(mapping.generated_tokens, reasons),
            ),
            requests_total=requests,
            generated_tokens_total=tokens,
        )

    # ---- gauges --------------------------------------------------------------------------------------------------
    def _gauge(
        self,
        source: GaugeSource | None,
        mapping: EngineMapping,
        exposition: Exposition,
        reasons: list[str],
        model: list[str],
        limit: float,
    ) -> float | None:
        if source is None:
            return None
        name = next((n for n in source.names if exposition.of(n)), None)
        if name is None:
            reasons.append(f"no {' or '.join(source.names)}")
            return None
        wrong = _wrong_type(exposition, name, _GAUGE_TYPES)
        if wrong:
            reasons.append(wrong)
            return None
        only = {**mapping.only, **source.only}
        values = [s.value for s in exposition.of(name) if _matches(s, only)]
        if not values:
            reasons.append(f"no series of {name} with {only}")
            return None
        if mapping.model_label and not model:
            label = next((s.label(mapping.model_label) for s in exposition.of(name)), None)
            if label:
                model.append(label)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            reasons.append(f"{name} is not a finite number >= 0")
            return None
        value = (sum(values) if source.combine == "sum" else sum(values) / len(values)) * source.scale
        if value > limit:
            reasons.append(f"{name} is above {limit:g}")
            return None
        return round(value, 6)

    # ---- histograms ------------------------------------------------------------------------------------------------
    def _latency(
        self, names: tuple[str, ...], mapping: EngineMapping, exposition: Exposition, at: float, reasons: list[str]
    ) -> LatencyQuantiles | None:
        if not names:
            return None
        family = next((n for n in names if exposition.of(n + "_bucket")), None)
        if family is None:
            reasons.append(f"no {' or '.join(names)}")
            return None
        wrong = _wrong_type(exposition, family, frozenset(("histogram",)))
        if wrong:
            reasons.append(wrong)
            return None
        samples = exposition.of(family + "_bucket")
        if mapping.only:
            samples = [sample for sample in samples if _matches(sample, mapping.only)]
        layout = self._layout(family, tuple(map(_LABELS, samples)))
        if isinstance(layout, str):
            reasons.append(f"{family} {layout}")
            return None
        values = list(map(_VALUE, samples))
        if not all(map(_AT_LEAST_ZERO, values)) or not all(map(_BELOW_INF, values)):  # NaN fails both
            reasons.append(f"{family} has a bucket that is not a count")
            return None
        buckets = layout.combine(values)
        window = self._histograms.get(family)
        if window is None:
            window = self._histograms[family] = HistogramWindow(self.window, self._max_points)
        window.add(at, buckets)
        p50, p90, p99 = window.quantiles(QUANTILES)
        if any(v is not None and not 0 <= v <= MAX_LATENCY_SECONDS for v in (p50, p90, p99)):
            reasons.append(f"{family} has buckets outside 0-{MAX_LATENCY_SECONDS:g} s")
            return None
        return LatencyQuantiles(p50=_rounded(p50), p90=_rounded(p90), p99=_rounded(p99))

    def _layout(self, family: str, labels: tuple[Labels, ...]) -> BucketLayout | str:
        """The layout of this read's bucket label sets: the last read's when they are the same (the parser hands out
        equal label sets as the same tuples, so this compares identities), otherwise made anew."""
        known = self._layouts.get(family)
        if known is not None and known[0] == labels:
            return known[1]
        layout = bucket_layout(labels)
        self._layouts[family] = (labels, layout)
        return layout

    # ---- counters --------------------------------------------------------------------------------------------------
    def _counter(
        self, names: tuple[str, ...], mapping: EngineMapping, exposition: Exposition, at: float, reasons: list[str]
    ) -> float | None:
        if not names:
            return None
        name = next((n for n in names if exposition.of(n)), None)
        if name is None:
            reasons.append(f"no {' or '.join(names)}")
            return None
        wrong = _wrong_type(exposition, name, _COUNTER_TYPES)
        if wrong:
            reasons.append(wrong)
            return None
        values = [s.value for s in exposition.of(name) if _matches(s, mapping.only)]
        if not values or not all(math.isfinite(v) and v >= 0 for v in values):
            reasons.append(f"{name} is not a finite count")
            return None
        counter = self._counters.get(names[0])
        if counter is None:
            counter = self._counters[names[0]] = CounterTotal(self.window, self._max_points)
        counter.add(at, sum(values))
        return counter.total

    def _rate(self, names: tuple[str, ...], reasons: list[str]) -> float | None:
        counter = self._counters.get(names[0]) if names else None
        rate = counter.rate() if counter is not None else None
        if rate is not None and not 0 <= rate <= MAX_RATE_PER_SECOND:
            reasons.append(f"{names[0]} rises faster than {MAX_RATE_PER_SECOND:g}/s")
            return None
        return None if rate is None else round(rate, 3)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
