"""docs/flags.md is what scripts/flags_reference.py makes of the settings models today, and it names every flag
`--help` offers (and no hidden alias)."""

from __future__ import annotations

import re

import pytest

from adapter.settings import COMMAND_LINE as ADAPTER
from exporter.settings import COMMAND_LINE as EXPORTER
from scripts.flags_reference import PAGE, main, render
from toolkit.settings import CommandLine


def test_the_committed_page_is_what_the_models_give() -> None:
    committed = PAGE.read_text(encoding="utf-8")
    assert committed == render(), "docs/flags.md is stale: run python -m scripts.flags_reference"
    assert main(["--check"]) == 0


@pytest.mark.parametrize("command", [EXPORTER, ADAPTER], ids=["exporter", "adapter"])
def test_every_flag_of_help_has_a_row_with_its_variable(command: CommandLine) -> None:
    page = PAGE.read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `--")]
    help_text = command.parser().format_help()
    offered = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text, flags=re.MULTILINE)) - {"--help", "--version"}
    assert offered, "no flags found in --help"
    for flag in offered:
        name = flag.removeprefix("--").removeprefix("no-").replace("-", "_")
        if name not in command.model.model_fields:  # --no-x of a switch x
            name = flag.removeprefix("--").replace("-", "_")
        matching = [row for row in rows if re.match(rf"\| `{re.escape(flag)}[ `]", row) or f"`{flag}`" in row]
        assert matching, f"{command.prog} {flag} has no row in docs/flags.md"
        assert any(f"`{command.env(name)}`" in row for row in matching), f"{command.prog} {flag}: no variable"
    for alias in command.aliases:
        assert f"--{alias}" not in page and command.env(alias) not in page, f"docs/flags.md names the hidden --{alias}"


def test_a_changed_default_makes_the_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: the page follows the model's defaults."""
    info = EXPORTER.model.model_fields["interval"]
    monkeypatch.setattr(info, "default", 2.5)
    assert "| `2.5` |" in render()
    assert render() != PAGE.read_text(encoding="utf-8")
