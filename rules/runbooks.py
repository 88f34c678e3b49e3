"""Where the alerts' `runbook_url` annotations point: `docs/runbooks.md` of the release the rules belong to.

The default is the repository pyproject.toml names (`[project.urls] Source`) at the tag of pyproject's version
(`v<version>`), so an alert of a release's rules opens the runbook written for that release rather than whatever the
default branch says later. `python -m rules.generate --runbook-url-base URL` writes files that point elsewhere (a
fork, an internal mirror, a wiki page with the same section anchors); the release workflow passes the repository it
runs in (.github/workflows/release.yaml), and the Helm chart's `prometheusRule.runbookUrl` replaces the base at
install time.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
RUNBOOKS_PATH = "docs/runbooks.md"
# an absolute http(s) URL without a fragment, quotes or white space: the alert's anchor is appended after a `#`
_BASE = re.compile(r"https?://[^\s#\"'<>]+")


class RunbookBaseError(ValueError):
    """A runbook URL base that cannot take an alert's anchor."""


def check_base(base: str) -> str:
    """`base` as given, or RunbookBaseError naming what is wrong with it."""
    if not _BASE.fullmatch(base):
        raise RunbookBaseError(
            f"runbook URL base {base!r}: expected an absolute http(s) URL without a #fragment "
            "(the alert's anchor is appended), e.g. https://git.example.com/team/gpu-pulse/blob/v0.1.0/docs/runbooks.md"
        )
    return base


def default_base(pyproject: Path = PYPROJECT) -> str:
    """docs/runbooks.md in the repository pyproject.toml names, at the tag of its version."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    source = project["urls"]["Source"].rstrip("/")
    return check_base(f"{source}/blob/v{project['version']}/{RUNBOOKS_PATH}")


def runbook_url(base: str, anchor: str) -> str:
    return f"{base}#{anchor}"
