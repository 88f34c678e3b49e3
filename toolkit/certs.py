"""A small certificate authority: CAs, and client and server certificates issued by them (ECDSA P-256).

The adapter uses it for its self-signed serving certificate; tests and the demo use it to stand up the trust that a
cluster would provide (front-proxy CA, client CA) and to write kubeconfigs with client certificates.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_BACKDATE = timedelta(minutes=5)  # tolerate clock skew between issuer and verifier


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def write(self, cert_path: Path, key_path: Path, *, chain: Sequence[x509.Certificate] = ()) -> None:
        """Write the certificate (followed by `chain`) and the key (mode 0600), each atomically."""
        pem = self.cert_pem + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
        write_private(key_path, self.key_pem)
        write_atomically(cert_path, pem, mode=0o644)


def write_atomically(path: Path, data: bytes, *, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_private(path: Path, data: bytes) -> None:
    write_atomically(path, data, mode=0o600)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def subject_alternative_names(hostnames: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hostnames):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(
        cls, common_name: str, *, valid_for: timedelta = timedelta(days=365), now: datetime | None = None
    ) -> CertificateAuthority:
        start = (now or datetime.now(UTC)) - _BACKDATE
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        public = key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + valid_for)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue_client(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        valid_for: timedelta = timedelta(days=365),
        now: datetime | None = None,
    ) -> IssuedCertificate:
        """A client certificate: CN is the user, O the groups (Kubernetes' reading)."""
        return self._issue(
            _name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH, [], valid_for, now or datetime.now(UTC)
        )

    def issue_server(
        self,
        hostnames: Sequence[str],
        *,
        common_name: str | None = None,
        valid_for: timedelta = timedelta(days=365),
        now: datetime | None = None,
    ) -> IssuedCertificate:
        """A serving certificate for these DNS names and IP addresses."""
        if not hostnames:
            raise ValueError("a serving certificate needs at least one host name or address")
        name = _name(common_name or hostnames[0])
        sans = subject_alternative_names(hostnames)
        return self._issue(name, ExtendedKeyUsageOID.SERVER_AUTH, sans, valid_for, now or datetime.now(UTC))

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
        valid_for: timedelta,
        now: datetime,
    ) -> IssuedCertificate:
        key = ec.generate_private_key(ec.SECP256R1())
        start = now - _BACKDATE
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(min(start + valid_for, self.certificate.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return IssuedCertificate(builder.sign(self.key, hashes.SHA256()), key)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,  # ECDSA keys sign; they do not encipher
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
