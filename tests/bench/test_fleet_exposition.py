"""bench/fleet_exposition.py and the fleet bench's targets: every node serves the exporter's template with its own
names, in the text format Prometheus scrapes, its counters growing and its walked families continuing the history."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_exposition import GPUS, SLOT_NODE, NodeTemplate, scraped_sample, slot_namespace, slot_pod
from fleet_prometheus import (
    BACKFILLED,
    DCGM_FAMILIES,
    DCGM_UP,
    JOB,
    POD_FAMILIES,
    SCRAPE_INTERVAL,
    FleetTargets,
    fleet,
    history_series,
)

UUIDS = tuple(f"GPU-0000000{k}-aaaa-bbbb-cccc-dddddddddddd" for k in range(GPUS))
NOW = 1_800_000_000


def _snapshot(step: int) -> str:
    """An exposition of the exporter's shape on the slot node: the walked families, a counter that grows, a held
    gauge, a cycling gauge, a clock and a label-less self-metric."""
    parts: list[str] = []
    for name in POD_FAMILIES:
        parts.append(f"# HELP {name} x\n# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}\n")
        parts += [
            f'{name}{{node="{SLOT_NODE}",namespace="{slot_namespace(k)}",pod="{slot_pod(k)}",container="main",'
            f'gpu="{k}",uuid="{UUIDS[k]}"}} 1\n'
            for k in range(GPUS)
        ]
    for name in (*DCGM_FAMILIES, "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"):
        kind = "counter" if name.endswith(("CONSUMPTION", "COUNTER")) else "gauge"
        parts.append(f"# HELP {name} x\n# TYPE {name} {kind}\n")
        changing = {"DCGM_FI_DEV_GPU_TEMP": str(40 + step), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": str(10 * step)}
        value = changing.get(name, "7")
        parts += [
            f'{name}{{gpu="{k}",UUID="{UUIDS[k]}",modelName="NVIDIA H100 80GB HBM3",Hostname="{SLOT_NODE}",'
            f'container="main",namespace="{slot_namespace(k)}",pod="{slot_pod(k)}"}} {value}\n'
            for k in range(GPUS)
        ]
    parts.append(f"# HELP {DCGM_UP} x\n# TYPE {DCGM_UP} gauge\n")
    parts += [f'{DCGM_UP}{{gpu="{k}",UUID="{UUIDS[k]}",Hostname="{SLOT_NODE}"}} 1\n' for k in range(GPUS)]
    parts.append("# HELP gpu_pulse_snapshot_timestamp_seconds x\n# TYPE gpu_pulse_snapshot_timestamp_seconds gauge\n")
    parts.append(f"gpu_pulse_snapshot_timestamp_seconds {1_700_000_000 + step}\n")
    parts.append("# HELP gpu_pulse_http_connections x\n# TYPE gpu_pulse_http_connections gauge\n")
    parts.append("gpu_pulse_http_connections 0\n")
    return "".join(parts)


TEMPLATE = NodeTemplate.parse([_snapshot(0), _snapshot(1), _snapshot(2)], seconds=2.0)


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in found, f"a series twice: {key}"
            found[key] = sample.value
    return found


def test_the_template_keeps_the_exporters_families_and_how_each_series_changes() -> None:
    names = [family.name for family in TEMPLATE.families]
    assert names[: len(POD_FAMILIES)] == list(POD_FAMILIES)
    assert TEMPLATE.uuids == UUIDS
    lines = {line.sample.partition("{")[0]: line for family in TEMPLATE.families for line in family.lines}
    assert lines["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"].rate == 10.0  # 0 -> 20 over 2 s
    assert lines["DCGM_FI_DEV_GPU_TEMP"].values == ("40", "41", "42")
    assert lines["gpu_pulse_snapshot_timestamp_seconds"].clock
    assert lines["gpu_pulse_http_connections"].slot is None
    slots = [line.slot for line in TEMPLATE.families[0].lines]
    assert slots == list(range(GPUS))
    assert TEMPLATE.series == sum(len(family.lines) for family in TEMPLATE.families)


def test_every_node_serves_the_template_with_its_own_names_and_no_series_twice() -> None:
    placements = fleet(pods=40, namespaces=3, namespace_pods=16)  # 5 nodes
    targets = FleetTargets(placements, TEMPLATE, shards=3)
    bodies = [targets.render(shard, NOW) for shard in range(3)]
    assert not any("slot-" in body for body in bodies)
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for body in bodies:
        for key, value in _series(body).items():
            assert key not in series, f"a series in two shards: {key}"
            series[key] = value
    assert len(series) == 5 * TEMPLATE.series == targets.series
    pods = {(p.node, p.namespace, p.pod) for p in placements}
    served = {
        (labels["node"], labels["namespace"], labels["pod"]) for _, pairs in series if "pod" in (labels := dict(pairs))
    }
    assert served == pods
    for _, pairs in series:
        labels = dict(pairs)
        assert labels["instance"].startswith("gpu-pulse-exporter-") and labels["node"].startswith("gpu-")
        if "Hostname" in labels:
            assert labels["Hostname"] == labels["node"]


def test_counters_grow_gauges_change_and_the_clock_is_the_scrapes() -> None:
    placements = fleet(pods=16, namespaces=2, namespace_pods=8)
    targets = FleetTargets(placements, TEMPLATE, shards=1)
    before, after = _series(targets.render(0, NOW)), _series(targets.render(0, NOW + SCRAPE_INTERVAL))
    assert before.keys() == after.keys()
    replays = [key for key in before if key[0] == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total"] or [
        key for key in before if key[0] == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    ]
    assert replays and all(after[key] - before[key] == 10.0 * SCRAPE_INTERVAL for key in replays)
    temps = [key for key in before if key[0] == "DCGM_FI_DEV_GPU_TEMP"]
    assert all(after[key] != before[key] for key in temps)
    clocks = [value for key, value in after.items() if key[0] == "gpu_pulse_snapshot_timestamp_seconds"]
    assert clocks == [NOW + SCRAPE_INTERVAL] * 2


def test_the_history_writes_the_very_series_the_scrapes_continue() -> None:
    placements = fleet(pods=24, namespaces=2, namespace_pods=8)
    scraped = _series(FleetTargets(placements, TEMPLATE, shards=1).render(0, NOW))
    expected = {
        (name, tuple(sorted((*pairs, ("job", JOB)))))
        for name, pairs in scraped
        if name in BACKFILLED or name + "_total" in BACKFILLED
    }
    history = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for _, entries in history_series(placements, TEMPLATE)
        for _, prefix in entries
        for family in text_string_to_metric_families(prefix + "1\n")
        for sample in family.samples
    }
    assert history == expected and len(history) == 24 * len(BACKFILLED)


_LABEL_NAMES = st.sampled_from(["gpu", "UUID", "pod", "namespace", "node", "err_msg", "le", "modelName"])
_LABEL_VALUES = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@given(st.dictionaries(_LABEL_NAMES, _LABEL_VALUES, max_size=5), st.booleans())
def test_the_scrape_adds_node_and_instance_and_keeps_the_exporters_own(labels: dict[str, str], job: bool) -> None:
    pairs = ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())
    sample = f"DCGM_FI_DEV_GPU_UTIL{{{pairs}}}" if labels else "DCGM_FI_DEV_GPU_UTIL"
    written = scraped_sample(sample, "gpu-0001", "gpu-pulse-exporter-abcde", JOB if job else None)
    (family,) = text_string_to_metric_families(written + " 1\n")
    (parsed,) = family.samples
    expected = {"node": "gpu-0001"} | labels | {"instance": "gpu-pulse-exporter-abcde"}
    assert parsed.labels == expected | ({"job": JOB} if job else {})


@given(
    st.lists(
        st.tuples(st.dictionaries(_LABEL_NAMES, _LABEL_VALUES, min_size=1, max_size=4), st.floats(-1e12, 1e12)),
        min_size=1,
        max_size=6,
        unique_by=lambda pair: tuple(sorted(pair[0].items())),
    )
)
def test_the_template_parses_every_sample_and_value_the_exporter_writes(
    series: list[tuple[dict[str, str], float]],
) -> None:
    samples = [
        "gauge_a{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"
        for labels, _ in series
    ]
    lines = [f"{sample} {value!r}\n" for sample, (_, value) in zip(samples, series, strict=True)]
    gpus = "".join(f'gpu_up{{gpu="{k}",UUID="{UUIDS[k]}"}} 1\n' for k in range(GPUS))
    text = "# HELP gauge_a x\n# TYPE gauge_a gauge\n" + "".join(lines) + "# TYPE gpu_up gauge\n" + gpus
    template = NodeTemplate.parse([text, text], seconds=1.0)
    (first, _) = template.families
    assert [line.sample for line in first.lines] == samples
    assert [line.values for line in first.lines] == [(repr(value), repr(value)) for _, value in series]
