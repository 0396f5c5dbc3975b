"""A request read once: ``decode_request(body, validate=True)`` (what ``Pipeline.ingest``
does) checks the request as the generated classes' parse would, without that parse, and
gives what parsing first gives: the same spans, views, repairs and rejections, or the same
``InvalidRequest`` for a malformed request, whatever the bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from processor_testkit import config, envelope_spans, fast_spans, key_values, request, span

from otel_agent_context.processor import _decode, _wire
from otel_agent_context.processor._decode import InvalidRequest, decode_request, parse_protobuf
from otel_agent_context.processor._metrics import MetricsRegistry
from otel_agent_context.processor._pipeline import Pipeline


def _outcome(body: bytes, *, validate: bool) -> Any:
    """Everything a decode says (or the error it raises), comparable."""
    try:
        decoded = (decode_request(body, validate=True) if validate
                   else decode_request(body, parse_protobuf(body)))
    except InvalidRequest as exc:
        return ("invalid", str(exc))
    return (decoded.spans, decoded.fast_path, decoded.unattributed, decoded.rejected,
            decoded.messages, decoded.repairs, decoded.problems, decoded.wal_payload,
            [(a.view, a.context_id, a.is_envelope, a.span_count, a.event_count, a.size)
             for a in decoded.accepted])


def _nested(depth: int) -> KeyValue:
    kv = KeyValue(key="context.bench.deep")
    value = kv.value
    for _ in range(depth):
        value = value.array_value.values.add()
    value.int_value = 1
    return kv


def _seeds() -> list[bytes]:
    """Requests with every part the lite types read, or leave to the generated classes."""
    plain = request(envelope_spans(7, "ctx-a", stages=2))
    mixed = request([*fast_spans(3, 2), *envelope_spans(3, "ctx-m", stages=1)])
    rich = envelope_spans(9, "ctx-r", stages=1)
    stage = rich[1]
    stage.trace_state = "vendor=1"
    stage.flags = 0x301
    stage.dropped_links_count = 1
    stage.status.code = trace_pb2.Status.STATUS_CODE_ERROR
    stage.status.message = "failed"
    link = stage.links.add(trace_id=(5).to_bytes(16, "big"), span_id=(6).to_bytes(8, "big"),
                           trace_state="t=1")
    link.attributes.extend(key_values({"link.kind": "follows", "n": [1, 2]}))
    stage.events[0].dropped_attributes_count = 2
    stage.attributes.append(_nested(3))
    rich_request = request(rich)
    rich_request.resource_spans[0].resource.attributes.extend(
        key_values({"process.command_args": ["a", "b"]}))
    rich_request.resource_spans[0].schema_url = "https://schema"
    rich_request.resource_spans[0].scope_spans[0].scope.version = "1.0"
    bad_ids = request([span(1, 1, "context.budget", {"context.id": "c"})])
    bad_ids.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01"
    return [r.SerializeToString() for r in (plain, mixed, rich_request, bad_ids)]


SEEDS = _seeds()

_edit = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.integers(1, 8)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("utf8"), st.integers(0, 10**6), st.sampled_from(
        [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"])),
)


def _apply(body: bytes, edits: list[tuple[str, int, Any]]) -> bytes:
    out = bytearray(body)
    for op, where, what in edits:
        at = where % (len(out) + 1)
        if op == "set" and out:
            out[at % len(out)] = what
        elif op == "cut":
            del out[at:at + what]
        elif op == "insert":
            out[at:at] = what
        elif op == "utf8":  # over a string's bytes, the same length kept
            out[at:at + len(what)] = what
    return bytes(out)


@settings(max_examples=1500, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), edits=st.lists(_edit, min_size=1, max_size=3))
def test_a_request_read_once_decodes_as_one_parsed_first(seed: bytes, edits: list[Any]
                                                         ) -> None:
    body = _apply(seed, edits)
    assert _outcome(body, validate=True) == _outcome(body, validate=False)


@pytest.mark.parametrize("body", SEEDS)
def test_the_seeds_are_valid_and_read_without_the_generated_classes(
        body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _outcome(body, validate=False)
    assert parsed[0] > 0  # spans
    parses: list[bytes] = []
    monkeypatch.setattr(_decode, "parse_protobuf", lambda b: parses.append(b) or
                        parse_protobuf(b))
    assert _outcome(body, validate=True) == parsed
    assert parses == []


def test_a_value_nested_near_the_depth_limit_is_left_to_the_generated_classes() -> None:
    # 48 levels of arrays: a KeyValue parsed alone takes it, the same KeyValue in a request
    # is past upb's depth limit (the request is refused whole)
    too_deep = _nested(48)
    KeyValue.FromString(too_deep.SerializeToString())
    spans = envelope_spans(4, "ctx-d", stages=1)
    spans[1].attributes.append(too_deep)
    body = request(spans).SerializeToString()
    with pytest.raises(InvalidRequest) as parsed:
        parse_protobuf(body)
    assert _outcome(body, validate=True) == ("invalid", str(parsed.value))
    # and a deep value the request may hold is read as before, and never cached
    spans[1].attributes[-1].CopyFrom(_nested(40))
    body = request(spans).SerializeToString()
    assert _outcome(body, validate=True) == _outcome(body, validate=False)
    assert spans[1].attributes[-1].SerializeToString() not in _decode._DECODED
    with pytest.raises(_wire.Deep):
        _wire.decode_key_value(spans[1].attributes[-1].SerializeToString(), deep_ok=False)


def test_each_status_sent_is_checked_and_the_last_one_read() -> None:
    envelope, stage = (s.SerializeToString() for s in envelope_spans(5, "ctx-s", stages=1))
    good = trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR).SerializeToString()
    bad_message = b"\x12\x01\xff"  # Status.message of invalid UTF-8
    for statuses, valid in (([good], True), ([bad_message, good], False),
                            ([good, b"\x18\x01"], True)):
        raw = stage + b"".join(b"\x7a" + bytes([len(s)]) + s for s in statuses)
        lite = _wire.LiteRequest()
        lite.resource_spans.add().scope_spans.add(spans=[envelope, raw])
        body = lite.SerializeToString()
        outcome = _outcome(body, validate=True)
        assert outcome == _outcome(body, validate=False)
        assert (outcome[0] != "invalid") is valid
        if valid:
            view = outcome[-1][-1][0]
            assert view.status_code == trace_pb2.Status.FromString(statuses[-1]).code


_BAD_KV = b"\x0a\x01k\x12\x03\x0a\x01\xff"  # KeyValue k = a string of invalid UTF-8


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _malformed_where_the_walk_does_not_read() -> dict[str, bytes]:
    envelope, stage = (s.SerializeToString() for s in envelope_spans(6, "ctx-w", stages=1))
    link = _field(1, bytes(16)[:-1] + b"\x05") + _field(2, bytes(7) + b"\x06")
    fast = fast_spans(6, 1)[0].SerializeToString()
    bad_id = span(6, 9, "context.budget", {"context.id": "ctx-w"})
    bad_id.span_id = b"\x09"
    cases = {
        "a link's attribute": [envelope, stage + _field(13, link + _field(4, _BAD_KV))],
        "a span rejected for its ids": [envelope, stage,
                                        bad_id.SerializeToString() + _field(9, _BAD_KV)],
        "a span not walked": [envelope, stage, fast + _field(9, _BAD_KV)],
        "the first of two statuses": [envelope, stage + _field(15, b"\x12\x01\xff")
                                      + _field(15, b"\x18\x02")],
    }
    out = {}
    for name, spans in cases.items():
        lite = _wire.LiteRequest()
        lite.resource_spans.add().scope_spans.add(spans=spans)
        out[name] = lite.SerializeToString()
    lite = _wire.LiteRequest()
    lite.resource_spans.add(resource=[_field(1, _BAD_KV)]).scope_spans.add(
        spans=[envelope, stage])
    out["the resource"] = lite.SerializeToString()
    lite = _wire.LiteRequest()
    lite.resource_spans.add().scope_spans.add(scope=[_field(1, b"\xff"), b""],
                                              spans=[envelope, stage])
    out["the first of two scopes"] = lite.SerializeToString()
    return out


@pytest.mark.parametrize("where", sorted(_malformed_where_the_walk_does_not_read()))
def test_malformed_bytes_the_walk_does_not_read_refuse_the_request(where: str) -> None:
    body = _malformed_where_the_walk_does_not_read()[where]
    with pytest.raises(InvalidRequest) as parsed:
        parse_protobuf(body)
    assert _outcome(body, validate=True) == ("invalid", str(parsed.value))


def test_the_hand_decoder_takes_only_what_the_generated_class_takes() -> None:
    # a bool whose one varint byte says "more follows": malformed
    with pytest.raises(DecodeError):
        KeyValue.FromString(b"\x0a\x01k\x12\x02\x10\x80")
    with pytest.raises(DecodeError):
        _wire.decode_key_value(b"\x0a\x01k\x12\x02\x10\x80")
    # a ten-byte varint with bits past the 64th: read as the generated class reads it
    ten = b"\x0a\x01k\x12\x0b\x18" + b"\xff" * 9 + b"\x7f"
    try:
        expected: Any = KeyValue.FromString(ten).value.int_value
    except DecodeError:
        expected = DecodeError
    try:
        got: Any = _wire.decode_key_value(ten)[1]
    except DecodeError:
        got = DecodeError
    assert got == expected


_OTLP = {"Span": trace_pb2.Span, "Event": trace_pb2.Span.Event, "Link": trace_pb2.Span.Link,
         "Status": trace_pb2.Status, "ResourceSpans": trace_pb2.ResourceSpans,
         "ScopeSpans": trace_pb2.ScopeSpans}
#: (lite type, field): what stands for an OTLP message field, and why it is checked
_AS_BYTES = {("Span", "attributes"), ("Span", "status"), ("Event", "attributes"),
             ("Link", "attributes"), ("ResourceSpans", "resource"), ("ScopeSpans", "scope"),
             ("ScopeSpans", "spans")}
#: singular OTLP messages held as every one sent (the last one read)
_EACH_SENT = {("Span", "status"), ("ResourceSpans", "resource"), ("ScopeSpans", "scope")}


def test_lite_types_mirror_otlp() -> None:
    """Every OTLP field is declared in the lite type with its number, name and wire type:
    a lite parse then checks what the generated class's checks (UTF-8, framing), but the
    bytes fields, which the decode reads through or leaves to the generated classes."""
    for name, lite in _wire.MIRRORED.items():
        otlp = {f.number: f for f in _OTLP[name].DESCRIPTOR.fields}
        mine = {f.number: f for f in lite.DESCRIPTOR.fields}
        assert set(mine) == set(otlp), name
        for number, field in otlp.items():
            ours = mine[number]
            assert ours.name == field.name, (name, number)
            if (name, field.name) in _AS_BYTES:
                assert field.type == FieldDescriptor.TYPE_MESSAGE
                assert ours.type == FieldDescriptor.TYPE_BYTES, (name, field.name)
                assert ours.is_repeated == (field.is_repeated
                                            or (name, field.name) in _EACH_SENT)
                continue
            assert ours.is_repeated == field.is_repeated, (name, field.name)
            if field.type == FieldDescriptor.TYPE_ENUM:
                assert ours.type == FieldDescriptor.TYPE_INT32, (name, field.name)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                assert ours.message_type.name == field.message_type.name, (name, field.name)
            else:
                assert ours.type == field.type, (name, field.name)


def _pipeline(tmp_path: Path, **values: Any) -> Pipeline:
    pipeline = Pipeline(config(tmp_path, **values), MetricsRegistry())
    pipeline.open(workers=False)
    return pipeline


def test_ingest_parses_a_request_once_and_refuses_a_malformed_one_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[bytes] = []
    real = _decode.parse_protobuf
    monkeypatch.setattr(_decode, "parse_protobuf", lambda b: parses.append(b) or real(b))
    pipeline = _pipeline(tmp_path)
    try:
        body = request(envelope_spans(11, "ctx-i", stages=2)).SerializeToString()
        result = pipeline.ingest(body, "grpc")
        assert (result.spans, result.rejected) == (3, 0)
        assert parses == []  # read once, by the lite types
        assert pipeline.emit_pending() == 1
        broken = body[:-3]
        with pytest.raises(InvalidRequest) as refused:
            pipeline.ingest(broken, "grpc")
        with pytest.raises(InvalidRequest) as parsed:
            real(broken)
        assert str(refused.value) == str(parsed.value)
        assert parses == [broken]  # the generated classes decided
    finally:
        pipeline.close(timeout=5)
