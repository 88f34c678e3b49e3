"""Small YAML files named by the report's flags (`--thresholds`, `--prices`): a mapping, or one line naming the flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from toolkit.inputfiles import read_input_text

MAX_FILE_BYTES = 256 * 1024


class InputError(ValueError):
    """A file or value given to the report that cannot be used, as one line naming the flag."""


def load_mapping(path: Path, flag: str) -> dict[str, Any]:
    """The mapping the YAML file at `path` holds (an empty file is an empty mapping)."""
    text = read_input_text(path, flag, max_bytes=MAX_FILE_BYTES)  # InputFileError is a ValueError naming the flag
    try:
        loaded = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        lines = str(exc).strip().splitlines()
        raise InputError(f"{flag} {path}: not YAML: {lines[0] if lines else exc}") from None
    if not isinstance(loaded, dict):
        raise InputError(f"{flag} {path}: expected a mapping, got {type(loaded).__name__}")
    return loaded
