"""The adapter's self-signed serving certificate, kept in `--cert-dir` when no `--tls-cert-file` is given: a fresh CA
and a serving certificate it signs, reused while valid for a day more and for every name asked for."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from toolkit.certs import CertificateAuthority
from toolkit.inputfiles import read_input_file
from toolkit.tls import CERT_FLAG, KEY_FLAG, TLSConfigError, reason, server_context

Clock = Callable[[], datetime]

SELF_SIGNED_CERT = "apiserver.crt"
SELF_SIGNED_KEY = "apiserver.key"
DEFAULT_HOSTNAMES = ("localhost", "127.0.0.1")
_RENEW_BEFORE = timedelta(days=1)


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
        raise TLSConfigError(f"cannot write a self-signed certificate into {cert_dir}: {reason(e)}") from None
    return cert_path, key_path


def _reusable(cert_path: Path, key_path: Path, hostnames: Sequence[str], now: datetime) -> bool:
    try:
        certificate = x509.load_pem_x509_certificates(read_input_file(cert_path, "--cert-dir"))[0]
        key = serialization.load_pem_private_key(read_input_file(key_path, "--cert-dir"), password=None)
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
