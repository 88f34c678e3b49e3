"""Content negotiation of `/metrics` (toolkit.negotiation), which both services answer with: the format a weighted
Accept header asks for, and whether an Accept-Encoding header takes gzip (RFC 9110 section 12.5)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.negotiation import accepts_gzip, media_ranges, wants_openmetrics

# what Prometheus sends (scrape/scrape.go acceptHeader): 2.x by default, and 3.x with its default scrape protocols
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        (PROMETHEUS_2_ACCEPT, True),
        (PROMETHEUS_3_ACCEPT, True),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text; version=0.0.1", True),
        ("application/openmetrics-text;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.9", False),
        ("application/openmetrics-text;version=2.0.0", False),
        ("application/openmetrics-text;q=0", False),
        ("text/html, application/openmetrics-text;q=0.9", True),
    ],
)
def test_accept_negotiation(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [("", False), ("gzip", True), ("deflate, gzip;q=0.5", True), ("gzip;q=0", False), ("*", True), ("br", False)],
)
def test_accept_encoding(header: str, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


# ---- a weighted list, written out and judged by the rule on its elements --------------------------------------------
@dataclass(frozen=True)
class Offered:
    media: str
    version: str | None
    q: str | None  # as written: "0", "0.5", "1", "0.125"
    extra: str | None  # a parameter the rule ignores (escaping=...)

    def written(self, draw_case: bool, spaces: str) -> str:
        media = self.media.upper() if draw_case else self.media
        params = [f"version={self.version}" if self.version is not None else None, self.extra]
        params.append(f"q={self.q}" if self.q is not None else None)
        return f"{spaces};{spaces}".join([media, *(p for p in params if p is not None)])

    @property
    def weight(self) -> float:
        return 1.0 if self.q is None else float(self.q)


MEDIA = ["application/openmetrics-text", "text/plain", "text/*", "*/*", "text/html", "application/json"]
offered = st.builds(
    Offered,
    media=st.sampled_from(MEDIA),
    version=st.sampled_from([None, "1.0.0", "0.0.1", "0.0.4", "2.0.0"]),
    q=st.one_of(st.none(), st.sampled_from(["0", "1", "1.0"]), st.integers(0, 1000).map(lambda n: f"0.{n:03d}")),
    extra=st.sampled_from([None, "escaping=allow-utf-8", 'charset="utf-8"']),
)
headers = st.lists(offered, max_size=6)


def expected_openmetrics(ranges: list[Offered]) -> bool:
    """OpenMetrics when its best weight (of a version we render) is above 0 and no lower than text 0.0.4's."""
    om = [r.weight for r in ranges if r.media == MEDIA[0] and r.version in (None, "1.0.0", "0.0.1")]
    text = [r.weight for r in ranges if r.media in MEDIA[1:4] and r.version in (None, "0.0.4")]
    return max(om, default=0.0) > 0 and max(om, default=0.0) >= max(text, default=0.0)


@given(ranges=headers, upper=st.booleans(), spaces=st.sampled_from(["", " ", "  "]))
def test_the_format_follows_the_weights(ranges: list[Offered], upper: bool, spaces: str) -> None:
    header = f",{spaces}".join(r.written(upper, spaces) for r in ranges)
    assert wants_openmetrics(header) is expected_openmetrics(ranges)


@given(ranges=headers, data=st.data())
def test_the_order_of_the_list_does_not_matter(ranges: list[Offered], data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(ranges))
    assert wants_openmetrics(",".join(r.written(False, "") for r in shuffled)) is wants_openmetrics(
        ",".join(r.written(False, "") for r in ranges)
    )


@given(st.text())
def test_any_header_gets_an_answer(header: str) -> None:
    assert isinstance(wants_openmetrics(header), bool)
    assert isinstance(accepts_gzip(header), bool)
    assert all(r.media == r.media.strip().lower() and r.media for r in media_ranges(header))


codings = st.lists(
    st.tuples(
        st.sampled_from(["gzip", "x-gzip", "*", "deflate", "br", "identity"]),
        st.one_of(st.none(), st.sampled_from(["0", "0.5", "1"])),
    ),
    max_size=5,
)


@given(codings)
def test_gzip_follows_the_first_coding_that_names_it(listed: list[tuple[str, str | None]]) -> None:
    header = ", ".join(coding if q is None else f"{coding};q={q}" for coding, q in listed)
    first = next((q for coding, q in listed if coding in ("gzip", "x-gzip", "*")), "absent")
    assert accepts_gzip(header) is (first != "absent" and (first is None or float(first) > 0))
