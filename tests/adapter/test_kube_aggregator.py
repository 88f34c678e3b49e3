"""The stand-in aggregator's forwarded identity (simulation/kubeapi/aggregator.py), as kube-apiserver sends it."""

from __future__ import annotations

import ssl

import aiohttp
from aiohttp import web

from simulation.kubeapi import KubeApiServer
from simulation.kubeapi.aggregator import AggregatedApi, forwarded_headers
from simulation.kubeapi.reviews import TokenUser

GROUP = "custom.metrics.k8s.io"
HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def test_the_user_goes_on_with_its_groups_and_system_authenticated() -> None:
    """kube-apiserver's authenticator is wrapped in k8s.io/apiserver's AuthenticatedGroupAdder (kubernetes
    pkg/kubeapiserver/authenticator/config.go), so the aggregator's X-Remote-Group headers (client-go
    transport/round_trippers.go, SetAuthProxyHeaders) name system:authenticated after the user's own groups."""
    incoming = [("Accept", "application/json"), ("Authorization", "Bearer x"), ("X-Remote-User", "mallory")]
    sent = forwarded_headers(incoming, "alice", ["ml-team"])
    assert sent == [
        ("Accept", "application/json"),
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "ml-team"),
        ("X-Remote-Group", "system:authenticated"),
    ]
    again = forwarded_headers([], "bob", ["system:authenticated", "team-b"])
    assert [v for k, v in again if k == "X-Remote-Group"] == ["system:authenticated", "team-b"]


async def test_a_service_account_token_is_proxied_as_its_user() -> None:
    """kube-apiserver authenticates a bearer token (a service account's, as the HPA controller sends) before its
    aggregator proxies the request, and tells the aggregated server who it was; a caller with no credential gets
    401 from kube-apiserver and never reaches it."""
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
            async with session.get(url) as refused:
                assert refused.status == 401
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
