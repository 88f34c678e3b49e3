"""Node maintenance the GPU Operator's way, on one node of a cluster of its own: a driver
upgrade without a reboot, then a MIG mode change, while the other nodes keep serving.

What the operator does, and what this test does in its place: its driver manager and mig-manager set the node's
`nvidia.com/gpu.deploy.client` label to paused-for-..., the DaemonSet controller deletes the exporter's pod (whose
nodeSelector no longer matches: here a SIGTERM to the node's exporter, which must exit cleanly, NVML shut down), they
unload the driver or reset the GPU (the simulator refuses both while a process holds NVML: tests/exporter), and set
the label back: the pod comes back (here a new exporter process on the same address, on the node's new state).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from functools import partial

import pytest

from exporter.catalogue import Dialect
from tests.e2e.answers import hpa_path, served_items
from tests.e2e.checks import answer, assert_fresh, headroom
from tests.e2e.cluster import (
    EMBED,
    INDEXER,
    LLM_SERVE,
    MAINTAINED_NODE,
    MIG_CHANGE_AT,
    MODULES_RELOADED_AT,
    TRAINER,
    UPGRADED_DRIVER,
    pods_of,
    upgraded_without_a_reboot,
    with_mig_on,
    write_scenario,
)
from tests.e2e.stack import INTERVAL, E2EStack
from tests.support.adapters import AdapterProcess
from tests.support.exporters import ExporterProcess, serving, start_exporter
from tests.support.waiting import patience, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _readyz(exporter: ExporterProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{exporter.url}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def _others_keep_serving(stack: E2EStack) -> None:
    """Both adapters answer for the workloads of nodes under no maintenance: every pod, fresh figures."""
    for adapter in stack.adapters:
        for workload in (LLM_SERVE, EMBED, TRAINER):
            items = answer(adapter, stack, hpa_path(workload))
            assert set(items) == set(pods_of(workload, stack.scenarios)), f"{adapter.name} {workload.name}"
            assert_fresh(items, adapter, f"{adapter.name} {workload.name} during the maintenance")


def _pause(stack: E2EStack) -> None:
    """The label set to paused-for-...: the DaemonSet controller deletes the pod; the exporter exits cleanly."""
    exporter = stack.exporters[MAINTAINED_NODE]
    code = stack.processes.stop(exporter.name)
    assert code == 0, f"{exporter.name} exited with {code} on SIGTERM:\n{stack.processes.log_tail(exporter.name)}"


def _come_back(stack: E2EStack, stem: str, data: dict[str, object]) -> ExporterProcess:
    """The label set back to "true": the exporter's pod comes back on the node's new state, at its old address."""
    old = stack.exporters[MAINTAINED_NODE]
    path = write_scenario(stack.workdir / "scenarios", stem, data)
    exporter = start_exporter(
        stack.processes, MAINTAINED_NODE, path, dialect=Dialect.PROMETHEUS, interval=INTERVAL, port=old.port,
        process_name=f"exporter-{stem}",
    )  # fmt: skip
    stack.exporters[MAINTAINED_NODE] = exporter
    return exporter


def _serves_the_indexer(stack: E2EStack, adapter: AdapterProcess) -> bool:
    """Whether the adapter serves the indexer's pod; until its feed of the node reconnects (backoff after the node's
    exporter was away) it answers 503, never a stale figure, which counts as "not yet"."""
    status, body = adapter.get(hpa_path(INDEXER), stack.hpa)
    return status == 200 and set(served_items(body)) == {"indexer-0"}


def _indexer_served_again(stack: E2EStack) -> None:
    for adapter in stack.adapters:
        wait_for(
            partial(_serves_the_indexer, stack, adapter), f"{adapter.name} serving the indexer again", patience(30)
        )


def test_a_driver_upgrade_without_a_reboot_on_one_node_while_the_others_keep_serving(stack: E2EStack) -> None:
    for adapter in stack.adapters:
        assert set(answer(adapter, stack, hpa_path(INDEXER))) == {"indexer-0"}
    _pause(stack)
    _others_keep_serving(stack)
    # the host's driver package was upgraded to 570; the 550 modules stay loaded until they are reloaded
    exporter = _come_back(stack, "e2e-maint-upgraded", upgraded_without_a_reboot())
    mismatch: list[tuple[str, str]] = []  # (the /readyz answer, /metrics) while NVML refuses

    def refused() -> bool:
        status, body = _readyz(exporter)
        if status == 503 and "LIB_RM_VERSION_MISMATCH" in body:
            mismatch.append((body, exporter.metrics()))
        return bool(mismatch) or status == 200

    wait_for(refused, "the exporter back, not ready: driver/library version mismatch", patience(20))
    assert mismatch, "the exporter was ready before the modules were reloaded"
    reason, metrics = mismatch[0]
    assert "reboot the node" in reason and "restart this pod" in reason, reason
    assert "gpu_pulse_nvml_up 0" in metrics and "nvidia_gpu_up{" not in metrics
    _others_keep_serving(stack)
    # the modules are reloaded at MODULES_RELOADED_AT: NVML answers again, no restart of the exporter
    deadline = exporter.launched_at + MODULES_RELOADED_AT + 15 + headroom()
    wait_for(lambda: _readyz(exporter)[0] == 200, "the exporter ready on the new driver", deadline - time.time())
    stack.processes.check_running(exporter.name)
    metrics = exporter.metrics()
    assert "gpu_pulse_nvml_up 1" in metrics
    assert f'driver_version="{UPGRADED_DRIVER}"' in metrics
    wait_for(lambda: serving(stack.processes, exporter, 1), "the indexer pod back on the exporter", patience(10))
    _indexer_served_again(stack)
    _others_keep_serving(stack)


def test_a_mig_mode_change_on_one_node_while_the_others_keep_serving(stack: E2EStack) -> None:
    exporter = stack.exporters[MAINTAINED_NODE]
    assert exporter.name == "exporter-e2e-maint-upgraded", "runs after the driver upgrade, on its exporter"
    log = stack.processes.log_path(exporter.name)
    # the mig-manager's try at MIG_CHANGE_AT waits while the exporter holds GPU 1, and the exporter says so (its MIG
    # layout check runs every 10 s)
    deadline = exporter.launched_at + MIG_CHANGE_AT + 10 + headroom()
    wait_for(
        lambda: "a MIG mode change (to on) is pending" in log.read_text(errors="replace"),
        "the exporter logging the MIG mode change it blocks",
        max(deadline - time.time(), 1),
    )
    _pause(stack)  # the GPU Operator's mig-manager pauses gpu.deploy.client, the change goes through
    _others_keep_serving(stack)
    exporter = _come_back(stack, "e2e-maint-mig", with_mig_on())
    wait_for(lambda: serving(stack.processes, exporter, 1), "the exporter back with GPU 1 in MIG mode", patience(30))
    wait_for(lambda: _readyz(exporter)[0] == 200, "the exporter ready", patience(10))
    metrics = exporter.metrics()
    instances = {
        line.split('gpu_instance="', 1)[1].split('"', 1)[0]
        for line in metrics.splitlines()
        if line.startswith("nvidia_gpu_memory_used_bytes{") and 'gpu="1"' in line and 'gpu_instance="' in line
    }
    assert len(instances - {""}) == 2, metrics
    _indexer_served_again(stack)
    _others_keep_serving(stack)
