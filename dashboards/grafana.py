"""A small layer over grafana-foundation-sdk: a dashboard with a datasource variable, filter variables, rows and panels
that always carry a title, a description, a unit and Prometheus queries on the dashboard's datasource.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gdb
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import (
    ReduceDataOptions,
    StackingConfig,
    VizLegendOptions,
    VizTooltipOptions,
)
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    StackingMode,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DynamicConfigValue,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from exporter.catalogue import Dialect
from rules.dialect import Vocabulary
from rules.promql import metric_names
from rules.recording import recording_intervals
from toolkit.durations import parse_duration

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# The dashboard schema written: current Grafana's. Grafana migrates a dashboard of an older schemaVersion on every load,
# one version at a time (grafana/grafana apps/dashboard/pkg/migration/schemaversion, v37.go to v41.go: legends as
# objects with showLegend, table cellOptions, timeSeriesTable transformations, refresh a string, no
# timepicker.time_options); the SDK pinned here writes 36. These dashboards already have the shape those migrations
# produce (tests/dashboards check each rule), so they are written as 41. Grafana's own latest v1 schema is 42, and its
# migrations 42 and 43 change only what these dashboards do not contain (custom.hideFrom overrides, formatTime
# transformations; checked too): a Grafana at 42 or later loads them unchanged.
SCHEMA_VERSION = 41
# The variable of the `cluster` label. Hidden unless the dashboards are generated for several clusters
# (`python -m dashboards.generate --multi-cluster`): where series carry no cluster label, a shown variable is an empty
# dropdown. Hidden, it stays `All` (`.*`, which also matches an absent label). The same choice as the Kubernetes
# monitoring mixins' `showMultiCluster` (off by default).
CLUSTER_VARIABLE = "cluster"

# The least step of a panel over the recorded series (Grafana's "Min interval", the panel's `interval`): the recording
# groups write one sample per interval (rules/recording.py), so a finer step draws each sample again at each step in
# between, at that many times the cost (at the default 15-s step over an hour, four times: docs/performance.md).
# `min_interval=RECORDED` is the interval of the fastest group among the recorded series the panel's queries read: a
# step shorter draws no new value, a longer one would skip values of that series (a series of a slower group read
# beside it, such as the workload relabel joined to a per-pod figure, is held between its evaluations: Prometheus
# looks back 5 minutes for it).
RECORDED = "recorded"
# Which group interval writes each recorded series: the same groups, names and intervals in both dialects.
RECORDED_EVERY = recording_intervals(Vocabulary.of(Dialect.PROMETHEUS))


def recorded_step(queries: tuple[Query, ...]) -> str:
    """The interval of the fastest recording group among the recorded series `queries` read; ValueError if none."""
    every = [RECORDED_EVERY[name] for q in queries for name in metric_names(q.expr) if name in RECORDED_EVERY]
    if not every:
        raise ValueError(f"a panel over recorded series reads none: {[q.expr for q in queries]}")
    return min(every, key=parse_duration)


# Every board, for the links each one carries to the others (Grafana's dashboard links, top right): by uid, with the
# title of its link. Each link keeps the time range, the data source and the cluster (`${var:queryparam}`), and
# nothing else: the boards' `job` variables name different jobs (exporters, adapter).
BOARD_LINKS: tuple[tuple[str, str], ...] = (
    ("gpu-pulse-cluster", "Cluster"),
    ("gpu-pulse-node-prometheus", "Node (prometheus dialect)"),
    ("gpu-pulse-node-dcgm", "Node (dcgm dialect)"),
    ("gpu-pulse-namespace", "Namespace"),
    ("gpu-pulse-waste", "Waste"),
    ("gpu-pulse-autoscaling", "Autoscaling"),
    ("gpu-pulse-inference", "LLM serving"),
)
CARRIED = "${datasource:queryparam}&${cluster:queryparam}"


def board_url(uid: str, *params: str) -> str:
    """A link to the board `uid` with the data source and cluster of this one, and `params` (`var-x=...`)."""
    return f"/d/{uid}?" + "&".join((CARRIED, *params))


@dataclass(frozen=True, slots=True)
class DrillDown:
    """A table's data link: a row opens the board `uid` with each of its `variables` set to the row's value of the
    field (label) of the same name, over the table's time range."""

    uid: str
    title: str
    variables: tuple[str, ...]

    def url(self) -> str:
        chosen = (f"var-{name}=${{__data.fields.{name}}}" for name in self.variables)
        return board_url(self.uid, *chosen, "${__url_time_range}")


NAMESPACE_DRILL = DrillDown("gpu-pulse-namespace", "Open the namespace's board", ("namespace",))
WORKLOAD_DRILL = DrillDown("gpu-pulse-namespace", "Open the workload on the namespace board", ("namespace", "workload"))


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True, slots=True)
class Variable:
    """A query variable over label values; `All` means the regex `.*`, which also matches an absent label."""

    name: str
    label: str
    query: str  # label_values(...) over a series
    multi: bool = True
    description: str = ""
    current: str | None = None  # the value selected when the dashboard opens (default: All)
    include_all: bool = True  # without `All`, Grafana opens on the first value (one node, not every node's panels)


