"""Grafana dashboards for gpu-pulse, built as code with grafana-foundation-sdk (pinned) into classic dashboard JSON.

`python -m dashboards.generate` writes the committed files under `dashboards/dist/`; `--check` fails when they are
out of date.
"""
