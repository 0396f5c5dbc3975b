"""OTLP/JSON values nested to the protobuf parser's limit, and one level past it.

JSON has no nesting limit of its own that matches protobuf's: a value nested 32 kvlist levels
deep once was acknowledged, made durable in the WAL, and unreadable when the WAL was read back
after a crash (the whole request's spans lost, other envelopes' too). Now the deepest value
the parser reads is kept and replays; one level deeper is dropped alone, as a ``too_deep``
repair told to the sender and listed in the bundle, before and after a crash alike."""

from __future__ import annotations

import base64
import random
import signal
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from processor_testkit import (
    by_context,
    envelope_spans,
    log_event,
    logs_request,
    post_json_document,
    read_bundles,
    request,
    serve,
    wait_for,
)

from otel_agent_context.processor._decode import (
    PARSE_DEPTH,
    InvalidRequest,
    decode_request,
    json_to_protobuf,
    parse_protobuf,
)
from otel_agent_context.processor._decode_logs import logs_json_to_protobuf

#: message levels of an attribute's AnyValue: request > resource_spans > scope_spans > span
#: > key_value > any_value (a log record's attribute alike); on an event one more
SPAN_VALUE, EVENT_VALUE = 5, 6


def nested(deepest: int, base: int, leaf: Any = None) -> dict[str, Any]:
    """An OTLP/JSON AnyValue at message level ``base`` whose deepest message is at level
    ``deepest`` (arrays: an ArrayValue, then an AnyValue, two levels each)."""
    levels = deepest - base
    value: dict[str, Any] = {"arrayValue": {}} if levels % 2 else (leaf or {"stringValue": "x"})
    for _ in range(levels // 2):
        value = {"arrayValue": {"values": [value]}}
    return value


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId")
                    else _hex_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def as_json(message: Any) -> Any:
    """A protobuf OTLP request as an OTLP/JSON exporter writes it (hex ids)."""
    return _hex_ids(json_format.MessageToDict(message))


def with_deep(document: Any, span_index: int, deepest: int, *, on_event: bool = False
              ) -> Any:
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    target = spans[span_index]
    if on_event:
        target = target.setdefault("events", [{"name": "x.event", "timeUnixNano": "1"}])[0]
        target.setdefault("attributes", [])
    target["attributes"].append({"key": "x.deep", "value": nested(
        deepest, EVENT_VALUE if on_event else SPAN_VALUE)})
    return document


def test_the_parser_limit_is_what_upb_reads() -> None:
    assert PARSE_DEPTH == 100  # if protobuf changes it, the rule follows (probed at import)


@pytest.mark.parametrize("on_event", [False, True])
def test_the_deepest_value_the_parser_reads_is_kept_and_one_deeper_is_a_repair(
        on_event: bool) -> None:
    for deepest, kept in ((PARSE_DEPTH, True), (PARSE_DEPTH + 1, False)):
        document = with_deep(as_json(request(envelope_spans(1, "c", stages=0))), 0, deepest,
                             on_event=on_event)
        body = json_to_protobuf(orjson_bytes(document)).SerializeToString()
        decoded = decode_request(body, parse_protobuf(body))  # what WAL replay does
        (accepted,) = decoded.accepted
        view = accepted.view
        attributes = view.events[0].attributes if on_event else view.attributes
        assert ("x.deep" in attributes) is kept
        too_deep = [r for r in decoded.repairs if r.kind == "too_deep"]
        assert bool(too_deep) is not kept
        if not kept:
            (repair,) = too_deep
            assert repair.field == "x.deep" and repair.action.endswith("dropped")
            assert repair.event == ("x.event" if on_event else "")


def orjson_bytes(document: Any) -> bytes:
    import orjson

    return orjson.dumps(document)


def test_unusual_json_shapes_refuse_past_the_limit_whole() -> None:
    # snake_case names take json_format.ParseDict: the same limit, the request refused (400)
    for deepest, ok in ((PARSE_DEPTH, True), (PARSE_DEPTH + 1, False)):
        document = with_deep(as_json(request(envelope_spans(1, "c", stages=0))), 0, deepest)
        document["resource_spans"] = document.pop("resourceSpans")
        if ok:
            parse_protobuf(json_to_protobuf(orjson_bytes(document)).SerializeToString())
        else:
            with pytest.raises(InvalidRequest, match="too deep"):
                json_to_protobuf(orjson_bytes(document))
    # a resource attribute is not the boundary's to repair: refused whole as well
    document = as_json(request(envelope_spans(1, "c", stages=0)))
    document["resourceSpans"][0]["resource"]["attributes"].append(
        {"key": "x.deep", "value": nested(PARSE_DEPTH + 1, 4)})
    with pytest.raises(InvalidRequest, match="too deep"):
        json_to_protobuf(orjson_bytes(document))
    document = as_json(logs_request([log_event(1, 1, "context.item.selected",
                                               {"context.item.id": "i"})]))
    document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"] = nested(
        PARSE_DEPTH + 1, 4)
    with pytest.raises(InvalidRequest, match="too deep"):
        logs_json_to_protobuf(orjson_bytes(document))


