"""Per-device error bookkeeping: what a device cannot give, and which NVML errors it returned since start."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType

from exporter.nvml.errors import FUNCTION_NOT_FOUND, Disposition, ErrorNames, disposition, status_code
from toolkit.logs import fields

log = logging.getLogger("exporter.nvml")


class DeviceFaults:
    """Errors of one GPU or MIG instance. Only the collector's thread touches it.

    `unsupported` holds the names of measurements the device said NOT_SUPPORTED (or FUNCTION_NOT_FOUND) for: they are
    not asked again. NO_PERMISSION is logged and counted once per measurement. Other errors count every time.
    """

    __slots__ = ("_counts", "_denied", "_names", "_view", "label", "reasons", "unsupported", "uuid")

    def __init__(self, label: str, names: ErrorNames, *, uuid: str | None = None) -> None:
        self.label = label  # "GPU 3 (GPU-8f6c...)" for log lines
        self.uuid = uuid  # the device's, for the log lines' gpu_uuid field
        self._names = names
        self._counts: dict[str, float] = {}
        self._denied: set[str] = set()
        self._view: Mapping[str, float] | None = None
        self.unsupported: set[str] = set()
        # what the device will not give -> why: not_supported, driver_lacks_function, no_permission
        self.reasons: dict[str, str] = {}

    def record(self, what: str, exc: BaseException) -> Disposition:
        """Account for a failed call reading `what`; the caller acts on the returned disposition."""
        return self.record_code(what, status_code(exc))

    def record_code(self, what: str, code: int) -> Disposition:
        kind = disposition(code)
        if kind is Disposition.UNSUPPORTED:
            if what not in self.unsupported:
                self.unsupported.add(what)
                self.reasons[what] = "driver_lacks_function" if code == FUNCTION_NOT_FOUND else "not_supported"
                log.debug("%s: %s is not supported (%s); not asking again", self.label, what, self._names(code))
        elif kind is Disposition.NO_PERMISSION:
            if what not in self._denied:
                self._denied.add(what)
                self.reasons[what] = "no_permission"
                self.count("NO_PERMISSION")
                log.warning(
                    "%s: no permission to read %s; it will be missing",
                    self.label,
                    what,
                    extra=fields(gpu_uuid=self.uuid, measurement=what, reason="NO_PERMISSION"),
                )
        elif kind is Disposition.LOST:
            pass  # the collector counts a loss once per event, not once per failing call
        elif kind is not Disposition.EMPTY:
            self.count(self._names(code))
        return kind

    def forget_verdicts(self) -> None:
        """Ask again for what the device refused: its MIG mode changed, and with it what it supports."""
        self.unsupported.clear()
        self.reasons.clear()
        self._denied.clear()

    def count(self, name: str, by: float = 1.0) -> None:
        self._counts[name] = self._counts.get(name, 0.0) + by
        self._view = None

    def view(self) -> Mapping[str, float]:
        """A read-only copy of the counts, rebuilt only when they changed."""
        if self._view is None:
            self._view = MappingProxyType(dict(self._counts))
        return self._view
