"""`--log-format text|json` and `--log-level`: one line per event, JSON that log pipelines can parse."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.logs import LOG_FIELDS, configure_logging, fields

ROOT = Path(__file__).resolve().parents[2]


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


def test_fields_are_named_once_and_none_is_left_out() -> None:
    assert fields(gpu=3, gpu_uuid="GPU-1", reason=None) == {"gpu": 3, "gpu_uuid": "GPU-1"}
    assert fields(reason=OSError("gone")) == {"reason": "gone"}
    with pytest.raises(ValueError, match="gpu_uid"):
        fields(gpu_uid="GPU-1")
    assert not LOG_FIELDS & set(vars(logging.makeLogRecord({}))), "a field that logging itself sets would raise"


def test_fields_are_keys_in_json_and_the_text_line_is_the_message_alone(restore_logging: None) -> None:
    for log_format in ("json", "text"):
        stream = io.StringIO()
        configure_logging("info", log_format, stream)  # type: ignore[arg-type]
        logging.getLogger("exporter.nvml").warning("%s: XID %d", "GPU-1", 79, extra=fields(gpu_uuid="GPU-1", xid=79))
        line = stream.getvalue()
        if log_format == "json":
            entry = json.loads(line)
            assert (entry["message"], entry["gpu_uuid"], entry["xid"]) == ("GPU-1: XID 79", "GPU-1", 79)
        else:
            assert line.endswith("WARNING exporter.nvml: GPU-1: XID 79\n"), line


@pytest.mark.timeout(60)
def test_a_real_exporters_gpu_events_carry_their_fields() -> None:
    """The faulty scenario: an XID burst on GPU 0 at 3 s, GPU 1 off the bus at 5 s (simulation/scenarios)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "faulty", "--listen", "127.0.0.1:0", "--interval", "0.2",
         "--log-format", "json"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")},
    )  # fmt: skip
    assert process.stderr is not None
    try:
        xid: dict[str, object] | None = None
        lost: dict[str, object] | None = None
        for line in process.stderr:
            entry = json.loads(line)
            if "XID 13" in entry["message"]:
                xid = entry
            if " is lost (" in entry["message"]:
                lost = entry
            if xid and lost:
                break
    finally:
        process.kill()
        process.wait(timeout=10)
    assert xid is not None and lost is not None
    assert xid["xid"] == 13 and str(xid["gpu_uuid"]).startswith("GPU-") and xid["gpu_uuid"] in str(xid["message"])
    assert (lost["gpu"], lost["reason"]) == (1, "GPU_IS_LOST") and lost["gpu_uuid"] in str(lost["message"])
