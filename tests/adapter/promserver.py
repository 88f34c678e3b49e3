"""A real `prometheus` process for adapter tests: it scrapes the targets a test writes to its file_sd file. It binds
port 0 and says in its log which port it got (tests/support/prometheus.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.prometheus import LISTENING_LINE
from tests.support.tools import require_tool
from tests.support.waiting import patience


class Prometheus:
    """A real prometheus process scraping the targets written to its file_sd file, every 200 ms."""

    def __init__(self, workdir: Path) -> None:
        binary = require_tool("prometheus")
        self.targets_file = workdir / "targets.json"
        self.query_log = workdir / "queries.log"
        self.set_targets([])
        config = {
            "global": {"scrape_interval": "200ms", "scrape_timeout": "150ms", "query_log_file": str(self.query_log)},
            "scrape_configs": [
                {
                    "job_name": "gpu-pulse-exporter",
                    "honor_labels": True,
                    "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log_path = workdir / "prometheus.log"
        self.log = log_path.open("w")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                "--web.listen-address=127.0.0.1:0",
                "--log.level=info",  # where it says which port it bound
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = ""
        deadline = time.monotonic() + patience(30)
        while not self.url or not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"prometheus did not start; see {log_path}")
            if not self.url and (listening := re.search(LISTENING_LINE, log_path.read_text(errors="replace"))):
                self.url = f"http://{listening.group(1)}"
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def set_targets(self, urls: list[str]) -> None:
        targets = [{"targets": [url.removeprefix("http://")], "labels": {}} for url in urls]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets))
        tmp.replace(self.targets_file)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]["result"]  # type: ignore[no-any-return]

    def query_at(self, promql: str, at: float) -> list[dict[str, Any]]:
        """An instant query evaluated at `at` (Unix seconds)."""
        params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=5) as response:
            return json.load(response)["data"]["result"]  # type: ignore[no-any-return]

    def logged_queries(self) -> list[str]:
        if not self.query_log.exists():
            return []
        lines = self.query_log.read_text().splitlines()
        return [json.loads(line)["params"]["query"] for line in lines if line.strip()]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
