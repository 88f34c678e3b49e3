"""The Helm chart as a release publishes it: the tag checked against the versions, the alerts linking its docs.

The release workflow (.github/workflows/release.yaml) runs this on a tag before `helm package` and `helm push`; it
needs nothing from the network, so tests/test_release_workflow.py runs it the same way. It

- refuses a tag that is not `v<version>` of pyproject.toml, or a chart whose `version`/`appVersion` differ from it
  (the images are tagged with that version and the chart's default image tag is its appVersion);
- copies deploy/helm/gpu-pulse to OUT/gpu-pulse with the PrometheusRule's rule files regenerated so that each
  alert's `runbook_url` points at docs/runbooks.md at the tag, in the repository the workflow runs in
  (`--repository-url`, e.g. https://github.com/OWNER/REPO): a fork's release links its own docs
  (rules/runbooks.py). The dashboards are copied as they are.

    python -m scripts.release_chart --tag v0.1.0 --repository-url https://github.com/OWNER/REPO --out DIR

Prints the chart's directory on stdout. Exit 2 with one line on a wrong tag or version.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tomllib
from pathlib import Path

import yaml

from rules import runbooks
from rules.generate import render_all
from rules.render import RULE_FILE

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "gpu-pulse"


class ReleaseError(ValueError):
    """A tag or version that the release cannot publish."""


def check_versions(tag: str, root: Path = ROOT) -> str:
    """The version the tag releases, once pyproject.toml and the chart agree with it."""
    version: str = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    if tag != f"v{version}":
        raise ReleaseError(f"tag {tag}: pyproject.toml's version is {version}, so the tag must be v{version}")
    chart = yaml.safe_load((root / "deploy" / "helm" / "gpu-pulse" / "Chart.yaml").read_text(encoding="utf-8"))
    for field in ("version", "appVersion"):
        if str(chart[field]) != version:
            raise ReleaseError(f"deploy/helm/gpu-pulse/Chart.yaml {field} is {chart[field]}, not {version}")
    return version


def prepare_chart(tag: str, repository_url: str, out: Path, root: Path = ROOT) -> Path:
    """OUT/gpu-pulse: the chart of the tag, its alerts linking docs/runbooks.md at the tag in `repository_url`."""
    check_versions(tag, root)
    base = runbooks.check_base(f"{repository_url.rstrip('/')}/blob/{tag}/{runbooks.RUNBOOKS_PATH}")
    target = out / "gpu-pulse"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(root / "deploy" / "helm" / "gpu-pulse", target)
    rules = target / "files" / "rules"
    shutil.rmtree(rules)
    rules.mkdir()
    for path, text in render_all(runbook_base=base).items():
        if path.name == RULE_FILE:  # dist/<dialect>/gpu-pulse.rules.yaml, as deploy/helm/sync-files.sh copies it
            (rules / f"{path.parent.name}.rules.yaml").write_text(text, encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.release_chart", description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True, help="the git tag being released, v<version>")
    parser.add_argument(
        "--repository-url", required=True, metavar="URL", help="the repository's web address, for the runbook links"
    )
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="where to write gpu-pulse/")
    args = parser.parse_args(argv)
    try:
        chart = prepare_chart(args.tag, args.repository_url, args.out)
    except (ReleaseError, runbooks.RunbookBaseError) as error:
        print(f"release_chart: {error}", file=sys.stderr)
        return 2
    print(chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
