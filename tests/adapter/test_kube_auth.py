"""Authentication and authorization of an aggregated API server, end to end over TLS.

A tiny aiohttp app stands in for the adapter's API (the router is another part); it is protected by the real
middleware, authenticators and SubjectAccessReviewer, which talk to the Kubernetes API test server through the real
`kubernetes` client. Certificates come from real CAs; `kubectl` is one of the clients.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from adapter.auth.clientcert import ClientCertAuthenticator
from adapter.auth.config import AuthenticationFlags, load_authentication_config
from adapter.auth.reload import TrustReloader
from adapter.auth.requests import (
    USER_KEY,
    DelegatingAuthenticator,
    NonResourceAttributes,
    RequestAttributes,
    ResourceAttributes,
    UserInfo,
    auth_middleware,
    forbidden_message,
)
from adapter.auth.sar import SubjectAccessReviewer
from adapter.auth.tokenreview import TokenReviewer
from simulation.kubeapi import AccessGrant, KubeApiServer, TokenUser
from simulation.kubeconfig import write_kubeconfig
from tests.support.waiting import eventually
from toolkit.certs import CertificateAuthority, IssuedCertificate
from toolkit.clientcerts import request_unverified_client_certificates
from toolkit.kubeclient import api_client
from toolkit.selfsigned import build_server_ssl_context

METRICS = "/apis/custom.metrics.k8s.io/v1beta2"


@dataclass
class Pki:
    front_proxy_ca: CertificateAuthority
    client_ca: CertificateAuthority
    proxy: IssuedCertificate  # the aggregator's client certificate
    intruder: IssuedCertificate  # front-proxy CA, but a name that is not allowed
    bob: IssuedCertificate  # a user certificate from the client CA
    rogue: IssuedCertificate  # a "proxy" certificate from a CA nobody trusts
    files: dict[str, tuple[Path, Path]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    front_proxy_ca = CertificateAuthority.create("front-proxy-ca")
    client_ca = CertificateAuthority.create("kubernetes-ca")
    rogue_ca = CertificateAuthority.create("rogue-ca")
    pki = Pki(
        front_proxy_ca=front_proxy_ca,
        client_ca=client_ca,
        proxy=front_proxy_ca.issue_client("front-proxy-client"),
        intruder=front_proxy_ca.issue_client("intruder"),
        bob=client_ca.issue_client("bob", ["team-a", "team-b"]),
        rogue=rogue_ca.issue_client("front-proxy-client"),
    )
    directory = tmp_path_factory.mktemp("pki")
    for name in ("proxy", "intruder", "bob", "rogue"):
        issued: IssuedCertificate = getattr(pki, name)
        paths = (directory / f"{name}.crt", directory / f"{name}.key")
        issued.write(*paths)
        pki.files[name] = paths
    return pki


def metric_attributes(request: web.Request) -> ResourceAttributes | None:
    """The resource a request touches, for the paths of this test app (the real router has its own)."""
    parts = request.path.removeprefix(METRICS + "/").split("/")
    if not request.path.startswith(METRICS + "/") or len(parts) != 5 or parts[0] != "namespaces":
        return None
    _, namespace, resource, name, metric = parts
    return ResourceAttributes(
        verb="get",
        group="custom.metrics.k8s.io",
        version="v1beta2",
        resource=resource,
        subresource=metric,
        namespace=namespace,
        name="" if name == "*" else name,
    )


async def whoami(request: web.Request) -> web.Response:
    user = request[USER_KEY]
    return web.json_response(
        {"user": user.name, "groups": list(user.groups), "extra": {k: list(v) for k, v in user.extra.items()}}
    )


async def healthy(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@dataclass
class Stack:
    kube: KubeApiServer
    url: str
    cert_dir: Path
    tokens: TokenReviewer
    access: SubjectAccessReviewer
    reviews: list[Mapping[str, Any]]
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    reloader: TrustReloader | None = None

    def client_context(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cert_dir / "apiserver.crt")
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    async def get(
        self,
        path: str,
        *,
        cert: tuple[Path, Path] | None = None,
        headers: Mapping[str, str] | CIMultiDict[str] | None = None,
    ) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, ssl=self.client_context(cert), headers=headers) as response,
        ):
            body = await response.read()
            try:
                return response.status, json.loads(body)
            except ValueError:
                return response.status, body.decode()


async def start_stack(
    pki: Pki,
    tmp_path: Path,
    *,
    allowed_names: list[str] | None = None,
    always_allow: tuple[str, ...] = (),
    reload_period: float | None = None,
    flags: AuthenticationFlags | None = None,
) -> AsyncIterator[Stack]:
    reviews: list[Mapping[str, Any]] = []

    def policy(spec: Mapping[str, Any]) -> bool:
        reviews.append(spec)
        attributes = spec.get("resourceAttributes") or {}
        if spec.get("nonResourceAttributes"):
            return True  # discovery is open to every authenticated user, as system:discovery is
        return attributes.get("subresource") == "gpu_utilization" or spec.get("user") == "admin"

    kube = KubeApiServer(authorization=policy)
    await kube.start()
    kube.set_authentication_configmap(
        {
            "client-ca-file": pki.client_ca.cert_pem.decode(),
            "requestheader-client-ca-file": pki.front_proxy_ca.cert_pem.decode(),
            "requestheader-allowed-names": json.dumps(
                ["front-proxy-client"] if allowed_names is None else allowed_names
            ),
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
    )
    client = api_client(base_url=kube.url)
    flags = flags if flags is not None else AuthenticationFlags()
    config = await load_authentication_config(client, flags)
    cert_dir = tmp_path / "serving"
    context = build_server_ssl_context(None, None, cert_dir, [], client_ca_data=config.ca_bundles())
    assert request_unverified_client_certificates(context), "as adapter.server does"
    registry = CollectorRegistry()
    tokens = TokenReviewer(client, registry=registry)
    access = SubjectAccessReviewer(client)
    authenticator = DelegatingAuthenticator.from_config(config, tokens)
    reloader = TrustReloader(
        client, flags, authenticator.reconfigure, current=config, period=reload_period or 1.0, registry=registry
    )
    app = web.Application(middlewares=[auth_middleware(authenticator, access, metric_attributes, always_allow)])
    app.router.add_get(METRICS + "/namespaces/{namespace}/pods/{name}/{metric}", whoami)
    app.router.add_get("/apis", whoami)
    for path in ("/healthz", "/livez", "/readyz", "/metrics"):
        app.router.add_get(path, healthy)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    if reload_period is not None:
        await reloader.start()
    try:
        yield Stack(kube, f"https://127.0.0.1:{port}", cert_dir, tokens, access, reviews, registry, reloader)
    finally:
        await reloader.stop()
        await runner.cleanup()
        await access.close()
        await kube.stop()


@pytest.fixture
async def stack(pki: Pki, tmp_path: Path) -> AsyncIterator[Stack]:
    async for s in start_stack(pki, tmp_path, always_allow=("/metrics",)):
        yield s


AS_ALICE = {"X-Remote-User": "alice", "X-Remote-Group": "ml-team"}


async def test_proxy_certificate_with_an_allowed_name_vouches_for_the_headers(pki: Pki, stack: Stack) -> None:
    headers = CIMultiDict(
        [
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "ml-team"),
            ("X-Remote-Group", "oncall"),
            ("X-Remote-Extra-Scopes%2Fread", "pods"),
            ("X-Remote-Extra-Scopes%2Fread", "nodes"),
        ]
    )
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/*/gpu_utilization", cert=pki.files["proxy"], headers=headers
    )
    assert status == 200, body
    assert body == {
        "user": "alice",
        "groups": ["ml-team", "oncall", "system:authenticated"],
        "extra": {"scopes/read": ["pods", "nodes"]},
    }
    # what the SubjectAccessReview asked, as the cluster saw it
    spec = stack.reviews[-1]
    assert spec["user"] == "alice" and spec["groups"] == ["ml-team", "oncall", "system:authenticated"]
    assert spec["extra"] == {"scopes/read": ["pods", "nodes"]}
    assert spec["resourceAttributes"] == {
        "verb": "get",
        "group": "custom.metrics.k8s.io",
        "version": "v1beta2",
        "resource": "pods",
        "subresource": "gpu_utilization",
        "namespace": "ml",
    }


async def test_headers_without_a_certificate_are_ignored(stack: Stack) -> None:
    status, body = await stack.get(f"{METRICS}/namespaces/ml/pods/*/gpu_utilization", headers=AS_ALICE)
    assert status == 401
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    assert stack.reviews == []  # never got as far as authorization


async def test_proxy_certificate_with_a_name_not_allowed_is_ignored(pki: Pki, stack: Stack) -> None:
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/*/gpu_utilization", cert=pki.files["intruder"], headers=AS_ALICE
    )
    assert status == 401 and body["reason"] == "Unauthorized"


async def test_any_front_proxy_name_is_trusted_when_no_names_are_configured(pki: Pki, tmp_path: Path) -> None:
    async for stack in start_stack(pki, tmp_path, allowed_names=[]):
        status, body = await stack.get(
            f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", cert=pki.files["intruder"], headers=AS_ALICE
        )
        assert status == 200 and body["user"] == "alice"


async def test_user_certificate_names_the_user_and_headers_cannot_change_it(pki: Pki, stack: Stack) -> None:
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", cert=pki.files["bob"], headers=AS_ALICE
    )
    assert status == 200
    assert body == {"user": "bob", "groups": ["team-a", "team-b", "system:authenticated"], "extra": {}}


async def test_certificate_from_an_unknown_ca_is_unauthorized_as_kube_apiserver_answers(pki: Pki, stack: Stack) -> None:
    # the handshake succeeds (kubernetes/apiserver secure_serving.go: tls.RequestClientCert); the authenticators refuse
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", cert=pki.files["rogue"], headers=AS_ALICE
    )
    assert status == 401 and body["reason"] == "Unauthorized", body
    assert stack.reviews == []
    # a bearer token still counts beside a certificate nobody trusts (every authenticator gets its turn)
    stack.kube.set_token("t", TokenUser("carol"))
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/x/gpu_utilization",
        cert=pki.files["rogue"],
        headers={**AS_ALICE, "Authorization": "Bearer t"},
    )
    assert status == 200 and body["user"] == "carol", body


async def test_bearer_tokens_are_reviewed_once_then_cached(stack: Stack) -> None:
    stack.kube.set_token("good-token", TokenUser("carol", uid="c-1", groups=("ml-team",)))
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    for _ in range(3):
        status, body = await stack.get(path, headers={"Authorization": "Bearer good-token"})
        assert status == 200 and body["user"] == "carol" and body["groups"] == ["ml-team", "system:authenticated"]
    for _ in range(3):
        status, body = await stack.get(path, headers={"Authorization": "Bearer bad-token"})
        assert status == 401 and body["kind"] == "Status"
    assert stack.kube.request_count("create", "tokenreviews") == 2  # one yes, one no, each cached
    assert stack.kube.request_count("create", "subjectaccessreviews") == 1  # the allow is cached too


async def test_a_token_that_is_not_ascii_is_401_and_never_reviewed(stack: Stack) -> None:
    """Issue 21, item 6: `Authorization: Bearer \\xe9` (aiohttp decodes it with a surrogate) gave a 500 and a
    traceback per request."""
    host, port = stack.url.removeprefix("https://").rsplit(":", 1)
    for _ in range(3):
        reader, writer = await asyncio.open_connection(host, int(port), ssl=stack.client_context())
        writer.write(
            f"GET {METRICS}/namespaces/ml/pods/x/gpu_utilization HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
            + b"Authorization: Bearer \xe9\xff\r\n\r\n"
        )
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:80]
    assert stack.kube.request_count("create", "tokenreviews") == 0


async def test_concurrent_requests_with_one_new_token_make_one_review(stack: Stack) -> None:
    stack.kube.set_token("fresh", TokenUser("dave"))
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    results = await asyncio.gather(*(stack.get(path, headers={"Authorization": "Bearer fresh"}) for _ in range(8)))
    assert [status for status, _ in results] == [200] * 8
    assert stack.kube.request_count("create", "tokenreviews") == 1


async def test_denied_access_is_a_forbidden_status(stack: Stack) -> None:
    stack.kube.set_token("t", TokenUser("carol"))
    auth = {"Authorization": "Bearer t"}
    status, body = await stack.get(f"{METRICS}/namespaces/ml/pods/web-1/gpu_memory_used_bytes", headers=auth)
    assert status == 403
    assert body["kind"] == "Status" and body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"].startswith(
        'pods.custom.metrics.k8s.io "web-1" is forbidden: User "carol" cannot get resource '
        '"pods/gpu_memory_used_bytes" in API group "custom.metrics.k8s.io" in the namespace "ml"'
    )
    status, _ = await stack.get(f"{METRICS}/namespaces/ml/pods/web-1/gpu_memory_used_bytes", headers=auth)
    assert status == 403
    assert stack.kube.request_count("create", "subjectaccessreviews") == 1  # the deny was cached


async def test_paths_outside_the_api_are_checked_as_non_resource_requests(stack: Stack) -> None:
    stack.kube.set_token("t", TokenUser("carol"))
    status, _ = await stack.get("/apis", headers={"Authorization": "Bearer t"})
    assert status == 200
    assert stack.reviews[-1]["nonResourceAttributes"] == {"path": "/apis", "verb": "get"}
    status, _ = await stack.get("/apis")
    assert status == 401


async def test_a_table_policy_grants_by_group(stack: Stack) -> None:
    stack.kube.set_authorization([AccessGrant(group="ml-team", resource="pods", namespace="ml")])
    stack.kube.set_token("member", TokenUser("erin", groups=("ml-team",)))
    stack.kube.set_token("outsider", TokenUser("frank"))
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_memory_used_bytes"
    assert (await stack.get(path, headers={"Authorization": "Bearer member"}))[0] == 200
    assert (await stack.get(path, headers={"Authorization": "Bearer outsider"}))[0] == 403


async def test_health_and_always_allowed_paths_need_no_credentials(stack: Stack) -> None:
    for path in ("/healthz", "/livez", "/readyz", "/metrics"):
        assert await stack.get(path) == (200, "ok")
    assert stack.kube.request_count("create", "tokenreviews") == 0
    assert stack.reviews == []


async def test_an_unreachable_cluster_answers_with_a_status(pki: Pki, stack: Stack) -> None:
    await stack.kube.stop()
    status, body = await stack.get(
        f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", headers={"Authorization": "Bearer t"}
    )
    # kube-apiserver answers 401 when the token cannot be checked (kubernetes/apiserver filters/authentication.go)
    assert status == 401 and body["reason"] == "Unauthorized" and body["message"] == "Unauthorized"
    assert stack.registry.get_sample_value("gpu_pulse_adapter_authentication_errors_total") == 1, "a self-metric"
    # authenticated by certificate, but the SubjectAccessReview cannot be made
    status, body = await stack.get(f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", cert=pki.files["bob"])
    assert status == 500 and body["reason"] == "InternalError" and "SubjectAccessReview" in body["message"]
    # the failures were not cached: once the cluster is back, the same requests succeed
    await stack.kube.start(port=int(stack.kube.url.rsplit(":", 1)[1]))
    stack.kube.set_token("t", TokenUser("carol"))
    status, _ = await stack.get(
        f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", headers={"Authorization": "Bearer t"}
    )
    assert status == 200
    status, _ = await stack.get(f"{METRICS}/namespaces/ml/pods/x/gpu_utilization", cert=pki.files["bob"])
    assert status == 200


async def test_kubectl_with_a_client_certificate(pki: Pki, stack: Stack, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI")
        pytest.skip("kubectl is not installed")
    serving_ca = (stack.cert_dir / "apiserver.crt").read_bytes()
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=stack.url,
        ca_pem=serving_ca,
        client_cert_pem=pki.bob.cert_pem,
        client_key_pem=pki.bob.key_pem,
    )
    process = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "--raw",
        f"{METRICS}/namespaces/ml/pods/%2A/gpu_utilization",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert json.loads(out)["user"] == "bob"


texts = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12)


@given(
    user=texts,
    attributes=st.one_of(
        st.builds(
            ResourceAttributes,
            verb=texts,
            group=st.one_of(st.just(""), texts),
            resource=texts,
            subresource=st.one_of(st.just(""), texts),
            namespace=st.one_of(st.just(""), texts),
            name=st.one_of(st.just(""), texts),
        ),
        st.builds(NonResourceAttributes, path=texts, verb=texts),
    ),
    reason=st.one_of(st.just(""), texts),
)
def test_forbidden_messages_name_who_and_what(user: str, attributes: RequestAttributes, reason: str) -> None:
    message = forbidden_message(UserInfo(user), attributes, reason)
    assert f'User "{user}" cannot {attributes.verb} ' in message
    if isinstance(attributes, NonResourceAttributes):
        assert message.startswith("forbidden: ") and f'path "{attributes.path}"' in message
    else:
        resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
        assert f'resource "{resource}" in API group "{attributes.group}"' in message
        assert (f'in the namespace "{attributes.namespace}"' in message) == bool(attributes.namespace)
    if reason:
        assert message.endswith(f": {reason}")


@pytest.fixture
async def reloading(pki: Pki, tmp_path: Path) -> AsyncIterator[Stack]:
    async for s in start_stack(pki, tmp_path, reload_period=0.05):
        yield s


async def test_a_rotated_requestheader_ca_is_used_without_a_restart(pki: Pki, reloading: Stack, tmp_path: Path) -> None:
    stack = reloading
    reloader = stack.reloader
    assert reloader is not None
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 200
    rotated = CertificateAuthority.create("front-proxy-ca-2")
    rotated.issue_client("front-proxy-client").write(tmp_path / "p2.crt", tmp_path / "p2.key")
    new_proxy = (tmp_path / "p2.crt", tmp_path / "p2.key")
    assert (await stack.get(path, cert=new_proxy, headers=AS_ALICE))[0] == 401
    configmap = stack.kube.get_object("configmaps", "kube-system", "extension-apiserver-authentication")
    assert configmap is not None
    data = {**configmap["data"], "requestheader-client-ca-file": rotated.cert_pem.decode()}
    stack.kube.set_authentication_configmap(data)
    await eventually(lambda: reloader.reloads >= 1, "the ConfigMap re-read")
    status, body = await stack.get(path, cert=new_proxy, headers=AS_ALICE)
    assert status == 200 and body["user"] == "alice", body
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 401, "the old CA is gone"


async def test_an_unusable_configmap_keeps_the_trust_in_use(pki: Pki, reloading: Stack) -> None:
    stack = reloading
    reloader = stack.reloader
    assert reloader is not None
    stack.kube.set_authentication_configmap({"requestheader-client-ca-file": "not a certificate"})
    assert not await reloader.check()
    assert (stack.registry.get_sample_value("gpu_pulse_adapter_trust_reload_errors_total") or 0) >= 1, "a self-metric"
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 200


@pytest.fixture
async def flag_files(pki: Pki, tmp_path: Path) -> AsyncIterator[tuple[Stack, Path, Path]]:
    client_ca_file, proxy_ca_file = tmp_path / "client-ca.crt", tmp_path / "front-proxy-ca.crt"
    client_ca_file.write_bytes(pki.client_ca.cert_pem)
    proxy_ca_file.write_bytes(pki.front_proxy_ca.cert_pem)
    flags = AuthenticationFlags(client_ca_file=client_ca_file, requestheader_client_ca_file=proxy_ca_file)
    async for stack in start_stack(pki, tmp_path, reload_period=0.05, flags=flags):
        yield stack, client_ca_file, proxy_ca_file


async def test_ca_files_given_by_flag_are_read_again(pki: Pki, flag_files: tuple[Stack, Path, Path]) -> None:
    """Issue 21, item 7: a CA removed from --client-ca-file still authenticated 25 s later. The files are re-read as
    the ConfigMap is (never read here: both CAs come from flags), and a removed CA stops authenticating."""
    stack, client_ca_file, proxy_ca_file = flag_files
    reloader = stack.reloader
    assert reloader is not None
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    assert (await stack.get(path, cert=pki.files["bob"]))[0] == 200
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 200
    client_ca_file.write_bytes(CertificateAuthority.create("another-ca").cert_pem)  # bob's CA removed
    await eventually(lambda: reloader.reloads >= 1, "the CA file re-read")
    assert (await stack.get(path, cert=pki.files["bob"]))[0] == 401
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 200, "the other CA stays"
    proxy_ca_file.write_text("not a certificate any more")  # a broken file keeps the trust in use
    assert not await reloader.check()
    assert (await stack.get(path, cert=pki.files["proxy"], headers=AS_ALICE))[0] == 200
    assert stack.kube.request_count("get", "configmaps") == 0


def impostor(ca: CertificateAuthority, common_name: str, directory: Path) -> tuple[Path, Path]:
    """A client certificate that names `ca` as its issuer, by name and by key identifier (so that OpenSSL picks the
    real CA to check it), signed by another key of the same type."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    paths = (directory / f"{common_name}-impostor.crt", directory / f"{common_name}-impostor.key")
    IssuedCertificate(certificate, key).write(*paths)
    return paths


