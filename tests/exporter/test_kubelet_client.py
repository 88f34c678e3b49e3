"""The pod-resources client against the fake kubelet (a real gRPC server on a unix socket): what it lists, its timer,
the 4 MiB limit, rate limiting, a kubelet restart that deletes the socket, a kubelet that hangs."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from exporter.kubelet.client import KubeletCallError, PodResourcesClient
from exporter.kubelet.podresources import ContainerDevices, ContainerResources, PodResources, pods_to_message
from exporter.kubelet.proto import api_pb2, api_pb2_grpc
from simulation.kubelet import RATE_LIMIT_MESSAGE, FakeKubelet
from tests.support.waiting import holds_within
from toolkit.backoff import Backoff

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-00000000-1111-2222-3333-555555555555"
FOUR_MIB = 4 * 1024 * 1024


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer
    directory = Path(tempfile.mkdtemp(prefix="gp-kl-", dir="/tmp"))
    yield directory / "pod-resources" / "kubelet.sock"
    shutil.rmtree(directory, ignore_errors=True)


def _pod(name: str, device: str, namespace: str = "ml") -> PodResources:
    return PodResources(
        namespace,
        name,
        (
            ContainerResources("log-shipper"),  # a sidecar without devices, listed first
            ContainerResources("main", (ContainerDevices("nvidia.com/gpu", (device,)),)),
        ),
    )


@pytest.fixture
def client_factory(socket_path: Path) -> Iterator[Callable[..., PodResourcesClient]]:
    made: list[PodResourcesClient] = []

    def make(**kwargs: object) -> PodResourcesClient:
        options: dict[str, object] = {"interval": 0.2, "call_timeout": 0.5, "socket_poll": 0.05}
        options.update(kwargs)
        client = PodResourcesClient(socket_path, rng=random.Random(1), **options)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_lists_pods_as_the_kubelet_reports_them(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    pods = [_pod("a", GPU0), _pod("b", f"{GPU1}::2", namespace="team-b")]
    with FakeKubelet(socket_path, pods):
        listed = client_factory().list_pods()
    assert listed == tuple(pods)
    assert [c.name for c in listed[0].containers] == ["log-shipper", "main"]


def test_a_reply_larger_than_grpcs_default_limit(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    pods = [
        PodResources(
            f"namespace-{i % 50:02d}",
            f"inference-server-{i:05d}-" + "x" * 200,
            tuple(
                ContainerResources(
                    f"worker-{c}", (ContainerDevices("nvidia.com/gpu", (f"{GPU0}::{i}", f"{GPU1}::{i}")),)
                )
                for c in range(4)
            ),
        )
        for i in range(6000)
    ]
    assert pods_to_message(pods).ByteSize() > FOUR_MIB
    with FakeKubelet(socket_path, pods):
        listed = client_factory(call_timeout=20.0).list_pods()
        assert len(listed) == 6000
        assert listed[-1] == pods[-1]
        with pytest.raises(KubeletCallError) as refused:  # what a client with gRPC's default limit gets
            client_factory(call_timeout=20.0, max_receive_bytes=FOUR_MIB).list_pods()
    assert refused.value.code == "RESOURCE_EXHAUSTED"


def test_the_timer_lists_and_reading_state_never_calls_the_kubelet(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    with FakeKubelet(socket_path, [_pod("a", GPU0)]) as kubelet:
        client = client_factory()
        client.start()
        assert holds_within(lambda: kubelet.list_calls >= 3, within=5.0)
        client.close()
        calls = kubelet.list_calls
        for _ in range(1000):
            state = client.state
        assert kubelet.list_calls == calls
    assert state.up
    assert state.pods == (_pod("a", GPU0),)
    assert state.errors_total == 0
    age = state.age(client.now())
    assert age is not None and age >= 0


def test_rate_limited_calls_back_off_and_keep_the_mapping(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    with FakeKubelet(socket_path, [_pod("a", GPU0)]) as kubelet:
        client = client_factory(backoff=Backoff(initial=0.05, maximum=0.2))
        client.start()
        assert holds_within(lambda: client.state.up, within=5.0)
        kubelet.exhaust(4)
        kubelet.set_pods([_pod("b", GPU1)])
        assert holds_within(lambda: not client.state.up, within=5.0)
        down = client.state
        assert down.pods == (_pod("a", GPU0),), "the last mapping is kept while the kubelet refuses"
        assert down.last_error is not None and "RESOURCE_EXHAUSTED" in down.last_error
        assert RATE_LIMIT_MESSAGE in down.last_error
        assert holds_within(lambda: client.state.up, within=5.0)
        assert client.state.pods == (_pod("b", GPU1),)
        assert client.state.errors_total == 4


def test_socket_deleted_and_recreated(socket_path: Path, client_factory: Callable[..., PodResourcesClient]) -> None:
    interval = 1.0
    kubelet = FakeKubelet(socket_path, [_pod("a", GPU0)])
    kubelet.start()
    try:
        client = client_factory(interval=interval, socket_poll=0.1)
        client.start()
        assert holds_within(lambda: client.state.up, within=5.0)
        kubelet.stop()  # a kubelet restart: the socket is deleted
        assert not socket_path.exists()
        assert holds_within(lambda: not client.state.up, within=5.0)
        assert client.state.pods == (_pod("a", GPU0),)
        kubelet.set_pods([_pod("b", GPU1)])
        kubelet.start()  # a new socket (new inode) at the same path
        assert holds_within(lambda: client.state.up and client.state.pods == (_pod("b", GPU1),), within=2 * interval)
    finally:
        kubelet.stop()


def test_no_socket_at_start_is_a_state(socket_path: Path, client_factory: Callable[..., PodResourcesClient]) -> None:
    client = client_factory()
    client.start()
    assert holds_within(lambda: client.state.errors_total >= 1, within=5.0)
    assert not client.state.up
    assert client.state.pods is None
    assert client.state.last_error is not None and "does not exist" in client.state.last_error
    with pytest.raises(KubeletCallError, match="does not exist"):
        client.list_pods()
    with FakeKubelet(socket_path, [_pod("a", GPU0)]):
        assert holds_within(lambda: client.state.up, within=5.0)
        assert client.state.pods == (_pod("a", GPU0),)


def test_a_hanging_kubelet_hits_the_deadline(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    with FakeKubelet(socket_path, [_pod("a", GPU0)]) as kubelet:
        client = client_factory(call_timeout=0.3)
        client.start()
        assert holds_within(lambda: client.state.up, within=5.0)
        with kubelet.hanging():
            with pytest.raises(KubeletCallError) as error:
                client.list_pods()
            assert error.value.code == "DEADLINE_EXCEEDED"
            assert holds_within(lambda: not client.state.up, within=5.0)
            assert client.state.pods == (_pod("a", GPU0),)
        assert holds_within(lambda: client.state.up, within=5.0)


def test_close_ends_a_call_in_flight(socket_path: Path, client_factory: Callable[..., PodResourcesClient]) -> None:
    with FakeKubelet(socket_path, [_pod("a", GPU0)]) as kubelet:
        kubelet.hang()
        client = client_factory(call_timeout=60.0)
        client.start()
        assert holds_within(lambda: kubelet.list_calls >= 1, within=5.0)
        closer = threading.Thread(target=client.close)
        closer.start()
        closer.join(timeout=5.0)
        assert not closer.is_alive(), "close() must not wait for the kubelet's answer"


def test_close_racing_the_timers_calls_never_escapes_or_crashes(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    """close() while another thread is between taking the channel and calling List: each call ends in a
    KubeletCallError (or its answer), never in grpc's ValueError for a closed channel nor a crash of the process (a
    stub made beside close() crashed a CI worker in grpc's core)."""
    with FakeKubelet(socket_path, [_pod("a", GPU0)]):
        for _ in range(60):
            client = client_factory()
            escaped: list[BaseException] = []

            def call(client: PodResourcesClient = client, escaped: list[BaseException] = escaped) -> None:
                for _ in range(20):
                    try:
                        client.list_pods()
                    except KubeletCallError:
                        pass
                    except BaseException as error:
                        escaped.append(error)

            caller = threading.Thread(target=call)
            caller.start()
            client.close()
            caller.join(timeout=10.0)
            assert not caller.is_alive()
            assert escaped == []


