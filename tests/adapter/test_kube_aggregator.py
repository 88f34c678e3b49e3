"""The stand-in aggregator's forwarded identity (simulation/kubeapi/aggregator.py), as kube-apiserver sends it."""

from __future__ import annotations

import ssl

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from simulation.kubeapi import KubeApiServer
from simulation.kubeapi.aggregator import AggregatedApi, forwarded_headers
from simulation.kubeapi.requestinfo import access_attributes
from simulation.kubeapi.reviews import AccessGrant, TokenUser

GROUP = "custom.metrics.k8s.io"
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def test_the_user_and_groups_go_on_and_no_credential_or_made_up_identity() -> None:
    """client-go transport/round_trippers.go, SetAuthProxyHeaders: X-Remote-User and one X-Remote-Group per group
    replace whatever the caller sent; its own credentials stay with kube-apiserver."""
    incoming = [("Accept", "application/json"), ("Authorization", "Bearer x"), ("X-Remote-User", "mallory")]
    sent = forwarded_headers(incoming, "alice", ["ml-team", "system:authenticated"])
    assert sent == [
        ("Accept", "application/json"),
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "ml-team"),
        ("X-Remote-Group", "system:authenticated"),
    ]


async def _aggregating(seen: list[dict[str, list[str]]]) -> tuple[KubeApiServer, web.AppRunner]:
    """The stand-in with an APIService whose backend records the identity headers of what reaches it."""

    async def backend(request: web.Request) -> web.Response:
        seen.append({k: request.headers.getall(k, []) for k in ("X-Remote-User", "X-Remote-Group", "Authorization")})
        return web.json_response({"kind": "APIResourceList"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", backend)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    server = KubeApiServer()
    await server.start()
    server.aggregate(AggregatedApi(GROUP, ("v1beta2",), f"http://127.0.0.1:{port}", ssl.create_default_context()))
    return server, runner


async def test_the_api_server_authorizes_before_it_proxies() -> None:
    """A user whom RBAC does not allow the request gets 403 from kube-apiserver, with its reason, and the aggregated
    server never sees the request (k8s.io/apiserver's authorization filter wraps the aggregator's handler); so does a
    caller with no credential, whom --anonymous-auth (on by default) makes system:anonymous."""
    seen: list[dict[str, list[str]]] = []
    server, runner = await _aggregating(seen)
    try:
        server.set_authorization([AccessGrant(user=HPA, api_group=GROUP, verb="get")])
        server.set_token("hpa", TokenUser(HPA))
        server.set_token("stranger", TokenUser("stranger"))
        path = f"/apis/{GROUP}/v1beta2/namespaces/serving/pods/*/gpu_utilization"
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + path, headers={"Authorization": "Bearer hpa"}) as allowed:
                assert allowed.status == 200
            async with session.get(server.url + path, headers={"Authorization": "Bearer stranger"}) as refused:
                assert refused.status == 403
                body = await refused.json()
            async with session.get(server.url + path) as anonymous:  # no credential: system:anonymous
                assert anonymous.status == 403
                assert 'User "system:anonymous" cannot get' in (await anonymous.json())["message"]
    finally:
        await server.stop()
        await runner.cleanup()
    assert [s["X-Remote-User"] for s in seen] == [[HPA]]
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        f'pods.{GROUP} "*" is forbidden: User "stranger" cannot get resource "pods/gpu_utilization" in API group '
        f'"{GROUP}" in the namespace "serving"'
    )


async def test_a_service_account_token_is_proxied_as_its_user() -> None:
    """kube-apiserver authenticates a bearer token (a service account's, as the HPA controller sends) before its
    aggregator proxies the request, and tells the aggregated server who it was, `system:authenticated` among its
    groups (pkg/kubeapiserver/authenticator/config.go: the authenticated group adder); a token it does not accept
    gets 401 and never reaches it."""
    seen: list[dict[str, list[str]]] = []

    async def backend(request: web.Request) -> web.Response:
        seen.append({k: request.headers.getall(k, []) for k in ("X-Remote-User", "X-Remote-Group", "Authorization")})
        return web.json_response({"kind": "APIResourceList"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", backend)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server = KubeApiServer()
    await server.start()
    try:
        server.aggregate(AggregatedApi(GROUP, ("v1beta2",), f"http://127.0.0.1:{port}", ssl.create_default_context()))
        server.set_token(
            "t0ken", TokenUser(HPA, groups=("system:serviceaccounts", "system:serviceaccounts:kube-system"))
        )
        async with aiohttp.ClientSession() as session:
            url = f"{server.url}/apis/{GROUP}/v1beta2"
            async with session.get(url, headers={"Authorization": "Bearer t0ken"}) as answered:
                assert answered.status == 200
            async with session.get(url, headers={"Authorization": "Bearer forged"}) as refused:
                assert refused.status == 401  # a bad token is refused, not taken as anonymous
    finally:
        await server.stop()
        await runner.cleanup()
    assert seen == [
        {
            "X-Remote-User": [HPA],
            "X-Remote-Group": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            "Authorization": [],
        }
    ]


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        # a custom metric of every pod: name "*", the metric as subresource (how the HPA and RBAC rules see it)
        ("GET", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/gpu_utilization", {},
         ("get", "custom.metrics.k8s.io", "pods", "ns", "*", "gpu_utilization")),
        # an external metric: the metric is the resource, a list
        ("GET", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/queue_depth", {},
         ("list", "external.metrics.k8s.io", "queue_depth", "ns", "", "")),
        ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", "", "", "")),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "ns", "ns", "")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "namespaces", "ns", "ns", "finalize")),
        ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "", "pods", "ns", "", "")),
    ],
)  # fmt: skip
def test_resource_requests_as_the_authorizer_sees_them(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    """k8s.io/apiserver pkg/endpoints/request/requestinfo.go, NewRequestInfo."""
    attributes = access_attributes(method, path, query)["resourceAttributes"]
    keys = ("verb", "group", "resource", "namespace", "name", "subresource")
    assert tuple(attributes[k] for k in keys) == expected


@pytest.mark.parametrize(
    "path", ["/apis", "/apis/custom.metrics.k8s.io", "/apis/custom.metrics.k8s.io/v1beta2", "/api/v1", "/openapi/v2"]
)
def test_discovery_paths_are_non_resource_requests(path: str) -> None:
    assert access_attributes("GET", path, {}) == {"nonResourceAttributes": {"path": path, "verb": "get"}}


@given(
    st.lists(st.from_regex(r"[a-z0-9*_.-]{1,12}", fullmatch=True), min_size=1, max_size=7),
    st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
)
def test_any_path_gives_one_kind_of_attributes(parts: list[str], method: str) -> None:
    attributes = access_attributes(method, "/" + "/".join(parts), {})
    assert len(attributes) == 1
    spec = attributes.get("resourceAttributes")
    if spec is not None:
        assert spec["resource"] and spec["verb"]
        assert "/".join(p for p in (spec["namespace"], spec["resource"], spec["name"]) if p) in "/".join(parts)
