"""A running node's load moved from outside its process: a JSON file of `set_load` overrides (the scenario's
`load_file`), read once a second of scenario time when it changed.

How a test drives the load of an exporter process it started, as workloads come and go (the GPUs of the pods a real
ReplicaSet controller creates, say). The file is one JSON object, `{target: percent}`, targets as a
`set_load` event names them (a GPU index or UUID, a MIG device UUID, a pod `namespace/name`); `null` removes the
override. Writers replace the file whole (write a temporary file, then rename it): a file that does not parse is
read again a second later.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

READ_EVERY_S = 1.0


@dataclass(slots=True)
class LoadFileWatch:
    """A timeline action (simulation/machine.py): called with the scenario time it was due, it applies the file
    when it changed and returns when to look again."""

    path: Path
    set_load: Callable[[str, float | None], None]
    _seen: tuple[int, int] | None = field(default=None)

    def __call__(self, due: float) -> float:
        try:
            stat = self.path.stat()
        except OSError:
            return due + READ_EVERY_S  # not written yet
        version = (stat.st_mtime_ns, stat.st_size)
        if version == self._seen:
            return due + READ_EVERY_S
        try:
            loads = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return due + READ_EVERY_S
        if not isinstance(loads, dict):
            log.warning("load file %s: not a JSON object, ignored", self.path)
        else:
            for target, percent in loads.items():
                try:
                    self.set_load(target, None if percent is None else float(percent))
                except (TypeError, ValueError) as error:
                    log.warning("load file %s: %s: %s", self.path, target, error)
        self._seen = version
        return due + READ_EVERY_S
