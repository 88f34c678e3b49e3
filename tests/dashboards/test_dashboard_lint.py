"""The committed dashboards: current with the generator, and each panel titled, described, with a unit, on the
datasource variable, rates over $__rate_interval, reading only series that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dashboards.generate import ROOT, allowed_names, boards, expressions, main, panels, render_all, stale_files
from dashboards.grafana import RECORDED_EVERY, SCHEMA_VERSION, Query, recorded_step
from dashboards.node import CHARTED, covered_keys
from exporter.catalogue import MEASUREMENTS, Dialect
from rules.inventory import adapter_names, exporter_names
from rules.jobs import Jobs
from rules.promql import metric_names
from toolkit.durations import parse_duration

FILES = sorted((ROOT / "dist").glob("*.json"))
RANGE_FUNCTION = re.compile(r"\b(rate|irate|increase|deriv|changes|predict_linear|[a-z]+_over_time)\(")


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def _variables(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in document["templating"]["list"]}


def test_committed_dashboards_match_the_generator() -> None:
    assert stale_files() == [], "regenerate with `python -m dashboards.generate`"
    assert {p.stem for p in FILES} == set(boards())


def test_dashboard_uids_are_unique_and_stable() -> None:
    uids = [_load(p)["uid"] for p in FILES]
    assert len(set(uids)) == len(uids)
    assert all(uid.startswith("gpu-pulse-") and len(uid) <= 40 for uid in uids)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_has_datasource_and_filter_variables(path: Path) -> None:
    document = _load(path)
    variables = _variables(document)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "cluster" in variables
    for name, variable in variables.items():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}", name
            one_node = name == "node" and path.stem.startswith("gpu-pulse-node-")  # opens on one (test below)
            assert one_node or (variable["includeAll"] and variable["allValue"] == ".*"), name
            assert variable["query"].startswith("label_values("), name
    stem = path.stem
    if "node" in stem:
        assert "node" in variables
    if "namespace" in stem or "autoscaling" in stem:
        assert "namespace" in variables


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_panel_is_titled_described_and_has_a_unit(path: Path) -> None:
    document = _load(path)
    ids: list[int] = []
    for panel in panels(document):
        ids.append(panel["id"])
        if panel["type"] == "row":
            assert panel["title"]
            continue
        title = panel["title"]
        assert title and panel["description"].endswith("."), title
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title}: no unit"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert panel["options"], f"{title}: no options"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), title
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", title
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, title
    assert len(set(ids)) == len(ids), "panel ids must be unique"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_rates_use_the_rate_interval(path: Path) -> None:
    for expr in expressions(_load(path)):
        for match in RANGE_FUNCTION.finditer(expr):
            function = match.group(1)
            ranges = re.findall(r"\[([^\]]*)\]", expr[match.end() :])
            assert ranges, expr
            if function in {"rate", "irate", "increase"}:
                assert ranges[0] == "$__rate_interval", f"{function} over [{ranges[0]}] in {expr}"
            else:
                assert ranges[0].startswith("$__"), f"fixed range [{ranges[0]}] in {expr}"


@pytest.mark.parametrize("stem", list(boards()))
def test_panels_read_only_series_that_exist(stem: str) -> None:
    _, dialect = boards()[stem]
    allowed = allowed_names(dialect)
    for expr in expressions(_load(ROOT / "dist" / f"{stem}.json")):
        assert metric_names(expr) <= allowed, expr


@pytest.mark.parametrize("dialect", list(Dialect))
def test_node_dashboard_shows_every_catalogue_measurement(dialect: Dialect) -> None:
    document = _load(ROOT / "dist" / f"gpu-pulse-node-{dialect}.json")
    read = set().union(*(metric_names(e) for e in expressions(document)))
    renderings = [m.rendering(dialect) for m in MEASUREMENTS if m.key in CHARTED]
    published = {r.name for r in renderings if r is not None}
    assert published - read == set(), "catalogue measurements without a panel"
    assert covered_keys(dialect) == {m.key for m in MEASUREMENTS if m.key in CHARTED and m.rendering(dialect)}
    titles = [p["title"] for p in panels(document)]
    assert any("MIG" in t for t in titles)


@pytest.mark.parametrize("stem", ["gpu-pulse-cluster", "gpu-pulse-namespace", "gpu-pulse-autoscaling"])
def test_shared_dashboards_work_with_either_dialect(stem: str) -> None:
    document = _load(ROOT / "dist" / f"{stem}.json")
    specific = exporter_names(Dialect.PROMETHEUS) ^ exporter_names(Dialect.DCGM)
    read = set().union(*(metric_names(e) for e in expressions(document)))
    assert read & specific == set()


def test_dashboards_fit_a_configmap_applied_client_side() -> None:
    """kubectl apply keeps the object in a 256 KiB annotation: each dashboard must stay well below it."""
    for path in FILES:
        assert path.stat().st_size < 200_000, path.name


def _raw_selectors(expr: str, names: frozenset[str]) -> list[str]:
    """The label matchers of every selector in `expr` over one of `names` (`{}` for a bare name)."""
    found = []
    for match in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?", expr):
        if match.group(1) in names:
            found.append(match.group(2) or "{}")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_gpu_pulse_series_are_selected_by_the_job_variable(path: Path) -> None:
    """No query depends on a job name: every selector over a series gpu-pulse's own targets publish carries the job
    variable, which opens on the default job; recorded series carry no job (they aggregate it away)."""
    document = _load(path)
    job = _variables(document)["job"]
    assert job["type"] == "query" and job["multi"] is False
    expected = Jobs().adapter if "autoscaling" in path.stem else Jobs().exporter
    assert job["current"]["value"] == expected
    own = exporter_names(Dialect.PROMETHEUS) | exporter_names(Dialect.DCGM) | adapter_names()
    # the panels, and the variables that come after the job variable (cluster and job itself come before it)
    queries = [t["expr"] for p in panels(document) for t in p.get("targets") or []]
    queries += [v["query"] for v in document["templating"]["list"] if v["type"] == "query"]
    queries = [q for q in queries if q not in {job["query"], _variables(document)["cluster"]["query"]}]
    selectors = [s for expr in queries for s in _raw_selectors(expr, own)]
    assert selectors, "a dashboard without series of gpu-pulse's targets would need no job variable"
    for selector in selectors:
        assert 'job=~"$job"' in selector, selector
    assert "gpu-pulse-exporter" not in json.dumps(document["panels"])
    assert "gpu-pulse-adapter" not in json.dumps(document["panels"])


def test_other_job_names_change_only_the_job_variable(tmp_path: Path) -> None:
    """`--exporter-job/--adapter-job --out` write the same dashboards, opening on the given job names."""
    assert main(["--exporter-job", "gpu-telemetry", "--adapter-job", "metrics-adapter", "--out", str(tmp_path)]) == 0
    for name, text in render_all().items():
        other = (tmp_path / name).read_text(encoding="utf-8")
        if name.suffix != ".json":
            assert other == text
            continue
        variables = _variables(json.loads(other))
        assert variables["job"]["current"]["value"] in {"gpu-telemetry", "metrics-adapter"}
        restored = other.replace('"gpu-telemetry"', '"gpu-pulse-exporter"').replace(
            '"metrics-adapter"', '"gpu-pulse-adapter"'
        )
        assert restored == text, name


def test_other_job_names_are_not_written_over_the_committed_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--exporter-job", "gpu-telemetry"])
    assert exit_info.value.code == 2
    assert "--out" in capsys.readouterr().err
    assert stale_files() == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_written_for_current_grafana_in_the_shape_its_migrations_produce(path: Path) -> None:
    """schemaVersion 41, and nothing Grafana's migrations 37 to 43 would change on load (grafana/grafana
    apps/dashboard/pkg/migration/schemaversion, v37.go ... v43.go): what each one rewrites is absent or already in
    its migrated form."""
    document = _load(path)
    assert document["schemaVersion"] == SCHEMA_VERSION == 41
    assert isinstance(document.get("refresh"), str)  # v40: refresh is a string
    assert "time_options" not in (document.get("timepicker") or {})  # v41
    for panel in panels(document):
        legend = (panel.get("options") or {}).get("legend")
        if legend is not None:  # v37: an object, showLegend explicit, no "hidden" display mode
            assert isinstance(legend, dict) and legend.get("showLegend") is True, panel["title"]
            assert legend.get("displayMode") != "hidden", panel["title"]
        custom = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("custom") or {}
        assert "displayMode" not in custom, panel["title"]  # v38: table cells as cellOptions
        overrides = (panel.get("fieldConfig") or {}).get("overrides") or []
        ids = {p.get("id") for o in overrides for p in o.get("properties") or []}
        assert not ids & {"custom.displayMode", "custom.hideFrom"}, panel["title"]  # v38, v42
        transformations = {t.get("id") for t in panel.get("transformations") or []}
        assert not transformations & {"timeSeriesTable", "formatTime"}, panel["title"]  # v39, v43


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_cluster_variable_is_hidden_on_the_committed_single_cluster_dashboards(path: Path) -> None:
    cluster = _variables(_load(path))["cluster"]
    assert cluster["hide"] == 2 and cluster["includeAll"] and cluster["allValue"] == ".*"
    assert all(v["hide"] == 0 for name, v in _variables(_load(path)).items() if name != "cluster")


def test_multi_cluster_dashboards_show_it_and_differ_in_nothing_else(tmp_path: Path) -> None:
    assert main(["--multi-cluster", "--out", str(tmp_path)]) == 0
    for name, text in render_all().items():
        other = (tmp_path / name).read_text(encoding="utf-8")
        if name.suffix != ".json":
            assert other == text
            continue
        shown = json.loads(other)
        assert _variables(shown)["cluster"]["hide"] == 0
        _variables(shown)["cluster"]["hide"] = 2
        assert shown == json.loads(text), name


@pytest.mark.parametrize("argv", [["--multi-cluster"], ["--multi-cluster", "--check"]])
def test_multi_cluster_dashboards_are_never_the_committed_ones(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and "--multi-cluster" in capsys.readouterr().err
    assert stale_files() == []


def _every_panel(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for row in document["panels"] for p in (row, *row.get("panels", []))]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_panel_over_recorded_series_steps_at_the_fastest_of_their_groups(path: Path) -> None:
    """A step shorter than every recorded series' interval draws no new value; one longer than the fastest skips
    values of it. Panels over the exporter's own series set no least step ($__rate_interval and Grafana's own)."""
    for panel in _every_panel(_load(path)):
        read = {name for t in panel.get("targets", []) for name in metric_names(t["expr"])} & set(RECORDED_EVERY)
        if "interval" not in panel:
            continue
        assert read, f"{panel['title']}: a least step on a panel over no recorded series"
        assert panel["interval"] == min((RECORDED_EVERY[n] for n in read), key=parse_duration), panel["title"]


def test_recorded_step_is_the_fastest_groups_interval() -> None:
    allocated = Query("sum(namespace:gpu_pulse_pod_allocated_devices:sum)")
    busy_now = Query("namespace:gpu_pulse_pod_gpu_utilization_ratio:avg")
    assert recorded_step((allocated,)) == RECORDED_EVERY["namespace:gpu_pulse_pod_allocated_devices:sum"] == "2m"
    assert recorded_step((allocated, busy_now)) == "1m"
    with pytest.raises(ValueError, match="reads none"):
        recorded_step((Query("gpu_pulse_pod_gpu_utilization_ratio"),))


def test_every_board_links_every_other_keeping_time_data_source_and_cluster() -> None:
    documents = {path.stem: _load(path) for path in FILES}
    for stem, document in documents.items():
        targets = {}
        for link in document["links"]:
            found = re.fullmatch(r"/d/([a-z0-9-]+)\?(.*)", link["url"])
            assert found is not None and link["keepTime"] and link["type"] == "link", (stem, link)
            assert found.group(2) == "${datasource:queryparam}&${cluster:queryparam}", (stem, link)
            targets[found.group(1)] = link["title"]
        assert set(targets) == set(documents) - {stem}, stem
        assert set(targets) <= {d["uid"] for d in documents.values()}


def test_tables_of_namespaces_and_workloads_open_the_namespace_board() -> None:
    """A row's data link sets the namespace board's variables from the row's labels, which the table's query keeps."""
    namespace_board = _variables(_load(ROOT / "dist" / "gpu-pulse-namespace.json"))
    drills = 0
    for path in FILES:
        for panel in _load(path)["panels"]:
            for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []):
                drills += 1
                assert link["url"].startswith("/d/gpu-pulse-namespace?"), (path.stem, panel["title"])
                for variable, field in re.findall(r"var-(\w+)=\$\{__data\.fields\.(\w+)\}", link["url"]):
                    assert variable == field and variable in namespace_board, link["url"]
                    assert all(field in t["expr"] for t in panel["targets"]), (panel["title"], field)
    assert drills >= 4


@pytest.mark.parametrize("path", [p for p in FILES if p.stem.startswith("gpu-pulse-node-")], ids=lambda p: p.stem)
def test_the_node_board_opens_on_one_node(path: Path) -> None:
    """Grafana opens a variable without `All` on its first value: the board draws one node's GPUs, not every one's."""
    node = _variables(_load(path))["node"]
    assert node["includeAll"] is False and node["multi"] is False


@pytest.mark.parametrize("dialect", list(Dialect))
def test_static_limits_are_dashed_lines_on_what_they_bound(dialect: Dialect) -> None:
    """The power limit on power draw, the temperature thresholds on the GPU temperature, the size on memory used:
    dashed lines beside the figure they bound, not panels of their own."""
    document = _load(ROOT / "dist" / f"gpu-pulse-node-{dialect}.json")
    by_title = {p["title"]: p for p in panels(document)}
    for title in ("Power limit", "Slowdown temperature", "Shutdown temperature", "Memory total"):
        assert title not in by_title, title
    for title, limits in (("Power draw", 1), ("GPU temperature", 3), ("Memory used", 1)):
        panel = by_title[title]
        dashed = {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]}
        refs = [t["refId"] for t in panel["targets"]]
        assert dashed == set(refs[-limits:]) and len(refs) == limits + 1, (title, refs, dashed)
