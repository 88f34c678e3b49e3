"""Who calls the external scaler (adapter/keda/callers.py): the certificate's user where there is one, else the peer's
address without its port, both as the port's front met the caller; and what a caller may read, asked as the custom
metrics API asks."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given
from hypothesis import strategies as st

from adapter.auth.identity import Decision, RequestAttributes, ResourceAttributes, UserInfo
from adapter.keda.callers import (
    Caller,
    NamespaceAccess,
    NamespaceAccessDeniedError,
    Peer,
    PeerDirectory,
    caller_of,
    peer_host,
)
from toolkit.certs import CertificateAuthority


class FakeContext:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


ports = st.integers(min_value=0, max_value=65535)


@given(st.ip_addresses(v=4), ports)
def test_an_ipv4_peer_is_its_address(address: ipaddress.IPv4Address, port: int) -> None:
    assert peer_host((str(address), port)) == f"ipv4:{address}"


@given(st.ip_addresses(v=6), ports)
def test_an_ipv6_peer_is_its_address(address: ipaddress.IPv6Address, port: int) -> None:
    assert peer_host((str(address), port, 0, 0)) == f"ipv6:[{address}]"


@given(st.text(max_size=40))
def test_any_grpc_peer_string_is_looked_up_without_failing(peer: str) -> None:
    peers = PeerDirectory()
    peers.add(5000, Peer("ipv4:10.0.0.7"))
    found = peers.of(peer)
    assert found is None or peer in ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")


def test_the_certificates_user_names_the_caller() -> None:
    issued = CertificateAuthority.create("ca").issue_client("keda-operator", ["autoscalers"])
    der = x509.load_pem_x509_certificate(issued.cert_pem).public_bytes(serialization.Encoding.DER)
    peers = PeerDirectory()
    peers.add(5000, Peer("ipv4:10.0.0.7", der))
    peers.add(5001, Peer("ipv4:10.0.0.7"))
    peers.add(5002, Peer("ipv4:10.0.0.7", b"not a certificate"))
    caller = caller_of(FakeContext("ipv4:127.0.0.1:5000"), peers)  # type: ignore[arg-type]
    assert caller.key == "user:keda-operator"
    assert caller.user is not None and caller.user.groups == ("autoscalers", "system:authenticated")
    anonymous = caller_of(FakeContext("ipv4:127.0.0.1:5001"), peers)  # type: ignore[arg-type]
    assert anonymous == Caller("peer:ipv4:10.0.0.7", None)
    garbage = caller_of(FakeContext("ipv4:127.0.0.1:5002"), peers)  # type: ignore[arg-type]
    assert garbage.user is None


def test_a_call_that_did_not_come_through_the_front_is_unauthenticated() -> None:
    peers = PeerDirectory()
    peers.add(5000, Peer("ipv4:10.0.0.7"))
    for stranger in ("ipv4:127.0.0.1:5001", "ipv4:10.0.0.7:5000", "unix:/tmp/s", ""):
        with pytest.raises(NamespaceAccessDeniedError, match="did not come through") as refused:
            caller_of(FakeContext(stranger), peers)  # type: ignore[arg-type]
        assert not refused.value.authenticated
    peers.remove(5000)
    with pytest.raises(NamespaceAccessDeniedError):
        caller_of(FakeContext("ipv4:127.0.0.1:5000"), peers)  # type: ignore[arg-type]


class Recorder:
    def __init__(self, allowed: bool) -> None:
        self.allowed, self.asked = allowed, []  # type: ignore[var-annotated]

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.asked.append((user, attributes))
        return Decision(self.allowed, "" if self.allowed else "no RBAC policy matched")


async def test_access_is_asked_as_the_custom_metrics_api_asks() -> None:
    user = UserInfo("keda-operator", groups=("system:authenticated",))
    allowed = Recorder(True)
    await NamespaceAccess(allowed).check(Caller("user:keda-operator", user), "ml", "gpu_utilization")
    assert allowed.asked == [
        (user, ResourceAttributes("get", "custom.metrics.k8s.io", "pods", "", "gpu_utilization", "ml", "*"))
    ]
    denied = NamespaceAccess(Recorder(False))
    with pytest.raises(NamespaceAccessDeniedError, match='in the namespace "ml": no RBAC policy matched') as refused:
        await denied.check(Caller("user:keda-operator", user), "ml", "gpu_utilization")
    assert refused.value.authenticated
    with pytest.raises(NamespaceAccessDeniedError) as anonymous:
        await denied.check(Caller("peer:ipv4:10.0.0.7", None), "ml", "gpu_utilization")
    assert not anonymous.value.authenticated and denied.denied == 2


async def test_a_demand_trigger_is_asked_as_the_external_metrics_api_asks() -> None:
    """kube-apiserver authorizes GET /apis/external.metrics.k8s.io/v1beta1/namespaces/ml/<metric> as `get` on the
    resource <metric> of that group: a demand trigger (adapter/demand/) reads what that request reads."""
    user = UserInfo("keda-operator", groups=("system:authenticated",))
    allowed = Recorder(True)
    caller = Caller("user:keda-operator", user)
    await NamespaceAccess(allowed).check(caller, "ml", "inference_pending_requests", external=True)
    assert allowed.asked == [
        (user, ResourceAttributes("get", "external.metrics.k8s.io", "inference_pending_requests", namespace="ml"))
    ]
    with pytest.raises(NamespaceAccessDeniedError, match='cannot get inference_pending_requests in API group "ext'):
        await NamespaceAccess(Recorder(False)).check(caller, "ml", "inference_pending_requests", external=True)
