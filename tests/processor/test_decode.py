"""OTLP request decoding: the fast path, the checks at the door, OTLP/JSON."""

from __future__ import annotations

import base64

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from processor_testkit import envelope_spans, fast_spans, log_event, logs_request, request, span

from otel_agent_context import _semconv as S
from otel_agent_context.processor._decode import (
    InvalidRequest,
    decode_request,
    json_to_protobuf,
    parse_protobuf,
)
from otel_agent_context.processor._decode_logs import decode_logs_request


def decode(req):
    body = req.SerializeToString()
    return decode_request(body, parse_protobuf(body)), body


def test_all_fast_path_request_is_not_walked() -> None:
    decoded, _ = decode(request(fast_spans(1, 25)))
    assert (decoded.spans, decoded.fast_path, decoded.accepted) == (25, 25, [])
    assert decoded.wal_payload is None


def test_all_context_request_is_kept_as_it_came() -> None:
    decoded, body = decode(request(envelope_spans(7, "ctx-a", stages=3)))
    assert decoded.spans == 4 and decoded.fast_path == 0 and decoded.rejected == 0
    assert decoded.wal_payload is body
    envelope = decoded.accepted[0]
    assert envelope.is_envelope and envelope.span_count == 3 and envelope.context_id == "ctx-a"
    view = decoded.accepted[1].view
    assert view.trace_id == f"{7:032x}" and view.span_id == f"{2:016x}"
    assert view.parent_span_id == f"{1:016x}"
    assert view.resource == {"service.name": "third-party-agent"}
    assert [e.name for e in view.events] == [S.EVENT_ITEM_SELECTED, S.EVENT_ITEM_OMITTED]
    assert view.events[0].attributes[S.SELECTION_SCORE] == 0.9


def test_mixed_request_keeps_only_context_spans_in_the_wal() -> None:
    spans = [*fast_spans(3, 5), *envelope_spans(3, "ctx-m", stages=1)]
    decoded, body = decode(request(spans))
    assert decoded.fast_path == 5 and len(decoded.accepted) == 2
    assert decoded.wal_payload is not None and decoded.wal_payload != body
    again = decode_request(decoded.wal_payload)
    assert [a.view.span_id for a in again.accepted] == [a.view.span_id for a in decoded.accepted]
    assert again.fast_path == 0


def test_prefix_in_a_value_only_is_still_fast_path() -> None:
    decoded, _ = decode(request([span(1, 1, "GET /docs", {"url.path": "/context.html"})]))
    assert decoded.fast_path == 1 and not decoded.accepted and not decoded.rejected


def test_gen_ai_span_without_context_id_is_unattributed() -> None:
    decoded, _ = decode(request([span(1, 1, "chat gpt", {"gen_ai.operation.name": "chat"})]))
    assert decoded.unattributed == 1 and decoded.rejected == 0


@pytest.mark.parametrize(("attributes", "message"), [
    ({"context.selection.id": "s"}, "has context.* attributes but context.id is unusable"),
    ({"context.selection.id": "s", "context.id": ["a", "b"]},
     "context.id is unusable (must be a string, got a list: dropped)"),
    ({"context.id": ""}, "context.id is empty"),
])
def test_spans_that_cannot_join_an_envelope_are_rejected(attributes, message) -> None:
    good = envelope_spans(9, "ctx-good", stages=1)
    bad = span(9, 77, "context.selection", attributes)
    decoded, _ = decode(request([*good, bad]))
    assert decoded.rejected == 1
    assert len(decoded.accepted) == 2  # nothing else lost
    assert message in decoded.error_message()
    assert f"span {77:016x} 'context.selection'" in decoded.error_message()


