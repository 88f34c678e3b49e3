"""`externalscaler.ExternalScaler` (KEDA's external scaler API) over gRPC, answered from the adapter's pods and source.

- `GetMetricSpec`: one MetricSpec named after the trigger's `metric`, `targetSizeFloat` = its `target`.
- `GetMetrics`: `metricValueFloat` = the sum of the selected pods' current values (0 when no pod is selected), so
  that KEDA's default `AverageValue` target gives the HPA ceil(sum / target) replicas, what a Pods metric gives.
- `IsActive`, `StreamIsActive`: the workload's activity, with hysteresis (followed_workloads.py).
- `StreamMetricSpec`: UNIMPLEMENTED; KEDA then keeps to GetMetricSpec (pkg/scalers/external_scaler.go,
  streamMetricSpecOnce), which is all a target fixed by the ScaledObject needs.

KEDA reads the float fields and falls back to the deprecated integer ones only when a float is not above 0
(external_scaler.go, buildMetricSpecs and GetMetricsAndActivity, since KEDA 2.17): a target here is always above 0,
and a value of 0 is 0 in both, so the integer fields are left 0.

Errors carry a gRPC status: INVALID_ARGUMENT for metadata that does not make a trigger (naming the key), NOT_FOUND
for a metric the adapter does not serve, UNAVAILABLE when no fresh figure can be had (pod cache not synced, source
down, pods without figures, no answer within the call's deadline), RESOURCE_EXHAUSTED past the stream or workload
bounds, INTERNAL when the source rejects the question.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from prometheus_client import CollectorRegistry

from adapter.auth.identity import AuthorizationUnavailableError
from adapter.keda.callers import Caller, NamespaceAccess, NamespaceAccessDeniedError, PeerDirectory, caller_of
from adapter.keda.followed_workloads import ActivityBoard, ActivityUnknownError, BoardFullError
from adapter.keda.proto import externalscaler_pb2 as pb
from adapter.keda.proto.externalscaler_pb2_grpc import ExternalScalerServicer
from adapter.keda.selfmetrics import KedaMetrics, ScalerCollector
from adapter.keda.trigger import Trigger, TriggerError, parse_trigger
from adapter.keda.workload import NoFiguresError, WorkloadReader
from adapter.sources.metricsource import SourceError, SourceUnavailableError

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label, as namespace names are


class CallError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def call_error(exc: BaseException) -> CallError:
    """The status a failure is answered with."""
    if isinstance(exc, CallError):
        return exc
    if isinstance(exc, NamespaceAccessDeniedError):
        code = grpc.StatusCode.PERMISSION_DENIED if exc.authenticated else grpc.StatusCode.UNAUTHENTICATED
        return CallError(code, str(exc))
    if isinstance(exc, TimeoutError):
        return CallError(grpc.StatusCode.UNAVAILABLE, "no answer within the call's timeout (--keda-call-timeout)")
    if isinstance(exc, AuthorizationUnavailableError):
        return CallError(grpc.StatusCode.UNAVAILABLE, f"cannot authorize the call: {exc}")
    if isinstance(exc, ActivityUnknownError):
        return call_error(exc.cause)
    if isinstance(exc, TriggerError):
        return CallError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, LookupError):  # UnknownMetricError
        return CallError(grpc.StatusCode.NOT_FOUND, str(exc))
    if isinstance(exc, SourceUnavailableError | NoFiguresError):
        return CallError(grpc.StatusCode.UNAVAILABLE, str(exc))
    if isinstance(exc, BoardFullError):
        return CallError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, SourceError):
        return CallError(grpc.StatusCode.INTERNAL, str(exc))
    return CallError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")


class ExternalScaler(ExternalScalerServicer):
    def __init__(
        self,
        reader: WorkloadReader,
        board: ActivityBoard,
        metrics: KedaMetrics,
        *,
        call_timeout: float = 5.0,
        max_streams: int = 1000,
        registry: CollectorRegistry | None = None,
        access: NamespaceAccess | None = None,
        peers: PeerDirectory | None = None,
    ) -> None:
        """Given a `registry`, the open streams and followed workloads are served from it (keda/selfmetrics.py).
        Given `access`, every call is authorized for the namespace its ScaledObjectRef names (keda/callers.py);
        without it (`--keda-client-ca-file` not set) any caller reads any namespace. `peers` are the clients the
        port's front let in (keda/front.py): a call is answered only when it came through the front."""
        self._access = access
        self.peers = peers if peers is not None else PeerDirectory()
        self._reader = reader
        self._board = board
        self._metrics = metrics
        self._call_timeout = call_timeout
        self._max_streams = max_streams
        self.streams = 0
        if registry is not None:
            registry.register(ScalerCollector(self))

    @property
    def workloads(self) -> int:
        return self._board.size

    async def start(self) -> None:
        await self._board.start()

    async def close(self) -> None:
        """End every stream (the board stops following) and the background observations."""
        await self._board.stop()

    # ---- the API ---------------------------------------------------------------------------------------------------
    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Context) -> pb.GetMetricSpecResponse:  # type: ignore[override]  # noqa: N802
        async def answer() -> pb.GetMetricSpecResponse:
            _, trigger, _ = await self._admit(request, context)
            spec = pb.MetricSpec(metricName=trigger.metric, targetSizeFloat=float(trigger.target))
            return pb.GetMetricSpecResponse(metricSpecs=[spec])

        return await self._unary("GetMetricSpec", context, answer)

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Context) -> pb.GetMetricsResponse:  # type: ignore[override]  # noqa: N802
        async def answer() -> pb.GetMetricsResponse:
            namespace, trigger, _ = await self._admit(request.scaledObjectRef, context)
            if request.metricName and request.metricName != trigger.metric:
                raise CallError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"metricName: {request.metricName[:100]!r} is not the trigger's metric {trigger.metric!r}",
                )
            reading = await self._reader.read(namespace, trigger)
            value = pb.MetricValue(metricName=trigger.metric, metricValueFloat=float(reading.total))
            return pb.GetMetricsResponse(metricValues=[value])

        return await self._unary("GetMetrics", context, answer)

    async def IsActive(self, request: pb.ScaledObjectRef, context: Context) -> pb.IsActiveResponse:  # type: ignore[override]  # noqa: N802
        async def answer() -> pb.IsActiveResponse:
            namespace, trigger, caller = await self._admit(request, context)
            return pb.IsActiveResponse(result=await self._board.is_active(namespace, trigger, caller.key))

        return await self._unary("IsActive", context, answer)

    async def StreamIsActive(  # type: ignore[override]  # noqa: N802
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.IsActiveResponse]:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            try:
                if self.streams >= self._max_streams:
                    raise CallError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"already {self._max_streams} StreamIsActive streams open (--keda-max-streams)",
                    )
                async with asyncio.timeout(self._call_timeout):
                    namespace, trigger, caller = await self._admit(request, context)
            except Exception as exc:
                failure = call_error(exc)
                code = failure.code
                await context.abort(failure.code, str(failure))
            self.streams += 1
            try:
                first = True
                following = aiter(self._board.follow(namespace, trigger, caller.key))
                while True:
                    try:
                        active = await anext(following)
                    except StopAsyncIteration:
                        break
                    except Exception as exc:  # the board full, say: a status, never UNKNOWN with a traceback
                        failure = call_error(exc)
                        code = failure.code
                        await context.abort(failure.code, str(failure))
                    if first:
                        self._observe_call("StreamIsActive", code, started)
                        first = False
                    yield pb.IsActiveResponse(result=active)
            finally:
                self.streams -= 1
        finally:
            if code is not grpc.StatusCode.OK:
                self._observe_call("StreamIsActive", code, started)

    async def StreamMetricSpec(  # type: ignore[override]  # noqa: N802
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        self._observe_call("StreamMetricSpec", grpc.StatusCode.UNIMPLEMENTED, time.perf_counter())
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "a gpu-pulse trigger's target is its metadata: use GetMetricSpec"
        )
        yield pb.GetMetricSpecResponse()  # pragma: no cover  # makes this an async generator, as a stream's handler

    # ---- inside ----------------------------------------------------------------------------------------------------
    async def _admit(self, ref: pb.ScaledObjectRef, context: Context) -> tuple[str, Trigger, Caller]:
        """The call's namespace, trigger (of a metric served) and caller, once the caller may read the namespace."""
        if not _NAMESPACE.match(ref.namespace):
            problem = "required" if not ref.namespace else f"{ref.namespace[:100]!r} is not a namespace name"
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"namespace: {problem} (the ScaledObject's namespace)")
        trigger = parse_trigger(ref.scalerMetadata)
        self._reader.check(trigger, ref.namespace)
        caller = caller_of(context, self.peers)
        if self._access is not None:
            await self._access.check(caller, ref.namespace, trigger.metric, external=trigger.of_demand)
        return ref.namespace, trigger, caller

    async def _unary(self, method: str, context: Context, answer: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._call_timeout):
                result = await answer()
        except TimeoutError:
            failure = CallError(
                grpc.StatusCode.UNAVAILABLE,
                f"no answer within {self._call_timeout:g} s (--keda-call-timeout): the source is slow or down",
            )
        except Exception as exc:
            failure = call_error(exc)
        else:
            self._observe_call(method, grpc.StatusCode.OK, started)
            return result
        self._observe_call(method, failure.code, started)
        await context.abort(failure.code, str(failure))
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    def _observe_call(self, method: str, code: grpc.StatusCode, started: float) -> None:
        self._metrics.calls.labels(method, code.name).observe(time.perf_counter() - started)
