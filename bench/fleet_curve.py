"""The adapter's scaling curve: the fleet benchmark at several fleet sizes, a line fitted per figure, projected on.

    PYTHONPATH=. python bench/fleet_curve.py [--nodes 250,500,1000,2000] [--duration 180] [--project 12500]

Runs `bench/fleet.py` once per size, with the pods scaled with the nodes as in the full fleet (10 GPU pods and 15 pods
without GPUs per GPU node, so 2,000 nodes are 20,000 GPU pods in a cache of 52,000), and reads each run's figures
(its `--json`). Then, for each figure (per replica CPU and RSS, answer p99s, figure age, requests per exporter), it fits
a straight line against the node count by least squares, states the fit's worst relative error at the measured sizes,
and projects it to `--project` nodes (12,500 nodes of 8 GPUs: 100,000 GPUs), unless the line misses a measured point
by more than LOOSE_FIT (answer times, which are not a cost that grows with the fleet, mostly do). It says which figure
reaches its goal first, and at how many nodes. Prints a table; `--json` writes the runs, the fits and the projections.

A straight line is the model because every per-replica cost here grows with what a replica follows: documents per
second (nodes / refresh), pods cached, streams held. The fit's error at the measured sizes says how well that holds.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPU_PODS_PER_NODE = 10
# a line that misses a measured point by more than this does not describe the figure: it is shown, not projected from
LOOSE_FIT = 0.2
OTHER_PODS_PER_NODE = 15


@dataclass(frozen=True)
class Figure:
    key: str  # in fleet.py's --json
    what: str
    unit: str
    goal: float | None  # the goal a replica must stay under, when there is one


FIGURES = (
    Figure("cpu_cores_max", "adapter CPU, busiest replica", "cores", 1.0),
    Figure("rss_mib_max", "adapter RSS, largest replica", "MiB", 400.0),
    Figure("p99_large_ms", "HPA answer p99, the largest Deployments (nodes / 2 pods)", "ms", 20.0),
    Figure("p99_ten_ms", "HPA answer p99, Deployments of about 10 pods", "ms", None),
    Figure("baseline_p99_ms", "bare TLS server p99 (the floor)", "ms", None),
    Figure("figure_age_p99_s", "served figure age p99", "s", 5.0),
    Figure("requests_per_exporter_per_minute", "/pods requests per exporter per minute", "/min", None),
    Figure("documents_per_exporter_per_minute", "/pods documents per exporter per minute", "/min", None),
)


@dataclass(frozen=True)
class Line:
    """y = intercept + slope * nodes, with its worst relative error at the measured sizes."""

    intercept: float
    slope: float
    worst_error: float

    def at(self, nodes: float) -> float:
        return self.intercept + self.slope * nodes

    def reaches(self, goal: float) -> float | None:
        """The node count at which the line reaches `goal` (None when it never does, growing)."""
        if self.slope <= 0:
            return None
        return (goal - self.intercept) / self.slope


def fit(points: list[tuple[float, float]]) -> Line:
    """The least-squares line through `points` (x, y); at least two distinct x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        raise ValueError("a line needs at least two different sizes")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    intercept = mean_y - slope * mean_x
    line = Line(intercept, slope, 0.0)
    worst = max((abs(line.at(x) - y) / abs(y) if y else 0.0) for x, y in points)
    return Line(intercept, slope, worst)


