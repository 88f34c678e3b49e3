"""The JSON bodies of the metrics APIs, exactly as k8s.io/metrics types serialize them.

custom.metrics.k8s.io/v1beta2 MetricValue: describedObject, metric {name, selector}, timestamp, windowSeconds, value.
custom.metrics.k8s.io/v1beta1 MetricValue: describedObject, metricName, timestamp, window, value, selector.
external.metrics.k8s.io/v1beta1 ExternalMetricValue: metricName, metricLabels, timestamp, window, value.
Values are canonical Quantity strings; timestamps RFC 3339 in UTC, whole seconds, the time the figures were sampled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, localcontext

from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP
from adapter.hotpath_caches import (
    QUANTITY_BOUND,
    QUANTITY_TEXTS,
    SECOND_BOUND,
    SECOND_TEXTS,
    described_texts,
    keep,
    keep_described,
)
from adapter.quantity import canonical_quantity
from adapter.sources.metricsource import ServedValue
from toolkit.pods import Pod

JsonObject = dict[str, object]

# the caches' lookups, bound once: a method called on an imported name is looked up anew at each call (CPython 3.11)
_second_text = SECOND_TEXTS.get
_quantity_text = QUANTITY_TEXTS.get


def rfc3339(unix_seconds: float) -> str:
    """RFC 3339 UTC with whole seconds, rounded down (a sample time is never reported later than it was)."""
    second = int(unix_seconds // 1)
    text = _second_text(second)
    if text is None:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        keep(SECOND_TEXTS, second, text, SECOND_BOUND)
    return text


_MILLI = Decimal("0.001")


def quantity(value: Decimal) -> str:
    """The served value as a canonical quantity, to the milli-unit: the HPA reads values as milli-units (MilliValue),
    so finer digits would only make "82849271278n" out of 82.849 for whoever reads the answer."""
    text = _quantity_text(value)
    if text is None:
        text = keep(QUANTITY_TEXTS, value, _quantity(value), QUANTITY_BOUND)
    return text


def _quantity(value: Decimal) -> str:
    if value.as_tuple().exponent < -3:  # type: ignore[operator]  # finite here: figures are checked on the way in
        with localcontext() as ctx:
            ctx.prec = max(28, value.adjusted() + 8)
            value = value.quantize(_MILLI, rounding=ROUND_HALF_UP)
    return canonical_quantity(value)


_PLAIN = re.compile(r"[A-Za-z0-9._/:*-]*").fullmatch  # Kubernetes names and kinds: nothing JSON would escape


def _string(text: str) -> str:
    """A JSON string literal; names (the common case) without the encoder's overhead."""
    return f'"{text}"' if _PLAIN(text) else json.dumps(text, ensure_ascii=False)


def described_object(kind: str, api_version: str, namespace: str | None, name: str) -> str:
    """The describedObject (an ObjectReference) as JSON text: kind, namespace (namespaced objects only), name,
    apiVersion ("/v1" for core objects, as custom-metrics-apiserver writes it). The same objects are asked about
    every HPA sync: each text is made once (adapter.hotpath_caches)."""
    texts = described_texts(kind, api_version, namespace)
    text = texts.get(name)
    if text is None:
        text = keep_described(texts, name, _described_object(kind, api_version, namespace, name))
    return text


def _described_object(kind: str, api_version: str, namespace: str | None, name: str) -> str:
    where = f',"namespace":{_string(namespace)}' if namespace is not None else ""
    return f'{{"kind":{_string(kind)}{where},"name":{_string(name)},"apiVersion":{_string(api_version)}}}'


_NO_TEXTS: dict[str, str] = {}  # before an answer's first pod


class CustomItems:
    """Renders the items of one custom.metrics.k8s.io answer as JSON text, field order as the Go types write them.

    Items are rendered as text, not built as dicts and encoded: an HPA answer holds one item per pod, and this is the
    per-pod cost of the request. `text()` gives the whole MetricValueList.
    """

    def __init__(self, version: str, metric: str, selector: JsonObject | None) -> None:
        self.version = version
        self._items: list[str] = []
        if version == "v1beta1":
            self._metric = f'"metricName":{_string(metric)},'
            self._window = "window"
            self._selector = f',"selector":{json.dumps(selector, separators=(",", ":"))}'
        else:
            self._metric = f'"metric":{json.dumps({"name": metric, "selector": selector}, separators=(",", ":"))},'
            self._window = "windowSeconds"
            self._selector = ""

    def add(self, described: str, served: ServedValue) -> None:
        """One item: the object `described` (its describedObject, as JSON text) and its value."""
        self.add_all((described,), (served,))

    def add_pods(self, kind: str, api_version: str, pods: Sequence[Pod], values: Sequence[ServedValue | None]) -> float:
        """`add_all` for pods that describe themselves (the HPA's question); the oldest sample time among them."""
        references: list[str] = []
        refer = references.append
        namespace, texts = None, _NO_TEXTS
        for pod in pods:
            if pod.namespace != namespace:  # pods come namespace by namespace: one lookup of the namespace's texts
                namespace = pod.namespace
                texts = described_texts(kind, api_version, namespace)
            text = texts.get(pod.name)
            if text is None:
                text = _described_object(kind, api_version, namespace, pod.name)
                keep_described(texts, pod.name, text)
            refer(text)
        return self.add_all(references, values)

    def add_all(self, described: Sequence[str], values: Sequence[ServedValue | None]) -> float:
        """An item for each object with a value (`values[i]` is that of `described[i]`; None leaves it out); returns
        the oldest sample time among them (inf for none). One loop over up to thousands of items, what is the same for
        all looked up once, and items that share a sample time and window (a document's do) share the text between
        their object and their value."""
        oldest = math.inf
        keep = self._items.append
        metric, window, selector = self._metric, self._window, self._selector
        tail = f'"{selector}}}'
        last_at, last_seconds, between = math.nan, -1, ""
        for reference, served in zip(described, values, strict=True):
            if served is None:
                continue
            at, seconds = served.sampled_at, served.window_seconds
            if at != last_at or seconds != last_seconds:  # what lies between an item's object and its value
                last_at, last_seconds = at, seconds
                between = f',{metric}"timestamp":"{rfc3339(at)}","{window}":{seconds},"value":"'
                if at < oldest:
                    oldest = at
            keep('{"describedObject":' + reference + between + quantity(served.value) + tail)
        return oldest

    def __len__(self) -> int:
        return len(self._items)

    def text(self) -> str:
        head = f'{{"kind":"MetricValueList","apiVersion":"{CUSTOM_GROUP}/{self.version}","metadata":{{}},"items":['
        return head + ",".join(self._items) + "]}"


def external_item(metric: str, labels: Mapping[str, str], served: ServedValue) -> JsonObject:
    return {
        "metricName": metric,
        "metricLabels": dict(labels),
        "timestamp": rfc3339(served.sampled_at),
        "window": served.window_seconds,
        "value": quantity(served.value),
    }


def external_list(version: str, items: list[JsonObject]) -> JsonObject:
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": f"{EXTERNAL_GROUP}/{version}",
        "metadata": {},
        "items": items,
    }
