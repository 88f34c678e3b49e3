"""Users by client certificate: a certificate from the client CA names its user (CN) and groups (O)."""

from __future__ import annotations

from adapter.auth.identity import UserInfo
from adapter.auth.trust import CertificatePool, Clock, common_name, organizations


class ClientCertAuthenticator:
    def __init__(self, ca_bundle: str, *, clock: Clock | None = None) -> None:
        kwargs = {"clock": clock} if clock is not None else {}
        self._pool = CertificatePool(ca_bundle, label="client-ca-file", **kwargs)

    def authenticate(self, peer_certificate: bytes) -> UserInfo | None:
        certificate = self._pool.verify(peer_certificate)
        if certificate is None:
            return None
        name = common_name(certificate)
        if not name:
            return None
        return UserInfo(name=name, groups=organizations(certificate))
