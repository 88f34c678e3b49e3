"""Repeated errors are logged once a second with a count of the rest; errors expected under attack lose their
traceback (toolkit.logthrottle)."""

from __future__ import annotations

import errno
import logging
import sys

import pytest
from aiohttp.http_exceptions import BadHttpMessage

from toolkit.logthrottle import RepeatThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(message: str, error: BaseException | None = None, name: str = "asyncio", *args: object) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, args or None, exc_info)


def test_accept_out_of_file_descriptors_is_one_line_a_second() -> None:
    clock = Clock()
    throttle = RepeatThrottle(clock=clock)
    emfile = OSError(errno.EMFILE, "Too many open files")
    message = "socket.accept() out of system resource\nsocket: <asyncio.TransportSocket fd=6>"
    first = record(message, emfile)
    assert throttle.filter(first)
    assert first.exc_info is None
    assert first.getMessage() == "socket.accept() out of system resource: OSError: [Errno 24] Too many open files"
    assert not any(throttle.filter(record(message, emfile)) for _ in range(10_000))
    clock.now += 1.0
    later = record(message, emfile)
    assert throttle.filter(later)
    assert later.getMessage().endswith("(10000 similar suppressed)")


def test_a_malformed_request_keeps_no_traceback_and_names_the_client() -> None:
    throttle = RepeatThrottle(clock=Clock())
    error = BadHttpMessage("Invalid header token")
    bad = record("Error handling request from %s", error, "aiohttp.server", "10.1.2.3")
    assert throttle.filter(bad)
    assert bad.exc_info is None
    assert bad.getMessage().startswith("Error handling request from 10.1.2.3: BadHttpMessage: 400")


def test_unexpected_errors_keep_their_traceback_but_are_throttled_too() -> None:
    clock = Clock()
    throttle = RepeatThrottle(clock=clock)
    try:
        raise KeyError("bug")
    except KeyError:
        exc_info = sys.exc_info()
    first = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", None, exc_info)
    assert throttle.filter(first) and first.exc_info is exc_info
    again = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", None, exc_info)
    assert not throttle.filter(again)


@pytest.mark.parametrize("kinds", [2, 5])
def test_different_kinds_are_counted_apart(kinds: int) -> None:
    throttle = RepeatThrottle(clock=Clock())
    assert all(throttle.filter(record(f"message {kind}")) for kind in range(kinds))


def test_every_warning_of_any_logger_is_throttled_on_the_services_handler() -> None:
    """Issue 21, item 6: a failure on each request (a TokenReview while the API server is away, 300 requests) made a
    line, or a traceback, per request. configure_logging throttles every WARNING and above, whatever its logger;
    INFO lines pass as they are."""
    import io

    from toolkit.logs import configure_logging

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", "text", stream)
        log = logging.getLogger("gpu_pulse.test.anywhere")
        for number in range(300):
            log.warning("cannot check a bearer token, answering 401: %s", f"attempt {number}")
        for number in range(3):
            log.info("serving %d", number)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = stream.getvalue().splitlines()
    assert len([line for line in lines if "answering 401" in line]) == 1
    assert len([line for line in lines if "serving" in line]) == 3
