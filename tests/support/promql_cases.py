"""PromQL expressions checked by `promtool test rules` against input series: no rule file, only `promql_expr_test`
cases, so that a query (a dashboard's, an alert's right-hand side) is refereed by Prometheus' own engine."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.tools import require_tool


def assert_promql_cases(tmp_path: Path, series: dict[str, str], cases: list[dict[str, Any]]) -> None:
    """Each of `cases` (promtool's `promql_expr_test` entries) holds over `series` (series -> promtool values, one a
    minute); fails with promtool's own report."""
    (tmp_path / "none.yaml").write_text("groups: []\n", encoding="utf-8")
    test = {
        "rule_files": ["none.yaml"],
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": cases,
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, width=1000), encoding="utf-8")
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", "test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
