"""The README and docs/ name what exists: every kustomize component, and flags by their advertised names only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapter.settings import COMMAND_LINE as ADAPTER
from exporter.settings import COMMAND_LINE as EXPORTER

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def test_the_readme_lists_every_kustomize_component() -> None:
    components = {path.name for path in (ROOT / "deploy" / "components").iterdir() if path.is_dir()}
    assert components, "no components found"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    listed = re.search(r"opt-in components \(([^)]*)\)", readme)
    assert listed is not None, "the README's list of kustomize components is gone"
    assert set(re.findall(r"`([a-z-]+)`", listed.group(1))) == components


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_use_no_hidden_flag_alias(path: Path) -> None:
    """An alias kept for old configurations (`--tls-key-file`) works but is not advertised: the docs name the flag."""
    text = path.read_text(encoding="utf-8")
    for command in (EXPORTER, ADAPTER):
        for alias in command.aliases:
            assert not re.search(rf"--{re.escape(alias)}\b", text), f"{path.name} names the hidden --{alias}"
            assert command.env(alias) not in text, f"{path.name} names the hidden {command.env(alias)}"


# ---- links, the index, and what docs/security.md says of the limits ------------------------------------------------
DOCS_DIR = (ROOT / "docs").resolve()
RECORDS = sorted((DOCS_DIR / "decisions").glob("*.md"))
# Records of issue #35 written in other branches beside this index; their links resolve once those branches land.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors_of(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lowercase, punctuation but `-` and `_` dropped, spaces to `-`,
    a repeated heading numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6} (.*)", line)
        if heading is None or in_code:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("path", [*DOCS, *RECORDS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_a_heading(path: Path) -> None:
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name} links {target}: no such file"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors_of(linked), f"{path.name} links {target}: no such heading"


def test_the_docs_index_lists_every_page_and_record() -> None:
    index = (DOCS_DIR / "README.md").read_text(encoding="utf-8")
    listed = set(LINK.findall(index))
    for page in sorted(DOCS_DIR.glob("*.md")):
        if page.name != "README.md":
            assert page.name in listed, f"docs/README.md does not list {page.name}"
    for record in RECORDS:
        assert f"decisions/{record.name}" in listed, f"docs/README.md does not list decisions/{record.name}"


def test_the_anchor_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## The kubelet's directory\n\n## Sizing\n\n## Sizing\n", encoding="utf-8")
    assert anchors_of(page) == {"title", "the-kubelets-directory", "sizing", "sizing-1"}


def _limit_rows() -> dict[str, str]:
    """`--flag` -> its default as docs/security.md's tables of limits write it."""
    text = (DOCS_DIR / "security.md").read_text(encoding="utf-8")
    section = text[text.index("## The limits, their flags and what each defends against") :]
    section = section[: section.index("\n## ", 1)]
    return dict(re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+) \|", section, flags=re.MULTILINE))


def test_the_limits_in_security_md_have_the_models_defaults() -> None:
    units = {"": 1, "s": 1, "MiB": 1024 * 1024}
    rows = _limit_rows()
    assert rows, "docs/security.md's table of limits is gone"
    for flag, written in rows.items():
        name = flag.removeprefix("--").replace("-", "_")
        owners = [command for command in (EXPORTER, ADAPTER) if name in command.model.model_fields]
        assert owners, f"docs/security.md names {flag}, which no service has"
        number, _, unit = written.strip().partition(" ")
        documented = float(number.replace(",", "")) * units[unit]
        for command in owners:
            assert documented == command.model.model_fields[name].default, f"{flag}: security.md says {written.strip()}"
