"""Regenerate the committed Python modules for the kubelet pod-resources proto.

    python -m exporter.kubelet.proto.generate            # rewrite api_pb2.py, api_pb2.pyi, api_pb2_grpc.py in place
    python -m exporter.kubelet.proto.generate --out DIR  # write them under DIR/exporter/kubelet/proto/ instead

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
PROTO_RELATIVE = "exporter/kubelet/proto/api.proto"


def generate(out_root: Path, tools_version: str | None = None) -> tuple[Path, ...]:
    """Compile api.proto into `out_root`/exporter/kubelet/proto/ and return the paths written."""
    return generate_stubs(REPO_ROOT, PROTO_RELATIVE, out_root, tools_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the pod-resources gRPC stubs.")
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
