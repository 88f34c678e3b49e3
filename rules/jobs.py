"""The Prometheus job names gpu-pulse's own series are scraped under: a parameter of the rule and dashboard generators.

The committed files under rules/dist/ and dashboards/dist/ use the defaults, which are the job names the shipped
ServiceMonitors (`jobLabel: app.kubernetes.io/name`) and scrape configs give. A team that scrapes the exporters or the
adapter under other job names generates its own files: `python -m rules.generate --exporter-job NAME --out DIR`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_EXPORTER_JOB = "gpu-pulse-exporter"
DEFAULT_ADAPTER_JOB = "gpu-pulse-adapter"

# a job label value written into PromQL between double quotes: printable, without quotes, backslashes or braces
_JOB_NAME = re.compile(r'[^"\\{}\s][^"\\{}]*')


class JobNameError(ValueError):
    """A job name that cannot be written into a PromQL label matcher as it is."""


@dataclass(frozen=True, slots=True)
class Jobs:
    """The job label values of the exporters' and the adapter's scrape targets."""

    exporter: str = DEFAULT_EXPORTER_JOB
    adapter: str = DEFAULT_ADAPTER_JOB

    def __post_init__(self) -> None:
        for role, name in (("exporter", self.exporter), ("adapter", self.adapter)):
            if not _JOB_NAME.fullmatch(name):
                raise JobNameError(f"{role} job name {name!r}: expected a label value without quotes or braces")

    @property
    def exporter_selector(self) -> str:
        """`job="<exporter job>"`, to put between the braces of a selector."""
        return f'job="{self.exporter}"'

    @property
    def adapter_selector(self) -> str:
        return f'job="{self.adapter}"'

    @property
    def is_default(self) -> bool:
        return self == Jobs()
