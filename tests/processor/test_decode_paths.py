"""The decoder's shortcuts give what its general path gives, to the attribute.

- A request most of whose spans are walked has every span parsed by one upb call, as a
  ``SpanProbe`` (``_wire``); a span the probe shows to carry events, links, a status or
  dropped counts is parsed again alone. Otherwise each walked span is parsed alone.
- A new value of a plain id or count (a cache miss) is read by ``_plain`` without the
  general decoder.

Each is compared with the general path on requests where spans without ``context.*`` sit
next to spans with it, in one request, in process and over gRPC and HTTP/JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import struct
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from processor_testkit import (
    by_context,
    envelope_spans,
    fast_spans,
    key_values,
    read_bundles,
    span,
    wait_for,
)

from otel_agent_context import _semconv as S
from otel_agent_context.processor import _decode
from otel_agent_context.rebuild._boundary import PARALLEL_KEYS, PLAIN_INT, PLAIN_TEXT

# -- requests ---------------------------------------------------------------------------------


def _budget_envelope(trace: int, context_id: str) -> list[Any]:
    """An envelope span and three budget spans: one with a status, one with a link and
    dropped counts, one with none of those."""
    spans = [span(trace, 1, "invoke_agent raw-agent", {
        S.CONTEXT_ID: context_id, S.CONTEXT_SCOPE: "turn", S.CONTEXT_SPAN_COUNT: 3,
        S.GEN_AI_AGENT_NAME: "raw-agent", S.GEN_AI_OPERATION_NAME: "invoke_agent"})]
    for index in range(3):
        spans.append(span(trace, 2 + index, S.SPAN_BUDGET, {
            S.CONTEXT_ID: context_id, S.BUDGET_ID: f"{context_id}-bud-{index}",
            S.BUDGET_TARGET: "model", S.BUDGET_MAX_TOKENS: 1000,
            S.BUDGET_ACTUAL_TOKENS: 900 + index, "app.note": f"n{index}"},
            parent=1, start=1_700_000_000_000_000_000 + (index + 1) * 1000))
    spans[1].status.code = 2
    spans[1].status.message = "over"
    link = spans[2].links.add()
    link.trace_id = (trace + 1).to_bytes(16, "big")
    link.span_id = (9).to_bytes(8, "big")
    spans[2].dropped_attributes_count = 2
    spans[2].dropped_events_count = 1
    return spans


def _mixed(tag: str) -> ExportTraceServiceRequest:
    """Two resources, three scopes: context spans (some with events, a status, a link),
    plain spans among them, a gen_ai span without context.id, a span whose only
    ``context.`` is in a value, a span with a bad id; 12 of 15 spans walked."""
    req = ExportTraceServiceRequest()
    first = req.resource_spans.add()
    first.resource.attributes.extend(key_values({"service.name": f"agent-a-{tag}"}))
    scope = first.scope_spans.add()
    scope.scope.name = "raw-emitter"
    selections = envelope_spans(31, f"ctx-{tag}-sel", stages=2)
    scope.spans.extend([selections[0], *fast_spans(31, 1, base_span=500), *selections[1:],
                        *_budget_envelope(32, f"ctx-{tag}-bud"),
                        *fast_spans(32, 1, base_span=600)])
    second = req.resource_spans.add()
    second.resource.attributes.extend(key_values({"service.name": f"agent-b-{tag}"}))
    scope = second.scope_spans.add()
    scope.spans.extend([
        *envelope_spans(33, f"ctx-{tag}-b", stages=1),
        span(33, 40, "chat m", {S.GEN_AI_OPERATION_NAME: "chat", S.GEN_AI_REQUEST_MODEL: "m"}),
        span(33, 41, "GET /x", {"url.path": "/context.yaml"})])
    scope = second.scope_spans.add()
    bad = span(34, 1, S.SPAN_BUDGET, {S.CONTEXT_ID: f"ctx-{tag}-bad", S.BUDGET_ID: "x"})
    bad.span_id = b"\x01" * 7
    scope.spans.extend([bad, span(34, 2, "invoke_agent raw-agent", {
        S.CONTEXT_ID: f"ctx-{tag}-bad", S.CONTEXT_SCOPE: "turn", S.CONTEXT_SPAN_COUNT: 0})])
    return req


def _facts(decoded: _decode.Decoded) -> Any:
    """Everything a decoded request says, views field by field."""
    return (decoded.spans, decoded.fast_path, decoded.unattributed, decoded.rejected,
            decoded.messages, decoded.repairs, decoded.problems, decoded.wal_payload,
            [(dataclasses.astuple(a.view), a.context_id, a.is_envelope, a.span_count,
              a.event_count, a.size) for a in decoded.accepted])


def _span_by_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every walked span parsed alone (as for a request of few walked spans)."""
    monkeypatch.setattr(_decode, "_parsed", lambda body: None)