@pytest.mark.parametrize(("attributes", "events", "kept", "message"), [
    # a value that converts without loss is converted
    ({"context.id": "c", "context.scope": "turn", "context.span_count": "3"}, (),
     {"context.span_count": 3},
     "attribute context.span_count=3: a numeric string: converted to an int"),
    ({"context.id": 42}, (), {"context.id": "42"},
     "attribute context.id=42: must be a string, got int: converted to text"),
    # one that cannot is dropped alone
    ({"context.id": "c", "context.budget.overflow": "yes"}, (), {"context.id": "c"},
     "attribute context.budget.overflow=yes: must be a bool, got str: dropped"),
    ({"context.id": "c", "context.compaction.loss_notes": [1, 2]}, (),
     {"context.compaction.loss_notes": ["1", "2"]},
     "non-string elements: converted to text"),
    ({"context.id": "c", "context.budget.utilization": float("nan")}, (), {"context.id": "c"},
     "attribute context.budget.utilization=nan: not a finite number: dropped"),
    # enums: case folded, unknown values become custom, or are dropped where there is none
    ({"context.id": "c", "context.scope": "TURN", "context.span_count": 0}, (),
     {"context.scope": "turn"}, "matched ignoring case: turn"),
    ({"context.id": "c", "context.scope": "conversation", "context.span_count": 0}, (),
     {"context.scope": "custom"}, "attribute context.scope=conversation: not a value of"),
    ({"context.id": "c", "context.missing.severity": "critical"}, (), {"context.id": "c"},
     "attribute context.missing.severity=critical: not a value of the enum: dropped"),
    # an event lacking its id is dropped alone, never its span
    ({"context.id": "c"}, [("context.item.selected", {"context.item.kind": "tool_result"})],
     {"context.id": "c"}, "event context.item.selected: lacks context.item.id: event dropped"),
    ({"context.id": "c"}, [("context.item.omitted", {"context.item.id": "x",
                                                     "context.item.token_estimate": 1.5})],
     {"context.id": "c"},
     "attribute context.item.token_estimate=1.5: must be an int, got a fraction: dropped"),
])
def test_off_spec_values_are_repaired_and_reported(attributes, events, kept, message) -> None:
    good = envelope_spans(9, "ctx-good", stages=1)
    odd = span(9, 77, "context.selection", attributes, events=events)
    decoded, _ = decode(request([*good, odd]))
    assert decoded.rejected == 0
    assert len(decoded.accepted) == 3  # the odd span is kept, and nothing else lost
    view = decoded.accepted[2].view
    for key, value in kept.items():
        assert view.attributes[key] == value
    assert decoded.repairs and view.repairs == decoded.repairs
    assert message in decoded.error_message()
    assert f"span {77:016x}" in decoded.error_message()
    counted = {}
    for r in decoded.repairs:
        counted[("third-party-agent", r.kind)] = counted.get(("third-party-agent", r.kind), 0) + 1
    assert decoded.problems == counted


def test_an_event_without_a_time_takes_its_span_start() -> None:
    s = span(1, 1, "context.budget", {"context.id": "c"},
             events=[("context.window.segment", {"context.window.segment": "history"})])
    s.events[0].time_unix_nano = 0
    decoded, _ = decode(request([s]))
    view = decoded.accepted[0].view
    assert view.events[0].time_unix_nano == view.start_time_unix_nano > 0
    assert [r.kind for r in view.repairs] == ["event_time"]


def test_lenient_numbers() -> None:
    s = span(1, 1, "context.budget", {"context.id": "c", "context.budget.utilization": 1,
                                      "context.budget.max_tokens": 8192.0})
    decoded, _ = decode(request([s]))
    attributes = decoded.accepted[0].view.attributes
    assert attributes[S.BUDGET_UTILIZATION] == 1.0 and isinstance(
        attributes[S.BUDGET_UTILIZATION], float)
    assert attributes[S.BUDGET_MAX_TOKENS] == 8192 and isinstance(
        attributes[S.BUDGET_MAX_TOKENS], int)


def test_bad_ids_are_rejected() -> None:
    s = span(1, 1, "context.surface", {"context.id": "c"})
    s.trace_id = b"\x00" * 16
    decoded, _ = decode(request([s]))
    assert decoded.rejected == 1 and "trace id" in decoded.error_message()


def test_rejection_message_is_bounded() -> None:
    bad = [span(1, i, "context.surface", {"context.id": ""}) for i in range(1, 40)]
    decoded, _ = decode(request(bad))
    assert decoded.rejected == 39
    assert decoded.error_message().endswith("and 34 more spans rejected")


