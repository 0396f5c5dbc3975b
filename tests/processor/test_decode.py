"""OTLP request decoding: the fast path, the checks at the door, OTLP/JSON."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from processor_testkit import (
    envelope_spans,
    fast_spans,
    key_values,
    log_event,
    logs_request,
    request,
    span,
)

from otel_agent_context import _semconv as S
from otel_agent_context.processor._decode import (
    _ID_FIELDS,
    InvalidRequest,
    _fast_json_request,
    decode_request,
    fast_json,
    json_to_protobuf,
    parse_protobuf,
)
from otel_agent_context.processor._decode_logs import decode_logs_request, logs_json_to_protobuf


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


def _rich_request() -> Any:
    """Every field of the OTLP trace request a JSON exporter may set, values of each kind."""
    spans = envelope_spans(6, "ctx-rich", stages=1)
    first = spans[0]
    first.trace_state, first.flags, first.kind = "k=v", 257, 3
    first.dropped_attributes_count, first.dropped_events_count = 2, 1
    first.dropped_links_count = 4
    first.status.code, first.status.message = 2, "boom"
    value = first.attributes.add(key="app.nested").value
    value.array_value.values.add().int_value = -(1 << 63)
    value.array_value.values.add().double_value = 1.5
    kvlist = value.array_value.values.add().kvlist_value
    kvlist.values.add(key="flag").value.bool_value = False
    kvlist.values.add(key="empty")  # a key without a value
    kvlist.values.add(key="blank").value.SetInParent()  # a value present and empty
    first.attributes.add(key="app.empty_list").value.array_value.SetInParent()
    first.attributes.add(key="app.big").value.int_value = (1 << 63) - 1
    event = first.events.add(name="e", time_unix_nano=(1 << 64) - 1, dropped_attributes_count=1)
    event.attributes.add(key="k").value.string_value = "é \u2028"
    link = first.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, trace_state="a=b",
                           flags=1, dropped_attributes_count=3)
    link.attributes.add(key="l").value.double_value = -0.0
    req = request(spans)
    rs = req.resource_spans[0]
    rs.schema_url = "https://opentelemetry.io/schemas/1.26.0"
    rs.resource.dropped_attributes_count = 1
    ss = rs.scope_spans[0]
    ss.schema_url, ss.scope.version, ss.scope.dropped_attributes_count = "s", "1.0", 5
    ss.scope.attributes.add(key="scope.k").value.string_value = "v"
    return req


def _hex_ids(document: dict[str, Any]) -> dict[str, Any]:
    for rs in document["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for item in (s, *s.get("links", ())):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64decode(item[key]).hex()
    return document


@pytest.mark.parametrize("integers", [False, True], ids=["enum-names", "enum-integers"])
def test_otlp_json_is_read_directly_as_parse_dict_reads_it(integers: bool) -> None:
    """The direct reader (not json_format, ~10x faster) gives the very request ParseDict
    gives, for every field and value kind, 64-bit numbers as strings or numbers."""
    from google.protobuf import json_format

    req = _rich_request()
    document = _hex_ids(json_format.MessageToDict(req, use_integers_for_enums=integers))
    body = orjson.dumps(document)
    assert _fast_json_request(orjson.loads(body)) == req  # not None: the direct path
    assert json_to_protobuf(body) == req
    numbers = body.replace(b'"18446744073709551615"', b"18446744073709551615")
    assert numbers != body and _fast_json_request(orjson.loads(numbers)) == req


@pytest.mark.parametrize("change", [
    lambda s: s.update(trace_id=s.pop("traceId")),  # the proto's own name
    lambda s: s.update(kind="SPAN_KIND_NOT_ONE"),
    lambda s: s.update(unknownField=1),
    lambda s: s.update(name=None),
    lambda s: s["attributes"].append({"key": "b", "value": {"bytesValue": "AAE="}}),
    lambda s: s["attributes"].append({"key": "d", "value": {"doubleValue": "NaN"}}),
    lambda s: s["attributes"].append({"key": "i", "value": {"intValue": "1e3"}}),
    lambda s: s["attributes"].append({"key": "i", "value": {"intValue": str(1 << 63)}}),
    lambda s: s["attributes"].append({"key": "x", "value": {"intValue": 1, "boolValue": 1}}),
    lambda s: s.update(spanId="zz"),
    lambda s: s.update(startTimeUnixNano=-1),
    lambda s: s.update(flags=1.0),
], ids=["snake_case", "enum-unknown", "unknown-field", "null", "bytes", "nan", "exponent",
        "int64-overflow", "two-values", "bad-id", "negative-time", "float-flags"])
def test_otlp_json_the_direct_reader_leaves_to_parse_dict(change: Any) -> None:
    """Anything off the common shape goes to ParseDict: the same request, or the same
    error, as before the direct reader."""
    from google.protobuf import json_format

    document = _hex_ids(json_format.MessageToDict(_rich_request()))
    change(document["resourceSpans"][0]["scopeSpans"][0]["spans"][0])
    assert _fast_json_request(orjson.loads(orjson.dumps(document))) is None
    body = orjson.dumps(document)
    try:
        expected: Any = json_format.ParseDict(_b64_ids(orjson.loads(body)),
                                              ExportTraceServiceRequest(),
                                              ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError):
        expected = InvalidRequest
    if expected is InvalidRequest:
        with pytest.raises(InvalidRequest):
            json_to_protobuf(body)
    else:
        assert json_to_protobuf(body) == expected


def _b64_ids(document: dict[str, Any]) -> dict[str, Any]:
    for rs in document["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for item in (s, *s.get("links", ())):
                    for key in _ID_FIELDS:
                        if isinstance(item.get(key), str):
                            item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    return document


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


# -- OTLP/JSON logs: the same direct reader ----------------------------------------------------


def _sdk_logs_request() -> ExportLogsServiceRequest:
    """What the OpenTelemetry SDK exports for context events and plain log records: its own
    LoggerProvider and OTLP encoder (records in a span, one outside any, every body and
    attribute kind a record may carry)."""
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "json-agent",
                                                        "host.cores": 2}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("agent.events", "1.2.3", schema_url="https://s/1.26.0",
                                 attributes={"scope.k": "v"})
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("turn"):
        logger.emit(event_name="context.item.added", severity_number=SeverityNumber.INFO,
                    attributes={"context.item.id": "kb:refunds:49",
                                "context.item.token_estimate": 120,
                                "context.item.score": 0.75, "context.item.pinned": True,
                                "context.item.sources": ["a", "b"], "app.ns": [1, 2, -3]})
        logger.emit(event_name="context.item.omitted", severity_number=SeverityNumber.WARN,
                    severity_text="WARN", body={"why": "budget", "n": [1.5, False]},
                    attributes={"context.item.id": "x", "context.omission.reason": "budget"})
    logger.emit(severity_number=SeverityNumber.ERROR, body="plain text é \u2028",
                attributes={"http.route": "/x"}, timestamp=(1 << 63) + 5)
    request = encode_logs(memory.get_finished_logs())
    assert len(request.resource_logs[0].scope_logs[0].log_records) == 3
    return request


def _log_ids(document: dict[str, Any], convert: Any) -> dict[str, Any]:
    for rl in document["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for record in sl["logRecords"]:
                for key in ("traceId", "spanId"):
                    if isinstance(record.get(key), str):
                        record[key] = convert(record[key])
    return document


def _hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode()


def _parse_dict_logs(body: bytes) -> Any:
    """What json_format.ParseDict makes of an OTLP/JSON logs body (InvalidRequest: an
    error)."""
    from google.protobuf import json_format

    try:
        return json_format.ParseDict(_log_ids(orjson.loads(body), _b64),
                                     ExportLogsServiceRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError):
        return InvalidRequest


@pytest.mark.parametrize("integers", [False, True], ids=["enum-names", "enum-integers"])
def test_otlp_json_logs_from_the_sdk_are_read_directly_as_parse_dict_reads_them(
        integers: bool) -> None:
    from google.protobuf import json_format

    req = _sdk_logs_request()
    body = orjson.dumps(_log_ids(json_format.MessageToDict(
        req, use_integers_for_enums=integers), _hex))
    direct = fast_json(orjson.loads(body), ExportLogsServiceRequest())
    assert direct is not None  # the direct path, not ParseDict
    expected = _parse_dict_logs(body)
    assert direct == expected == req
    assert direct.SerializeToString(deterministic=True) == \
        expected.SerializeToString(deterministic=True)
    assert logs_json_to_protobuf(body) == req
    # and what the pipeline reads from it: the two context events, the plain record ignored
    decoded = decode_logs_request(req.SerializeToString(), req)
    assert (decoded.records, decoded.ignored, len(decoded.events)) == (3, 1, 2)
    numbers = body.replace(str((1 << 63) + 5).join('""').encode(), str((1 << 63) + 5).encode())
    assert numbers != body and fast_json(orjson.loads(numbers), ExportLogsServiceRequest()) == req


@pytest.mark.parametrize("change", [
    lambda r: r.update(event_name=r.pop("eventName")),  # the proto's own name
    lambda r: r.update(severityNumber="SEVERITY_NUMBER_NOT_ONE"),
    lambda r: r.update(severityNumber=7),  # a number no name has: kept (open enum)
    lambda r: r.update(unknownField=1),
    lambda r: r.update(severityText=None),
    lambda r: r.update(body={"bytesValue": "AAE="}),
    lambda r: r.update(body={"doubleValue": "NaN"}),
    lambda r: r.update(body={}),
    lambda r: r["attributes"].append({"key": "i", "value": {"intValue": "1e3"}}),
    lambda r: r.update(traceId="zz"),
    lambda r: r.update(spanId=""),
    lambda r: r.update(observedTimeUnixNano=-1),
    lambda r: r.update(flags=1.0),
], ids=["snake_case", "enum-unknown", "enum-number", "unknown-field", "null", "bytes-body",
        "nan-body", "empty-body", "exponent", "bad-id", "empty-id", "negative-time",
        "float-flags"])
def test_otlp_json_logs_off_the_common_shape_read_as_parse_dict_reads_them(change: Any
                                                                          ) -> None:
    """Anything off the common shape gives what ParseDict gives (the same request or an
    error), whichever path reads it."""
    from google.protobuf import json_format

    document = _log_ids(json_format.MessageToDict(_sdk_logs_request()), _hex)
    change(document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0])
    body = orjson.dumps(document)
    expected = _parse_dict_logs(body)
    direct = fast_json(orjson.loads(body), ExportLogsServiceRequest())
    if expected is InvalidRequest:
        assert direct is None
        with pytest.raises(InvalidRequest):
            logs_json_to_protobuf(body)
    else:
        assert direct is None or direct == expected
        assert logs_json_to_protobuf(body) == expected


def test_a_trace_name_in_a_log_record_is_off_shape() -> None:
    """The two signals share the direct reader's tables; a span's field in a log record
    (or the other way round) is no part of the common shape."""
    from google.protobuf import json_format

    document = _log_ids(json_format.MessageToDict(_sdk_logs_request()), _hex)
    document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["startTimeUnixNano"] = "1"
    assert fast_json(document, ExportLogsServiceRequest()) is None
    assert fast_json({"resourceLogs": []}, ExportTraceServiceRequest()) is None


@pytest.mark.parametrize("extra", [0, 12], ids=["few attributes", "many attributes"])
def test_cached_attributes_decode_and_repair_as_fresh_ones(extra: int) -> None:
    """Spans of a few attributes are read one by one, spans of many as one dict of cached
    entries: either way, decoded cold or warm (every entry cached), the same attributes and
    the same repairs come out, each listed once, the folded form's arrays lined up."""
    attributes = {"context.id": f"ctx-cache-{extra}", "context.budget.id": f"b-{extra}",
                  "context.budget.target": "MODEL",  # case folded
                  "context.budget.utilization": float("nan"),  # dropped
                  **{f"app.extra.{i}": i for i in range(extra)}}
    odd = span(11, 2, "chat m", attributes, events=[
        ("context.item.selected", {"context.item.id": f"i-{extra}",
                                   "context.item.kind": "Document_Excerpt"}),
        ("context.item.selected", {"context.item.id": f"j-{extra}",
                                   "context.item.kind": "document_excerpt"})])
    odd.attributes.extend(key_values({"context.budget.max_tokens": 100}))
    odd.attributes.extend(key_values({"context.budget.max_tokens": 200}))  # the last kept
    folded = span(11, 3, "chat m", {
        "context.id": f"ctx-cache-{extra}", "context.budget.id": f"f-{extra}",
        "context.window.segment_names": ["system", "history"],
        "context.window.segment_used_tokens": [10],  # one short: padded
        **{f"app.extra.{i}": i for i in range(extra)}})
    clean = span(11, 4, "context.budget", {
        "context.id": f"ctx-cache-{extra}", "context.budget.id": f"c-{extra}",
        "context.budget.target": "model", **{f"app.extra.{i}": i for i in range(extra)}})
    runs = [decode(request([odd, folded, clean]))[0] for _ in range(2)]
    for decoded in runs:
        views = {a.view.span_id[-1]: a.view for a in decoded.accepted}
        assert views["2"].attributes == {
            "context.id": f"ctx-cache-{extra}", "context.budget.id": f"b-{extra}",
            "context.budget.target": "model", "context.budget.max_tokens": 200,
            **{f"app.extra.{i}": i for i in range(extra)}}
        assert [e.attributes["context.item.kind"] for e in views["2"].events] == [
            "document_excerpt", "document_excerpt"]
        assert sorted((r.kind, r.field, r.event) for r in views["2"].repairs) == [
            ("duplicate_key", "context.budget.max_tokens", ""),
            ("enum_case", "context.budget.target", ""),
            ("enum_case", "context.item.kind", "context.item.selected"),
            ("non_finite", "context.budget.utilization", "")]
        assert views["3"].attributes["context.window.segment_used_tokens"] == [10, -1]
        assert [(r.kind, r.field) for r in views["3"].repairs] == [
            ("array_length", "context.window.segment_used_tokens")]
        assert views["4"].repairs == [] and views["4"].attributes["context.budget.target"] \
            == "model"
        assert len(decoded.repairs) == 5
    assert [r for a in runs[0].accepted for r in a.view.repairs] == [
        r for a in runs[1].accepted for r in a.view.repairs]


