"""What each node of bench/fleet_prometheus.py's fleet serves: the real exporter's exposition, captured once.

The exporter (`python -m exporter --simulate`, its default field set and dialect unless told otherwise) runs on a
simulated 8 x H100 node whose eight pods each hold one GPU, the fleet's shape, and is scraped `snapshots` times a
second apart once its pods are attributed. That text is the template: every node of the fleet serves exactly its
series, with the node's own name, GPU UUIDs and pods written over the template's placeholders, and the labels the
shipped scrape configuration adds (deploy/overlays/plain: `node`, `instance` = the node's exporter pod; `job` comes
from the target).

Values: the families the adapter's queries and the history read (fleet_prometheus.FAMILIES) follow that bench's
random walk, so that the scraped series continue the backfilled ones; every other gauge cycles through the values the
exporter served in the snapshots (a node's offset staggers them), every counter grows at the rate it grew between the
first and last snapshot, and `*_timestamp_seconds` is the scrape's time. So each series changes as the exporter's
does, and Prometheus stores samples of about the size it stores for a real fleet.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

GPUS = 8
SLOT_NODE = "slot-node"
MODEL = "H100-SXM5-80GB"
SETTLE_SECONDS = 3.0  # past the first poll and the first kubelet answer: pod labels and per-pod series are there
TEXT_FORMAT = "text/plain;version=0.0.4"
_UUID = re.compile(r'(?:UUID|uuid)="(GPU-[0-9a-f-]+)"')
_GPU_INDEX = re.compile(r'\bgpu="(\d+)"')


def slot_namespace(slot: int) -> str:
    return f"slot-ns-{slot}"


def slot_pod(slot: int) -> str:
    return f"slot-pod-{slot}"


def slot_scenario() -> dict[str, object]:
    """A simulated node of the fleet's shape: 8 x H100, pod `slot-pod-k` (namespace `slot-ns-k`) holding GPU k alone,
    loads from busy training to nearly idle, as simulation/scenarios/h100x8.yaml spreads them."""
    baselines = (86, 84, 60, 50, 45, 35, 18, 10)
    gpus = [
        {
            "model": MODEL,
            "load": {"baseline": b, "waves": [{"amplitude": 8, "period_s": 240, "phase": k / 8}], "noise": 3},
        }
        for k, b in enumerate(baselines)
    ]
    processes = [{"pid": 41000 + k, "gpu": k, "name": "python3", "memory_mib": 20000 + 6000 * k} for k in range(GPUS)]
    pods = [
        {
            "namespace": slot_namespace(k),
            "name": slot_pod(k),
            "containers": [{"name": "main", "gpus": [{"gpu": k}], "pids": [41000 + k]}],
        }
        for k in range(GPUS)
    ]
    return {
        "description": "a node of bench/fleet_prometheus.py's fleet: 8 x H100, one pod per GPU",
        "seed": 8,
        "node": SLOT_NODE,
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": gpus,
        "processes": processes,
        "pods": pods,
    }


def capture(snapshots: int, *args: str) -> tuple[list[str], float]:
    """`snapshots` answers of the real exporter on the slot scenario, a second apart, once its eight pods are in
    (`args`: the exporter's flags, such as --field-set and --dialect), and the seconds from the first to the last."""
    from exporter_pipeline import ExporterProcess  # bench/: the exporter as its own process

    with tempfile.TemporaryDirectory(prefix="gpu-pulse-slot-") as tmp:
        scenario = Path(tmp) / "slot.yaml"
        scenario.write_text(yaml.safe_dump(slot_scenario()))
        exporter = ExporterProcess(str(scenario), *args, interval=1.0)
        try:
            time.sleep(SETTLE_SECONDS)
            texts: list[str] = []
            times: list[float] = []
            deadline = time.monotonic() + 60
            while len(texts) < snapshots:
                text = _scrape(exporter.url)
                if all(f'pod="{slot_pod(k)}"' in text for k in range(GPUS)):
                    texts.append(text)
                    times.append(time.monotonic())
                elif time.monotonic() > deadline:
                    raise RuntimeError("the slot exporter never served its eight pods")
                time.sleep(1.0)
            return texts, times[-1] - times[0]
        finally:
            exporter.stop()


def save(texts: Sequence[str], seconds: float, path: Path) -> None:
    """The snapshots, for another process of the bench to parse (`load`)."""
    path.write_text(json.dumps({"seconds": seconds, "texts": list(texts)}))


def load(path: Path) -> NodeTemplate:
    saved = json.loads(path.read_text())
    return NodeTemplate.parse(saved["texts"], float(saved["seconds"]))


def _scrape(url: str) -> str:
    request = urllib.request.Request(url + "/metrics", headers={"Accept": TEXT_FORMAT})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


# ---- the template ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """One series of the template: `name{labels}` (placeholders in), the GPU slot it belongs to (None: the node's),
    and its value's rule: `values` cycled (a gauge), `start` + `rate` per second (a counter that grew), the time
    (`clock`), or `walk` (the bench's walk of that family)."""

    sample: str
    slot: int | None
    values: tuple[str, ...]
    rate: float = 0.0
    clock: bool = False


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    kind: str  # the TYPE line's: gauge, counter, untyped...
    header: str  # its HELP and TYPE lines
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class NodeTemplate:
    """The exporter's families in its order, each series' sample and values; `uuids[k]`: GPU k's UUID."""

    families: tuple[Family, ...]
    uuids: tuple[str, ...]
    seconds: float  # between the first and last snapshot: the counters' rates are over it

    @property
    def series(self) -> int:
        return sum(len(family.lines) for family in self.families)

    @classmethod
    def parse(cls, texts: Sequence[str], seconds: float) -> NodeTemplate:
        """The template from snapshots of one exporter (the first's series; the others' values of the same series).
        Lines are split at "\n" alone, as the text format ends them: str.splitlines would also split a label value
        at \x1c-\x1e, \x85 or \u2028."""
        if not texts:
            raise ValueError("no snapshot")
        later = [_samples(text) for text in texts]
        headers: dict[str, list[str]] = {}
        kinds: dict[str, str] = {}
        order: list[str] = []
        members: dict[str, list[str]] = {}
        for raw in texts[0].split("\n"):
            if raw.startswith("# HELP ") or raw.startswith("# TYPE "):
                name = raw.split(" ", 3)[2]
                if name not in headers:
                    headers[name], members[name] = [], []
                    order.append(name)
                headers[name].append(raw + "\n")
                if raw.startswith("# TYPE "):
                    kinds[name] = raw.split(" ", 3)[3].strip()
            elif raw and not raw.startswith("#"):
                sample = raw.rpartition(" ")[0]
                members[_family_of(sample, order)].append(sample)
        uuids = _gpu_uuids(texts[0])
        slot_of = {uuid: k for k, uuid in enumerate(uuids)}
        families: list[Family] = []
        for name in order:
            kind = kinds.get(name, "untyped")
            lines: list[Line] = []
            for sample in members[name]:
                values = tuple(snapshot.get(sample, later[0][sample]) for snapshot in later)
                found = _UUID.search(sample)
                slot = slot_of.get(found.group(1)) if found else None
                rate = 0.0
                if kind == "counter" and seconds > 0:
                    rate = max(0.0, (float(values[-1]) - float(values[0])) / seconds)
                clock = name.endswith("_timestamp_seconds") and kind == "gauge"
                lines.append(Line(sample, slot, values, rate, clock))
            families.append(Family(name, kind, "".join(headers[name]), tuple(lines)))
        return cls(tuple(families), uuids, seconds)


def _samples(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for raw in text.split("\n"):
        if raw and not raw.startswith("#"):
            sample, _, value = raw.rpartition(" ")
            found[sample] = value
    return found


def _family_of(sample: str, order: Sequence[str]) -> str:
    """The family a sample belongs to: the last declared one its name is, or begins with plus a suffix (counters'
    `_total`, histograms' `_bucket`, `_sum`, `_count`)."""
    name = sample.partition("{")[0]
    for family in reversed(order):
        if name == family or name.startswith(family + "_"):
            return family
    raise ValueError(f"a sample before its family's TYPE line: {name}")


def _gpu_uuids(text: str) -> tuple[str, ...]:
    """GPU k's UUID, from the lines that name both (the device series)."""
    uuids: dict[int, str] = {}
    for raw in text.split("\n"):
        found, index = _UUID.search(raw), _GPU_INDEX.search(raw)
        if found and index and not raw.startswith("#"):
            uuids.setdefault(int(index.group(1)), found.group(1))
    if sorted(uuids) != list(range(GPUS)):
        raise ValueError(f"the template names GPUs {sorted(uuids)}, not 0..{GPUS - 1}")
    return tuple(uuids[k] for k in range(GPUS))


# ---- a node of the fleet --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What a fleet node writes over the template: its name, its exporter pod, GPU k's UUID and pod k's namespace
    and name (k = 0..7)."""

    node: str
    exporter_pod: str
    uuids: tuple[str, ...]
    pods: tuple[tuple[str, str], ...]

    def replacements(self, template: NodeTemplate) -> dict[str, str]:
        names = {SLOT_NODE: self.node}
        names |= dict(zip(template.uuids, self.uuids, strict=True))
        for k, (namespace, pod) in enumerate(self.pods):
            names[slot_namespace(k)], names[slot_pod(k)] = namespace, pod
        return names


def substituter(template: NodeTemplate) -> Callable[[str, Mapping[str, str]], str]:
    """A function writing a node's names over the template's placeholders in one text (one regex pass)."""
    placeholders = [SLOT_NODE, *template.uuids]
    placeholders += [name for k in range(GPUS) for name in (slot_namespace(k), slot_pod(k))]
    pattern = re.compile("|".join(re.escape(p) for p in sorted(placeholders, key=len, reverse=True)))

    def substitute(text: str, names: Mapping[str, str]) -> str:
        return pattern.sub(lambda m: names[m.group(0)], text)

    return substitute


def scraped_sample(sample: str, node: str, exporter_pod: str, job: str | None) -> str:
    """`sample` with what the shipped scrape configuration adds (honor_labels: a label the exporter set is kept):
    `node` unless the series has one, `instance` (the exporter pod); `job` too where given (the history's lines)."""
    name, brace, labels = sample.partition("{")
    pairs = labels[:-1] if brace else ""
    extra = [] if re.search(r'(^|,)node="', pairs) else [f'node="{node}"']
    extra.append(f'instance="{exporter_pod}"')
    if job is not None:
        extra.append(f'job="{job}"')
    return f"{name}{{{','.join(filter(None, [pairs, *extra]))}}}"