def _probed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Count the requests parsed whole as probes (True each)."""
    calls: list[bool] = []
    parsed = _decode._parsed

    def spy(body: bytes) -> Any:
        out = parsed(body)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(_decode, "_parsed", spy)
    return calls


# -- in process -------------------------------------------------------------------------------


def test_a_mostly_walked_request_decodes_as_span_by_span(monkeypatch) -> None:
    body = _mixed("inproc").SerializeToString()
    probed = _probed(monkeypatch)
    whole = _decode.decode_request(body, _decode.parse_protobuf(body))
    assert probed == [True]
    _span_by_span(monkeypatch)
    alone = _decode.decode_request(body, _decode.parse_protobuf(body))
    assert _facts(whole) == _facts(alone)
    # and what was sent, explicitly
    assert (whole.spans, whole.fast_path, whole.unattributed, whole.rejected) == (15, 3, 1, 1)
    views = {(a.view.trace_id[-2:], a.view.span_id[-2:]): a.view for a in whole.accepted}
    assert len(views) == 10
    selection = views[("1f", "02")]
    assert [e.name for e in selection.events] == [S.EVENT_ITEM_SELECTED, S.EVENT_ITEM_OMITTED]
    assert selection.resource == {"service.name": "agent-a-inproc"}
    with_status, with_link, bare = views[("20", "02")], views[("20", "03")], views[("20", "04")]
    assert (with_status.status_code, with_status.links, with_status.dropped_attributes_count) \
        == (2, [], 0)
    assert (with_link.status_code, with_link.links, with_link.dropped_attributes_count,
            with_link.dropped_events_count) == (0, [(f"{33:032x}", f"{9:016x}")], 2, 1)
    assert (bare.status_code, bare.links, bare.events, bare.dropped_events_count) \
        == (0, [], [], 0)
    assert bare.attributes == {
        S.CONTEXT_ID: "ctx-inproc-bud", S.BUDGET_ID: "ctx-inproc-bud-bud-2",
        S.BUDGET_TARGET: "model", S.BUDGET_MAX_TOKENS: 1000, S.BUDGET_ACTUAL_TOKENS: 902,
        "app.note": "n2"}
    assert bare.parent_span_id == f"{1:016x}" and bare.name == S.SPAN_BUDGET
    assert views[("21", "01")].resource == {"service.name": "agent-b-inproc"}
    assert "trace id must be 16 bytes" in whole.messages[0]
    # the WAL keeps the accepted spans alone, under their resources and scopes
    kept = ExportTraceServiceRequest.FromString(whole.wal_payload)
    assert [len(ss.spans) for rs in kept.resource_spans for ss in rs.scope_spans] == [7, 2, 1]


def test_a_request_of_few_walked_spans_is_read_span_by_span(monkeypatch) -> None:
    """Below two thirds walked the request is not parsed whole (its plain spans would cost
    more than they save), and decodes as before."""
    req = _mixed("few")
    req.resource_spans[0].scope_spans[0].spans.extend(fast_spans(35, 40, base_span=700))
    body = req.SerializeToString()
    probed = _probed(monkeypatch)
    decoded = _decode.decode_request(body, _decode.parse_protobuf(body))
    assert probed == [] and (decoded.spans, decoded.fast_path, len(decoded.accepted)) \
        == (55, 43, 10)


# -- new plain ids and counts ----------------------------------------------------------------


def _general_entry(buf: bytes) -> tuple[Any, ...]:
    key, value, noted = _decode._decode_checked(buf)
    if noted is None and key is not None and key not in PARALLEL_KEYS:
        return key, value
    return key, value, noted


def _encoded(key: str, value_field: bytes) -> bytes:
    """A KeyValue: ``key`` and the AnyValue whose fields are ``value_field`` as encoded."""
    head = key.encode()
    return (b"\x0a" + _len(head) + head + b"\x12" + _len(value_field) + value_field)


def _len(data: bytes) -> bytes:
    size, out = len(data), b""
    while size > 0x7F:
        out += bytes((size & 0x7F | 0x80,))
        size >>= 7
    return out + bytes((size,))


def test_new_plain_ids_and_counts_read_as_the_general_decoder_reads_them() -> None:
    """For every plain text and int attribute, values at and past every edge the reader
    tests (empty, 127 and 128 bytes, non-ASCII, each int bound, the type of the other kind,
    a value of two fields, an unknown field after the value, a long length encoding), in
    any encoding an OTLP writer may use: what the reader gives, when it gives anything, is
    what the general decoder and check give, and the common cases are read by it."""
    keys = sorted(key for key in PLAIN_TEXT | set(PLAIN_INT) if key not in PARALLEL_KEYS)
    assert S.BUDGET_ID in keys and S.BUDGET_ACTUAL_TOKENS in keys and S.CONTEXT_ID in keys
    read = 0
    for key in keys:
        low = PLAIN_INT.get(key, 0)
        values: list[Any] = ["x-new-id", "", "é" * 5, "a" * 125, "a" * 126, "a" * 300,
                             True, 0.5]
        values += [low - 1, low, low + 1, 0, 7, -1, 300, (1 << 63) - 1, -(1 << 63)]
        bufs = [key_values({key: value})[0].SerializeToString() for value in values
                if not (isinstance(value, int) and not -(1 << 63) <= value < 1 << 63)]
        text, count = b"\x0a\x03abc", b"\x18\x07"
        bufs += [_encoded(key, text + count), _encoded(key, count + text),
                 _encoded(key, text + b"\x50\x01"),  # an unknown field after it
                 _encoded(key, b"\x0a\x83\x00abc"),  # its length in more bytes than needed
                 _encoded(key, b"\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"),  # 70 bits
                 _encoded(key, b"\x21" + struct.pack("<d", 2.0)),
                 _encoded(key, b"\x0a\x03\xff\xfe\xfd"),  # not UTF-8 (refused before)
                 _encoded(key, b""), _encoded(key, text)[:-1] + b"\x80",
                 KeyValue(key=key).SerializeToString()]
        for buf in bufs:
            try:
                expected = _general_entry(buf)
            except (UnicodeDecodeError, Exception) as exc:  # noqa: BLE001 - the bad bytes
                expected = type(exc)
            got = _decode._plain(buf)
            if got is not None:
                read += 1
                assert got == expected, (key, buf)
                assert type(got[1]) is type(expected[1])  # type: ignore[index]
        plain = key_values({key: "x-new-id" if key in PLAIN_TEXT else low + 5})[0]
        assert _decode._plain(plain.SerializeToString()) is not None, key
    assert read >= 2 * len(keys)


def test_a_span_of_new_ids_decodes_as_with_every_attribute_cached() -> None:
    """The same spans, decoded once cold (new ids and counts read by ``_plain``) and once
    with every attribute cached: the same views."""
    req = _mixed("cold")
    body = req.SerializeToString()
    cold = _decode.decode_request(body, _decode.parse_protobuf(body))
    warm = _decode.decode_request(body, _decode.parse_protobuf(body))
    assert _facts(cold) == _facts(warm)


# -- over gRPC and HTTP/JSON ----------------------------------------------------------------


def _json_body(req: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as a third-party SDK sends it: lowerCamelCase, every id in hex."""
    return orjson.dumps(_hex_ids(json_format.MessageToDict(req)))


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: base64.b64decode(value).hex() if key in _IDS else _hex_ids(value)
                for key, value in node.items()}
    if isinstance(node, list):
        return [_hex_ids(value) for value in node]
    return node