async def test_a_certificate_in_a_cas_name_signed_by_another_key_is_401(pki: Pki, stack: Stack, tmp_path: Path) -> None:
    """Issue 21, item 9: a client certificate naming a trusted CA as its issuer but signed by another key dropped the
    connection (OpenSSL left the failed signature on its error queue, which failed the connection's next read)
    instead of answering 401."""
    path = f"{METRICS}/namespaces/ml/pods/x/gpu_utilization"
    for ca, name, headers in ((pki.client_ca, "bob", {}), (pki.front_proxy_ca, "front-proxy-client", AS_ALICE)):
        status, body = await stack.get(path, cert=impostor(ca, name, tmp_path), headers=headers)
        assert status == 401 and body["kind"] == "Status", name
    assert (await stack.get(path, cert=pki.files["bob"]))[0] == 200, "the connection after them is served"


def test_a_certificate_with_a_duplicated_extension_is_refused_not_an_error(pki: Pki) -> None:
    """Issue 21, item 9: a duplicated extension raised out of the authenticator (no answer) instead of a 401."""
    der = pki.bob.certificate.public_bytes(serialization.Encoding.DER)
    key_usage, basic_constraints = bytes.fromhex("0603551d0f"), bytes.fromhex("0603551d13")  # OIDs 2.5.29.15, .19
    assert der.count(key_usage) == 1
    duplicated = der.replace(key_usage, basic_constraints)  # two BasicConstraints extensions
    with pytest.raises(x509.DuplicateExtension):
        _ = x509.load_der_x509_certificate(duplicated).extensions
    authenticator = ClientCertAuthenticator(pki.client_ca.cert_pem.decode())
    assert authenticator.authenticate(duplicated) is None
    assert authenticator.authenticate(der) is not None
