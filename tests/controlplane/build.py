"""Building gpu-pulse-controlplane (tests/controlplane/go: Kubernetes' own API server and controllers as Go modules)
with the Go toolchain, cached per machine.

The binary is kept under the cache directory ($GPU_PULSE_CONTROLPLANE_CACHE, default
~/.cache/gpu-pulse/controlplane), keyed by a hash of the Go version and every file of the Go module, so a second run
finds it and builds nothing; the Go build and module caches live beside it, so a change to the program rebuilds only
what changed. Concurrent builders (test workers) wait for one another on a lock file.

`python -m tests.controlplane.build` builds it (when needed) and prints where it is; with `--if-cached` it only says
whether a build from the same sources is there. The first build takes long (71 min on two shared cores; README), so the
README's test command builds it only when asked (GPU_PULSE_CONTROLPLANE=build) or finds it built, and the tests skip,
saying how to build it, where it is not.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODULE = Path(__file__).resolve().parent / "go"
BINARY_NAME = "gpu-pulse-controlplane"
CACHE_VARIABLE = "GPU_PULSE_CONTROLPLANE_CACHE"


class BuildError(RuntimeError):
    """The Go toolchain is missing or the build failed; the message says which, with the build's output."""


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache" / "gpu-pulse" / "controlplane"


def go_tool() -> str:
    found = shutil.which("go")
    if found is None:
        raise BuildError("the Go toolchain (go) is not on PATH: the control plane tests build Kubernetes with it")
    return found


def source_key(go: str) -> str:
    """A hash of the Go version and the module's files: what the binary is built from."""
    digest = hashlib.sha256()
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    digest.update(version.encode())
    for path in sorted(p for p in MODULE.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_environment(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["GOCACHE"] = str(cache / "gocache")
    env["GOMODCACHE"] = str(cache / "gomodcache")
    env.setdefault("GOFLAGS", "")
    env["GOFLAGS"] = " ".join(f for f in (env["GOFLAGS"], "-mod=readonly", "-trimpath", "-buildvcs=false") if f)
    env["CGO_ENABLED"] = "0"
    return env


BUILD_VARIABLE = "GPU_PULSE_CONTROLPLANE"  # "build": build it when missing, whatever it takes
NOT_BUILT = (
    "the Kubernetes control plane is not built on this machine: `GPU_PULSE_CONTROLPLANE=build bash scripts/test.sh`, "
    "or `python -m tests.controlplane.build` (the first build takes long: README, 'Developing')"
)


def cached_binary() -> Path | None:
    """The binary built from the same sources, when one is in the cache (None without the Go toolchain too)."""
    try:
        go = go_tool()
    except BuildError:
        return None
    binary = cache_dir() / "bin" / source_key(go) / BINARY_NAME
    return binary if binary.exists() else None


def build_asked() -> bool:
    return os.environ.get(BUILD_VARIABLE) == "build"


def controlplane_binary(log: Path | None = None) -> Path:
    """The built binary: from the cache when one was built from the same sources, else built now (minutes the first
    time on a machine: `go build` of k8s.io/kubernetes's API server and controllers). BuildError when it fails."""
    go = go_tool()
    cache = cache_dir()
    binary = cache / "bin" / source_key(go) / BINARY_NAME
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building the same binary
        if binary.exists():
            return binary
        partial = binary.with_name(BINARY_NAME + ".partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        argv = [go, "build", "-ldflags=-s -w", "-o", str(partial), "."]
        output = open(log, "wb") if log is not None else subprocess.PIPE
        try:
            done = subprocess.run(
                argv, cwd=MODULE, env=build_environment(cache), stdout=output, stderr=subprocess.STDOUT, check=False
            )
        finally:
            if log is not None:
                output.close()  # type: ignore[union-attr]
        if done.returncode != 0:
            text = log.read_text(errors="replace") if log is not None else (done.stdout or b"").decode()
            raise BuildError(f"go build of {MODULE} failed (exit {done.returncode}):\n{text[-4000:]}")
        partial.rename(binary)
    return binary


def main() -> int:
    started = time.monotonic()
    if "--if-cached" in sys.argv[1:] and not build_asked():
        found = cached_binary()
        print(f"controlplane build: {found if found is not None else NOT_BUILT}")
        return 0
    try:
        binary = controlplane_binary()
    except BuildError as error:
        print(f"controlplane build: {error}", file=sys.stderr)
        return 1
    print(f"{binary} ({binary.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
