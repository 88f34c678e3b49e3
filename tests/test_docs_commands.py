"""The commands README.md and docs/ give (shell blocks and inline code) hold up from a fresh clone, as written:

- `pip install` installs the clone (`.`, `'.[extra]'`) with extras pyproject.toml defines: gpu-pulse is not on PyPI;
- `python -m MODULE` names a module that exists, and every package it imports comes with the install or with an
  extra the same page installs (`python -m dashboards.generate` needs the extra `generate`);
- `gpu-pulse-exporter`, `gpu-pulse-adapter`, `gpu-pulse-report` (or `python -m exporter`, `python -m adapter`) are
  console scripts of the package, and every `--flag` given to them is one of theirs.

The cluster commands (helm, kubectl) are followed by tests/deploy/test_docs_install.py and test_docs_manifests.py."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from adapter.settings import COMMAND_LINE as ADAPTER
from exporter.settings import COMMAND_LINE as EXPORTER
from report.settings import COMMAND_LINE as REPORT

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FIRST_PARTY = {"exporter", "adapter", "toolkit", "simulation", "report", "rules", "dashboards", "scripts", "bench"}
COMMANDS = {"gpu-pulse-exporter": EXPORTER, "gpu-pulse-adapter": ADAPTER, "gpu-pulse-report": REPORT}
MODULE_COMMANDS = {"exporter": EXPORTER, "adapter": ADAPTER, "report": REPORT}
_SH = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_COMMAND_START = re.compile(r"^(\.venv/bin/|python3? |pip3? |gpu-pulse-(exporter|adapter|report)\b)")


def _words(line: str) -> list[list[str]]:
    """A shell line as commands (split at `&&`, `;` and `|`), comments dropped."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return []
    commands: list[list[str]] = []
    current: list[str] = []
    for word in words:
        if word in ("&&", "||", ";", "|"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    return [c for c in [*commands, current] if c]


def commands_of(text: str) -> Iterator[list[str]]:
    """Every command of the page's shell blocks, and every inline code span that starts like one of ours."""
    for block in _SH.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            yield from _words(line)
    prose = _SH.sub("", text)
    for span in _INLINE.findall(" ".join(prose.split())):  # a span may be wrapped over two lines
        if _COMMAND_START.match(span):
            yield from _words(span)


def _program(word: str) -> str:
    return word.removeprefix(".venv/bin/")


def pip_installs(command: list[str]) -> list[str] | None:
    """What a `pip install` installs (its requirement arguments), or None for another command."""
    programs = [i for i, w in enumerate(command) if _program(w) in ("pip", "pip3")]
    if programs and command[programs[0] + 1 : programs[0] + 2] == ["install"]:
        return [w for w in command[programs[0] + 2 :] if not w.startswith("-")]
    if command[:1] and _program(command[0]) in ("python", "python3") and command[1:4] == ["-m", "pip", "install"]:
        return [w for w in command[4:] if not w.startswith("-")]
    return None


def extras_installed(target: str) -> set[str]:
    """The extras a pip requirement installs from the clone; AssertionError for anything but the clone."""
    match = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
    assert match, f"pip install {target}: gpu-pulse is not on PyPI; install the clone (`.` or '.[extra]')"
    extras = set(match.group(1).split(",")) if match.group(1) else set()
    unknown = extras - set(PROJECT["optional-dependencies"])
    assert not unknown, f"pip install {target}: pyproject.toml has no extra {', '.join(sorted(unknown))}"
    return extras


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements bring, with theirs, as installed here."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or name == "gpu-pulse":
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [r for r in map(Requirement, requires) if r.marker is None or r.marker.evaluate({"extra": ""})]
    return seen


def provided(extras: set[str]) -> set[str]:
    """The distributions an install of the clone with `extras` provides."""
    requirements = list(PROJECT["dependencies"])
    for extra in extras:
        for requirement in PROJECT["optional-dependencies"][extra]:
            if requirement.startswith("gpu-pulse["):
                inner = requirement[len("gpu-pulse[") : -1].split(",")
                requirements += [r for e in inner for r in PROJECT["optional-dependencies"][e]]
            else:
                requirements.append(requirement)
    return _closure(requirements)


def third_party_imports(package: str) -> set[str]:
    """The top-level modules the first-party package imports that are neither first-party nor the standard
    library."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in FIRST_PARTY and n not in sys.stdlib_module_names and n != "__future__"}


def check_page(text: str) -> None:
    """AssertionError naming the first command of the page that does not hold up."""
    commands = list(commands_of(text))
    extras: set[str] = set()
    for command in commands:
        for target in pip_installs(command) or []:
            extras |= extras_installed(target)
    distributions = provided(extras)
    owners = importlib.metadata.packages_distributions()
    for command in commands:
        program = _program(command[0])
        arguments = command[1:]
        parser = None
        if program in ("python", "python3") and command[1:2] == ["-m"] and len(command) > 2:
            module = command[2]
            assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
            package = module.split(".")[0]
            if package in FIRST_PARTY:
                for name in third_party_imports(package):
                    dists = {canonicalize_name(d) for d in owners.get(name, [])}
                    assert dists & distributions, (
                        f"python -m {module} imports {name} ({', '.join(sorted(dists)) or 'not installed'}), which "
                        "neither the install nor an extra the page installs provides"
                    )
            parser = MODULE_COMMANDS.get(module)
            arguments = command[3:]
        elif program.startswith("gpu-pulse-") and program in COMMANDS:
            assert program in PROJECT["scripts"], f"{program}: not a console script of the package"
            parser = COMMANDS[program]
        elif program.startswith("gpu-pulse-") and command[0].startswith(".venv/bin/"):
            raise AssertionError(f"{program}: not a console script of the package")
        if parser is not None:
            known = set(parser.parser()._option_string_actions)
            for word in arguments:
                flag = word.strip("[]").split("=")[0]
                if flag.startswith("--"):
                    assert flag in known, f"{program} {flag}: no such flag"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_holds_up_from_a_fresh_clone(page: Path) -> None:
    check_page(page.read_text(encoding="utf-8"))


def test_the_commands_checked_include_the_first_hours() -> None:
    """The walk finds the commands a new user runs first (else the checks above would pass on nothing)."""
    readme = list(commands_of((ROOT / "README.md").read_text(encoding="utf-8")))
    assert [".venv/bin/pip", "install", ".[report]"] in readme
    assert any(c[:1] == [".venv/bin/gpu-pulse-report"] for c in readme)
    assert any(c[:3] == [".venv/bin/python", "-m", "dashboards.generate"] for c in readme)
    assert any(c[:2] == [".venv/bin/gpu-pulse-adapter", "--demo"] for c in readme)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("```sh\npip install 'gpu-pulse[report]'\n```\n", "not on PyPI"),
        ("```sh\n.venv/bin/pip install '.[reports]'\n```\n", "no extra reports"),
        ("Run `python -m dashboards.generate` to regenerate.", "imports grafana_foundation_sdk"),
        ("```sh\npython -m dashboards.generat\n```\n", "no such module"),
        ("```sh\ngpu-pulse-exporter --simulate shared --listen-address :9400\n```\n", "--listen-address: no such flag"),
        ("`gpu-pulse-report --prometheus-url URL [--windows 7d]`", "--windows: no such flag"),
        ("```sh\n.venv/bin/gpu-pulse-scaler --help\n```\n", "not a console script"),
    ],
)
def test_what_a_fresh_clone_cannot_run_is_refused(text: str, says: str) -> None:
    with pytest.raises(AssertionError, match=re.escape(says)):
        check_page(text)


def test_a_generator_is_runnable_where_the_page_installs_its_extra() -> None:
    check_page("`.venv/bin/pip install '.[generate]'`, then `.venv/bin/python -m dashboards.generate --check`.")
