"""The report's thresholds (toolkit.thresholds): its defaults, then a YAML file (`--thresholds FILE`), then flags, each
checked with one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from report.yamlinput import InputError, load_mapping
from toolkit.thresholds import Thresholds


def load_thresholds(path: Path | None, overrides: dict[str, Any]) -> Thresholds:
    """Defaults, then the file's values, then `overrides` (flags that were given). InputError (one line) otherwise."""
    values: dict[str, Any] = load_mapping(path, "--thresholds") if path is not None else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Thresholds.model_validate(values)
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            where = ".".join(str(p) for p in item.get("loc", ())) or "thresholds"
            problems.append(f"{where}: {item.get('msg', 'invalid')}, got {item.get('input')!r}")
        source = f"--thresholds {path}" if path is not None else "thresholds"
        raise InputError(f"{source}: " + "; ".join(problems)) from None
