"""A stand-in kubelet: the pod-resources v1 gRPC service on a unix socket, for tests and the demo.

It serves `List`, `GetAllocatableResources` and `Get` from plain `PodResources` data (a simulator scenario's pods,
with the devices of their DRA ResourceClaims, see simulation/dra.py),
through the same generated stubs and wire format as the real kubelet, and has knobs for the failures a real kubelet
shows: a hang (calls block until released), bursts of RESOURCE_EXHAUSTED ("rejected by rate limit", as the kubelet's
100 qps limiter answers), `Get` disabled (a plain error, code UNKNOWN, as before the feature gate), a new pod list, and
a restart that deletes the socket and creates it again.

`start_simulated_pod_side` runs what a simulated node's kubelet and host show in-process: this fake kubelet serving
the scenario's pods, and a fake proc tree with the scenario's cgroups.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import grpc

from exporter.kubelet.podresources import (
    ContainerDevices,
    ContainerResources,
    PodResources,
    pod_to_message,
    pods_to_message,
)
from exporter.kubelet.proto import api_pb2, api_pb2_grpc
from simulation.dra import claims_of
from simulation.proctree import CgroupLayout, ContainerRuntime, write_proc_tree
from simulation.scenario import Scenario

RATE_LIMIT_MESSAGE = "rejected by rate limit"


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def List(  # noqa: N802  (the gRPC method name)
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        return self._kubelet._answer_list(context)

    def GetAllocatableResources(  # noqa: N802
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        self._kubelet._gate(context)
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=d.resource_name, device_ids=list(d.device_ids))
                for d in self._kubelet.allocatable
            ]
        )

    def Get(  # noqa: N802
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        self._kubelet._gate(context)
        if not self._kubelet.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self._kubelet.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod_to_message(pod))
        context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} not found in namespace {request.pod_namespace}")
        raise AssertionError("unreachable: abort raises")


class FakeKubelet:
    """The pod-resources service on `socket_path`. Use as a context manager, or start()/stop()."""

    def __init__(
        self,
        socket_path: Path | str,
        pods: Iterable[PodResources] = (),
        allocatable: Iterable[ContainerDevices] = (),
        *,
        get_enabled: bool = True,
        max_workers: int = 8,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.allocatable: tuple[ContainerDevices, ...] = tuple(allocatable)
        self.get_enabled = get_enabled
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._pods: tuple[PodResources, ...] = ()
        self._reply = api_pb2.ListPodResourcesResponse()
        self._exhausted = 0
        self._released = threading.Event()
        self._released.set()
        self._server: grpc.Server | None = None
        self.list_calls = 0  # List calls received, answered or not
        self.set_pods(pods)

    # ---- knobs -------------------------------------------------------------------------------------------------------
    @property
    def pods(self) -> tuple[PodResources, ...]:
        return self._pods

    def set_pods(self, pods: Iterable[PodResources]) -> None:
        """Replace the pod list; the next List returns it."""
        listed = tuple(pods)
        reply = pods_to_message(listed)
        with self._lock:
            self._pods, self._reply = listed, reply

    def exhaust(self, calls: int) -> None:
        """Answer the next `calls` calls with RESOURCE_EXHAUSTED, as the kubelet's rate limiter does."""
        with self._lock:
            self._exhausted = calls

    def hang(self) -> None:
        """Make calls block (the client's deadline runs out) until release() or stop()."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    @contextmanager
    def hanging(self) -> Iterator[None]:
        self.hang()
        try:
            yield
        finally:
            self.release()

    # ---- lifecycle ---------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the socket (its directory too) and serve."""
        if self._server is not None:
            return
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="fake-kubelet")
        )
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call]
        if server.add_insecure_port(f"unix:{self.socket_path.absolute()}") == 0:
            raise OSError(f"cannot listen on unix socket {self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving, end hanging calls, and delete the socket (as a kubelet restart does)."""
        server, self._server = self._server, None
        self._released.set()
        if server is not None:
            server.stop(grace=None).wait(5.0)
        with suppress(FileNotFoundError):
            self.socket_path.unlink()

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def serving(self) -> bool:
        return self._server is not None

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- what the servicer calls -------------------------------------------------------------------------------------
    def _gate(self, context: grpc.ServicerContext) -> None:
        """Rate limit and hang, shared by every method."""
        with self._lock:
            exhausted = self._exhausted > 0
            if exhausted:
                self._exhausted -= 1
        if exhausted:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE)
        while not self._released.wait(0.05):
            if not context.is_active():
                context.abort(grpc.StatusCode.CANCELLED, "client went away")

    def _answer_list(self, context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            self.list_calls += 1
        self._gate(context)
        return self._reply


# ---- a simulator scenario as the kubelet and the API server would show it ------------------------------------------
DRA_GATE = "KubeletPodResourcesDynamicResources"


def lists_dynamic_resources(scenario: Scenario) -> bool:
    """Whether the scenario's kubelet fills `dynamic_resources`: its feature gate, alpha and off by default from 1.27,
    beta and on by default from 1.34 (kubernetes/kubernetes pkg/features/kube_features.go)."""
    gate = scenario.kubelet_feature_gates.get(DRA_GATE)
    return gate if gate is not None else int(scenario.kubernetes_version.split(".")[1]) >= 34


def pod_resources_of(scenario: Scenario) -> tuple[PodResources, ...]:
    """The scenario's pods as pod-resources List reports them: sidecars (restartable init containers) first, each
    container's DRA claims in `dynamic_resources` when the kubelet's gate lists them."""
    dynamic = lists_dynamic_resources(scenario)
    return tuple(
        PodResources(
            pod.namespace,
            pod.name,
            tuple(
                ContainerResources(
                    container.name,
                    tuple(ContainerDevices(d.resource_name, tuple(d.device_ids)) for d in container.devices),
                    claims_of(scenario, pod, container) if dynamic else (),
                )
                for container in sorted(pod.containers, key=lambda c: not c.sidecar)
            ),
        )
        for pod in scenario.pods
    )


def allocatable_of(scenario: Scenario) -> tuple[ContainerDevices, ...]:
    """Every GPU (or, on MIG-enabled GPUs, every MIG device) of the scenario, as GetAllocatableResources lists them."""
    gpus: list[str] = []
    migs: dict[str, list[str]] = {}
    for gpu in scenario.gpus:
        if gpu.mig is None:
            gpus.append(str(gpu.uuid))
        else:
            for instance in gpu.mig:
                migs.setdefault(f"nvidia.com/mig-{instance.profile}", []).append(str(instance.uuid))
    listed = [ContainerDevices("nvidia.com/gpu", tuple(gpus))] if gpus else []
    return (*listed, *(ContainerDevices(name, tuple(ids)) for name, ids in sorted(migs.items())))


@dataclass(frozen=True, slots=True)
class SimulatedPodSide:
    """What `start_simulated_pod_side` started; `stop()` ends the kubelet and removes what it wrote."""

    kubelet: FakeKubelet  # not serving when the user gave a real kubelet's socket
    socket_path: Path
    proc_root: Path
    workdir: Path
    owns_workdir: bool

    def stop(self) -> None:
        self.kubelet.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_simulated_pod_side(
    scenario: Scenario,
    workdir: Path | str | None = None,
    *,
    layout: CgroupLayout | str = CgroupLayout.V2_SYSTEMD,
    runtime: ContainerRuntime | str = ContainerRuntime.CONTAINERD,
    serve_kubelet: bool = True,
) -> SimulatedPodSide:
    """Serve the scenario's pods from a fake kubelet and write its proc tree, under `workdir` (a new temporary
    directory when None, removed by stop()). The socket path must stay short (unix sockets allow ~107 bytes).
    `serve_kubelet=False` writes the proc tree only (the user points the exporter at a real kubelet)."""
    owns = workdir is None
    root = Path(tempfile.mkdtemp(prefix="gpu-pulse-sim-")) if workdir is None else Path(workdir)
    proc_root = root / "proc"
    write_proc_tree(proc_root, scenario, layout, runtime)
    socket_path = root / "kubelet.sock"
    if len(str(socket_path.absolute())) > 100:
        raise ValueError(f"simulated kubelet socket path too long for a unix socket: {socket_path}")
    kubelet = FakeKubelet(socket_path, pod_resources_of(scenario), allocatable_of(scenario))
    if serve_kubelet:
        kubelet.start()
    return SimulatedPodSide(kubelet, socket_path, proc_root, root, owns)
