"""The real `kubectl get --raw`, as a user or a script runs it against the adapter."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tools import require_tool


@dataclass(frozen=True)
class KubectlResult:
    code: int
    body: Any  # the parsed JSON answer when code == 0, else None
    stderr: str


def kubectl_get_raw(kubeconfig: Path, path: str, *, timeout: float = 30) -> KubectlResult:
    argv = [require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw", path]
    return run_kubectl(argv, timeout=timeout)


def run_kubectl(argv: list[str], *, cwd: Path | None = None, timeout: float = 30) -> KubectlResult:
    """Run a kubectl command line (argv[0] is kubectl); its JSON answer on success."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=timeout, check=False)
    body = json.loads(done.stdout) if done.returncode == 0 else None
    return KubectlResult(done.returncode, body, done.stderr.decode(errors="replace"))
