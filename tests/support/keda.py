"""A client of KEDA's external scaler API that owes nothing to the adapter's stubs.

Its messages are built from `KEDA_MESSAGES`, a table written from KEDA's own proto file
(kedacore/keda pkg/scalers/externalscaler/externalscaler.proto at commit 8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a),
into a descriptor pool of its own (google.protobuf descriptor_pb2 + message_factory), and it calls the service by
method path with gRPC's generic unary and stream calls, as KEDA's generated Go client does. So where the adapter's
.proto drifted from KEDA's (a field number, a type, a method name), this client and the adapter disagree on the wire
and the tests fail; tests/adapter/test_keda_proto.py also compares the two field by field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

PACKAGE = "externalscaler"
SERVICE = "ExternalScaler"
KEDA_COMMIT = "8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a"

# (message, field, number, type, label, message type of a message field) as KEDA's proto states them
_F = descriptor_pb2.FieldDescriptorProto
KEDA_FIELDS: tuple[tuple[str, str, int, int, int, str], ...] = (
    ("ScaledObjectRef", "name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ("ScaledObjectRef", "namespace", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ("ScaledObjectRef", "scalerMetadata", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "ScalerMetadataEntry"),  # a map
    ("IsActiveResponse", "result", 1, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, ""),
    ("GetMetricSpecResponse", "metricSpecs", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "MetricSpec"),
    ("MetricSpec", "metricName", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ("MetricSpec", "targetSize", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
    ("MetricSpec", "targetSizeFloat", 3, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, ""),
    ("GetMetricsRequest", "scaledObjectRef", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, "ScaledObjectRef"),
    ("GetMetricsRequest", "metricName", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ("GetMetricsResponse", "metricValues", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "MetricValue"),
    ("MetricValue", "metricName", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
    ("MetricValue", "metricValue", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
    ("MetricValue", "metricValueFloat", 3, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, ""),
)
# (method, request, response, server streaming)
KEDA_METHODS: tuple[tuple[str, str, str, bool], ...] = (
    ("IsActive", "ScaledObjectRef", "IsActiveResponse", False),
    ("StreamIsActive", "ScaledObjectRef", "IsActiveResponse", True),
    ("GetMetricSpec", "ScaledObjectRef", "GetMetricSpecResponse", False),
    ("GetMetrics", "GetMetricsRequest", "GetMetricsResponse", False),
    ("StreamMetricSpec", "ScaledObjectRef", "GetMetricSpecResponse", True),
)


def keda_file() -> descriptor_pb2.FileDescriptorProto:
    """KEDA's proto file as a FileDescriptorProto built from the tables (`map<string, string>` spelt as protoc does:
    a nested `ScalerMetadataEntry` message with key = 1, value = 2 and the map_entry option)."""
    file = descriptor_pb2.FileDescriptorProto(name="keda/externalscaler.proto", package=PACKAGE, syntax="proto3")
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    for message, field, number, kind, label, type_name in KEDA_FIELDS:
        if message not in messages:
            messages[message] = file.message_type.add(name=message)
        proto = messages[message].field.add(name=field, number=number, type=kind, label=label, json_name=field)
        if type_name == "ScalerMetadataEntry":
            entry = messages[message].nested_type.add(name=type_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, json_name="key")
            entry.field.add(name="value", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, json_name="value")
            proto.type_name = f".{PACKAGE}.{message}.{type_name}"
        elif type_name:
            proto.type_name = f".{PACKAGE}.{type_name}"
    service = file.service.add(name=SERVICE)
    for method, request, response, streaming in KEDA_METHODS:
        service.method.add(
            name=method,
            input_type=f".{PACKAGE}.{request}",
            output_type=f".{PACKAGE}.{response}",
            server_streaming=streaming,
        )
    return file


_POOL = descriptor_pool.DescriptorPool()
FILE = _POOL.AddSerializedFile(keda_file().SerializeToString())


def message_class(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


ScaledObjectRef = message_class("ScaledObjectRef")
GetMetricsRequest = message_class("GetMetricsRequest")
IsActiveResponse = message_class("IsActiveResponse")
GetMetricSpecResponse = message_class("GetMetricSpecResponse")
GetMetricsResponse = message_class("GetMetricsResponse")


def scaled_object(namespace: str, metadata: Mapping[str, str], name: str = "scaled") -> Message:
    return ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=dict(metadata))


def metrics_request(namespace: str, metadata: Mapping[str, str], metric: str) -> Message:
    return GetMetricsRequest(scaledObjectRef=scaled_object(namespace, metadata), metricName=metric)


def _path(method: str) -> str:
    return f"/{PACKAGE}.{SERVICE}/{method}"


def request_headers(method: str) -> list[tuple[str, str]]:
    """A call's HTTP/2 request headers, as a gRPC client sends them (gRPC over HTTP2, doc/PROTOCOL-HTTP2.md), for
    clients that write their own frames."""
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", _path(method)),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


@dataclass(frozen=True)
class ScalerClient:
    """The five methods on a channel (a `grpc.Channel` or a `grpc.aio.Channel`: calls then block or are awaited)."""

    is_active: Any
    stream_is_active: Any
    get_metric_spec: Any
    get_metrics: Any
    stream_metric_spec: Any

    @classmethod
    def on(cls, channel: grpc.Channel | grpc.aio.Channel) -> ScalerClient:
        def unary(method: str, response: type[Message]) -> Any:
            return channel.unary_unary(
                _path(method), request_serializer=_serialize, response_deserializer=response.FromString
            )

        def stream(method: str, response: type[Message]) -> Any:
            return channel.unary_stream(
                _path(method), request_serializer=_serialize, response_deserializer=response.FromString
            )

        return cls(
            is_active=unary("IsActive", IsActiveResponse),
            stream_is_active=stream("StreamIsActive", IsActiveResponse),
            get_metric_spec=unary("GetMetricSpec", GetMetricSpecResponse),
            get_metrics=unary("GetMetrics", GetMetricsResponse),
            stream_metric_spec=stream("StreamMetricSpec", GetMetricSpecResponse),
        )


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