def test_new_plain_ids_and_counts_decode_as_the_full_check_says() -> None:
    """The decoder keeps a new value of a plain text or int attribute (``PLAIN_TEXT``,
    ``PLAIN_INT``) without the full check: for every such attribute, what it keeps, drops
    and says is exactly what ``check_attribute`` does (an empty id, a negative count)."""
    from otel_agent_context.processor import _decode
    from otel_agent_context.rebuild._boundary import (
        DROP,
        PLAIN_INT,
        PLAIN_TEXT,
        check_attribute,
    )

    assert S.BUDGET_ID in PLAIN_TEXT and S.CONTEXT_ID in PLAIN_TEXT
    assert S.BUDGET_TARGET not in PLAIN_TEXT  # an enum: always the full check
    assert S.BUDGET_ACTUAL_TOKENS in PLAIN_INT and S.BUDGET_UTILIZATION not in PLAIN_INT
    cases = [(name, text, "string_value") for name in sorted(PLAIN_TEXT)
             for text in ("x-new-id", "")]
    cases += [(name, number, "int_value") for name in sorted(PLAIN_INT)
              for number in (0, 7, -1, (1 << 63) - 1, -(1 << 63))]
    for name, sent, kind in cases:
        buf = key_values({name: sent})[0].SerializeToString()
        key, value, noted = _decode._decode_checked(buf)
        checked, repair = check_attribute(name, sent, kind)
        if checked is DROP:
            assert key is None, (name, sent)
        else:
            assert (key, value) == (name, checked), (name, sent)
        assert (None if noted is None else noted[:2]) == repair, (name, sent)


def test_span_status_is_read_from_its_bytes() -> None:
    """The lite span carries its status as bytes, decoded only when present."""
    spans = envelope_spans(3, "ctx-status", stages=2)
    spans[1].status.code = 2
    spans[1].status.message = "boom"
    spans[2].status.message = "no code"
    decoded, _ = decode(request(spans))
    codes = sorted((a.view.span_id, a.view.status_code) for a in decoded.accepted)
    assert [code for _, code in codes] == [0, 2, 0]
