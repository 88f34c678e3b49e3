"""Which CA a client certificate comes from: the requestheader CA (the aggregator's proxy) or the client CA (users).

The TLS layer asks for a client certificate but accepts any chain (toolkit/clientcerts.py, as kube-apiserver's
`tls.RequestClientCert`): the check is here, against the bundles in use now (signature of a CA of the bundle, the CA
and the certificate valid at request time, client-auth usage). Only certificates the CA signed directly are accepted:
the TLS layer hands over the client's leaf certificate, not the intermediates it may have sent. Where the TLS layer
still verifies (an OpenSSL the callback cannot reach), these checks come on top.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Clock = Callable[[], datetime]


class TrustConfigError(ValueError):
    """A CA bundle that holds no usable certificate."""


def common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else ""
    return value if isinstance(value, str) else value.decode()


def organizations(certificate: x509.Certificate) -> tuple[str, ...]:
    values = (a.value for a in certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return tuple(v if isinstance(v, str) else v.decode() for v in values)


def _allows_client_auth(certificate: x509.Certificate) -> bool:
    try:
        usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no EKU extension: any usage
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


class CertificatePool:
    """A CA bundle. `verify(der)` returns the client certificate when one of the bundle's certificates issued it."""

    def __init__(self, pem_bundle: str | bytes, *, label: str, clock: Clock = lambda: datetime.now(UTC)) -> None:
        data = pem_bundle.encode() if isinstance(pem_bundle, str) else pem_bundle
        try:
            self._issuers = x509.load_pem_x509_certificates(data)
        except ValueError as e:
            raise TrustConfigError(f"{label}: not a PEM certificate bundle ({e})") from None
        self.label = label
        self.pem = data
        self._clock = clock
        self._seen: OrderedDict[bytes, x509.Certificate | None] = OrderedDict()

    def verify(self, der: bytes) -> x509.Certificate | None:
        if der in self._seen:
            certificate = self._seen[der]
            self._seen.move_to_end(der)
        else:
            certificate = self._issued_here(der)
            self._seen[der] = certificate
            while len(self._seen) > 256:
                self._seen.popitem(last=False)
        if certificate is None:
            return None
        now = self._clock()
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            return None
        return certificate

    def _issued_here(self, der: bytes) -> x509.Certificate | None:
        try:
            certificate = x509.load_der_x509_certificate(der)
            if not _allows_client_auth(certificate):  # reads every extension: a duplicated one raises here
                return None
        except (ValueError, x509.DuplicateExtension):  # a certificate we cannot read is none the CA issued: a 401
            return None
        now = self._clock()
        for issuer in self._issuers:
            if not issuer.not_valid_before_utc <= now <= issuer.not_valid_after_utc:
                continue
            try:
                certificate.verify_directly_issued_by(issuer)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return certificate
        return None
