"""Content negotiation of `/metrics`, for both services: which exposition format an `Accept` header asks for, and
whether an `Accept-Encoding` header takes gzip.

The headers are weighted lists (RFC 9110 section 12.5); Prometheus states its scrape protocols in order of preference
as one (prometheus/prometheus scrape/scrape.go `acceptHeader`). Both services answer OpenMetrics 1.0.0 or text 0.0.4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

# versions of each format a scraper may name and still take what we render
_OPENMETRICS_VERSIONS = ("1.0.0", "0.0.1")
_OPENMETRICS = "application/openmetrics-text"
_TEXT_RANGES = ("text/plain", "text/*", "*/*")
_GZIP_CODINGS = ("gzip", "x-gzip", "*")


@dataclass(frozen=True, slots=True)
class MediaRange:
    """One element of a weighted list: `media` in lower case, its parameters (keys in lower case) and its weight."""

    media: str
    params: dict[str, str] = field(default_factory=dict)
    q: float = 1.0


def media_ranges(header: str) -> list[MediaRange]:
    """The elements of a weighted header, in order; a weight that is no number counts as 0 (not acceptable)."""
    ranges = []
    for part in header.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if not media:
            continue
        values: dict[str, str] = {}
        for param in params:
            key, _, value = param.partition("=")
            values[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(values.pop("q", "1"))
        except ValueError:
            q = 0.0
        ranges.append(MediaRange(media.lower(), values, q))
    return ranges


def wants_openmetrics(accept: str) -> bool:
    """True when the Accept header weighs OpenMetrics (a version we can answer) at least as high as text 0.0.4."""
    openmetrics_q = text_q = 0.0
    for each in media_ranges(accept):
        if each.media == _OPENMETRICS and each.params.get("version", "1.0.0") in _OPENMETRICS_VERSIONS:
            openmetrics_q = max(openmetrics_q, each.q)
        elif each.media in _TEXT_RANGES and each.params.get("version", "0.0.4") == "0.0.4":
            text_q = max(text_q, each.q)
    return openmetrics_q > 0 and openmetrics_q >= text_q


def content_type(openmetrics: bool) -> str:
    return CONTENT_TYPE_OPENMETRICS if openmetrics else CONTENT_TYPE_TEXT


def accepts_gzip(accept_encoding: str) -> bool:
    """True when the first coding of the header that names gzip (or `*`) has a weight above 0."""
    for each in media_ranges(accept_encoding):
        if each.media in _GZIP_CODINGS:
            return each.q > 0
    return False
