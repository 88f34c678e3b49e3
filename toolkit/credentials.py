"""Credentials for an upstream (the adapter's exporters and Prometheus, the report's Prometheus): a bearer token
re-read from its file, a CA bundle."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path

_REREAD_SECONDS = 60.0  # projected service-account tokens rotate; re-read the file about once a minute


class BearerToken:
    """A token read from a file (kept fresh, as projected tokens rotate); `headers()` gives the Authorization header.

    A file that cannot be read keeps the last token read, and raises only when there never was one.
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._token: str | None = None
        self._read_at = -_REREAD_SECONDS
        self.headers()  # fail at start, with the path named, when the file is unreadable

    def headers(self) -> dict[str, str]:
        now = self._clock()
        if self._token is None or now - self._read_at >= _REREAD_SECONDS:
            try:
                token = self._path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                if self._token is None:
                    raise ValueError(f"cannot read bearer token file {self._path}: {exc.strerror or exc}") from None
            else:
                if not token and self._token is None:
                    raise ValueError(f"bearer token file {self._path} is empty")
                self._token = token or self._token
            self._read_at = now
        return {"Authorization": f"Bearer {self._token}"}


def client_ssl_context(ca_file: Path | None) -> ssl.SSLContext | None:
    """A TLS client context trusting `ca_file` (None: no custom CA, use the system's)."""
    if ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load CA file {ca_file}: {exc}") from None
