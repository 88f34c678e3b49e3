"""Authentication's own metrics: bearer tokens that could not be checked, and re-reads of the trust configuration that
failed, read from the token reviewer and the trust reloader at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class Counted(Protocol):
    @property
    def failures(self) -> int: ...


class FailureCollector(Collector):
    """One counter read from a part's `failures`, with the `_created` time a prometheus_client Counter would have."""

    def __init__(self, part: Counted, name: str, documentation: str) -> None:
        self._part = part
        self._name = name
        self._documentation = documentation
        self._created = time.time()

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, value=self._part.failures, created=self._created)


def token_review_collector(reviewer: Counted) -> FailureCollector:
    return FailureCollector(
        reviewer,
        "gpu_pulse_adapter_authentication_errors",
        "Requests whose credentials could not be checked (a TokenReview that failed, or a new token past the bound on "
        "the rate of reviews); each was answered 401.",
    )


def trust_reload_collector(reloader: Counted) -> FailureCollector:
    return FailureCollector(
        reloader,
        "gpu_pulse_adapter_trust_reload_errors",
        "Re-reads of kube-system/extension-apiserver-authentication that failed (the trust in use was kept).",
    )
