"""Users named by headers, trusted only from the aggregator: the requestheader scheme of aggregated API servers.

A request proxied by kube-apiserver carries the proxy's client certificate. Only when that certificate was issued by
the requestheader CA, and (when allowed names are configured) its common name is one of them, are the user, group
and extra headers believed. Otherwise they are ignored, and other authenticators get their turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

from multidict import CIMultiDictProxy

from adapter.auth.config import RequestHeaderConfig
from adapter.auth.identity import UserInfo
from adapter.auth.trust import CertificatePool, Clock, common_name


class RequestHeaderAuthenticator:
    def __init__(self, config: RequestHeaderConfig, *, clock: Clock | None = None) -> None:
        kwargs = {"clock": clock} if clock is not None else {}
        self._pool = CertificatePool(config.ca_bundle, label="requestheader-client-ca-file", **kwargs)
        self._allowed = frozenset(config.allowed_names)
        self._user_headers = config.username_headers
        self._group_headers = config.group_headers
        self._extra_prefixes = tuple(p.lower() for p in config.extra_headers_prefixes)

    def authenticate(self, peer_certificate: bytes, headers: CIMultiDictProxy[str]) -> UserInfo | None:
        certificate = self._pool.verify(peer_certificate)
        if certificate is None:
            return None
        if self._allowed and common_name(certificate) not in self._allowed:
            return None
        name = next((v for h in self._user_headers if (v := headers.get(h, "").strip())), "")
        if not name:
            return None
        groups = tuple(v for h in self._group_headers for v in headers.getall(h, ()) if v.strip())
        return UserInfo(name=name, groups=groups, extra=self._extra(headers))

    def _extra(self, headers: CIMultiDictProxy[str]) -> Mapping[str, tuple[str, ...]]:
        extra: dict[str, list[str]] = {}
        if not self._extra_prefixes:
            return {}
        for header, value in headers.items():
            lowered = header.lower()
            for prefix in self._extra_prefixes:
                if lowered.startswith(prefix) and len(lowered) > len(prefix):
                    extra.setdefault(unquote(lowered[len(prefix) :]), []).append(value)
                    break
        return {k: tuple(v) for k, v in extra.items()}