def test_deep_values_survive_a_crash_at_the_limit_and_past_it(tmp_path: Path) -> None:
    out_dir, ready = tmp_path / "out", tmp_path / "ready.json"
    args = ["--out", str(out_dir), "--otlp-grpc", "off", "--otlp-http", "127.0.0.1:0",
            "--metrics", "off", "--envelope-timeout", "60", "--orphan-timeout", "60"]
    process, addresses = serve(args, ready)
    http = addresses["otlp_http"]
    # two envelopes waiting for their last stage, one request: the envelope span of "at-limit"
    # carries the deepest value the parser reads, "past-limit" one level deeper on an event
    at_limit = envelope_spans(1, "at-limit", stages=2)
    past_limit = envelope_spans(2, "past-limit", stages=2)
    document = as_json(request(at_limit[:2] + past_limit[:2]))
    with_deep(document, 0, PARSE_DEPTH)
    with_deep(document, 2, PARSE_DEPTH + 1, on_event=True)
    reply = post_json_document(http, document)
    assert "too_deep" not in str(reply)  # the message names the attribute, not the kind
    assert "x.deep" in reply["partialSuccess"]["errorMessage"]
    assert "nested deeper" in reply["partialSuccess"]["errorMessage"]
    # log-based events the same way, on the first stage of each envelope
    records = [log_event(1, 2, "context.item.selected", {"context.item.id": "log-at"}),
               log_event(2, 2, "context.item.selected", {"context.item.id": "log-past"})]
    logs = as_json(logs_request(records))
    for record, deepest in zip(logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"],
                               (PARSE_DEPTH, PARSE_DEPTH + 1), strict=True):
        record["attributes"].append({"key": "x.deep", "value": nested(deepest, SPAN_VALUE)})
    reply = post_json_document(http, logs, "/v1/logs")
    assert "x.deep" in reply["partialSuccess"]["errorMessage"]
    process.send_signal(signal.SIGKILL)  # acknowledged, in the WAL, not written
    process.wait(20)
    assert not read_bundles(out_dir)

    process, addresses = serve(args, ready)
    post_json_document(addresses["otlp_http"],
                       as_json(request(at_limit[2:] + past_limit[2:])))
    wait_for(lambda: {"at-limit", "past-limit"} <= set(by_context(read_bundles(out_dir))),
             timeout=20)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0
    log = "".join(p.read_text() for p in tmp_path.glob("ready.*.log"))
    assert "unreadable" not in log
    found = by_context(read_bundles(out_dir))
    assert found["at-limit"]["rebuild"]["status"] == "complete"
    assert len(found["at-limit"]["context_selections"]) == 2
    past = found["past-limit"]
    assert len(past["context_selections"]) == 2  # nothing else of the request lost
    repairs = [(r["kind"], r["field"], r.get("event", "")) for r in past["rebuild"]["repairs"]]
    assert sorted(repairs) == [("too_deep", "x.deep", "context.item.selected"),
                               ("too_deep", "x.deep", "x.event")]
    items = {i["item_id"] for b in found.values() for i in b.get("context_items", [])}
    assert {"log-at", "log-past"} <= items


def _shape(rng: random.Random, levels: int) -> dict[str, Any]:
    """A random OTLP/JSON value of about ``levels`` kvlist/array levels, ending in a scalar
    or an empty list or value somewhere."""
    if levels == 0:
        return rng.choice([{"stringValue": "s"}, {"intValue": "1"}, {}, {"arrayValue": {}},
                           {"kvlistValue": {}}, {"kvlistValue": {"values": [{"key": "k"}]}}])
    inner = _shape(rng, levels - 1)
    if rng.random() < 0.5:
        return {"arrayValue": {"values": [{"stringValue": "a"}, inner][rng.randrange(2):]}}
    return {"kvlistValue": {"values": [{"key": "k", "value": inner}]}}


def test_the_json_rule_is_the_parsers_rule_for_any_shape() -> None:
    """Random nests around the limit, on spans and events: an attribute is kept exactly when
    the protobuf parser reads the request holding it (as built without any limit)."""
    rng = random.Random(10)
    for _ in range(300):
        on_event = rng.random() < 0.5
        value = _shape(rng, rng.randrange(28, 50))
        document = as_json(request(envelope_spans(1, "c", stages=0)))
        spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
        target = spans[0]
        if on_event:
            target["events"] = [{"name": "e", "timeUnixNano": "1", "attributes": []}]
            target = target["events"][0]
        target["attributes"].append({"key": "x.deep", "value": value})
        unbounded = ExportTraceServiceRequest()
        json_format.ParseDict(_base64_ids(document), unbounded, max_recursion_depth=10_000)
        try:
            parse_protobuf(unbounded.SerializeToString())
            readable = True
        except InvalidRequest:
            readable = False
        body = json_to_protobuf(orjson_bytes(document)).SerializeToString()
        decoded = decode_request(body, parse_protobuf(body))
        assert any(r.kind == "too_deep" for r in decoded.repairs) is not readable, value


def _base64_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId",
                                                                           "parentSpanId")
                    else _base64_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_base64_ids(v) for v in node]
    return node
