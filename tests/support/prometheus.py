"""A real `prometheus` process for tests: started with a configuration the test writes, queried over its HTTP API.

It binds port 0 (`--web.listen-address=127.0.0.1:0`) and its address is read back from its log, where the exporter
toolkit's web server says `msg="Listening on" address=...` with the port it bound (at level info): no port is picked
before it is bound, so no retry is needed (tests/support/loopback.py)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from exporter.catalogue import Dialect
from rules.generate import ROOT as RULES_ROOT
from rules.render import RULE_FILE
from tests.support.loopback import http_get
from tests.support.processes import ChildProcesses
from tests.support.waiting import patience, wait_for

# 2.x writes `component=web msg="Listening on" address=...`, 3.x `msg="Listening on" component=web address=...`
LISTENING_LINE = r'msg="Listening on"(?: component=\S+)? address=([0-9.]+:[0-9]+)'


def rule_file(dialect: Dialect) -> Path:
    """The shipped plain rule file of a dialect."""
    return RULES_ROOT / "dist" / str(dialect) / RULE_FILE


def rule_file_evaluated_every_time(dialect: Dialect, directory: Path) -> Path:
    """A copy of the shipped rule file whose groups all run at the global evaluation interval: groups with a slow
    `interval:` (the waste rules run every 5 minutes) would record nothing in a test that lasts seconds."""
    document = yaml.safe_load(rule_file(dialect).read_text(encoding="utf-8"))
    for group in document["groups"]:
        group.pop("interval", None)
    copy = directory / f"{dialect}-every-evaluation.rules.yaml"
    copy.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return copy


def shipped_rules(dialect: Dialect) -> list[dict[str, Any]]:
    """Every rule (recording and alerting) of the shipped rule file of `dialect`."""
    document = yaml.safe_load(rule_file(dialect).read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


@dataclass
class PrometheusServer:
    dialect: Dialect
    processes: ChildProcesses = field(repr=False)
    name: str
    names: set[str] = field(default_factory=set)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.processes.started[self.name]

    @cached_property
    def url(self) -> str:
        """Its address, from its log once it listens (waits for that)."""
        return "http://" + self.processes.wait_for_line(self.name, LISTENING_LINE, patience(30)).group(1)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            document = json.loads(http_get(url, timeout=10))
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"prometheus refused {expr!r}: {exc.read().decode()}") from exc
        result: list[dict[str, Any]] = document["data"]["result"]
        return result

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        params = {"match[]": match} if match else {}
        url = f"{self.url}/api/v1/label/{label}/values?{urllib.parse.urlencode(params)}"
        values: list[str] = json.loads(http_get(url, timeout=10))["data"]
        return values

    def rule_groups(self) -> list[dict[str, Any]]:
        """The rule groups as /api/v1/rules describes them (`lastEvaluation`, `rules`, ...)."""
        groups: list[dict[str, Any]] = json.loads(http_get(f"{self.url}/api/v1/rules", timeout=10))["data"]["groups"]
        return groups

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus ({self.dialect}) exited: see its log in the test's tmp directory")
        return bool(http_get(f"{self.url}/-/ready"))


def start_prometheus(
    binary: str,
    config: dict[str, Any],
    workdir: Path,
    processes: ChildProcesses,
    name: str,
    dialect: Dialect,
) -> PrometheusServer:
    """Write `config` and start prometheus with it on port 0 (started, not yet ready: see `PrometheusServer.ready`)."""
    config_file = workdir / f"{name}.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = [
        binary, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / f'tsdb-{name}'}",
        "--web.listen-address=127.0.0.1:0", "--log.level=info",
    ]  # fmt: skip
    processes.start(name, argv)
    return PrometheusServer(dialect, processes, name)


def wait_ready(server: PrometheusServer, timeout: float = 20) -> None:
    wait_for(server.ready, f"{server.dialect} prometheus ready", patience(timeout))
