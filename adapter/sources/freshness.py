"""Whether the direct source may serve a figure: young enough, and the asked pod's own.

One verdict for every way the direct source answers (the pod figure index, node by node, device by device samples), so
that the HPA's pods answers and every other answer leave out the same figures. Times are on the adapter's wall clock:
an answer places a document's sample times there (nodeanswer.exporter_clock_offset).
"""

from __future__ import annotations

from toolkit.pods import Pod


def default_max_age(interval_seconds: float) -> float:
    """How old a figure may be before it is left out: three exporter intervals and two seconds."""
    return 3 * interval_seconds + 2.0


class Freshness:
    """How old a figure may be: `max_age` seconds when given, else `default_max_age` of its exporter's interval."""

    __slots__ = ("_fixed",)

    def __init__(self, max_age: float | None = None) -> None:
        self._fixed = max_age

    def max_age(self, interval_seconds: float) -> float:
        fixed = self._fixed
        return default_max_age(interval_seconds) if fixed is None else fixed


def servable(sampled_at: float, uid: str | None, pod: Pod, now: float, max_age: float) -> bool:
    """Whether a figure sampled at `sampled_at` of a pod the exporter knew as `uid` may be served for `pod` at `now`:
    no older than `max_age` seconds, and the pod's own, not an earlier pod's of that name (when both know a uid)."""
    return now - sampled_at <= max_age and not (uid and pod.uid and uid != pod.uid)