def test_malformed_protobuf() -> None:
    with pytest.raises(InvalidRequest, match="malformed ExportTraceServiceRequest"):
        parse_protobuf(b"\x0a\xff\xff\xff\xff\x0f garbage")


def _otlp_json(req) -> bytes:
    """The OTLP/JSON encoding: hex ids, lowerCamelCase (as a third-party SDK sends it)."""
    from google.protobuf import json_format

    document = json_format.MessageToDict(req)
    for rs in document["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return orjson.dumps(document)


def test_json_request_decodes_like_protobuf() -> None:
    req = request(envelope_spans(5, "ctx-json", stages=2))
    from_json = json_to_protobuf(_otlp_json(req))
    assert from_json == req
    decoded = decode_request(from_json.SerializeToString(), from_json)
    assert len(decoded.accepted) == 3 and decoded.wal_payload == req.SerializeToString()


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"resourceSpans": 3}', "resourceSpans: expected a list"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
     "resourceSpans[0].scopeSpans[0].spans[0].traceId: not a hex id"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5, "kind": "x"}]}]}]}',
     "not an OTLP/JSON ExportTraceServiceRequest"),
])
def test_malformed_json(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=__import__("re").escape(message)):
        json_to_protobuf(body)


# -- logs: context events as log records ----------------------------------------------------------


def test_logs_only_context_event_records_are_kept_and_made_durable() -> None:
    plain = logs_request([log_event(1, 1, "", {"http.route": "/x"}) for _ in range(5)])
    decoded = decode_logs_request(plain.SerializeToString())
    assert (decoded.records, decoded.ignored, decoded.events, decoded.wal_payload) == (
        5, 5, [], None)
    kept = log_event(1, 2, "context.item.added", {"context.item.id": "a",
                                                  "context.item.token_estimate": "12"},
                     time=0, observed=777)
    mixed = logs_request([log_event(1, 1, "app.x", {"context.note": "x"}), kept,
                          log_event(1, None, "context.item.added", {"context.item.id": "b"})])
    decoded = decode_logs_request(mixed.SerializeToString())
    assert (decoded.records, decoded.ignored, decoded.rejected) == (3, 1, 1)
    (event,) = decoded.events
    assert (event.trace_id, event.span_id, event.name) == (f"{1:032x}", f"{2:016x}",
                                                           "context.item.added")
    assert event.event is not None and event.event.time_unix_nano == 777  # observed time
    assert event.event.attributes == {"context.item.id": "a", "context.item.token_estimate": 12}
    assert [r.kind for r in event.repairs] == ["type"]
    durable = ExportLogsServiceRequest.FromString(decoded.wal_payload)
    assert list(durable.resource_logs[0].scope_logs[0].log_records) == [kept]
    assert durable.resource_logs[0].resource == mixed.resource_logs[0].resource
    alone = logs_request([kept]).SerializeToString()
    assert decode_logs_request(alone).wal_payload is alone
    retried = decode_logs_request(alone).events[0]
    assert retried.digest == event.digest  # the same record is the same event


def test_a_lone_surrogate_in_otlp_json_loses_no_span() -> None:
    # JSON.stringify (the OpenTelemetry JS exporter's OTLP/JSON) writes a string cut inside
    # a surrogate pair as a lone "\ud83d" escape; the Collector's receiver reads it as U+FFFD.
    # One such value must not cost the request: every span is taken, the value repaired.
    spans = envelope_spans(7, "ctx-lone", stages=1)
    spans[0].attributes.add(key="gen_ai.agent.description").value.string_value = "LONE"
    body = _otlp_json(request(spans)).replace(b"LONE", b"cut \\ud83d")
    from_json = json_to_protobuf(body)
    decoded = decode_request(from_json.SerializeToString(), from_json)
    assert len(decoded.accepted) == 2
    values = [kv.value.string_value for kv in from_json.resource_spans[0].scope_spans[0]
              .spans[0].attributes if kv.key == "gen_ai.agent.description"]
    assert values == ["cut \ufffd"]
