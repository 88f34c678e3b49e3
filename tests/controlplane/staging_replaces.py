"""The replace directives a module importing k8s.io/kubernetes needs, generated from Kubernetes' own go.mod.

k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver, k8s.io/client-go, ...) at v0.0.0 and
replaces each with its directory under ./staging/src; replace directives of a dependency do not apply to the module
that imports it, so tests/controlplane/go/go.mod replaces each with the tag published with the release (Kubernetes
v1.37.2: v0.37.2). Run when moving to another Kubernetes release:

    python -m tests.controlplane.staging_replaces v1.37.2   (in tests/controlplane/go, with GOMODCACHE as build.py sets)

and put its output in go.mod in place of the old block, then `go mod tidy`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

STAGING = re.compile(r"^\s*(k8s\.io/[\w./-]+)\s+=>\s+\./staging/src/", re.MULTILINE)


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    return sorted(set(STAGING.findall(kubernetes_go_mod)))


def staging_tag(kubernetes_version: str) -> str:
    """v1.37.2 -> v0.37.2: the staging modules are tagged with the release's minor and patch."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if match is None:
        raise ValueError(f"not a Kubernetes release tag: {kubernetes_version}")
    return f"v0.{match.group(1)}.{match.group(2)}"


def replace_block(modules: list[str], tag: str) -> str:
    lines = [f"\t{module} => {module} {tag}" for module in modules]
    return "replace (\n" + "\n".join(lines) + "\n)\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.controlplane.staging_replaces vMAJOR.MINOR.PATCH", file=sys.stderr)
        return 2
    version = argv[0]
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], capture_output=True, text=True, check=True
    )
    go_mod = Path(json.loads(done.stdout)["GoMod"]).read_text(encoding="utf-8")
    print(replace_block(staging_modules(go_mod), staging_tag(version)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
