"""Regenerate the committed Python modules for KEDA's external scaler proto.

    python -m adapter.keda.proto.generate            # rewrite externalscaler_pb2.py, .pyi, _pb2_grpc.py in place
    python -m adapter.keda.proto.generate --out DIR  # write them under DIR/adapter/keda/proto/ instead

The generator is pinned (grpcio-tools, see pyproject.toml) so that regenerating gives byte-identical files; a test
regenerates into a temporary directory and compares.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata, resources
from pathlib import Path

PINNED_GRPCIO_TOOLS = "1.85.1"
PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parents[2]
PROTO_RELATIVE = "adapter/keda/proto/externalscaler.proto"
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


class GeneratorError(RuntimeError):
    """The stubs could not be generated (wrong grpcio-tools version, or protoc failed)."""


def generate(out_root: Path, tools_version: str | None = None) -> tuple[Path, ...]:
    """Compile externalscaler.proto into `out_root`/adapter/keda/proto/ and return the paths written.

    `tools_version` is the installed grpcio-tools version (looked up when None); anything but the pin is refused.
    """
    installed = tools_version if tools_version is not None else metadata.version("grpcio-tools")
    if installed != PINNED_GRPCIO_TOOLS:
        raise GeneratorError(f"grpcio-tools {PINNED_GRPCIO_TOOLS} is required to generate the stubs, found {installed}")
    from grpc_tools import protoc  # type: ignore[import-untyped]  # heavy, needed only here

    include = str(resources.files("grpc_tools") / "_proto")
    target = out_root / "adapter" / "keda" / "proto"
    target.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={REPO_ROOT}",
        f"--proto_path={include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        PROTO_RELATIVE,
    ]
    status = protoc.main(args)
    if status != 0:
        raise GeneratorError(f"protoc failed with status {status} on {PROTO_RELATIVE}")
    return tuple(target / name for name in GENERATED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate KEDA's external scaler gRPC stubs.")
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="root to write under (default: the repository)")
    options = parser.parse_args(argv)
    try:
        written = generate(options.out)
    except GeneratorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
