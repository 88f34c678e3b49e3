"""Device series: the catalogue families, `up`, and `nvidia_gpu_info`, for every GPU and MIG instance of a snapshot.

Rendering cost is dominated by label strings, so they are built once per device identity (and, in the dcgm dialect,
per set of pods on the device) and kept while the device stays in the snapshots; each sample is then one cached
prefix plus its value. A cache entry unused by a snapshot is dropped with it, so pod churn cannot grow the cache.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace

from exporter.catalogue import DCGM_UP, KEPT_WHILE_DOWN, PROM_INFO, PROM_INFOROM_INFO, PROM_UP, Dialect, MetricType
from exporter.exposition.families import FamilyHeader, FamilyPlan, MemberPlan
from exporter.exposition.labels import DEFAULT_LABEL_FIELDS, dcgm_pod_pairs, device_pairs, info_pairs, inforom_pairs
from exporter.exposition.textformat import escape_label_value, format_value, label_pairs
from exporter.exposition.xid_names import xid_name
from exporter.snapshot import DeviceReading, DraClaim, GpuIdentity, MigIdentity, PodDeviceUse, PodRef, Snapshot

Families = list[tuple[FamilyHeader, list[str]]]
_Cache = dict[Hashable, "DeviceLabels"]

UP_HELP = "1 while the GPU answers NVML, 0 after it was lost (its other series are then absent, except its XIDs)."
INFO_HELP = (
    "Identity of a GPU or MIG instance (value 1): PCI bus, device node, driver, CUDA and NVML versions, brand, serial, "
    "VBIOS, MIG mode."
)
INFOROM_HELP = "InfoROM versions of a GPU (value 1): the image and the OEM, ECC and power objects (empty: not given)."


@dataclass(slots=True)
class DeviceLabels:
    """The label strings of one device in one dialect, with per-member sample prefixes filled on first use."""

    variants: tuple[str, ...]  # `gpu="0",UUID="..."...`: one per pod holding the device (dcgm), else one
    plain: str  # the device labels without pod labels (up series)
    prefixes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    info: str | None = None  # the whole `nvidia_gpu_info` line (prometheus dialect)
    inforom: str | None = None  # the whole `nvidia_gpu_inforom_info` line ("" when the GPU gives no version)

    def prefix(self, member: MemberPlan) -> tuple[str, ...]:
        """`name{labels,const} ` for each variant (bitmask members: for each variant and each bit)."""
        cached = self.prefixes.get(member.index)
        if cached is None:
            if member.bits:
                cached = tuple(f"{member.name}{{{v}{member.const}{b}}} " for v in self.variants for b, _ in member.bits)
            else:
                cached = tuple(f"{member.name}{{{v}{member.const}}} " for v in self.variants)
            self.prefixes[member.index] = cached
        return cached


Holder = tuple[PodRef, DraClaim | None]


def _pods_on_devices(pods: tuple[PodDeviceUse, ...]) -> dict[str, tuple[Holder, ...]]:
    """Pods (with the DRA claim they hold the device through) per device UUID, de-duplicated by (namespace, pod,
    container), in a stable order."""
    found: dict[str, dict[tuple[str, str, str], Holder]] = {}
    for use in pods:
        ref = use.pod
        found.setdefault(use.device_uuid, {}).setdefault((ref.namespace, ref.name, ref.container), (ref, use.claim))
    return {uuid: tuple(refs[k] for k in sorted(refs)) for uuid, refs in found.items()}


class DeviceSeries:
    """Renders the device families of a dialect; keeps the label cache between snapshots."""

    def __init__(
        self,
        dialect: Dialect,
        plan: tuple[FamilyPlan, ...],
        hostname_label: str = "Hostname",
        label_fields: tuple[tuple[str, str], ...] = DEFAULT_LABEL_FIELDS,
    ) -> None:
        self._dialect = dialect
        self._hostname_label = hostname_label
        self._label_fields = tuple(sorted(label_fields, key=lambda field: field[1]))
        self._plan = plan
        self._node = ""
        self._cache: dict[Hashable, DeviceLabels] = {}
        up_name = DCGM_UP if dialect is Dialect.DCGM else PROM_UP
        self._up = FamilyHeader.of(up_name, MetricType.GAUGE, UP_HELP)
        self._info = FamilyHeader.of(PROM_INFO, MetricType.GAUGE, INFO_HELP)
        self._inforom = FamilyHeader.of(PROM_INFOROM_INFO, MetricType.GAUGE, INFOROM_HELP)
        # catalogue key -> (position of its family in the plan, member) for each family it is published in (a
        # counters CSV may name a family otherwise than the catalogue, and the catalogue's name is then kept too)
        self._scalar: dict[str, tuple[tuple[int, MemberPlan], ...]] = {}
        self._vector: dict[str, tuple[tuple[int, MemberPlan], ...]] = {}
        for position, family in enumerate(plan):
            for member in family.members:
                target = self._scalar if member.vector_label is None else self._vector
                target[member.key] = (*target.get(member.key, ()), (position, member))

    def _labels(self, ident: GpuIdentity | MigIdentity, holders: tuple[Holder, ...], new: _Cache) -> DeviceLabels:
        key: Hashable = (ident, tuple((p.namespace, p.name, p.container, c) for p, c in holders))
        entry = new.get(key) or self._cache.get(key)
        if entry is None:
            pairs = device_pairs(ident, self._node, self._dialect, self._hostname_label, self._label_fields)
            base = label_pairs(pairs)
            variants = tuple(f"{base},{label_pairs(dcgm_pod_pairs(p, c))}" for p, c in holders) or (base,)
            entry = DeviceLabels(variants, base)
        new[key] = entry
        return entry

    def _rows(
        self, snapshot: Snapshot, up_lines: list[str], kept: list[tuple[DeviceReading, DeviceLabels]]
    ) -> list[tuple[DeviceReading, DeviceLabels]]:
        """The devices to render (GPUs that are up, and MIG instances of those) with their labels; fills `up_lines`,
        and `kept` with what lost GPUs still report (their XIDs, under the device labels alone)."""
        if snapshot.node != self._node:
            self._node, self._cache = snapshot.node, {}
        pods = _pods_on_devices(snapshot.pods) if self._dialect is Dialect.DCGM else {}
        new: _Cache = {}
        rows: list[tuple[DeviceReading, DeviceLabels]] = []
        down: set[str] = set()
        seen: set[str] = set()
        up_name = self._up.name
        for reading in snapshot.devices:
            ident = reading.identity
            if ident.uuid in seen:  # one series per device: a repeated UUID would repeat every series
                continue
            seen.add(ident.uuid)
            is_mig = isinstance(ident, MigIdentity)
            parent_down = isinstance(ident, MigIdentity) and ident.parent.uuid in down
            if not reading.up or parent_down:
                down.add(ident.uuid)
                if not is_mig:
                    entry = self._labels(ident, (), new)
                    up_lines.append(f"{up_name}{{{entry.plain}}} 0\n")
                    if reading.values or reading.vectors:
                        kept.append((_kept_while_down(reading), entry))
                continue
            entry = self._labels(ident, pods.get(ident.uuid, ()), new)
            if not is_mig:
                up_lines.append(f"{up_name}{{{entry.plain}}} 1\n")
            rows.append((reading, entry))
        self._cache = new
        return rows

    def render(self, snapshot: Snapshot, out: Families) -> int:
        """Append the up, info and catalogue families of `snapshot` to `out`; return the number of samples."""
        up_lines: list[str] = []
        kept: list[tuple[DeviceReading, DeviceLabels]] = []
        rows = self._rows(snapshot, up_lines, kept)
        count = len(up_lines)
        if up_lines:
            out.append((self._up, up_lines))
        if self._dialect is Dialect.PROMETHEUS:
            count += self._render_info(rows, out)
        rows += kept
        # one pass over the values each device has (not over every family for every device): a MIG instance has a
        # handful of the catalogue's measurements, a GPU two dozen
        buckets: list[list[str]] = [[] for _ in self._plan]
        scalar, vector = self._scalar, self._vector
        for reading, labels in rows:
            for key, native in reading.values.items():
                hits = scalar.get(key)
                if hits is None:
                    continue
                for position, member in hits:
                    lines = buckets[position]
                    if member.bits:
                        _render_bits(member, native, labels, lines)
                        continue
                    if member.xid_labels:
                        _render_xid(member, native, labels, lines)
                        continue
                    text = format_value(native) if member.gauge_as_is else member.publish(native)
                    if text is None:
                        continue
                    prefixes = labels.prefixes.get(member.index) or labels.prefix(member)
                    for prefix in prefixes:
                        lines.append(f"{prefix}{text}\n")
            if reading.vectors:
                for key, values in reading.vectors.items():
                    for position, member in vector.get(key, ()):
                        _render_vector(member, values, labels, buckets[position])
        for family, lines in zip(self._plan, buckets, strict=True):
            if lines:
                out.append((family.header, lines))
                count += len(lines)
        return count

    def _render_info(self, rows: list[tuple[DeviceReading, DeviceLabels]], out: Families) -> int:
        lines: list[str] = []
        inforom: list[str] = []
        for reading, labels in rows:
            if labels.info is None:
                labels.info = f"{PROM_INFO}{{{label_pairs(info_pairs(reading.identity, self._node))}}} 1\n"
                pairs = None if reading.is_mig else inforom_pairs(reading.gpu, self._node)
                labels.inforom = "" if pairs is None else f"{PROM_INFOROM_INFO}{{{label_pairs(pairs)}}} 1\n"
            lines.append(labels.info)
            if labels.inforom:
                inforom.append(labels.inforom)
        if lines:
            out.append((self._info, lines))
        if inforom:
            out.append((self._inforom, inforom))
        return len(lines) + len(inforom)


def _kept_while_down(reading: DeviceReading) -> DeviceReading:
    """Of a lost GPU's reading, only what stays true while it is gone: the XIDs it reported."""
    return replace(
        reading,
        values={k: v for k, v in reading.values.items() if k in KEPT_WHILE_DOWN},
        vectors={k: v for k, v in reading.vectors.items() if k in KEPT_WHILE_DOWN},
    )


