"""The layering rules of docs/architecture.md, checked on the source: layers only point down.

Each rule says which modules a package may not import. The check reads every module's imports with `ast` (including
imports inside functions), so a lazy import cannot slip past it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (importer prefix, forbidden prefixes, why)
_ABOVE_SOURCES = ("exporter.exposition", "exporter.server", "exporter.loop", "exporter.cli", "exporter.page")

_STANDINS = ("simulation",)
_CLIS = ("exporter.cli", "adapter.cli")
# the adapter's assembly: its parts built from settings, the aiohttp application over them, the server, the CLI
ASSEMBLY = ("adapter.parts", "adapter.application", "adapter.server", "adapter.cli")


@dataclass(frozen=True)
class Rule:
    importer: str  # a module prefix
    forbidden: tuple[str, ...]
    why: str
    allowed: tuple[str, ...] = ()  # exceptions to `forbidden`
    exempt: tuple[str, ...] = ()  # modules under `importer` the rule does not cover


RULES: list[Rule] = [
    Rule("exporter", ("adapter",), "the exporter never imports the adapter"),
    Rule("toolkit", ("exporter", "adapter", "simulation"), "the toolkit serves both services and knows neither"),
    Rule(
        "toolkit",
        ("report", "rules", "dashboards"),
        "the toolkit knows nothing of the report, the rules or the dashboards either",
    ),
    Rule(
        "toolkit.pods_contract",
        ("toolkit.",),
        "the /pods contract stands alone: both services, the stand-ins and benchmarks import it",
    ),
    Rule("exporter", ("report",), "the services never import the report"),
    Rule("adapter", ("report",), "the services never import the report"),
    Rule(
        "report",
        ("exporter", "adapter", "simulation", "rules", "dashboards"),
        "the report stands on the toolkit: it reads Prometheus and the Kubernetes API, never the services' code",
    ),
    Rule(
        "rules",
        ("report",),
        "the rules share the MIG table and the thresholds with the report through the toolkit, never the report",
    ),
    Rule(
        "dashboards",
        ("report",),
        "the dashboards share the thresholds and durations with the report through the toolkit, never the report",
    ),
    Rule(
        "exporter.snapshot",
        ("exporter.",),
        "the snapshot model is the bottom layer",
    ),
    Rule("exporter.catalogue", ("exporter.",), "the catalogue is plain data"),
    Rule(
        "exporter.nvml",
        (*_ABOVE_SOURCES, "exporter.kubelet", "exporter.attribution"),
        "sources know nothing of HTTP, rendering or the pod side",
    ),
    Rule(
        "exporter.kubelet",
        (*_ABOVE_SOURCES, "exporter.nvml"),
        "sources know nothing of HTTP, rendering or NVML",
    ),
    Rule(
        "exporter.attribution",
        _ABOVE_SOURCES,
        "attribution works on plain data, below the server",
    ),
    Rule(
        "exporter.engines",
        (*_ABOVE_SOURCES, "exporter.nvml", "exporter.kubelet", "exporter.attribution"),
        "the engine reader is a source: it hands the loop plain data and knows nothing of HTTP serving or the GPUs",
    ),
    Rule(
        "simulation",
        (
            "exporter.nvml",
            "exporter.exposition",
            "exporter.server",
            "exporter.loop",
            "exporter.cli",
            "exporter.attribution",
            "exporter.engines",
            "exporter.page",
            "adapter.api",
            "adapter.sources",
            "adapter.auth",
            "adapter.podcache",
        ),
        "the stand-ins stand in for hardware and external services, never for our own code",
        (),
        ("simulation.node", "simulation.demo"),  # these two compose stand-ins with our real code, by design
    ),
    Rule(
        "exporter.exposition",
        ("exporter.server", "exporter.loop", "exporter.cli", "exporter.nvml", "exporter.kubelet"),
        "exposition renders snapshots; it does not collect or serve",
    ),
    Rule("exporter.loop", ("exporter.server", "exporter.cli"), "the loop is below the server"),
    Rule("adapter.quantity", ("adapter.", "exporter."), "wire formats stand alone"),
    Rule("adapter.selectors", ("adapter.", "exporter."), "wire formats stand alone"),
    Rule("adapter.status", ("adapter.", "exporter."), "wire formats stand alone"),
    Rule(
        "adapter.podcache",
        ("adapter.sources", "adapter.auth", "adapter.api", *ASSEMBLY),
        "the pod cache is below the API, the sources and authentication",
    ),
    Rule(
        "adapter.auth",
        ("adapter.sources", "adapter.podcache", "adapter.api", *ASSEMBLY),
        "authentication is below the API and knows nothing of pods or figures",
    ),
    Rule("adapter.sources", ("adapter.api", *ASSEMBLY), "sources know nothing of HTTP routing"),
    Rule(
        "adapter.keda",
        ("adapter.api", "adapter.auth.requests", "adapter.auth.requestheader", *ASSEMBLY, "aiohttp"),
        "KEDA's external scaler sits beside the HTTP API: it uses the sources, the pod cache, the metric "
        "definitions and the users and authorization (adapter.auth's identities and reviews), and knows nothing of "
        "HTTP routing or HTTP's authentication",
    ),
    Rule(
        "adapter.parts", ("adapter.application", "adapter.server", "aiohttp"), "the parts are built apart from the app"
    ),
    Rule("adapter", ("exporter",), "the adapter imports nothing of the exporter: the /pods contract is the toolkit's"),
]


def _lazy_imports_only(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    """Top-level (module-scope) imports of `forbidden` in `path`: the CLIs may import the stand-ins only lazily."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [n for n in names if any(_matches(n, f) for f in forbidden)]
    return found


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
    for top in ("exporter", "adapter", "toolkit", "simulation", "report", "rules", "dashboards"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "proto" in path.parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            out.append((_module_name(path), path))
    return out


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("rule", RULES, ids=[r.importer for r in RULES])
def test_layers_point_down(rule: Rule) -> None:
    violations = []
    for module, path in _modules():
        if not _matches(module, rule.importer) or any(_matches(module, e) for e in rule.exempt):
            continue
        for imported in _imports(path, module):
            if _matches(imported, rule.importer) or any(_matches(imported, a) for a in rule.allowed):
                continue  # a package may import itself
            if any(_matches(imported, f) for f in rule.forbidden):
                violations.append(f"{module} imports {imported}")
    assert not violations, f"{rule.why}:\n" + "\n".join(sorted(set(violations)))


def test_services_import_the_stand_ins_only_lazily_from_their_clis() -> None:
    """`--simulate` and `--demo` are user features, so the stand-ins ship in the wheel; but only the two CLIs reach
    them, inside a function, so that no service module depends on simulated hardware."""
    violations = []
    for module, path in _modules():
        if not (_matches(module, "exporter") or _matches(module, "adapter")):
            continue
        if module in _CLIS:
            violations += [f"{module} imports {name} at module scope" for name in _lazy_imports_only(path, _STANDINS)]
            continue
        violations += [
            f"{module} imports {name}" for name in _imports(path, module) if any(_matches(name, s) for s in _STANDINS)
        ]
    assert not violations, "\n".join(sorted(set(violations)))


def test_rules_see_the_code() -> None:
    """Guard against a rule set that silently checks nothing (a renamed package, a moved tree)."""
    modules = {m for m, _ in _modules()}
    assert "exporter.snapshot" in modules and "exporter.catalogue" in modules
    assert "toolkit.pods_contract" in modules and "simulation.nvml.library" in modules
    assert "rules.waste" in modules and "dashboards.grafana" in modules
    assert any(_matches(m, "adapter.podcache") for m in modules) and any(_matches(m, "toolkit") for m in modules)
    for rule in RULES:
        assert any(_matches(m, rule.importer) for m in modules), f"rule for {rule.importer} matches no module"
