"""Trust configuration: the extension-apiserver-authentication ConfigMap, flags over it, and the requestheader rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from adapter.auth.config import (
    AuthConfigError,
    AuthenticationConfig,
    AuthenticationFlags,
    RequestHeaderConfig,
    apply_flags,
    config_from_configmap,
    load_authentication_config,
)
from adapter.auth.requestheader import RequestHeaderAuthenticator
from adapter.auth.trust import CertificatePool
from simulation.kubeapi import KubeApiServer
from toolkit.certs import CertificateAuthority
from toolkit.kubeclient import api_client

FRONT_PROXY_CA = CertificateAuthority.create("front-proxy-ca")
CLIENT_CA = CertificateAuthority.create("kubernetes-ca")
PROXY_DER = FRONT_PROXY_CA.issue_client("front-proxy-client").certificate.public_bytes(serialization.Encoding.DER)

CONFIGMAP = {
    "client-ca-file": CLIENT_CA.cert_pem.decode(),
    "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
    "requestheader-allowed-names": '["front-proxy-client"]',
    "requestheader-username-headers": '["X-Remote-User"]',
    "requestheader-group-headers": '["X-Remote-Group"]',
    "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
}


def test_configmap_as_kube_apiserver_publishes_it() -> None:
    config = config_from_configmap(CONFIGMAP)
    assert config.client_ca_bundle == CLIENT_CA.cert_pem.decode()
    assert config.request_header == RequestHeaderConfig(
        ca_bundle=FRONT_PROXY_CA.cert_pem.decode(),
        allowed_names=("front-proxy-client",),
        username_headers=("X-Remote-User",),
        group_headers=("X-Remote-Group",),
        extra_headers_prefixes=("X-Remote-Extra-",),
    )
    assert config.ca_bundles() == [CLIENT_CA.cert_pem.decode(), FRONT_PROXY_CA.cert_pem.decode()]


def test_configmap_without_requestheader_keys() -> None:
    assert config_from_configmap({"client-ca-file": CLIENT_CA.cert_pem.decode()}) == AuthenticationConfig(
        client_ca_bundle=CLIENT_CA.cert_pem.decode()
    )
    assert config_from_configmap({}) == AuthenticationConfig()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("requestheader-allowed-names", "front-proxy-client", "requestheader-allowed-names is not a JSON array"),
        ("requestheader-group-headers", "[1, 2]", "requestheader-group-headers is not a JSON array of strings"),
        ("client-ca-file", "not a certificate", "client-ca-file: not a PEM certificate bundle"),
    ],
)
def test_bad_configmap_values_are_one_line_errors(key: str, value: str, message: str) -> None:
    with pytest.raises(AuthConfigError) as caught:
        config_from_configmap({**CONFIGMAP, key: value})
    assert message in str(caught.value) and "\n" not in str(caught.value)


@given(st.dictionaries(st.sampled_from(sorted(CONFIGMAP)), st.text(max_size=40), max_size=6))
def test_any_configmap_content_gives_a_config_or_a_clear_error(data: dict[str, str]) -> None:
    try:
        config = config_from_configmap(data)
    except AuthConfigError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert isinstance(config, AuthenticationConfig)


def test_flags_override_the_configmap_field_by_field(tmp_path: Path) -> None:
    other_ca = CertificateAuthority.create("other")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(other_ca.cert_pem)
    base = config_from_configmap(CONFIGMAP)

    config = apply_flags(base, AuthenticationFlags(requestheader_allowed_names=["aggregator"]))
    assert config.request_header is not None
    assert config.request_header.allowed_names == ("aggregator",)
    assert config.request_header.ca_bundle == FRONT_PROXY_CA.cert_pem.decode()

    config = apply_flags(base, AuthenticationFlags(requestheader_client_ca_file=ca_file, client_ca_file=ca_file))
    assert config.request_header is not None and config.request_header.ca_bundle == other_ca.cert_pem.decode()
    assert config.request_header.allowed_names == ("front-proxy-client",)
    assert config.client_ca_bundle == other_ca.cert_pem.decode()

    alone = apply_flags(AuthenticationConfig(), AuthenticationFlags(requestheader_client_ca_file=ca_file))
    assert alone.request_header == RequestHeaderConfig(ca_bundle=other_ca.cert_pem.decode())

    with pytest.raises(AuthConfigError, match="requestheader-username-headers is empty"):
        apply_flags(base, AuthenticationFlags(requestheader_username_headers=[]))
    with pytest.raises(AuthConfigError, match=r"--client-ca-file .*missing\.crt"):
        apply_flags(base, AuthenticationFlags(client_ca_file=tmp_path / "missing.crt"))


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    server = KubeApiServer()
    await server.start()
    yield server
    await server.stop()


async def test_loaded_from_the_cluster(kube: KubeApiServer) -> None:
    kube.set_authentication_configmap(CONFIGMAP)
    config = await load_authentication_config(api_client(base_url=kube.url))
    assert config == config_from_configmap(CONFIGMAP)
    assert kube.request_count("get", "configmaps") == 1


async def test_missing_configmap_means_flags_only(kube: KubeApiServer, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CLIENT_CA.cert_pem)
    config = await load_authentication_config(
        api_client(base_url=kube.url), AuthenticationFlags(client_ca_file=ca_file)
    )
    assert config == AuthenticationConfig(client_ca_bundle=CLIENT_CA.cert_pem.decode())


async def test_unreadable_configmap_fails_start_unless_tolerated(kube: KubeApiServer) -> None:
    kube.set_authentication_configmap(CONFIGMAP)
    kube.set_forbidden(["configmaps"])
    client = api_client(base_url=kube.url)
    with pytest.raises(AuthConfigError, match=r"cannot read kube-system/extension-apiserver-authentication \(HTTP 403"):
        await load_authentication_config(client)
    assert await load_authentication_config(client, tolerate_lookup_failure=True) == AuthenticationConfig()


async def test_both_ca_flags_skip_the_configmap(kube: KubeApiServer, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CLIENT_CA.cert_pem)
    flags = AuthenticationFlags(client_ca_file=ca_file, requestheader_client_ca_file=ca_file)
    await load_authentication_config(api_client(base_url=kube.url), flags)
    assert kube.request_count("get", "configmaps") == 0


def _headers(pairs: list[tuple[str, str]]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


# header names are tokens: printable ASCII without separators; keys are lower-cased before unescaping
extra_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./:%@ äöé", min_size=1, max_size=20)


@given(st.dictionaries(extra_keys, st.lists(st.text(alphabet="abcXYZ 0189-_", max_size=8), min_size=1, max_size=3)))
def test_extra_header_keys_are_url_unescaped(extra: dict[str, list[str]]) -> None:
    authenticator = RequestHeaderAuthenticator(RequestHeaderConfig(ca_bundle=FRONT_PROXY_CA.cert_pem.decode()))
    pairs = [("X-Remote-User", "alice")]
    pairs += [(f"X-Remote-Extra-{quote(key, safe='')}", value) for key, values in extra.items() for value in values]
    user = authenticator.authenticate(PROXY_DER, _headers(pairs))
    assert user is not None
    assert user.extra == {key: tuple(values) for key, values in extra.items()}


def test_first_non_empty_user_header_wins_and_blank_groups_are_dropped() -> None:
    config = RequestHeaderConfig(
        ca_bundle=FRONT_PROXY_CA.cert_pem.decode(), username_headers=("X-User", "X-Remote-User")
    )
    authenticator = RequestHeaderAuthenticator(config)
    headers = _headers([("X-User", " "), ("X-Remote-User", "alice"), ("X-Remote-Group", ""), ("x-remote-group", "g")])
    user = authenticator.authenticate(PROXY_DER, headers)
    assert user is not None and user.name == "alice" and user.groups == ("g",)
    assert authenticator.authenticate(PROXY_DER, _headers([("X-Remote-Group", "g")])) is None  # no user: no one


def test_certificate_validity_is_checked_at_request_time() -> None:
    now = datetime.now(UTC)
    ca = CertificateAuthority.create("ca", now=now)
    short = ca.issue_client("front-proxy-client", valid_for=timedelta(hours=1), now=now)
    der = short.certificate.public_bytes(serialization.Encoding.DER)
    clock = [now]
    pool = CertificatePool(ca.cert_pem, label="test", clock=lambda: clock[0])
    assert pool.verify(der) is not None
    clock[0] = now + timedelta(hours=2)
    assert pool.verify(der) is None


def test_only_client_certificates_of_this_ca_pass() -> None:
    pool = CertificatePool(FRONT_PROXY_CA.cert_pem, label="test")
    server_only = FRONT_PROXY_CA.issue_server(["localhost"]).certificate.public_bytes(serialization.Encoding.DER)
    foreign = CLIENT_CA.issue_client("front-proxy-client").certificate.public_bytes(serialization.Encoding.DER)
    assert pool.verify(PROXY_DER) is not None
    assert pool.verify(server_only) is None  # serverAuth only: not for clients
    assert pool.verify(foreign) is None
    assert pool.verify(b"\x30\x03garbage") is None


def test_allowed_names_compare_the_common_name() -> None:
    config = RequestHeaderConfig(ca_bundle=FRONT_PROXY_CA.cert_pem.decode(), allowed_names=("aggregator",))
    authenticator = RequestHeaderAuthenticator(config)
    assert authenticator.authenticate(PROXY_DER, _headers([("X-Remote-User", "alice")])) is None
    named = FRONT_PROXY_CA.issue_client("aggregator").certificate.public_bytes(serialization.Encoding.DER)
    user = authenticator.authenticate(named, _headers([("X-Remote-User", "alice")]))
    assert user is not None and user.name == "alice"
    assert user.extra == {}


@pytest.mark.parametrize("content", [b"", b"\n  \n", b"not a certificate\n"], ids=["empty", "blank", "no-pem"])
@pytest.mark.parametrize("flag", ["client_ca_file", "requestheader_client_ca_file"])
def test_a_ca_file_without_a_certificate_is_an_error_not_a_login_turned_off(
    tmp_path: Path, content: bytes, flag: str
) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(content)
    flags = AuthenticationFlags(**{flag: ca_file})  # type: ignore[arg-type]
    shown = "--" + flag.replace("_", "-")
    with pytest.raises(AuthConfigError, match=rf"^{shown} .*ca.crt: no PEM certificate in the file$"):
        apply_flags(config_from_configmap(CONFIGMAP), flags)
