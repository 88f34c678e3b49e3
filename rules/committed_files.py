"""Generated files that are committed: write them, or check that what is committed is what the generator makes.

Shared by `python -m rules.generate` and `python -m dashboards.generate` (and their regenerate-and-diff tests). Both
take the job names of gpu-pulse's scrape targets (rules/jobs.py): the committed files are made with the defaults, and
files for other job names are written elsewhere (`--out`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rules.jobs import DEFAULT_ADAPTER_JOB, DEFAULT_EXPORTER_JOB, JobNameError, Jobs

Render = Callable[[Jobs], Mapping[Path, str]]
# A generator's own options (its `parents` parsers) bound into its render, and whether they are the defaults the
# committed files are made with.
Bound = tuple[Render, bool]


class OptionError(ValueError):
    """A generator's own option with a value it cannot use: one line, the command's usage error."""


def stale_files(render: Render, root: Path) -> list[Path]:
    """Generated files (relative to `root`) that are missing or differ on disk from what the defaults make."""
    return [
        path
        for path, text in render(Jobs()).items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]


def generator_main(
    render: Render,
    root: Path,
    *,
    prog: str,
    description: str,
    argv: list[str] | None,
    parents: Sequence[argparse.ArgumentParser] = (),
    bind: Callable[[argparse.Namespace], Bound] | None = None,
) -> int:
    """The command line of a generator: write every file, or with --check write nothing and exit 1 when stale.
    `parents` add the generator's own options, which `bind` turns into the render to use."""
    parser = argparse.ArgumentParser(prog=prog, description=description, parents=list(parents))
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed file is stale")
    parser.add_argument(
        "--exporter-job",
        default=DEFAULT_EXPORTER_JOB,
        metavar="NAME",
        help=f"job label of the exporters' scrape targets (default: {DEFAULT_EXPORTER_JOB})",
    )
    parser.add_argument(
        "--adapter-job",
        default=DEFAULT_ADAPTER_JOB,
        metavar="NAME",
        help=f"job label of the adapter's scrape targets (default: {DEFAULT_ADAPTER_JOB})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=f"write into DIR instead of {root.name}/ (required with job names other than the defaults)",
    )
    args = parser.parse_args(argv)
    try:
        jobs = Jobs(exporter=args.exporter_job, adapter=args.adapter_job)
        render, own_defaults = bind(args) if bind is not None else (render, True)
    except (JobNameError, OptionError) as e:
        parser.error(str(e))
    defaults = jobs.is_default and own_defaults
    if args.check:
        if args.out is not None or not defaults:
            parser.error("--check compares the committed files, made with the defaults and no --out")
        stale = stale_files(render, root)
        for path in stale:
            print(f"stale: {root.name}/{path} (run {prog})", file=sys.stderr)
        return 1 if stale else 0
    if args.out is None and not defaults:
        parser.error(f"the committed files in {root.name}/ use the defaults: write yours with --out DIR")
    target_root: Path = args.out if args.out is not None else root
    shown = str(args.out) if args.out is not None else root.name
    for path, text in render(jobs).items():
        target = target_root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {shown}/{path}")
    return 0
