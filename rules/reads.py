"""What each alert reads, per dialect, for rules/README.md: the series families, and for the dcgm dialect which of
them dcgm-exporter's default-counters.csv leaves out and the exporter serves anyway (`ALWAYS_SERVED`)."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalogue import ALWAYS_SERVED, BY_KEY, DCGM_DEFAULT_SET, Dialect
from rules.model import Alert
from rules.promql import metric_names

INTRO = """
## What the alerts read

Every alert fires from series the exporter serves in its dialect, with its default field set and with
dcgm-exporter's `default-counters.csv` as `--collectors` (`tests/rules/test_alerts_can_fire.py` fires each one from the
real exporter's series with both). The memory alerts read only what that file has (used and free framebuffer). For
ECC, the pending row remap, the clock-event reasons and the XID count (the file's last-XID gauge cannot show the same
XID twice) the file has nothing to read instead, so the exporter serves
what the shipped alerts read whatever `--collectors` says (marked `+` below) and names what it adds at start-up: a
few series per GPU rather than an alert that silently never fires. No alert needs an optional field.
`docs/runbooks.md` says what each alert needs of the GPU itself (ECC mode, row remapping).

| alert | prometheus dialect | dcgm dialect |
|---|---|---|
"""


def _always_served_names(dialect: Dialect) -> frozenset[str]:
    renderings = (BY_KEY[key].rendering(dialect) for key in ALWAYS_SERVED)
    return frozenset(r.name for r in renderings if r is not None)


def _names(expr: str, dialect: Dialect) -> str:
    added = _always_served_names(dialect) if dialect is Dialect.DCGM else frozenset()
    marked = (f"`{n}`+" if n in added and n not in DCGM_DEFAULT_SET else f"`{n}`" for n in sorted(metric_names(expr)))
    return ", ".join(marked)


def section(by_dialect: Mapping[Dialect, tuple[Alert, ...]]) -> str:
    """The README section: one row per alert (in the prometheus dialect's order)."""
    dcgm = {a.alert: a for a in by_dialect[Dialect.DCGM]}
    rows = "".join(
        f"| `{a.alert}` | {_names(a.expr, Dialect.PROMETHEUS)} | {_names(dcgm[a.alert].expr, Dialect.DCGM)} |\n"
        for a in by_dialect[Dialect.PROMETHEUS]
    )
    return INTRO + rows
