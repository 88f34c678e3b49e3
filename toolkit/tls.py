"""Serving TLS for both services: TLS 1.2 and newer, a given certificate or (the adapter) a self-signed one kept in a
directory, and client certificates requested but not required, verified against the CAs given.

Both services name their files with the same flags, `--tls-cert-file` and `--tls-private-key-file`, and a file that
cannot be used is one line naming both flags.

Python's TLS layer cannot "request but not verify" a client certificate as Go's can: a client certificate from an
unknown CA fails the handshake here, where kube-apiserver would answer 401. A client without a certificate passes,
and authenticates by token or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from toolkit.certs import CertificateAuthority
from toolkit.inputfiles import InputFileError, refuse_passphrase

Clock = Callable[[], datetime]

log = logging.getLogger(__name__)

SELF_SIGNED_CERT = "apiserver.crt"
SELF_SIGNED_KEY = "apiserver.key"
DEFAULT_HOSTNAMES = ("localhost", "127.0.0.1")
_RENEW_BEFORE = timedelta(days=1)


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
        context.load_cert_chain(cert_file, key_file, password=refuse_passphrase(KEY_FLAG, key_file))
    except InputFileError as e:
        raise TLSConfigError(str(e)) from None
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(
            f"{CERT_FLAG} {cert_file} / {KEY_FLAG} {key_file}: cannot load the serving certificate: {_reason(e)}"
        ) from None
    for ca_file in client_ca_files:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as e:
            raise TLSConfigError(f"cannot load the client CA file {ca_file}: {_reason(e)}") from None
    for ca in client_ca_data:
        try:
            context.load_verify_locations(cadata=ca.decode() if isinstance(ca, bytes) else ca)
        except ssl.SSLError as e:
            raise TLSConfigError(f"cannot load a client CA bundle: {_reason(e)}") from None
    context.verify_mode = ssl.CERT_OPTIONAL if client_ca_files or client_ca_data else ssl.CERT_NONE
    return context


def service_hostnames(service: str, namespace: str) -> tuple[str, ...]:
    """The names the aggregator uses to reach a Service: `<svc>.<ns>.svc` (and the usual longer forms)."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


def build_server_ssl_context(
    cert_file: Path | None,
    key_file: Path | None,
    cert_dir: Path,
    client_ca_files: Sequence[Path],
    *,
    client_ca_data: Sequence[str | bytes] = (),
    alt_names: Sequence[str] = (),
    clock: Clock = lambda: datetime.now(UTC),
) -> ssl.SSLContext:
    """A server context serving `cert_file`/`key_file`, or a self-signed certificate kept in `cert_dir` for
    localhost, 127.0.0.1 and `alt_names`. Client certificates are requested (not required) when CAs are given."""
    if (cert_file is None) != (key_file is None):
        raise TLSConfigError(f"{CERT_FLAG} and {KEY_FLAG} must be given together")
    if cert_file is None or key_file is None:
        cert_file, key_file = ensure_self_signed(cert_dir, (*DEFAULT_HOSTNAMES, *alt_names), clock=clock)
    return server_context(cert_file, key_file, client_ca_files=client_ca_files, client_ca_data=client_ca_data)


def _reason(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def ensure_self_signed(
    cert_dir: Path, hostnames: Sequence[str], *, clock: Clock = lambda: datetime.now(UTC)
) -> tuple[Path, Path]:
    """`cert_dir`/apiserver.crt and .key: reused when valid for a day more and for all `hostnames`, else made anew
    (a fresh CA and a serving certificate it signs; the .crt holds both, so the CA can be the APIService caBundle)."""
    cert_path, key_path = cert_dir / SELF_SIGNED_CERT, cert_dir / SELF_SIGNED_KEY
    now = clock()
    if _reusable(cert_path, key_path, hostnames, now):
        return cert_path, key_path
    stamp = int(now.timestamp())
    ca = CertificateAuthority.create(f"gpu-pulse-adapter-ca@{stamp}", now=now)
    serving = ca.issue_server(hostnames, common_name=f"gpu-pulse-adapter@{stamp}", now=now)
    try:
        serving.write(cert_path, key_path, chain=[ca.certificate])
    except OSError as e:
        raise TLSConfigError(f"cannot write a self-signed certificate into {cert_dir}: {_reason(e)}") from None
    return cert_path, key_path


def _reusable(cert_path: Path, key_path: Path, hostnames: Sequence[str], now: datetime) -> bool:
    try:
        certificate = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound):
        return False
    same_key = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    covered = {str(n) for n in sans.get_values_for_type(x509.DNSName)}
    covered |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    fresh = certificate.not_valid_before_utc <= now and now + _RENEW_BEFORE < certificate.not_valid_after_utc
    return same_key and fresh and set(hostnames) <= covered


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
        if period <= 0:
            raise ValueError("the reload period must be positive")
        self._context = context
        self._cert_file = cert_file
        self._key_file = key_file
        self._period = period
        self._seen = self._stamp()
        self.reloads = 0
        self.errors = 0
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    def _stamp(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in (self._cert_file.stat(), self._key_file.stat()))
        except OSError:
            return None

    def check(self) -> bool:
        """Load the pair if the files changed since the last load; True when a new pair now serves."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        try:
            with tempfile.TemporaryDirectory(prefix="gpu-pulse-tls-") as scratch:
                cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
                cert.write_bytes(self._cert_file.read_bytes())
                key.touch(mode=0o600)
                key.write_bytes(self._key_file.read_bytes())
                trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                trial.load_cert_chain(cert, key, password=refuse_passphrase(KEY_FLAG, self._key_file))
                self._context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError, InputFileError) as e:
            self.errors += 1
            problem = f"{CERT_FLAG} {self._cert_file} / {KEY_FLAG} {self._key_file}: {_reason(e)}"
            if problem != self.last_error:  # once per distinct problem, not every period while it lasts
                log.warning("the renewed serving certificate cannot be used yet, keeping the current one: %s", problem)
            self.last_error = problem
            return False
        self._seen = stamp
        self.reloads += 1
        self.last_error = ""
        log.info("serving the renewed certificate %s", self._cert_file)
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            self.check()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tls-certificate-reload")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
