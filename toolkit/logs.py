"""Logging: one line per event, as text for people or as JSON objects for log pipelines (`--log-format`)."""

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
