"""A real `prometheus` on a loopback port, and an aiohttp app served beside it, for the benches that time a signal
through Prometheus against gpu-pulse's direct path (inference_step.py, demand_step.py).

Prometheus binds port 0 and its address is read back from its log (tests/support/prometheus.py, LISTENING_LINE), so
no port is picked before it is bound.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.support.prometheus import LISTENING_LINE


def launch_prometheus(
    workdir: Path, config: dict[str, Any], timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Write `config` to workdir/prometheus.yml and start prometheus on it; the process and its URL once it listens."""
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             "--web.listen-address=127.0.0.1:0", "--log.level=info"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {log.read_text()[-2000:]}")
        if found := re.search(LISTENING_LINE, log.read_text(errors="replace")):
            return process, f"http://{found.group(1)}"
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("prometheus did not say where it listens")


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """`app` on a loopback port the kernel picks: its runner (to clean up) and its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"
