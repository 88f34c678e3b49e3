"""Logs that a hostile client cannot flood: a repeated error once a second, with a count of the ones left out.

Some errors are expected under attack and say nothing about the service: a malformed request (aiohttp logs "Error
handling request" with a traceback for each), a client gone before its answer, `accept()` out of file descriptors
(asyncio logs "socket.accept() out of system resource" with a traceback). Those keep one line each, without the
traceback. Every record of the loggers the filter is installed on (`install_log_throttle`) is limited the same way: one
record per `period` for each kind (logger, message template, exception type); the next one that gets through says
how many were left out since.

Both services also put one on their log handler for every record of level WARNING and above (toolkit.logs): whatever
logger an error comes from (a TokenReview that fails on each request while the API server is away, a source that
fails on each query), it is one line a second at most.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp.http_exceptions import HttpProcessingError

# Loggers on which every service installs the filter: aiohttp's server side, and asyncio (the event loop's own errors).
NOISY_LOGGERS = ("aiohttp.server", "aiohttp.web", "asyncio")
_EXPECTED_MESSAGES = ("socket.accept() out of system resource",)
_EXPECTED_ERRORS: tuple[type[BaseException], ...] = (HttpProcessingError, ConnectionError, TimeoutError)
_MAX_KINDS = 1024  # kinds remembered; messages are templates from code, so there are few


@dataclass(slots=True)
class _Seen:
    last: float
    suppressed: int = 0


class RepeatThrottle(logging.Filter):
    """A logging filter: at most one record per `period` seconds for each kind of record."""

    def __init__(
        self, period: float = 1.0, clock: Callable[[], float] = time.monotonic, *, min_level: int = logging.NOTSET
    ) -> None:
        super().__init__()
        self._period = period
        self._clock = clock
        self._min_level = min_level  # records below pass untouched
        self._seen: OrderedDict[tuple[str, str, str], _Seen] = OrderedDict()
        self.suppressed_total = 0  # records left out since the filter was made

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self._min_level:
            return True
        error = record.exc_info[1] if record.exc_info else None
        template = str(record.msg).partition("\n")[0]
        key = (record.name, template, type(error).__name__ if error is not None else "")
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.last < self._period:
            seen.suppressed += 1
            self.suppressed_total += 1
            return False
        suppressed = seen.suppressed if seen is not None else 0
        self._seen[key] = _Seen(now)
        self._seen.move_to_end(key)
        while len(self._seen) > _MAX_KINDS:
            self._seen.popitem(last=False)
        if _expected(template, error):
            record.msg, record.args = _one_line(record, error), None
            record.exc_info, record.exc_text = None, None
        if suppressed:
            record.msg, record.args = f"{record.getMessage()} ({suppressed} similar suppressed)", None
        return True


def _expected(template: str, error: BaseException | None) -> bool:
    return template.startswith(_EXPECTED_MESSAGES) or isinstance(error, _EXPECTED_ERRORS)


def _one_line(record: logging.LogRecord, error: BaseException | None) -> str:
    message = record.getMessage().partition("\n")[0]
    if error is None:
        return message
    detail = " ".join(str(error).split())[:200]
    return f"{message}: {type(error).__name__}: {detail}" if detail else f"{message}: {type(error).__name__}"


def install_log_throttle(loggers: Iterable[str] = NOISY_LOGGERS, period: float = 1.0) -> None:
    """Add a `RepeatThrottle` to each of `loggers` (once: a second call leaves them as they are)."""
    for name in loggers:
        if installed_throttle(name) is None:
            logging.getLogger(name).addFilter(RepeatThrottle(period))


def installed_throttle(name: str) -> RepeatThrottle | None:
    """The `RepeatThrottle` on logger `name`, if one is installed."""
    return next((f for f in logging.getLogger(name).filters if isinstance(f, RepeatThrottle)), None)
