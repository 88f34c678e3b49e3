"""Calls of the external scaler earning their place: a call holds a slot only once its request message has arrived.

gRPC starts a call when its HEADERS frame arrives, before any message. A stream that sends headers and never its
message held one of grpc's `maximum_concurrent_rpcs` slots for as long as the client liked (1,300 such streams took
every slot, and KEDA's own calls got RESOURCE_EXHAUSTED). So every method is served as a request-streaming handler
(the wire is the same: a unary request is one message and the end of the stream), and the handler reads that one
message here, within `request_seconds`, which is far shorter than the call timeout: KEDA's gRPC client sends the
message in the same flight as the headers. At most `max_waiting` calls wait for their message at once; one more
ends the call that has waited longest (RESOURCE_EXHAUSTED), so a flood of silent streams only ever displaces its own
kind, and a call whose message is there is never one of them for longer than one turn of the event loop.

Calls that have their message are bounded apart: `max_unary` unary calls in flight (RESOURCE_EXHAUSTED past it), and
the StreamIsActive streams by the servicer (`--keda-max-streams`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

REQUEST_SECONDS = 2.0
MAX_WAITING = 256
MAX_UNARY = 256

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AdmissionStats:
    waiting: int  # calls waiting for their request message now
    unary: int  # unary calls in flight now (their message arrived)
    request_timeouts: int  # calls ended: no request message within request_seconds
    displaced: int  # calls ended while waiting, to make room for a newer one
    refused: int  # unary calls refused past max_unary


class CallAdmission:
    def __init__(
        self,
        *,
        request_seconds: float = REQUEST_SECONDS,
        max_waiting: int = MAX_WAITING,
        max_unary: int = MAX_UNARY,
    ) -> None:
        if request_seconds <= 0 or max_waiting < 1 or max_unary < 1:
            raise ValueError("request_seconds, max_waiting and max_unary must be positive")
        self._request_seconds = request_seconds
        self._max_waiting = max_waiting
        self._max_unary = max_unary
        self._waiting: dict[asyncio.Future[None], None] = {}  # each waiting call's "make room" signal, oldest first
        self._unary = 0
        self._request_timeouts = self._displaced = self._refused = 0

    def stats(self) -> AdmissionStats:
        return AdmissionStats(len(self._waiting), self._unary, self._request_timeouts, self._displaced, self._refused)

    async def request(self, context: Context) -> Any:
        """The call's request message; the call is aborted when it does not come in time, or when it is displaced."""
        if len(self._waiting) >= self._max_waiting:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            oldest.set_result(None)
            self._displaced += 1
        displaced: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[displaced] = None
        read = asyncio.ensure_future(context.read())
        try:
            done, _ = await asyncio.wait(
                (read, displaced), timeout=self._request_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self._waiting.pop(displaced, None)
            if not read.done():
                read.cancel()
        if read in done:
            message = read.result()
            if message is grpc.aio.EOF:  # type: ignore[attr-defined]  # grpc-stubs lack it (grpc.aio's __all__)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
            return message
        if displaced in done:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"more than {self._max_waiting} calls were waiting for their request message: this one waited longest",
            )
        self._request_timeouts += 1
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"no request message within {self._request_seconds:g} s of the call's start",
        )
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    async def unary(self, context: Context, call: Callable[[Any], Awaitable[T]]) -> T:
        """A unary call: its request, then `call(request)` within the bound on unary calls in flight."""
        request = await self.request(context)
        if self._unary >= self._max_unary:
            self._refused += 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"already {self._max_unary} calls in flight: try again"
            )
        self._unary += 1
        try:
            return await call(request)
        finally:
            self._unary -= 1

    async def stream(self, context: Context, call: Callable[[Any], AsyncIterator[T]]) -> AsyncIterator[T]:
        """A server-streaming call: its request, then what `call(request)` yields (the servicer bounds the streams)."""
        request = await self.request(context)
        async for answer in call(request):
            yield answer


def service_handler(
    service: str,
    admission: CallAdmission,
    unary: dict[str, tuple[Callable[[Any, Context], Awaitable[Any]], type[Message]]],
    streams: dict[str, tuple[Callable[[Any, Context], AsyncIterator[Any]], type[Message]]],
) -> grpc.GenericRpcHandler[Any, Any]:
    """`service`'s methods (name -> (servicer method, request type)) as request-streaming handlers through
    `admission`."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for name, (method, request_type) in unary.items():
        handlers[name] = grpc.stream_unary_rpc_method_handler(
            _unary_handler(admission, method),
            request_deserializer=request_type.FromString,
            response_serializer=_serialize,
        )
    for name, (stream_method, request_type) in streams.items():
        handlers[name] = grpc.stream_stream_rpc_method_handler(
            _stream_handler(admission, stream_method),
            request_deserializer=request_type.FromString,
            response_serializer=_serialize,
        )
    return grpc.method_handlers_generic_handler(service, handlers)


def _unary_handler(
    admission: CallAdmission, method: Callable[[Any, Context], Awaitable[Any]]
) -> Callable[[Any, Context], Awaitable[Any]]:
    async def handle(requests: Any, context: Context) -> Any:
        return await admission.unary(context, lambda request: method(request, context))

    return handle


def _stream_handler(
    admission: CallAdmission, method: Callable[[Any, Context], AsyncIterator[Any]]
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def handle(requests: Any, context: Context) -> AsyncIterator[Any]:
        async for answer in admission.stream(context, lambda request: method(request, context)):
            yield answer

    return handle


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
