"""Whom to trust: the client CA and the requestheader settings of an aggregated API server.

They come from the ConfigMap `kube-system/extension-apiserver-authentication` (which kube-apiserver publishes; list
values are JSON string arrays), and flags override them field by field (`--client-ca-file`,
`--requestheader-client-ca-file`, `--requestheader-allowed-names`, `--requestheader-username-headers`,
`--requestheader-group-headers`, `--requestheader-extra-headers-prefix`). When both CA files are given by flag, the
ConfigMap is not read at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from adapter.auth.trust import CertificatePool, TrustConfigError
from toolkit.inputfiles import InputFileError, read_input_file

log = logging.getLogger(__name__)

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"

DEFAULT_USERNAME_HEADERS = ("X-Remote-User",)
DEFAULT_GROUP_HEADERS = ("X-Remote-Group",)
DEFAULT_EXTRA_HEADERS_PREFIXES = ("X-Remote-Extra-",)


class AuthConfigError(ValueError):
    """Authentication configuration that cannot be used; the message is one line, fit for a start-up failure."""


@dataclass(frozen=True, slots=True)
class RequestHeaderConfig:
    ca_bundle: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = DEFAULT_USERNAME_HEADERS
    group_headers: tuple[str, ...] = DEFAULT_GROUP_HEADERS
    extra_headers_prefixes: tuple[str, ...] = DEFAULT_EXTRA_HEADERS_PREFIXES


@dataclass(frozen=True, slots=True)
class AuthenticationConfig:
    client_ca_bundle: str | None = None
    request_header: RequestHeaderConfig | None = None

    def ca_bundles(self) -> list[str]:
        """Every CA a client certificate may chain to, for the TLS layer."""
        bundles = [self.client_ca_bundle] if self.client_ca_bundle else []
        if self.request_header is not None:
            bundles.append(self.request_header.ca_bundle)
        return bundles


@dataclass(frozen=True, slots=True)
class AuthenticationFlags:
    """Overrides from the command line; None means "not given"."""

    client_ca_file: Path | None = None
    requestheader_client_ca_file: Path | None = None
    requestheader_allowed_names: Sequence[str] | None = None
    requestheader_username_headers: Sequence[str] | None = None
    requestheader_group_headers: Sequence[str] | None = None
    requestheader_extra_headers_prefix: Sequence[str] | None = None


def _string_list(data: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    raw = data.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuthConfigError(f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}: {key} is not a JSON array of strings: {raw!r}")
    return tuple(value)


def config_from_configmap(data: Mapping[str, str]) -> AuthenticationConfig:
    """The configuration the ConfigMap's `data` describes."""
    request_header = None
    if ca := data.get("requestheader-client-ca-file"):
        request_header = RequestHeaderConfig(
            ca_bundle=ca,
            allowed_names=_string_list(data, "requestheader-allowed-names") or (),
            username_headers=_string_list(data, "requestheader-username-headers") or DEFAULT_USERNAME_HEADERS,
            group_headers=_string_list(data, "requestheader-group-headers") or DEFAULT_GROUP_HEADERS,
            extra_headers_prefixes=_string_list(data, "requestheader-extra-headers-prefix")
            or DEFAULT_EXTRA_HEADERS_PREFIXES,
        )
    return _checked(
        AuthenticationConfig(client_ca_bundle=data.get("client-ca-file") or None, request_header=request_header)
    )


def _read(path: Path, flag: str) -> str:
    """A CA bundle named by `flag`: a file with at least one PEM certificate (an empty file would silently turn the
    login it configures off)."""
    try:
        text = read_input_file(path, flag).decode("ascii")
    except InputFileError as e:
        raise AuthConfigError(str(e)) from None
    except UnicodeDecodeError:
        raise AuthConfigError(f"{flag} {path}: not a PEM file (not ASCII text)") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise AuthConfigError(f"{flag} {path}: no PEM certificate in the file")
    return text


def apply_flags(base: AuthenticationConfig, flags: AuthenticationFlags) -> AuthenticationConfig:
    """`base` (from the ConfigMap, or empty) with every given flag taking precedence."""
    client_ca = _read(flags.client_ca_file, "--client-ca-file") if flags.client_ca_file else base.client_ca_bundle
    rh = base.request_header
    if flags.requestheader_client_ca_file is not None:
        ca = _read(flags.requestheader_client_ca_file, "--requestheader-client-ca-file")
        rh = RequestHeaderConfig(ca) if rh is None else replace(rh, ca_bundle=ca)
    if rh is not None:
        rh = replace(
            rh,
            allowed_names=_given(flags.requestheader_allowed_names, rh.allowed_names),
            username_headers=_given(flags.requestheader_username_headers, rh.username_headers),
            group_headers=_given(flags.requestheader_group_headers, rh.group_headers),
            extra_headers_prefixes=_given(flags.requestheader_extra_headers_prefix, rh.extra_headers_prefixes),
        )
    return _checked(AuthenticationConfig(client_ca_bundle=client_ca, request_header=rh))


def _given(flag: Sequence[str] | None, current: tuple[str, ...]) -> tuple[str, ...]:
    return current if flag is None else tuple(flag)


def _checked(config: AuthenticationConfig) -> AuthenticationConfig:
    try:
        if config.client_ca_bundle:
            CertificatePool(config.client_ca_bundle, label="client-ca-file")
        if config.request_header is not None:
            CertificatePool(config.request_header.ca_bundle, label="requestheader-client-ca-file")
    except TrustConfigError as e:
        raise AuthConfigError(str(e)) from None
    if config.request_header is not None and not config.request_header.username_headers:
        raise AuthConfigError("requestheader-username-headers is empty: no header can name the user")
    return config


async def load_authentication_config(
    api_client: ApiClient | None,
    flags: AuthenticationFlags = AuthenticationFlags(),
    *,
    tolerate_lookup_failure: bool = False,
    request_timeout: float = 10.0,
) -> AuthenticationConfig:
    """Read the ConfigMap (in a thread) unless flags give both CAs, then apply the flags.

    A ConfigMap that does not exist counts as empty. Any other failure to read it raises `AuthConfigError`, unless
    `tolerate_lookup_failure`, when the flags alone decide.
    """
    base = AuthenticationConfig()
    both_given = flags.client_ca_file is not None and flags.requestheader_client_ca_file is not None
    if api_client is not None and not both_given:
        try:
            data = await asyncio.to_thread(read_configmap, api_client, request_timeout)
        except Exception as e:
            problem = f"HTTP {e.status} {e.reason}" if isinstance(e, ApiException) else f"{type(e).__name__}: {e}"
            problem = problem.splitlines()[0] if problem else type(e).__name__
            if isinstance(e, ApiException) and e.status == 404:
                log.warning("%s/%s does not exist; using flags only", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
            elif tolerate_lookup_failure:
                log.warning("cannot read %s/%s (%s); using flags only", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME, problem)
            else:
                raise AuthConfigError(
                    f"cannot read {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} ({problem}): bind the adapter to the role "
                    "extension-apiserver-authentication-reader, or pass --client-ca-file and "
                    "--requestheader-client-ca-file"
                ) from None
        else:
            base = config_from_configmap(data)
    return apply_flags(base, flags)


def read_configmap(api_client: ApiClient, request_timeout: float) -> dict[str, str]:
    """The ConfigMap's data (blocking: call it in a thread)."""
    configmap = CoreV1Api(api_client).read_namespaced_config_map(
        CONFIGMAP_NAME, CONFIGMAP_NAMESPACE, _request_timeout=request_timeout
    )
    return dict(configmap.data or {})
