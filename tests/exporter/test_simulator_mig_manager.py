"""The mig-manager's pause protocol (simulation/mig_manager.py) against docs/install.md's claims: every MIG change not
already applied pauses gpu-pulse's label, a change of instances as well as of the mode; the label comes back only when
the change succeeds; a wait that times out, or a failed apply, leaves it paused."""

from __future__ import annotations

from typing import Any

import pytest

from simulation import Simulator, build_scenario
from simulation.mig_manager import CLIENT_LABEL, PAUSED, STATE_LABEL, WAIT_TIMEOUT_S, MigManager, NodePod
from simulation.scenario import ReconfigureMig
from tests.support.clocks import ManualClock

EXPORTER = NodePod("gpu-pulse-exporter-x7k2p", "DaemonSet", frozenset({CLIENT_LABEL}))


class _Node:
    """One node: a simulated A100 with two 3g.20gb instances, its labels, and the DaemonSet controller's view of
    gpu-pulse's pod (there while the node's label is `true`); `stuck` pods never go."""

    def __init__(self, wanted: list[dict[str, Any]], labels: dict[str, str], stuck: tuple[NodePod, ...] = ()) -> None:
        data = {
            "gpus": [{"model": "A100-SXM4-40GB", "mig": [{"profile": "3g.20gb"}, {"profile": "3g.20gb"}]}],
            "timeline": [{"at": 1e9, "action": "reconfigure_mig", "gpu": 0, "mig": wanted}],
        }
        self.clock = ManualClock()
        self.sim = Simulator(build_scenario(data, seed=1), clock=self.clock)
        self.wanted = sorted(m["profile"] for m in wanted)
        self.labels = labels
        self.stuck = stuck
        self.seen_at_apply: tuple[str | None, list[NodePod]] | None = None
        self.fail_apply = False

    def pods(self) -> list[NodePod]:
        running = [EXPORTER] if self.labels.get(CLIENT_LABEL) == "true" else []
        return running + list(self.stuck)

    def profiles(self) -> list[str]:
        return sorted(m.profile.name for m in (self.sim.node.gpus[0].migs or {}).values())

    def apply(self) -> None:
        self.seen_at_apply = (self.labels.get(CLIENT_LABEL), self.pods())
        if self.fail_apply:
            raise RuntimeError("nvidia-mig-parted apply: exit status 1")
        event = self.sim.scenario.timeline[0]
        assert isinstance(event, ReconfigureMig)
        self.sim.node.reconfigure_mig(0, event.mig)

    def manager(self) -> MigManager:
        return MigManager(
            self.labels,
            self.pods,
            lambda: self.profiles() == self.wanted,
            self.apply,
            self.clock,
            self.clock.advance,
        )


def test_a_change_of_instances_alone_pauses_the_exporter_and_brings_it_back() -> None:
    node = _Node([{"profile": "7g.40gb"}], {CLIENT_LABEL: "true"})
    outcome = node.manager().run()
    assert outcome.applied and outcome.error is None
    assert node.seen_at_apply == (PAUSED, [])  # applied with the label paused and the exporter's pod gone
    assert node.profiles() == ["7g.40gb"]
    assert node.labels[CLIENT_LABEL] == "true" and node.labels[STATE_LABEL] == "success"


def test_a_configuration_already_applied_touches_no_label() -> None:
    node = _Node([{"profile": "3g.20gb"}, {"profile": "3g.20gb"}], {CLIENT_LABEL: "true"})
    assert node.manager().run().applied
    assert node.seen_at_apply is None
    assert node.labels[CLIENT_LABEL] == "true"


def test_a_wait_that_times_out_leaves_the_exporter_paused() -> None:
    # another GPU client's DaemonSet pod selecting by the same label that does not go (a finalizer, a stuck kubelet)
    stuck = NodePod("inference-agent-5d8c", "DaemonSet", frozenset({CLIENT_LABEL, "kubernetes.io/os"}))
    node = _Node([{"profile": "7g.40gb"}], {CLIENT_LABEL: "true"}, stuck=(stuck,))
    start = node.clock()
    outcome = node.manager().run()
    assert not outcome.applied and outcome.error == "failed to wait for pods to be deleted"
    assert WAIT_TIMEOUT_S - 5 <= node.clock() - start <= WAIT_TIMEOUT_S
    assert node.seen_at_apply is None and node.profiles() == ["3g.20gb", "3g.20gb"]
    assert node.labels[CLIENT_LABEL] == PAUSED, "nobody sets it back: gpu-pulse stays off the node"
    assert node.labels[STATE_LABEL] == "pending"


def test_a_failed_apply_leaves_the_exporter_paused() -> None:
    node = _Node([{"profile": "7g.40gb"}], {CLIENT_LABEL: "true"})
    node.fail_apply = True
    outcome = node.manager().run()
    assert not outcome.applied and outcome.error is not None and "exit status 1" in outcome.error
    assert node.labels[CLIENT_LABEL] == PAUSED and node.labels[STATE_LABEL] == "failed"


@pytest.mark.parametrize(("before", "after"), [("false", "false"), (None, None)])
def test_a_label_set_to_false_or_absent_is_left_so(before: str | None, after: str | None) -> None:
    labels = {} if before is None else {CLIENT_LABEL: before}
    node = _Node([{"profile": "7g.40gb"}], labels)
    assert node.manager().run().applied
    assert node.labels.get(CLIENT_LABEL) == after