def _render_xid(member: MemberPlan, native: float, labels: DeviceLabels, lines: list[str]) -> None:
    """dcgm-exporter 4.x: the last XID also as `err_code` and, named, as `err_msg` (after the other labels)."""
    text = member.publish(native)
    if text is None or native != native or native in (float("inf"), float("-inf")):
        return
    code = int(native)
    fragment = f'{member.const},err_code="{code}",err_msg="{escape_label_value(xid_name(code))}"'
    for variant in labels.variants:
        lines.append(f"{member.name}{{{variant}{fragment}}} {text}\n")


def _render_bits(member: MemberPlan, native: float, labels: DeviceLabels, lines: list[str]) -> None:
    if native != native or native in (float("inf"), float("-inf")):
        return
    mask = int(native)
    prefixes = labels.prefix(member)
    bits = member.bits
    n = len(bits)
    for i, prefix in enumerate(prefixes):
        lines.append(f"{prefix}{1 if mask & bits[i % n][1] else 0}\n")


def _render_vector(
    member: MemberPlan, vector: Mapping[str, float] | None, labels: DeviceLabels, lines: list[str]
) -> None:
    if not vector:
        return
    label = member.vector_label
    for key in sorted(vector):
        text = member.publish(vector[key])
        if text is None:
            continue
        fragment = f'{member.const},{label}="{escape_label_value(str(key))}"'
        for variant in labels.variants:
            lines.append(f"{member.name}{{{variant}{fragment}}} {text}\n")
