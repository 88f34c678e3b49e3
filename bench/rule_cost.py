"""What the rule groups cost a running Prometheus, from its own metrics, and the budget they are held to.

Prometheus exposes per rule group (label `rule_group="<file>;<group>"`): the time its last evaluation took
(`prometheus_rule_group_last_duration_seconds`), when that evaluation ran
(`prometheus_rule_group_last_evaluation_timestamp_seconds`), the samples it wrote
(`prometheus_rule_group_last_evaluation_samples`: one per series a recording rule writes, ALERTS and ALERTS_FOR_STATE
for an alerting group), its interval (`prometheus_rule_group_interval_seconds`) and the evaluations it skipped because
the previous one was still running (`prometheus_rule_group_iterations_missed_total`). `RuleGroupSampler` reads them
every few seconds over a window, so that every evaluation in the window is seen once, not only the last.

The budget (docs/performance.md): each group's evaluation under GROUP_SHARE of its interval (3 s at 30 s), and all
groups together under TOTAL_CORES of a core; no missed iteration in the window. "All groups together" is the CPU the
rules add to Prometheus (its process CPU with the rules loaded minus without them, measured in the same run) when
that is known, else each group's mean evaluation time over its interval, summed. The times are wall-clock: an
evaluation mostly computes on one goroutine, so that sum is the share of a core the rules keep busy when Prometheus
has its cores to itself, and more than that when it shares them, a group waiting for a core that scrapes or another
group hold counting as busy; it is printed beside the CPU as an upper bound.
"""

from __future__ import annotations

import re
import statistics
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

GROUP_SHARE = 0.10  # of the group's interval, per evaluation
TOTAL_CORES = 0.25  # of one core, all groups together

_SAMPLE = re.compile(r'^(prometheus_rule_group_[a-z_]+)\{rule_group="[^";]*;([^"]*)"\} (\S+)$')


def parse_rule_group_metrics(text: str) -> dict[str, dict[str, float]]:
    """Per group name, its `prometheus_rule_group_*` samples (metric name -> value) from Prometheus' /metrics."""
    groups: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            metric, group, value = match.groups()
            groups.setdefault(group, {})[metric] = float(value)
    return groups


@dataclass
class GroupCost:
    """One rule group over the window: every evaluation seen (time it ran -> seconds it took) and the counters."""

    name: str
    interval: float = 0.0
    evaluations: dict[float, float] = field(default_factory=dict)
    samples: float = 0.0
    missed_at_start: float = 0.0
    missed_at_end: float = 0.0
    iterations_at_start: float = 0.0
    iterations_at_end: float = 0.0

    @property
    def missed(self) -> float:
        return self.missed_at_end - self.missed_at_start

    @property
    def last(self) -> float:
        return self.evaluations[max(self.evaluations)] if self.evaluations else 0.0

    @property
    def worst(self) -> float:
        return max(self.evaluations.values(), default=0.0)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.evaluations.values()) if self.evaluations else 0.0

    @property
    def share(self) -> float:
        """The share of its interval the group spends evaluating: mean evaluation time over the interval."""
        return self.mean / self.interval if self.interval else 0.0

    @property
    def within_budget(self) -> bool:
        return self.worst < GROUP_SHARE * self.interval and self.missed == 0


def record(costs: dict[str, GroupCost], metrics: Mapping[str, Mapping[str, float]]) -> None:
    """Fold one reading of /metrics into `costs` (the first reading sets the counters' start)."""
    for name, values in metrics.items():
        cost = costs.get(name)
        missed = values.get("prometheus_rule_group_iterations_missed_total", 0.0)
        iterations = values.get("prometheus_rule_group_iterations_total", 0.0)
        if cost is None:
            cost = costs[name] = GroupCost(name, missed_at_start=missed, iterations_at_start=iterations)
        cost.interval = values.get("prometheus_rule_group_interval_seconds", cost.interval)
        cost.samples = values.get("prometheus_rule_group_last_evaluation_samples", cost.samples)
        cost.missed_at_end, cost.iterations_at_end = missed, iterations
        ran = values.get("prometheus_rule_group_last_evaluation_timestamp_seconds", 0.0)
        if ran > 0:  # a group that has not run yet shows a zero (or negative) timestamp
            cost.evaluations[ran] = values.get("prometheus_rule_group_last_duration_seconds", 0.0)