def test_a_call_on_a_channel_closed_under_it_is_cancelled(
    socket_path: Path, client_factory: Callable[..., PodResourcesClient]
) -> None:
    """grpc refuses a call on a closed channel with ValueError ("Cannot invoke RPC"): the client reports a cancelled
    call, as for a call close() ended in flight."""
    with FakeKubelet(socket_path, [_pod("a", GPU0)]):
        client = client_factory()
        client.list_pods()
        channel = client._channel
        assert channel is not None
        channel.close()
        with pytest.raises(KubeletCallError) as cancelled:
            client.list_pods()
        assert cancelled.value.code == "CANCELLED"


def test_get_and_allocatable_on_the_fake_kubelet(socket_path: Path) -> None:
    allocatable = [ContainerDevices("nvidia.com/gpu", (GPU0, GPU1))]
    with FakeKubelet(socket_path, [_pod("a", GPU0)], allocatable) as kubelet:
        with grpc.insecure_channel(f"unix:{socket_path}") as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            got = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="a", pod_namespace="ml"), timeout=5)
            assert got.pod_resources.containers[1].devices[0].device_ids == [GPU0]
            devices = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=5).devices
            assert list(devices[0].device_ids) == [GPU0, GPU1]
            with pytest.raises(grpc.RpcError) as missing:
                stub.Get(api_pb2.GetPodResourcesRequest(pod_name="zzz", pod_namespace="ml"), timeout=5)
            assert missing.value.code() is grpc.StatusCode.UNKNOWN
            kubelet.get_enabled = False
            with pytest.raises(grpc.RpcError) as disabled:
                stub.Get(api_pb2.GetPodResourcesRequest(pod_name="a", pod_namespace="ml"), timeout=5)
            assert disabled.value.code() is grpc.StatusCode.UNKNOWN


def test_the_pod_side_starts_with_the_first_list_done(socket_path: Path) -> None:
    """The exporter's first snapshot comes right after start: the first List has answered by then, so the first
    scrape's device series already carry their pods (not one interval later)."""
    from exporter.attribution.attributor import KubeletPodAttributor

    with FakeKubelet(socket_path, [_pod("a", GPU0)]):
        attributor = KubeletPodAttributor(PodResourcesClient(socket_path, interval=30.0, call_timeout=2.0))
        try:
            attributor.start()
            assert attributor.client.state.pods == (_pod("a", GPU0),)
        finally:
            attributor.close()


def test_a_missing_socket_does_not_hold_up_the_start(socket_path: Path) -> None:
    client = PodResourcesClient(socket_path, interval=30.0, call_timeout=2.0)
    try:
        client.start()
        assert client.wait_first_answer(2.0)
        assert client.state.up is False and "does not exist" in (client.state.last_error or "")
    finally:
        client.close()