@dataclass(slots=True)
class Board:
    uid: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    _builder: gdb.Dashboard = field(init=False)
    _next_id: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        self._builder = (
            gdb.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["gpu-pulse", *self.tags])
            .time("now-1h", "now")
            .refresh("30s")
            .timezone("browser")
            .tooltip(DashboardCursorSync.CROSSHAIR)
            .editable()
            .with_variable(
                gdb.DatasourceVariable("datasource")
                .label("Data source")
                .description("The Prometheus (or Thanos, Mimir, VictoriaMetrics) holding gpu-pulse metrics and rules.")
                .type("prometheus")
            )
        )
        for uid, title in BOARD_LINKS:
            if uid != self.uid:
                self._builder.link(
                    gdb.DashboardLink(title)
                    .type(DashboardLinkType.LINK)
                    .url(board_url(uid))
                    .keep_time(True)
                    .tooltip(f"The gpu-pulse {title.lower()} board, same time range, data source and cluster")
                    .icon("dashboard")
                )
        for var in self.variables:
            variable = (
                gdb.QueryVariable(var.name)
                .label(var.label)
                .description(var.description or var.label)
                .datasource(DATASOURCE)
                .query(var.query)
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                .sort(VariableSort.ALPHABETICAL_ASC)
                .multi(var.multi)
                .include_all(var.include_all)
            )
            if var.include_all:
                variable.all_value(".*")
            if var.current is not None:
                variable.current(VariableOption(selected=True, text=var.current, value=var.current))
            self._builder.with_variable(variable)

    def _id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def row(self, title: str) -> Board:
        self._builder.with_row(gdb.Row(title).id(self._id()))
        return self

    def _targets(
        self, queries: tuple[Query, ...], instant: bool, table: bool = True
    ) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
        out: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
        for ref, q in zip(REF_IDS, queries, strict=False):
            target = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
            if q.legend:
                target.legend_format(q.legend)
            if instant:
                target.instant()
                if table:
                    target.format(PromQueryFormat.TABLE)
            else:
                target.range()
            out.append(target)
        if len(out) != len(queries):
            raise ValueError(f"too many queries in one panel: {len(queries)}")
        return out

    def timeseries(
        self,
        title: str,
        description: str,
        unit: str,
        *queries: Query,
        width: int = 12,
        height: int = 8,
        stacked: bool = False,
        max_value: float | None = None,
        min_interval: str | None = None,
        limits: int = 0,
    ) -> Board:
        """A time series panel; `min_interval` (Grafana's "Min interval") is the least step its queries are sent at:
        RECORDED for series written once per recording interval (the fastest of those the queries read). The last
        `limits` queries are the bounds of the others (a power limit, a slowdown temperature): dashed, not filled."""
        panel = (
            timeseries.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(self._targets(queries, instant=False))
            .span(width)
            .height(height)
            .min(0)
            .fill_opacity(10)
            .legend(
                VizLegendOptions()
                .display_mode(LegendDisplayMode.LIST)
                .placement(LegendPlacement.BOTTOM)
                .show_legend(True)
            )
            .tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
        )
        if max_value is not None:
            panel.max(max_value)
        if min_interval is not None:
            panel.interval(recorded_step(queries) if min_interval == RECORDED else min_interval)
        if stacked:
            panel.stacking(StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(40)
        for ref in REF_IDS[len(queries) - limits : len(queries)] if limits else ():
            panel.override_by_query(
                ref,
                [
                    DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
                    DynamicConfigValue(id_val="custom.fillOpacity", value=0),
                ],
            )
        self._builder.with_panel(panel)
        return self

    def stat(
        self,
        title: str,
        description: str,
        unit: str,
        query: Query,
        *,
        width: int = 4,
        height: int = 4,
        instant: bool = False,
    ) -> Board:
        """A single figure: the last value of a range query, or (`instant`) one value at the end of the range, for a
        figure over the whole range (`[$__range]`) that would otherwise be computed again at every step."""
        panel = (
            stat.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(self._targets((query,), instant=instant, table=False))
            .span(width)
            .height(height)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        )
        self._builder.with_panel(panel)
        return self

    def table(
        self,
        title: str,
        description: str,
        unit: str,
        *queries: Query,
        width: int = 24,
        height: int = 8,
        drill_down: DrillDown | None = None,
    ) -> Board:
        """A table of instant values; `drill_down` makes each row a link to the board that details it."""
        panel = (
            table.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(self._targets(queries, instant=True))
            .span(width)
            .height(height)
            .show_header(True)
        )
        if drill_down is not None:
            panel.data_links([gdb.DashboardLink(drill_down.title).url(drill_down.url())])
        self._builder.with_panel(panel)
        return self

    def to_json(self, *, multi_cluster: bool = False) -> str:
        """The dashboard JSON, for current Grafana (SCHEMA_VERSION); the cluster variable shown with `multi_cluster`."""
        document: Any = json.loads(json.dumps(self._builder.build(), cls=JSONEncoder))
        document["schemaVersion"] = SCHEMA_VERSION
        for variable in document["templating"]["list"]:
            if variable["name"] == CLUSTER_VARIABLE:
                variable["hide"] = VariableHide.DONT_HIDE.value if multi_cluster else VariableHide.HIDE_VARIABLE.value
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def job_variable(job: str, series: str, role: str) -> Variable:
    """The `job` variable: the job label of gpu-pulse's own targets (`role`: exporters or adapter), read from
    `series`, which only those targets publish, and opened on `job`, the job name the dashboards were generated for."""
    return Variable(
        "job",
        "Job",
        f'label_values({series}{{cluster=~"$cluster"}}, job)',
        multi=False,
        description=f"The Prometheus job that scrapes the gpu-pulse {role}.",
        current=job,
    )


def matcher(**labels: str) -> str:
    """`{a=~"$a", ...}` from label -> variable name (the variable's value is a regex)."""
    return "{" + ", ".join(f'{label}=~"${var}"' for label, var in labels.items()) + "}"
