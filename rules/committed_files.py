"""Generated files that are committed: write them, or check that what is committed is what the generator makes.

Shared by `python -m rules.generate` and `python -m dashboards.generate` (and their regenerate-and-diff tests).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

Render = Callable[[], Mapping[Path, str]]


def stale_files(render: Render, root: Path) -> list[Path]:
    """Generated files (relative to `root`) that are missing or differ on disk."""
    return [
        path
        for path, text in render().items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]


def generator_main(render: Render, root: Path, *, prog: str, description: str, argv: list[str] | None) -> int:
    """The command line of a generator: write every file, or with --check write nothing and exit 1 when stale."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed file is stale")
    args = parser.parse_args(argv)
    shown = root.name
    if args.check:
        stale = stale_files(render, root)
        for path in stale:
            print(f"stale: {shown}/{path} (run {prog})", file=sys.stderr)
        return 1 if stale else 0
    for path, text in render().items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {shown}/{path}")
    return 0
