"""Prometheus' answers to instant queries, decoded without trusting them (the `prometheus` source).

An answer is bounded in bytes as it is read (responses.py), but bytes are not memory: 15 MiB of `"result":[[],[],...]`
decoded into Python objects peaked at 885 MiB, and 520,000 sound series at 575 MiB (issue 21, item 4). So an answer is
decoded in steps, each refusing what the HTTP API would never send before it costs memory:

1. its head only (`status`, `errorType`, `error`, `data.resultType`; everything else skipped without being built):
   an error, or a result of another type, is known without decoding any series;
2. the series into typed structs (msgspec), each checked as it is decoded against the API's shape
   (`{"metric": {...}, "value": [<time>, "<value>"]}`: the first `[]` stops the decoder), and counted: past
   `max_series` the decoder stops (`SERIES_PER_BYTE`: a real series is 250 bytes or more). A series' labels stay
   undecoded bytes at this step;
3. each series' `namespace` and `pod` only; the labels of the series of the pods asked about are decoded last, each
   set bounded in size, and only when asked for (the HPA's question reads values alone). Values without labels, when
   each pod asked about has one series, take one pass that builds `namespace` and `pod` and skips the rest.

The HTTP API documents the shape (prometheus/prometheus docs/querying/api.md, "Instant vectors"): `data.result` is a
list of `{"metric": {<label>: <value>}, "value": [<unix time>, "<sample value>"]}`, label values strings, the sample
value a string. A vector never holds two series with one label set (Prometheus' engine refuses to build one: "vector
cannot contain metrics with the same labelset", promql/engine.go): a pod whose series repeat a label set is left out,
as its figure would be a guess.

`LargeAnswers` bounds how many answers past `LARGE_ANSWER_BYTES` are read and decoded at once; an answer past
`INLINE_DECODE_BYTES` is decoded in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

import msgspec

from adapter.sources.metricsource import PodKey, SourceError, SourceUnavailableError

log = logging.getLogger(__name__)

# A series of the answer takes at least this many bytes of JSON for every one the decoder may build: a real series of
# gpu-pulse's metrics is 250 bytes or more; a hostile `{"metric":{},"value":[0,"0"]}` is 30.
SERIES_PER_BYTE = 1 / 160
MAX_LABEL_SET_BYTES = 16 * 1024  # the JSON of one series' labels: a real one is a few hundred bytes
LARGE_ANSWER_BYTES = 1024 * 1024  # an answer past this is read and decoded under `LargeAnswers`, in a worker thread
LARGE_ANSWERS_AT_ONCE = 2
INLINE_DECODE_BYTES = 64 * 1024  # an answer past this (some 250 series) is decoded in a worker thread

_counting = threading.local()  # the series the decoder of this thread may still build


class _Counted(msgspec.Struct, gc=False):
    """A series that counts itself as it is decoded: past the limit of this thread's decoder, decoding stops."""

    def __post_init__(self) -> None:
        _counting.left -= 1
        if _counting.left < 0:
            raise ValueError(f"more than {_counting.limit} series")


class _Series(_Counted):
    metric: msgspec.Raw
    value: tuple[float, str]


class _Result(msgspec.Struct):
    result: list[_Series] | None = None


class _Body(msgspec.Struct):
    data: _Result


class _HeadData(msgspec.Struct):
    resultType: Any = None  # noqa: N815 (the HTTP API's name)


class _Head(msgspec.Struct):
    status: Any = None
    errorType: Any = None  # noqa: N815
    error: Any = None
    data: _HeadData | None = None


class _Identity(msgspec.Struct, gc=False):
    namespace: str = ""
    pod: str = ""


class _IdentifiedSeries(_Counted):
    """A series with its `namespace` and `pod` only (its other labels skipped unbuilt)."""

    metric: _Identity
    value: tuple[float, str]


class _IdentifiedResult(msgspec.Struct):
    result: list[_IdentifiedSeries] | None = None


class _IdentifiedBody(msgspec.Struct):
    data: _IdentifiedResult


_HEAD = msgspec.json.Decoder(_Head)
_BODY = msgspec.json.Decoder(_Body)
_IDENTIFIED = msgspec.json.Decoder(_IdentifiedBody)
_IDENTITY = msgspec.json.Decoder(_Identity)
_LABELS = msgspec.json.Decoder(dict[str, str])


class PodSeries(msgspec.Struct, frozen=True, gc=False):
    """One series of a pod asked about: its labels (None when not asked for) and its sample value as the API writes
    it. A struct untracked by the garbage collector (it holds strings only): one is made per series of every answer."""

    pod: PodKey
    labels: Mapping[str, str] | None
    value: str


def _text(value: object, otherwise: str) -> str:
    """A string field of an answer, on one line and shortened for a log line or a Status message."""
    return " ".join(value.split())[:200] if isinstance(value, str) else otherwise


def raise_unless_success(status: object, error_type: object, error: object, http_status: int, asked: str) -> None:
    """What the HTTP API's envelope (`status`, `errorType`, `error`) says of a call that did not succeed, for every
    call of the API the adapter makes: SourceError when Prometheus rejected what was `asked` (400, 422: the query's
    or rule's mistake), SourceUnavailableError otherwise."""
    if status == "success":
        return
    problem = f"{_text(error_type, 'error')}: {_text(error, 'no error message')}"
    if http_status in (400, 422):
        raise SourceError(f"prometheus rejected {asked}: {problem}")
    raise SourceUnavailableError(f"prometheus answered HTTP {http_status}: {problem}")


