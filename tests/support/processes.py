"""Child processes of a test: each started with its output in a log file, all stopped (SIGTERM, then SIGKILL) at the
end, also when the test fails. The environment handed to children drops `GPU_PULSE_*` variables, so a developer's
settings cannot leak into the processes under test."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

REPO = Path(__file__).resolve().parents[2]


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without `GPU_PULSE_*`, with the repository importable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def stop_process(process: subprocess.Popen[bytes], grace: float = 5.0, *, group: bool = False) -> int:
    """SIGTERM, then SIGKILL after `grace` seconds; the exit code (negative: the signal that ended it).

    `group`: the process leads its own process group (started with `start_new_session`), and the signals go to the
    whole group, so that what it started goes too: Debian's `faketime` forks its command and does not pass SIGTERM
    on, which would leave the command running after the test."""

    def send(signal_number: int) -> None:
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal_number)
        else:
            process.send_signal(signal_number)

    if process.poll() is None:
        send(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            process.wait(timeout=grace)
    if group:
        deadline = time.monotonic() + grace
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # the group's other members end on the same SIGTERM
        send(signal.SIGKILL)  # whatever is left of it
    return process.returncode


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def first_line_matching(log: Path, pattern: str) -> re.Match[str] | None:
    """The first line of the file `log` in which `pattern` (a regular expression) is found; None if none (yet)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    return next((m for m in map(re.compile(pattern).search, text.splitlines()) if m is not None), None)


@dataclass
class ChildProcesses:
    """The processes one test (or module) started; `stop_all()` ends them in reverse order of starting."""

    logs_dir: Path
    started: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[BinaryIO] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        if name in self.started:
            raise ValueError(f"a process named {name} was started already")
        log = open(self.log_path(name), "wb")  # closed by stop_all
        self._logs.append(log)
        process = subprocess.Popen(
            list(argv), cwd=REPO, env=dict(env) if env is not None else clean_environment(), stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.started[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log_path(name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_running(self, name: str) -> None:
        """AssertionError with the log's tail when the process has exited."""
        code = self.started[name].poll()
        if code is not None:
            raise AssertionError(f"{name} exited with code {code}:\n{self.log_tail(name)}")

    def wait_for_line(self, name: str, pattern: str, timeout: float) -> re.Match[str]:
        """The first line of the process's log matching `pattern` (a regular expression), once it is written: how a
        child that bound port 0 reports its address. AssertionError with the log's tail if it exits or `timeout`
        seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            exited = self.started[name].poll()
            found = first_line_matching(self.log_path(name), pattern)
            if found is not None:
                return found
            if exited is not None or time.monotonic() > deadline:
                what = f"exited with code {exited}" if exited is not None else f"wrote no such line in {timeout:g} s"
                raise AssertionError(f"{name} {what} (waiting for /{pattern}/):\n{self.log_tail(name)}")
            time.sleep(0.05)

    def stop(self, name: str) -> int:
        return stop_process(self.started[name], group=True)

    def stop_all(self) -> None:
        for process in reversed(list(self.started.values())):
            stop_process(process, group=True)
        for log in self._logs:
            log.close()
        self._logs.clear()
