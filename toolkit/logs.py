"""Logging: one line per event, as text for people or as JSON objects for log pipelines (`--log-format`).

What a log pipeline filters or groups by travels as fields of its own, not only inside `message`: a log call names
them with `extra=fields(...)` (the GPU's `gpu_uuid`, an `xid`, a `pod`, a `reason`, ...; LOG_FIELDS lists the names).
In JSON each is a key of the object; the text format shows the message alone, which names the same things in words,
so text lines read as before.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal, TextIO

from toolkit.logthrottle import RepeatThrottle

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# attributes every LogRecord has; anything else was passed with `extra=` and goes into the JSON object
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

# the structured fields of both services' log lines, one spelling each (a field's meaning never depends on the logger)
LOG_FIELDS = frozenset(
    {
        "gpu",  # the GPU's NVML index, as the `gpu` label of the metrics
        "gpu_uuid",  # GPU-... or MIG-..., as the `UUID`/`uuid` label
        "gpu_instance",  # a MIG instance's GPU instance ID
        "xid",  # an XID error number
        "node",  # a Kubernetes node
        "namespace",  # a Kubernetes namespace
        "pod",  # a pod, as namespace/name
        "reason",  # why: an error's text, an NVML error name, what is missing
        "measurement",  # a catalogue key (exporter/catalogue)
        "url",  # an upstream's address
        "metric",  # a served metric's name (adapter)
        "activation_target",  # a KEDA trigger's activation target (adapter)
        "selector",  # a label selector
    }
)


def fields(**values: object) -> dict[str, object]:
    """`extra=` for a log call: `log.warning("%s: XID %d", uuid, xid, extra=fields(gpu_uuid=uuid, xid=xid))`.

    Names are those of LOG_FIELDS (a typo is a ValueError in tests, not a silently new key in production); a value of
    None is left out. Numbers and strings stay what they are in JSON; anything else is its str()."""
    unknown = values.keys() - LOG_FIELDS
    if unknown:
        raise ValueError(f"not log fields: {', '.join(sorted(unknown))} (toolkit.logs.LOG_FIELDS)")
    return {
        name: value if isinstance(value, int | float | str | bool) else str(value)
        for name, value in values.items()
        if value is not None
    }


class JsonFormatter(logging.Formatter):
    """`{"time": ..., "level": ..., "logger": ..., "message": ..., <extra fields>, "exception": ...}` per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str = "info", log_format: LogFormat = "text", stream: TextIO | None = None) -> None:
    """Route every logger to one handler on `stream` (stderr by default), replacing handlers set before."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    # warnings and errors, from any logger: at most one line a second per kind, with a count of those left out
    handler.addFilter(RepeatThrottle(min_level=logging.WARNING))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # one log line per scrape would drown everything else: aiohttp's access log only at debug level
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
