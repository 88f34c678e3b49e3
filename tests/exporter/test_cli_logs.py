"""`--log-format text|json` and `--log-level`: one line per event, JSON that log pipelines can parse."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from toolkit.logs import configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    access_level = logging.getLogger("aiohttp.access").level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(access_level)


def test_json_lines(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    log = logging.getLogger("exporter.test")
    log.info("serving on %s", "http://127.0.0.1:9400", extra={"node": "n1"})
    log.debug("not shown at info")
    try:
        raise ValueError("multi\nline")
    except ValueError:
        log.exception("it broke")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, "one line per event, tracebacks included"
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "serving on http://127.0.0.1:9400"
    assert (first["level"], first["logger"], first["node"]) == ("info", "exporter.test", "n1")
    assert first["time"].endswith("+00:00")
    assert second["level"] == "error" and "ValueError: multi\nline" in second["exception"]


def test_text_lines_and_levels(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("warning", "text", stream)
    logging.getLogger("exporter.test").info("quiet")
    logging.getLogger("exporter.test").warning("loud")
    assert stream.getvalue().count("\n") == 1
    assert "WARNING exporter.test: loud" in stream.getvalue()


def test_access_log_only_at_debug(restore_logging: None) -> None:
    configure_logging("info", "text", io.StringIO())
    assert not logging.getLogger("aiohttp.access").isEnabledFor(logging.INFO)
    configure_logging("debug", "text", io.StringIO())
    assert logging.getLogger("aiohttp.access").isEnabledFor(logging.INFO)
