"""Regenerate the committed Python modules for KEDA's external scaler proto.

    python -m adapter.keda.proto.generate            # rewrite externalscaler_pb2.py, .pyi, _pb2_grpc.py in place
    python -m adapter.keda.proto.generate --out DIR  # write them under DIR/adapter/keda/proto/ instead

The generator is pinned (grpcio-tools, toolkit/protostubs.py) so that regenerating gives byte-identical files; a test
regenerates into a temporary directory and compares.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit.protostubs import PINNED_GRPCIO_TOOLS, GeneratorError, generate_stubs

__all__ = ["PINNED_GRPCIO_TOOLS", "PROTO_DIR", "GeneratorError", "generate", "main"]

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parents[2]
PROTO_RELATIVE = "adapter/keda/proto/externalscaler.proto"


def generate(out_root: Path, tools_version: str | None = None) -> tuple[Path, ...]:
    """Compile externalscaler.proto into `out_root`/adapter/keda/proto/ and return the paths written."""
    return generate_stubs(REPO_ROOT, PROTO_RELATIVE, out_root, tools_version)


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
