"""Exposition: a Snapshot rendered once into the `/metrics` bytes of a dialect (text 0.0.4 and OpenMetrics 1.0)."""

from exporter.exposition.render import ExpositionRenderer, Rendered, render_exposition
from exporter.exposition.textformat import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT

__all__ = [
    "CONTENT_TYPE_OPENMETRICS",
    "CONTENT_TYPE_TEXT",
    "ExpositionRenderer",
    "Rendered",
    "render_exposition",
]
