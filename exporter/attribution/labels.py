"""Which Kubernetes pod labels travel onto per-pod series (`--pod-labels`), bounded so cardinality cannot explode.

A label is exported when its key fully matches the allowlist regex. At most `max_labels` labels per pod are kept (the
first in key order), and values are cut to `max_value_length` characters, so a pod with a thousand labels, or with a
label that carries a request ID, adds a bounded number of short label values and no more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodLabelPolicy:
    allow: re.Pattern[str] | None = None  # None: no pod labels are exported
    max_labels: int = 8
    max_value_length: int = 63

    @classmethod
    def parse(cls, pattern: str | None, *, max_labels: int = 8, max_value_length: int = 63) -> PodLabelPolicy:
        """Build from the `--pod-labels` flag value; raise ValueError with one clear line on a bad regex."""
        if max_labels < 0 or max_value_length < 1:
            raise ValueError("--pod-labels bounds must be positive")
        if pattern is None or pattern == "":
            return cls(None, max_labels, max_value_length)
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"--pod-labels: invalid regular expression {pattern!r}: {error}") from None
        return cls(compiled, max_labels, max_value_length)

    def select(self, labels: Mapping[str, str]) -> Mapping[str, str]:
        """The labels of one pod that may be exported."""
        if self.allow is None or self.max_labels == 0 or not labels:
            return _EMPTY
        kept: dict[str, str] = {}
        for key in sorted(labels):
            if self.allow.fullmatch(key) is None:
                continue
            kept[key] = labels[key][: self.max_value_length]
            if len(kept) >= self.max_labels:
                break
        return MappingProxyType(kept) if kept else _EMPTY
