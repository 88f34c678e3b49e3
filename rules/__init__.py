"""Prometheus recording and alerting rules for gpu-pulse, generated for both metric dialects from one source.

`python -m rules.generate` writes the committed files under `rules/dist/`; `--check` fails when they are out of date.
"""
