"""The README and docs/ name what exists: every kustomize component, and flags by their advertised names only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapter.settings import COMMAND_LINE as ADAPTER
from exporter.settings import COMMAND_LINE as EXPORTER

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def test_the_readme_lists_every_kustomize_component() -> None:
    components = {path.name for path in (ROOT / "deploy" / "components").iterdir() if path.is_dir()}
    assert components, "no components found"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    listed = re.search(r"opt-in components \(([^)]*)\)", readme)
    assert listed is not None, "the README's list of kustomize components is gone"
    assert set(re.findall(r"`([a-z-]+)`", listed.group(1))) == components


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_use_no_hidden_flag_alias(path: Path) -> None:
    """An alias kept for old configurations (`--tls-key-file`) works but is not advertised: the docs name the flag."""
    text = path.read_text(encoding="utf-8")
    for command in (EXPORTER, ADAPTER):
        for alias in command.aliases:
            assert not re.search(rf"--{re.escape(alias)}\b", text), f"{path.name} names the hidden --{alias}"
            assert command.env(alias) not in text, f"{path.name} names the hidden {command.env(alias)}"