def decode_answer(
    body: bytes, http_status: int, promql: str, wanted: Collection[PodKey], *, max_series: int, labels: bool
) -> list[PodSeries]:
    """The series of the pods in `wanted` that an instant query's answer holds (their labels decoded when `labels`).

    SourceUnavailableError when the answer is not one the HTTP API would give (or holds more than `max_series`
    series); SourceError when Prometheus rejects the query (400, 422) or it gives another type of result (a
    configuration problem)."""
    try:
        head = _HEAD.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise SourceUnavailableError(f"prometheus answered HTTP {http_status} without a JSON object") from None
    raise_unless_success(head.status, head.errorType, head.error, http_status, f"the query {promql!r}")
    if head.data is None:
        raise SourceUnavailableError("prometheus answered without a data object")
    result_type = head.data.resultType
    if result_type != "vector":
        if isinstance(result_type, str) and result_type in ("matrix", "scalar", "string"):
            raise SourceError(f"the query {promql!r} returns a {result_type}, not an instant vector")
        raise SourceUnavailableError("prometheus answered with an unknown resultType")
    if not labels:
        found = _one_series_a_pod(body, wanted, max_series)
        if found is not None:
            return found
    _counting.left = _counting.limit = max_series
    try:
        series = _BODY.decode(body).data.result or []
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise SourceUnavailableError(f"prometheus answered with a malformed vector: {_one_line(error)}") from None
    return _of_pods(series, wanted, labels)


def _one_series_a_pod(body: bytes, wanted: Collection[PodKey], max_series: int) -> list[PodSeries] | None:
    """The series of the pods in `wanted`, without their labels, decoded in one pass when each of those pods has one
    series (a pod of one GPU, or a query that aggregates by pod: the common case); None when one has several, whose
    label sets tell devices from repeats (`_of_pods`)."""
    _counting.left = _counting.limit = max_series
    try:
        series = _IDENTIFIED.decode(body).data.result or []
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise SourceUnavailableError(f"prometheus answered with a malformed vector: {_one_line(error)}") from None
    found: list[PodSeries] = []
    keep = found.append
    seen: set[PodKey] = set()
    remember = seen.add
    for one in series:
        pod = (one.metric.namespace, one.metric.pod)
        if pod in wanted:
            before = len(seen)
            remember(pod)
            if len(seen) == before:
                return None
            keep(PodSeries(pod, None, one.value[1]))
    return found


def _of_pods(series: list[_Series], wanted: Collection[PodKey], labels: bool) -> list[PodSeries]:
    """One loop over up to thousands of series per answer: what is called in it is bound once."""
    found: list[PodSeries] = []
    keep = found.append
    seen: set[object] = set()
    remember = seen.add
    repeated: set[PodKey] = set()
    identity_of = _IDENTITY.decode
    for index, one in enumerate(series):
        raw = bytes(one.metric)
        try:
            identity = identity_of(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise SourceUnavailableError(f"prometheus answered with a malformed series (result[{index}])") from None
        pod = (identity.namespace, identity.pod)
        if pod not in wanted:
            continue
        shown: Mapping[str, str] | None = None
        key: object = raw  # the label set as written, pod and namespace included: Prometheus writes labels sorted
        if labels:
            if len(raw) > MAX_LABEL_SET_BYTES:
                raise SourceUnavailableError(f"prometheus answered a label set of {len(raw)} bytes (result[{index}])")
            try:
                shown = _LABELS.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise SourceUnavailableError(f"prometheus answered with a malformed series (result[{index}])") from None
            key = msgspec.json.encode(sorted(shown.items()))  # the same set however its labels were ordered
        before = len(seen)
        remember(key)
        if len(seen) == before:
            repeated.add(pod)
        keep(PodSeries(pod, shown, one.value[1]))
    if repeated:
        log.warning(
            "prometheus answered a series twice for %d pods (%s): left out, their figures would be a guess",
            len(repeated),
            ", ".join(f"{ns}/{name}" for ns, name in sorted(repeated)[:3]),
        )
        found = [series for series in found if series.pod not in repeated]
    return found


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:200] or type(error).__name__


class LargeAnswers:
    """At most `at_once` answers past `threshold` bytes held and decoded at a time: the rest wait, having read no more
    than `threshold` each. An answer past `INLINE_DECODE_BYTES` is decoded in a worker thread."""

    def __init__(self, at_once: int = LARGE_ANSWERS_AT_ONCE, threshold: int = LARGE_ANSWER_BYTES) -> None:
        self.slots = asyncio.Semaphore(at_once)
        self.threshold = threshold

    @contextlib.asynccontextmanager
    async def admission(self) -> AsyncIterator[Admission]:
        admission = Admission(self)
        try:
            yield admission
        finally:
            if admission.large:
                self.slots.release()


class Admission:
    """One answer under `LargeAnswers`: `grown(size)` as it is read (waits for a slot once it is large), `decode(...)`
    once read."""

    def __init__(self, answers: LargeAnswers) -> None:
        self._answers = answers
        self.large = False

    async def grown(self, size: int) -> None:
        if not self.large and size > self._answers.threshold:
            await self._answers.slots.acquire()
            self.large = True

    async def decode(
        self, body: bytes, http_status: int, promql: str, wanted: Collection[PodKey], *, max_series: int, labels: bool
    ) -> list[PodSeries]:
        if len(body) <= INLINE_DECODE_BYTES:
            return decode_answer(body, http_status, promql, wanted, max_series=max_series, labels=labels)
        return await asyncio.to_thread(
            decode_answer, body, http_status, promql, wanted, max_series=max_series, labels=labels
        )
