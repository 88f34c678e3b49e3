"""The demo's simulated GPU nodes: one exporter child process per node (`python -m exporter --simulate <file>`), each
with its simulated kubelet and proc tree started inside it. pynvml holds one NVML library per process, hence one
process per node.

Children run in their own session (a Ctrl-C in the terminal reaches the demo, which stops them in order) and, on
Linux, get SIGTERM should the demo die without stopping them. Each binds port 0 and says in its log where it serves
(exporter/cli.py): a port chosen here and bound there could be taken in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

import exporter
from toolkit.pods_contract import NodePods, parse_node_pods

_PR_SET_PDEATHSIG = 1
# what an exporter logs (at level info) once it listens, with the port it bound
_SERVING = re.compile(r"serving .* on (http://[0-9.]+:[0-9]+)")


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of an exporter child: without `GPU_PULSE_*` settings (the demo passes flags), with this
    installation of gpu-pulse importable (also when it runs from a source checkout)."""
    env = {k: v for k, v in environ.items() if not k.startswith("GPU_PULSE_")}
    root = str(Path(exporter.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


# looked up here, so that the child (between fork and exec) only makes the call
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _terminate_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


@dataclass
class NodeExporter:
    """One simulated node's exporter process."""

    node: str
    log: Path
    process: asyncio.subprocess.Process
    url: str = ""  # known once it serves (`read_address`)

    @property
    def pid(self) -> int:
        return self.process.pid

    def read_address(self) -> bool:
        """Whether its address is known: read from its log's "serving" line once that is written."""
        if not self.url:
            try:
                found = _SERVING.search(self.log.read_text(errors="replace"))
            except OSError:
                found = None
            self.url = found.group(1) if found else ""
        return bool(self.url)

    async def document(self, session: aiohttp.ClientSession) -> NodePods | None:
        try:
            async with session.get(f"{self.url}/pods") as response:
                if response.status != 200:
                    return None
                return parse_node_pods(await response.read())
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, grace: float = 5.0) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


async def start_node_exporter(
    node: str, scenario: Path, workdir: Path, environ: Mapping[str, str], *, engines: bool = True
) -> NodeExporter:
    """The node's exporter; `engines`: it reads its pods' engines (the exporter refuses --engines on a simulated
    node without pods, as --demo-scale-to-zero leaves one)."""
    log = workdir / f"exporter-{node}.log"
    argv = [
        sys.executable, "-m", "exporter", f"--simulate={scenario}", f"--node-name={node}",
        "--listen=127.0.0.1:0", "--interval=1", "--dialect=prometheus", "--log-level=info",
        *(["--engines"] if engines else []),
    ]  # fmt: skip
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
            env=child_environment(environ),
            start_new_session=True,
            preexec_fn=_terminate_with_parent if _PRCTL is not None else None,
        )
    return NodeExporter(node, log, process)


class NodeStartError(RuntimeError):
    """An exporter exited or never served its pods; the message says which and shows its log."""


async def wait_serving(nodes: Mapping[str, NodeExporter], pods: Mapping[str, int], timeout: float) -> None:
    """Wait until every node's exporter serves a /pods document with all its pods."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiting = dict(nodes)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while waiting:
            for name, node in list(waiting.items()):
                if node.process.returncode is not None:
                    raise NodeStartError(
                        f"the exporter of node {name} exited ({node.process.returncode}):\n{node.log_tail()}"
                    )
                document = await node.document(session) if node.read_address() else None
                if document is not None and len(document.pods) == pods[name]:
                    del waiting[name]
            if waiting and loop.time() > deadline:
                raise NodeStartError(f"the exporters of {', '.join(sorted(waiting))} did not serve their pods")
            if waiting:
                await asyncio.sleep(0.2)