_IDS = frozenset({"traceId", "spanId", "parentSpanId"})


def _send(processor: Any, protocol: str, req: ExportTraceServiceRequest) -> str:
    """The request sent; the partial-success message it got back."""
    if protocol == "grpc":
        stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
        response = stub.Export(req, timeout=10)
        return str(response.partial_success.error_message)
    http = urllib.request.Request(
        f"http://{processor.addresses['otlp_http']}/v1/traces", data=_json_body(req),
        method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(http, timeout=10) as answer:
        got = json_format.Parse(answer.read() or b"{}", ExportTraceServiceResponse())
    return str(got.partial_success.error_message)


@pytest.mark.parametrize("protocol", ["grpc", "http_json"])
def test_mixed_request_over_the_wire_writes_what_span_by_span_writes(
        start_processor, monkeypatch, tmp_path: Path, protocol: str) -> None:
    """The mixed request through a running processor, parsed whole, and again through one
    parsing each walked span alone: the same bundles, the same partial-success message."""
    req = _mixed(protocol)
    out: list[Any] = []
    for run in ("whole", "alone"):
        probed = _probed(monkeypatch) if run == "whole" else None
        if run == "alone":
            _span_by_span(monkeypatch)
        processor = start_processor(output__dir=str(tmp_path / run))
        message = _send(processor, protocol, req)
        wait_for(lambda p=processor: len(read_bundles(p.config.out_dir)) >= 4, 15,
                 message="4 bundles")
        if probed is not None:
            assert probed == [True]
        bundles = {key: _stable(bundle)
                   for key, bundle in by_context(read_bundles(processor.config.out_dir)).items()}
        out.append((message, bundles))
        processor.stop(timeout=10)
    assert out[0] == out[1]
    message, bundles = out[0]
    assert "trace id must be 16 bytes" in message
    assert set(bundles) == {f"ctx-{protocol}-{name}" for name in ("sel", "bud", "b", "bad")}
    budgets = bundles[f"ctx-{protocol}-bud"]["context_budgets"]
    assert sorted(b["budget_id"] for b in budgets) == [
        f"ctx-{protocol}-bud-bud-{index}" for index in range(3)]
    assert sorted(b["actual_tokens"] for b in budgets) == [900, 901, 902]
    (selection, _) = sorted(bundles[f"ctx-{protocol}-sel"]["context_selections"],
                            key=lambda s: s["selection_id"])
    assert selection["selected_item_refs"] == ["doc-0-a"]


def _stable(bundle: dict[str, Any]) -> dict[str, Any]:
    """A bundle without what differs from one writing to the next (when it was written)."""
    return {key: value for key, value in bundle.items() if key not in _VOLATILE}


_VOLATILE = frozenset()
