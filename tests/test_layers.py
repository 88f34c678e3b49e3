"""The layering contracts of quality.md, checked on the source: layers only point down.

Each rule says which modules a package may not import. The check reads every module's imports with `ast` (including
imports inside functions), so a lazy import cannot slip past it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (importer prefix, forbidden prefixes, why)
_ABOVE_SOURCES = ("exporter.exposition", "exporter.server", "exporter.loop", "exporter.cli", "exporter.page")

RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("exporter", ("adapter",), "the exporter never imports the adapter"),
    (
        "exporter.snapshot",
        ("exporter.",),
        "the snapshot model is the bottom layer",
    ),
    ("exporter.catalogue", ("exporter.",), "the catalogue is plain data"),
    ("exporter.podview", ("exporter.",), "the /pods contract stands alone: the adapter imports it"),
    (
        "exporter.nvml",
        (*_ABOVE_SOURCES, "exporter.kubelet", "exporter.attribution"),
        "sources know nothing of HTTP, rendering or the pod side",
    ),
    (
        "exporter.kubelet",
        (*_ABOVE_SOURCES, "exporter.nvml"),
        "sources know nothing of HTTP, rendering or NVML",
    ),
    (
        "exporter.attribution",
        _ABOVE_SOURCES,
        "attribution works on plain data, below the server",
    ),
    (
        "exporter.simulator",
        (
            "exporter.nvml",
            "exporter.exposition",
            "exporter.server",
            "exporter.loop",
            "exporter.cli",
            "exporter.attribution",
            "exporter.page",
        ),
        "the simulator stands in for hardware and external services, never for our own code",
    ),
    (
        "exporter.exposition",
        ("exporter.server", "exporter.loop", "exporter.cli", "exporter.nvml", "exporter.kubelet", "exporter.simulator"),
        "exposition renders snapshots; it does not collect or serve",
    ),
    ("exporter.loop", ("exporter.server", "exporter.cli"), "the loop is below the server"),
    ("adapter.quantity", ("adapter.", "exporter."), "wire formats stand alone"),
    ("adapter.selectors", ("adapter.", "exporter."), "wire formats stand alone"),
    (
        "adapter.kube",
        ("adapter.sources", "adapter.server", "adapter.cli", "adapter.demo"),
        "the Kubernetes side is below the API and the sources",
    ),
    ("adapter.sources", ("adapter.api", "adapter.server", "adapter.cli"), "sources know nothing of HTTP routing"),
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _modules() -> list[tuple[str, Path]]:
    out = []
    for top in ("exporter", "adapter"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "proto" in path.parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            out.append((_module_name(path), path))
    return out


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize(("importer", "forbidden", "why"), RULES, ids=[r[0] for r in RULES])
def test_layers_point_down(importer: str, forbidden: tuple[str, ...], why: str) -> None:
    violations = []
    for module, path in _modules():
        if not _matches(module, importer):
            continue
        for imported in _imports(path, module):
            if _matches(imported, importer):
                continue  # a package may import itself
            if any(_matches(imported, f) for f in forbidden):
                violations.append(f"{module} imports {imported}")
    assert not violations, f"{why}:\n" + "\n".join(sorted(set(violations)))


def test_rules_see_the_code() -> None:
    """Guard against a rule set that silently checks nothing (a renamed package, a moved tree)."""
    modules = {m for m, _ in _modules()}
    assert "exporter.snapshot" in modules and "exporter.catalogue" in modules
    assert any(_matches(m, "adapter") for m in modules)
