"""Generating committed gRPC stubs from a .proto of the repository, with the pinned grpcio-tools, so that
regenerating gives byte-identical files (a test per .proto regenerates into a temporary directory and compares)."""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path

PINNED_GRPCIO_TOOLS = "1.85.1"  # as pyproject.toml's test extra pins it


class GeneratorError(RuntimeError):
    """The stubs could not be generated (wrong grpcio-tools version, or protoc failed)."""


def generate_stubs(
    repo_root: Path, proto_relative: str, out_root: Path, tools_version: str | None = None
) -> tuple[Path, ...]:
    """Compile `proto_relative` (a path under `repo_root`) into `out_root`, in the same relative folder: the `_pb2.py`,
    `_pb2.pyi` and `_pb2_grpc.py` modules, whose paths are returned. `tools_version` is the installed grpcio-tools
    version (looked up when None); anything but the pin is refused before anything is written."""
    installed = tools_version if tools_version is not None else metadata.version("grpcio-tools")
    if installed != PINNED_GRPCIO_TOOLS:
        raise GeneratorError(f"grpcio-tools {PINNED_GRPCIO_TOOLS} is required to generate the stubs, found {installed}")
    from grpc_tools import protoc  # type: ignore[import-untyped]  # heavy, needed only here

    include = str(resources.files("grpc_tools") / "_proto")
    relative = Path(proto_relative)
    target = out_root / relative.parent
    target.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={repo_root}",
        f"--proto_path={include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        proto_relative,
    ]
    status = protoc.main(args)
    if status != 0:
        raise GeneratorError(f"protoc failed with status {status} on {proto_relative}")
    stem = relative.stem
    return tuple(target / f"{stem}{suffix}" for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))
