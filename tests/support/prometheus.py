"""A real `prometheus` process for tests: started on a free loopback port with a configuration the test writes,
queried over its HTTP API."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.catalogue import Dialect
from rules.generate import ROOT as RULES_ROOT
from rules.render import RULE_FILE
from tests.support.loopback import free_port, http_get
from tests.support.processes import ChildProcesses
from tests.support.waiting import wait_for


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
    url: str
    process: subprocess.Popen[bytes]
    names: set[str] = field(default_factory=set)

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
    *,
    port: int | None = None,
) -> PrometheusServer:
    """Write `config` and start prometheus with it (started, not yet ready: see `PrometheusServer.ready`)."""
    port = port or free_port()
    config_file = workdir / f"{name}.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = [
        binary, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / f'tsdb-{name}'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip
    process = processes.start(name, argv)
    return PrometheusServer(dialect, f"http://127.0.0.1:{port}", process)


def wait_ready(server: PrometheusServer, timeout: float = 20) -> None:
    wait_for(server.ready, f"{server.dialect} prometheus ready", timeout)