class RuleGroupSampler:
    """Reads Prometheus' rule group metrics every `period` seconds on a thread of its own, from `start` to `stop`."""

    def __init__(self, read: Callable[[], str], period: float = 5.0) -> None:
        self._read = read
        self._period = period
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rule-group-sampler", daemon=True)
        self.costs: dict[str, GroupCost] = {}
        self.errors = 0

    @classmethod
    def of(cls, prometheus_url: str, period: float = 5.0) -> RuleGroupSampler:
        def read() -> str:
            with urllib.request.urlopen(f"{prometheus_url}/metrics", timeout=30) as response:
                return str(response.read().decode())

        return cls(read, period)

    def _sample(self) -> None:
        try:
            record(self.costs, parse_rule_group_metrics(self._read()))
        except OSError:
            self.errors += 1

    def _run(self) -> None:
        while not self._stopped.wait(self._period):
            self._sample()

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> list[GroupCost]:
        self._stopped.set()
        self._thread.join()
        self._sample()
        return sorted(self.costs.values(), key=lambda cost: cost.name)


def cost_table(
    costs: Sequence[GroupCost], window: float, what: str = "measuring", rules_cpu: float | None = None
) -> str:
    """One line per group: evaluations seen, last / mean / max time, its budget, the core share, missed iterations,
    the samples (series) it writes per evaluation; then the total: the shares summed, and the CPU the rules add
    (`rules_cpu`, cores) when known, which then decides (the sum is an upper bound, `within_budget`)."""
    header = (
        f"{'rule group':<36} {'interval':>8} {'evals':>5} {'last s':>7} {'mean s':>7} {'max s':>7} {'budget':>7}"
        f" {'share':>6} {'missed':>6} {'series':>8}  within"
    )
    lines = [f"rule groups over {window:.0f} s of {what}:", header, "-" * len(header)]
    for cost in costs:
        lines.append(
            f"{cost.name:<36} {cost.interval:>7.0f}s {len(cost.evaluations):>5} {cost.last:>7.2f} {cost.mean:>7.2f}"
            f" {cost.worst:>7.2f} {GROUP_SHARE * cost.interval:>7.1f} {cost.share:>6.3f} {cost.missed:>6.0f}"
            f" {cost.samples:>8,.0f}  {'yes' if cost.within_budget else 'NO'}"
        )
    total = sum(cost.share for cost in costs)
    verdict = "yes" if total < TOTAL_CORES else "NO"
    lines.append(
        f"{'all groups, shares summed':<36} {'':>8} {'':>5} {'':>7} {'':>7} {'':>7} {TOTAL_CORES:>7.2f} {total:>6.3f}"
        f" {sum(cost.missed for cost in costs):>6.0f} {sum(cost.samples for cost in costs):>8,.0f}"
        f"  {verdict if rules_cpu is None else '(bound)'}"
    )
    if rules_cpu is not None:
        lines.append(
            f"{'all groups, CPU they add (cores)':<36} {'':>8} {'':>5} {'':>7} {'':>7} {'':>7} {TOTAL_CORES:>7.2f}"
            f" {rules_cpu:>6.3f} {'':>6} {'':>8}  {'yes' if rules_cpu < TOTAL_CORES else 'NO'}"
        )
    return "\n".join(lines)


def within_budget(costs: Sequence[GroupCost], rules_cpu: float | None = None) -> bool:
    """Every group within its share of its interval with no missed iteration, and all together within TOTAL_CORES:
    the CPU the rules add (`rules_cpu`, cores) when known, else the groups' shares of their intervals summed."""
    total = rules_cpu if rules_cpu is not None else sum(cost.share for cost in costs)
    return all(cost.within_budget for cost in costs) and total < TOTAL_CORES
