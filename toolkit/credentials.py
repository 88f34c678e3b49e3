"""Credentials for an upstream (the adapter's exporters and Prometheus, the report's Prometheus): a bearer token
re-read from its file, a CA bundle."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path

from toolkit.inputfiles import InputFileError, read_input_text

_REREAD_SECONDS = 60.0  # projected service-account tokens rotate; re-read the file about once a minute
MAX_TOKEN_BYTES = 64 * 1024  # a service account token is about 1 KB; an OIDC token a few


class BearerToken:
    """A token read from a file (kept fresh, as projected tokens rotate); `headers()` gives the Authorization header.

    The file goes through the bounded reader (toolkit/inputfiles.py), at start and on every re-read: a FIFO or
    `/dev/zero` is an error naming `flag`, never a hang. A file that cannot be read keeps the last token read, and
    raises only when there never was one.
    """

    def __init__(self, path: Path, flag: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._flag = flag
        self._clock = clock
        self._token: str | None = None
        self._read_at = -_REREAD_SECONDS
        self.headers()  # fail at start, with the flag and the path named, when the file is unusable

    def headers(self) -> dict[str, str]:
        now = self._clock()
        if self._token is None or now - self._read_at >= _REREAD_SECONDS:
            try:
                token = read_input_text(self._path, self._flag, max_bytes=MAX_TOKEN_BYTES).strip()
            except InputFileError:
                if self._token is None:
                    raise
            else:
                if not token and self._token is None:
                    raise InputFileError(f"{self._flag} {self._path}: the file is empty")
                self._token = token or self._token
            self._read_at = now
        return {"Authorization": f"Bearer {self._token}"}


def client_ssl_context(ca_file: Path | None, flag: str) -> ssl.SSLContext | None:
    """A TLS client context trusting the CA bundle `ca_file` (None: no custom CA, use the system's)."""
    if ca_file is None:
        return None
    bundle = read_input_text(ca_file, flag)
    try:
        return ssl.create_default_context(cadata=bundle)
    except (ValueError, ssl.SSLError) as exc:
        raise InputFileError(f"{flag} {ca_file}: not a usable CA bundle: {exc}") from None
