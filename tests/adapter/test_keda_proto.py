"""The external scaler's stubs are exactly what the pinned grpcio-tools makes of our externalscaler.proto, and that
file states KEDA's wire format: compared field by field with the independent table of tests/support/keda.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

from adapter.keda.proto import externalscaler_pb2, generate
from tests.support import keda

pytest.importorskip("grpc_tools", reason="grpcio-tools (a test extra) generates the stubs")


def test_regenerated_stubs_match_the_committed_files(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    for path in written:
        committed = generate.PROTO_DIR / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed.name} is stale: run python -m adapter.keda.proto.generate"
        )


def test_generator_refuses_another_grpcio_tools(tmp_path: Path) -> None:
    with pytest.raises(generate.GeneratorError, match=r"grpcio-tools 1\.85\.1 is required .* found 1\.60\.0"):
        generate.generate(tmp_path, tools_version="1.60.0")
    assert not (tmp_path / "adapter").exists()


_LABELS = {keda._F.LABEL_OPTIONAL: False, keda._F.LABEL_REPEATED: True}


@pytest.mark.parametrize(("message", "name", "number", "kind", "label", "type_name"), keda.KEDA_FIELDS)
def test_every_field_is_kedas(message: str, name: str, number: int, kind: int, label: int, type_name: str) -> None:
    ours = externalscaler_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]
    assert ours.number == number
    assert ours.type == kind
    assert ours.is_repeated is _LABELS[label]
    if type_name:
        assert ours.message_type is not None and ours.message_type.name == type_name


def test_no_field_beyond_kedas() -> None:
    table = {(m, f) for m, f, *_ in keda.KEDA_FIELDS}
    ours = {
        (message.name, field.name)
        for message in externalscaler_pb2.DESCRIPTOR.message_types_by_name.values()
        for field in message.fields
    }
    assert ours == table
    assert set(externalscaler_pb2.DESCRIPTOR.message_types_by_name) == {m for m, *_ in keda.KEDA_FIELDS}


def test_scaler_metadata_is_a_map_of_strings() -> None:
    field = externalscaler_pb2.ScaledObjectRef.DESCRIPTOR.fields_by_name["scalerMetadata"]
    entry = field.message_type
    assert entry.GetOptions().map_entry
    assert [(f.name, f.number, f.type) for f in entry.fields] == [
        ("key", 1, FieldDescriptor.TYPE_STRING),
        ("value", 2, FieldDescriptor.TYPE_STRING),
    ]


def test_service_and_methods_are_kedas() -> None:
    assert externalscaler_pb2.DESCRIPTOR.package == keda.PACKAGE == "externalscaler"
    service = externalscaler_pb2.DESCRIPTOR.services_by_name[keda.SERVICE]
    ours = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming, m.client_streaming) for m in service.methods
    }
    kedas = {name: (request, response, streaming, False) for name, request, response, streaming in keda.KEDA_METHODS}
    assert ours == kedas


def test_the_two_descriptions_are_the_same_wire_format() -> None:
    """A message written by one side reads back whole on the other, field for field."""
    ref = keda.scaled_object("ml", {"metric": "gpu_utilization", "podSelector": "app=llm"}, name="llm")
    request = keda.GetMetricsRequest(scaledObjectRef=ref, metricName="gpu_utilization")
    ours = externalscaler_pb2.GetMetricsRequest.FromString(request.SerializeToString())
    assert ours.scaledObjectRef.namespace == "ml" and ours.scaledObjectRef.name == "llm"
    assert dict(ours.scaledObjectRef.scalerMetadata) == {"metric": "gpu_utilization", "podSelector": "app=llm"}
    assert ours.metricName == "gpu_utilization"
    answer = externalscaler_pb2.GetMetricsResponse(
        metricValues=[externalscaler_pb2.MetricValue(metricName="m", metricValue=3, metricValueFloat=2.5)]
    )
    theirs = keda.GetMetricsResponse.FromString(answer.SerializeToString())
    (value,) = theirs.metricValues  # type: ignore[attr-defined]
    assert (value.metricName, value.metricValue, value.metricValueFloat) == ("m", 3, 2.5)
