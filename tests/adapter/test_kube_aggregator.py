"""The stand-in aggregator's forwarded identity (simulation/kubeapi/aggregator.py), as kube-apiserver sends it."""

from __future__ import annotations

from simulation.kubeapi.aggregator import forwarded_headers


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
