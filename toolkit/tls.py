"""Serving TLS for both services: TLS 1.2 and newer, the certificate given, renewed in place without a restart, and
client certificates requested but not required, verified against the CAs given. (The adapter's self-signed certificate,
which needs the `cryptography` package the exporter does without, is in toolkit/selfsigned.py.)

Both services name their files with the same flags, `--tls-cert-file` and `--tls-private-key-file`, and a file that
cannot be used is one line naming both flags.

Python's TLS layer cannot "request but not verify" a client certificate as Go's can: a client certificate from an
unknown CA fails the handshake here, where kube-apiserver would answer 401. A client without a certificate passes,
and authenticates by token or not at all.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from toolkit.inputfiles import InputFileError, read_input_file, read_input_text, refuse_passphrase
from toolkit.periodic import Periodic

log = logging.getLogger(__name__)


class TLSConfigError(ValueError):
    """Serving TLS that cannot be set up; the message is one line."""


CERT_FLAG = "--tls-cert-file"
KEY_FLAG = "--tls-private-key-file"


def server_context(
    cert_file: Path,
    key_file: Path,
    *,
    client_ca_files: Sequence[Path] = (),
    client_ca_data: Sequence[str | bytes] = (),
) -> ssl.SSLContext:
    """A TLS 1.2+ server context serving `cert_file`/`key_file`. Client certificates are requested (not required)
    when CAs are given. TLSConfigError (one line, naming the flags) when a file cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        load_pair(context, cert_file, key_file)
    except InputFileError as e:
        raise TLSConfigError(str(e)) from None
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(
            f"{CERT_FLAG} {cert_file} / {KEY_FLAG} {key_file}: cannot load the serving certificate: {reason(e)}"
        ) from None
    for ca_file in client_ca_files:
        try:
            context.load_verify_locations(cadata=read_input_text(ca_file, "--client-ca-file"))
        except InputFileError as e:
            raise TLSConfigError(str(e)) from None
        except (ValueError, ssl.SSLError) as e:
            raise TLSConfigError(f"cannot load the client CA file {ca_file}: {reason(e)}") from None
    for ca in client_ca_data:
        try:
            context.load_verify_locations(cadata=ca.decode() if isinstance(ca, bytes) else ca)
        except ssl.SSLError as e:
            raise TLSConfigError(f"cannot load a client CA bundle: {reason(e)}") from None
    context.verify_mode = ssl.CERT_OPTIONAL if client_ca_files or client_ca_data else ssl.CERT_NONE
    return context


def load_pair(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
    """Load `cert_file` and `key_file` into `context` from a private copy (`private_copy`), the key refused if it asks
    for a passphrase. InputFileError, OSError or ssl.SSLError when the pair cannot be used."""
    with private_copy(cert_file, key_file) as (cert, key):
        context.load_cert_chain(cert, key, password=refuse_passphrase(KEY_FLAG, key_file))


@contextmanager
def private_copy(cert_file: Path, key_file: Path) -> Iterator[tuple[Path, Path]]:
    """The pair, each file read once through the bounded reader (OpenSSL would open a FIFO and wait, or read a device
    without end) into a private directory that lives as long as the context."""
    cert_pem = read_input_file(cert_file, CERT_FLAG)
    key_pem = read_input_file(key_file, KEY_FLAG)
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-tls-") as scratch:
        cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        cert.write_bytes(cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        yield cert, key


FilesStamp = tuple[tuple[int, int, int], ...]


def files_stamp(*files: Path) -> FilesStamp | None:
    """What tells a file replaced or rewritten in place (inode, size, modification time), for each of `files`; None
    while one cannot be read (a rotation half done)."""
    try:
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in (f.stat() for f in files))
    except OSError:
        return None


def reason(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e).splitlines()[0] if str(e) else type(e).__name__


class CertificateReloader:
    """Serves a renewed certificate without a restart: every `period` seconds it looks at `--tls-cert-file` and
    `--tls-private-key-file`, and when either changed it loads the new pair into the same `SSLContext`, so new
    handshakes present it while open connections keep theirs (cert-manager, or a rotated Secret, replaces the files in
    place).

    A pair is first checked in a scratch context, from a private copy of the two files read once, and only then
    loaded into the serving context from that same copy: a certificate and key caught half-way through a rotation (one
    file new, the other old) are refused, logged and retried, and the serving context keeps the pair it had.
    """

    def __init__(self, context: ssl.SSLContext, cert_file: Path, key_file: Path, *, period: float = 10.0) -> None:
        self._periodic = Periodic(self.check, period, "tls-certificate-reload")
        self._context = context
        self._cert_file = cert_file
        self._key_file = key_file
        self._seen = self._stamp()
        self.reloads = 0
        self.errors = 0
        self.last_error = ""

    def _stamp(self) -> FilesStamp | None:
        return files_stamp(self._cert_file, self._key_file)

    def check(self) -> bool:
        """Load the pair if the files changed since the last load; True when a new pair now serves."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        try:
            with private_copy(self._cert_file, self._key_file) as (cert, key):
                trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                trial.load_cert_chain(cert, key, password=refuse_passphrase(KEY_FLAG, self._key_file))
                self._context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError, InputFileError) as e:
            self.errors += 1
            problem = f"{CERT_FLAG} {self._cert_file} / {KEY_FLAG} {self._key_file}: {reason(e)}"
            if problem != self.last_error:  # once per distinct problem, not every period while it lasts
                log.warning("the renewed serving certificate cannot be used yet, keeping the current one: %s", problem)
            self.last_error = problem
            return False
        self._seen = stamp
        self.reloads += 1
        self.last_error = ""
        log.info("serving the renewed certificate %s", self._cert_file)
        return True

    async def start(self) -> None:
        await self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()