def run_size(nodes: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out = workdir / f"fleet-{nodes}.json"
    command = [
        sys.executable,
        str(REPO / "bench" / "fleet.py"),
        f"--nodes={nodes}",
        f"--gpu-pods={nodes * GPU_PODS_PER_NODE}",
        f"--other-pods={nodes * OTHER_PODS_PER_NODE}",
        f"--duration={args.duration:g}",
        f"--json={out}",
        *args.fleet_flag,
    ]
    print(f"== {nodes} nodes: {' '.join(command[1:])}", flush=True)
    finished = subprocess.run(command, cwd=REPO, check=False)
    if finished.returncode not in (0, 1):  # 1: a goal missed, which the curve reports; 2: the run failed
        raise SystemExit(f"the fleet benchmark at {nodes} nodes failed (exit {finished.returncode})")
    return flat_figures(json.loads(out.read_text()))


def flat_figures(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one `fleet.py --json` run under the keys of FIGURES (the run's own fields kept beside them)."""
    return {
        **run,
        "cpu_cores_max": max(run["cpu_cores_per_replica"]),
        "rss_mib_max": max(run["rss_mib_per_replica"]),
        "p99_large_ms": run["answers_large"]["p99_ms"],
        "p99_ten_ms": run["answers_ten"]["p99_ms"],
        "baseline_p99_ms": run["baseline"]["p99_ms"],
        "figure_age_p99_s": run["figure_age_s"]["p99"],
        "requests_per_exporter_per_minute": run["requests_per_exporter_per_minute"]["mean"],
        "documents_per_exporter_per_minute": run["documents_per_exporter_per_minute"]["mean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="250,500,1000,2000", help="the fleet sizes, comma-separated")
    parser.add_argument("--duration", type=float, default=180.0, help="seconds measured at each size")
    parser.add_argument("--project", type=int, default=12_500, help="the fleet size to project to")
    parser.add_argument("--fleet-flag", action="append", default=[], help="another flag for bench/fleet.py")
    parser.add_argument("--from-json", type=Path, help="fit the runs of an earlier --json instead of running")
    parser.add_argument(
        "--add",
        type=Path,
        action="append",
        default=[],
        help="a fleet.py --json run to fit too",
    )
    parser.add_argument("--json", type=Path, help="write the runs, fits and projections here")
    args = parser.parse_args()
    if args.from_json is not None:
        runs = json.loads(args.from_json.read_text())["runs"]
    else:
        sizes = sorted({int(n) for n in args.nodes.split(",") if n.strip()} if args.nodes else set())
        with tempfile.TemporaryDirectory(prefix="gpu-pulse-curve-") as tmp:
            runs = [run_size(nodes, args, Path(tmp)) for nodes in sizes]
    runs += [flat_figures(json.loads(path.read_text())) for path in args.add]
    runs.sort(key=lambda run: int(run["nodes"]))
    report = curve(runs, args.project)
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, **report}, indent=1))


def curve(runs: list[dict[str, Any]], project: int) -> dict[str, Any]:
    sizes = [int(run["nodes"]) for run in runs]
    print()
    header = ["figure", *(f"{n:,} nodes" for n in sizes), "per 1,000 nodes", "fit error", f"at {project:,}", "goal"]
    rows = [header]
    fits: dict[str, Any] = {}
    first_out: list[tuple[float, str]] = []
    for figure in FIGURES:
        points = [(float(run["nodes"]), float(run[figure.key])) for run in runs if _number(run.get(figure.key))]
        cells = [f"{run[figure.key]:.2f}" if _number(run.get(figure.key)) else "-" for run in runs]
        if len({x for x, _ in points}) < 2:
            rows.append([f"{figure.what} ({figure.unit})", *cells, "-", "-", "-", "-"])
            continue
        line = fit(points)
        projected = line.at(project)
        loose = line.worst_error > LOOSE_FIT
        reaches = line.reaches(figure.goal) if figure.goal is not None and not loose else None
        if reaches is not None:
            first_out.append((reaches, figure.what))
        fits[figure.key] = {
            **asdict(line),
            "projected": None if loose else projected,
            "goal": figure.goal,
            "goal_reached_at": reaches,
        }
        rows.append(
            [
                f"{figure.what} ({figure.unit})",
                *cells,
                f"{line.slope * 1000:+.3g}",
                f"{line.worst_error:.0%}",
                "(loose fit)" if loose else f"{projected:.3g}",
                "-" if figure.goal is None else f"< {figure.goal:g}" + (f" (at {reaches:,.0f})" if reaches else ""),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for index, row in enumerate(rows):
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("-+-".join("-" * width for width in widths))
    first = min(first_out) if first_out else None
    if first is not None:
        print(f"\nfirst to reach its goal: {first[1]}, at about {max(0.0, first[0]):,.0f} nodes")
    return {"fits": fits, "project": project, "first_goal_reached": first}


def _number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


if __name__ == "__main__":
    main()
