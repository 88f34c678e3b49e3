"""`python -m exporter`: the same as the `gpu-pulse-exporter` console script."""

from exporter.cli import main

raise SystemExit(main())
