"""index.html as a person sees it: one self-contained file (no script, nothing fetched), opened in headless Chromium
(Debian package `chromium`), whose screenshot shows the plots drawn, and which prints to PDF."""

from __future__ import annotations

import re
import subprocess
from html import escape
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.report.conftest import KnownPrometheus, run_report
from tests.support.tools import require_tool

# the plots' colours (report/plots.py): held, busy, idle, the recommended profile's limits
COLOURS = {"held": (0x4C, 0x72, 0xB0), "busy": (0x55, 0xA8, 0x68), "idle": (0xC4, 0x4E, 0x52)}


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    binary = require_tool("chromium")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}",
    ]  # fmt: skip
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=90, check=False)


@pytest.fixture(scope="module")
def page(known: KnownPrometheus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page")
    run_report(known, out)
    return out / "index.html"


def test_the_page_stands_alone(page: Path, document: dict[str, Any]) -> None:
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*(?:"(?!#)|'(?!#)|[^\s"'#>])""", html, re.IGNORECASE), (
        "a resource from elsewhere"
    )
    assert "@import" not in html and "@font-face" not in html
    assert not re.search(r"url\((?!#)", html), (
        "a stylesheet resource from elsewhere"
    )  # the SVGs' clip paths are url(#id)
    assert html.count("<svg") >= 2 + 4  # the fleet plots and one per workload to act on
    assert "@media print" in html
    for workload in document["workloads"]:  # every recommendation says why, keep included
        assert workload["name"] in html
        assert escape(workload["recommendation"]["why"][0]) in html, workload["name"]
    assert "1g.10gb" in html and "reclaim" in html and "share" in html


def test_chromium_draws_the_plots(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "page.png"
    result = chromium(f"--screenshot={shot}", "--window-size=1200,2600", page.as_uri(), profile=tmp_path / "profile")
    assert shot.exists(), result.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 2600)
    counts = dict.fromkeys(COLOURS, 0)
    for (r, g, b), name in ((rgb, name) for name, rgb in COLOURS.items()):
        for pixel in image.get_flattened_data():
            if abs(pixel[0] - r) < 8 and abs(pixel[1] - g) < 8 and abs(pixel[2] - b) < 8:
                counts[name] += 1
    # the busy fill of the fleet plot, the top idle holders' bars, and the workloads' distributions
    assert all(count > 500 for count in counts.values()), counts


def test_chromium_prints_it(page: Path, tmp_path: Path) -> None:
    pdf = tmp_path / "page.pdf"
    result = chromium(f"--print-to-pdf={pdf}", "--no-pdf-header-footer", page.as_uri(), profile=tmp_path / "profile")
    assert pdf.exists(), result.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and data.count(b"/Type /Page") - data.count(b"/Type /Pages") >= 2
