"""What the end-to-end tests check again and again: the adapters' answers against the exporters' own figures, their
freshness, the HPA's replica count, and waiting on Prometheus and on the timeline."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.answers import Served, hpa_path, pods_mean_utilization, served_items
from tests.e2e.cluster import Workload, pods_of
from tests.e2e.stack import TARGET_UTILIZATION, E2EStack
from tests.support.adapters import AdapterProcess
from tests.support.hpa import hpa_desired_replicas
from tests.support.waiting import patience, wait_for

TARGET = Decimal(TARGET_UTILIZATION)
# how far an adapter's answer may be from the exporter's own figure read a moment later
DIRECT_TOLERANCE = 3.0  # both are the exporter's window mean, a document or two apart
PROMETHEUS_TOLERANCE = 5.0  # the minute's mean of Prometheus' scrapes against the exporter's own window mean
SOURCES_TOLERANCE = 5.0  # both are means over the last minute (avg_over_time(...[1m]) and the exporter's window)
# measuring a propagation by polling adds up to one polling period and the requests' round trips
OBSERVATION = 1.0
POLL = 0.2
HEADROOM = 5.0  # seconds a wait for a timeline event gets beyond its bound, more on a busy machine (`headroom`)


def headroom() -> float:
    """Slack for waiting on something the timeline makes happen: a wait that ends sooner costs nothing, and what a
    test asserts about delays it measures itself, from the figures' own timestamps."""
    return patience(HEADROOM)


def exporter_truth(stack: E2EStack, workload: Workload, adapter: AdapterProcess) -> dict[str, float | None]:
    """The exporters' own figure for each pod of the workload: the /pods window mean, which the direct source serves
    and the prometheus source computes again from its scrapes (avg_over_time over the same minute)."""
    del adapter  # both sources serve the same mean
    figures: dict[str, float | None] = {}
    for pod, node in pods_of(workload, stack.scenarios).items():
        exporter = stack.exporters[node]
        figures[pod] = pods_mean_utilization(exporter.document(workload.namespace), workload.namespace, pod)
    return figures


def source_tolerance(adapter: AdapterProcess, stack: E2EStack) -> float:
    return DIRECT_TOLERANCE if adapter is stack.direct else PROMETHEUS_TOLERANCE


def assert_fresh(items: dict[str, Served], adapter: AdapterProcess, what: str) -> None:
    now = time.time()
    for item in items.values():
        # timestamps are whole seconds, rounded down: one more second of apparent age
        assert now - item.timestamp <= adapter.max_age + 1, (
            f"{what}: {item.name} is stamped {now - item.timestamp:.1f} s ago"
        )
        assert item.timestamp <= now + 1, f"{what}: {item.name} is stamped in the future"


def require_before(stack: E2EStack, node: str, scenario_seconds: float, what: str) -> None:
    """This test describes the cluster before a timeline event: fail (not silently pass) if the event may have
    happened already because the stack took too long to get here."""
    earliest = stack.exporters[node].launched_at + scenario_seconds
    if time.time() > earliest - 1:
        pytest.fail(
            f"{what} must be checked before t={scenario_seconds:g} s of {node}'s timeline, but "
            f"{time.time() - stack.exporters[node].launched_at:.0f} s have passed since its exporter started"
        )


def answer(adapter: AdapterProcess, stack: E2EStack, path: str) -> dict[str, Served]:
    status, body = adapter.get(path, stack.hpa)
    assert status == 200, f"{adapter.name} {path}: {status} {body}"
    return served_items(body)


def desired_replicas(items: dict[str, Served]) -> int:
    return hpa_desired_replicas([item.value for item in items.values()], TARGET)


def eventually_selects(stack: E2EStack, expr: str, what: str, timeout: float) -> list[dict[str, Any]]:
    """Wait until the PromQL expression selects something (within `timeout` seconds, stretched on a busy machine);
    its result."""
    found: list[dict[str, Any]] = []

    def selects() -> bool:
        found[:] = stack.prometheus.query(expr)
        return bool(found)

    wait_for(selects, what, patience(timeout))
    return found


def kill_exporter(stack: E2EStack, node: str) -> float:
    process = stack.processes.started[f"exporter-{node}"]
    process.kill()
    process.wait(10)
    return time.time()


def after_the_kill(
    stack: E2EStack, adapter: AdapterProcess, workload: Workload, killed_at: float, done: Callable[[int, Any], bool]
) -> float:
    """Ask for the workload until `done(status, body)`: every answer on the way serves fresh figures only, and
    `done` holds by the adapter's max-age after the kill (its last figures were sampled before it). Returns when."""
    bound = killed_at + adapter.max_age
    while True:
        asked_at = time.time()
        status, body = adapter.get(hpa_path(workload), stack.hpa)
        if done(status, body):
            return asked_at - killed_at
        assert status == 200, f"{adapter.name} {workload.name}: {status} {body}"
        assert_fresh(served_items(body), adapter, f"{adapter.name} {workload.name} after the kill")
        late = asked_at - killed_at
        assert asked_at <= bound + OBSERVATION, f"{adapter.name} {workload.name}: {body} {late:.1f} s after the kill"
        time.sleep(POLL)
