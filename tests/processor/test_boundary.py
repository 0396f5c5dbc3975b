"""The boundary, one off-spec input at a time, through the real processor over OTLP/HTTP.

Each test sends what a third-party emitter gets wrong and checks the bundle the processor
writes (and, where it matters, ``/metrics`` and the OTLP response). The in-process path is
checked where the processor cannot be (real SDK spans, values OTLP cannot carry).

Nothing here imports the generated table or the boundary at module level, so the file runs
against a tree from before them and each test fails there for its own reason.
"""

from __future__ import annotations

import base64
import logging
import math
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from processor_testkit import (
    SPAWNED,
    post_json_document,
    read_bundles,
    request,
    serve,
    span,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families

from otel_agent_context import bundle_json_schema
from otel_agent_context._records import ns_to_rfc3339
from otel_agent_context.processor._decode import decode_request, parse_protobuf
from otel_agent_context.rebuild import (
    BundleSpanProcessor,
    EventView,
    SpanView,
    rebuild,
    rebuild_envelope,
    view_from_readable_span,
)

AGENT = "boundary-agent"
TRACE = 0x7E57
T0 = 1_800_000_000_000_000_000
SCHEMA = bundle_json_schema()


# -- helpers -----------------------------------------------------------------------------------


def envelope(cid: str, stages: int, *, scope: str = "turn", trace: int = TRACE,
             events: Any = (), **attributes: Any) -> Span:
    return span(trace, 1, f"invoke_agent {AGENT}", {
        "context.id": cid, "context.scope": scope, "context.span_count": stages,
        "gen_ai.agent.name": AGENT, **attributes}, events=events, start=T0, duration=10_000)


def stage(span_id: int, name: str, cid: str, attributes: dict[str, Any], events: Any = (), *,
          trace: int = TRACE) -> Span:
    return span(trace, span_id, name, {"context.id": cid, **attributes}, parent=1,
                events=events, start=T0 + span_id * 100, duration=50)


def at(s: Span, *times: int) -> Span:
    """Set the span's event times (0: the event carries none)."""
    for event, time in zip(s.events, times, strict=True):
        event.time_unix_nano = time
    return s


def post(processor: Any, spans: list[Span], service: str = AGENT, *,
         address: str | None = None) -> ExportTraceServiceResponse:
    """OTLP/HTTP protobuf export; the processor's response."""
    req = urllib.request.Request(
        f"http://{address or processor.addresses['otlp_http']}/v1/traces",
        data=request(spans, service=service).SerializeToString(), method="POST",
        headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as response:
        assert response.status == 200
        return ExportTraceServiceResponse.FromString(response.read())


def post_json(processor: Any, spans: list[Span]) -> dict[str, Any]:
    """OTLP/HTTP JSON export (hex ids; NaN and infinities as the strings protobuf JSON uses)."""
    document = json_format.MessageToDict(request(spans, service=AGENT))
    for rs in document["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return post_json_document(processor.addresses["otlp_http"], document)  # type: ignore[no-any-return]


def bundles(processor: Any, count: int = 1) -> list[dict[str, Any]]:
    """The ``count`` bundles the processor wrote (each valid against the schema)."""
    found = wait_for(lambda: (b := read_bundles(processor.config.out_dir)) and len(b) >= count
                     and b, message=f"{count} bundles")
    assert len(found) == count, found
    for bundle in found:
        jsonschema.validate(bundle, SCHEMA)
    return found  # type: ignore[no-any-return]


def by_id(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["context_envelope"]["context_id"]: b for b in found}


def repairs(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["kind"], r["field"]) for r in bundle["rebuild"].get("repairs", [])]


def metrics(processor: Any) -> tuple[str, dict[str, Any]]:
    with urllib.request.urlopen(f"http://{processor.addresses['metrics']}/metrics",
                                timeout=10) as response:
        text = response.read().decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def samples(families: dict[str, Any], family: str, name: str) -> list[Any]:
    return [s for s in families[family].samples if s.name == name] if family in families else []


def sdk_bundles() -> tuple[Any, list[dict[str, Any]]]:
    """A tracer whose spans are rebuilt in process (BundleSpanProcessor), and its bundles."""
    out: list[dict[str, Any]] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(out.append))
    return provider, out


# -- empty records ---------------------------------------------------------------------------------


def test_window_segment_event_without_attributes_is_not_an_empty_segment(start_processor):
    processor = start_processor()
    response = post(processor, [envelope("ctx-seg", 1), stage(2, "context.budget", "ctx-seg", {
        "context.budget.id": "b1", "context.window.id": "w1"}, events=[
        ("context.window.segment", {}),
        ("context.window.segment", {"context.window.segment": "history",
                                    "context.window.order": 1})])])
    assert response.partial_success.rejected_spans == 0
    assert "event context.window.segment: lacks context.window.segment: event dropped" in \
        response.partial_success.error_message
    (bundle,) = bundles(processor)
    (budget,) = bundle["context_budgets"]
    assert budget["window_segments"] == [{"segment": "history", "order": 1}]
    assert bundle["context_windows"][0]["segments"] == [{"segment": "history", "order": 1}]
    assert ("event_dropped", "context.window.segment") in repairs(bundle)
    assert bundle["rebuild"]["status"] == "partial"
    assert bundle["rebuild"]["partial_reasons"] == ["repaired"]


def test_omitted_item_without_a_reason_is_not_an_omitted_ref_without_one(start_processor):
    processor = start_processor()
    post(processor, [envelope("ctx-omit", 1), stage(2, "context.selection", "ctx-omit", {
        "context.selection.id": "s1", "context.selection.candidate_count": 3}, events=[
        ("context.item.omitted", {"context.item.id": "i1"}),
        ("context.item.omitted", {"context.item.id": "i2", "context.omission.reason": "budget"}),
        ("context.item.selected", {"context.item.id": "i3"})])])
    (bundle,) = bundles(processor)
    (selection,) = bundle["context_selections"]
    assert selection["omitted_item_refs"] == [{"item_id": "i2", "reason": "budget"}]
    assert all("reason" in ref for ref in selection["omitted_item_refs"])
    assert selection["selected_item_refs"] == ["i3"]
    assert ("event_dropped", "context.item.omitted") in repairs(bundle)


# -- enums -----------------------------------------------------------------------------------------


def test_enum_values_are_matched_ignoring_case_or_made_custom_and_never_reach_labels(
        start_processor):
    processor = start_processor()
    response = post(processor, [
        envelope("ctx-enum", 1, scope="conversation"),
        stage(2, "context.selection", "ctx-enum", {"context.selection.id": "s1"}, events=[
            ("context.item.omitted", {"context.item.id": "i1", "context.item.kind": "web_page",
                                      "context.omission.reason": "too_long"}),
            ("context.item.omitted", {"context.item.id": "i2", "context.item.kind": "tool_result",
                                      "context.omission.reason": "BUDGET",
                                      "context.item.token_estimate": 40}),
            ("context.missing.detected", {"context.missing.id": "m1",
                                          "context.missing.severity": "critical"})])])
    message = response.partial_success.error_message
    assert response.partial_success.rejected_spans == 0
    assert "attribute context.omission.reason=BUDGET: matched ignoring case: budget" in message
    (bundle,) = bundles(processor)
    assert bundle["context_envelope"]["scope"] == "custom"
    (selection,) = bundle["context_selections"]
    assert selection["omitted_item_refs"] == [{"item_id": "i1", "reason": "custom"},
                                              {"item_id": "i2", "reason": "budget"}]
    kinds = {i["item_id"]: i.get("context_kind") for i in bundle["context_items"]}
    assert kinds == {"i1": "custom", "i2": "tool_result"}
    (gap,) = bundle["missing_context"]
    assert gap["missing_id"] == "m1" and "severity" not in gap  # severity has no custom
    received = {r["received"]: r["kind"] for r in bundle["rebuild"]["repairs"]}
    assert received == {"conversation": "enum_custom", "web_page": "enum_custom",
                        "too_long": "enum_custom", "BUDGET": "enum_case",
                        "critical": "enum_dropped"}

    get = processor.metrics.contract.value
    wait_for(lambda: get("context.envelopes", ("custom", AGENT, "partial")) == 1,
             message="the envelope counted")
    text, families = metrics(processor)
    omitted = {(s.labels["kind"], s.labels["reason"]): s.value
               for s in samples(families, "context_items_omitted", "context_items_omitted_total")}
    assert omitted == {("custom", "custom"): 1.0, ("tool_result", "budget"): 1.0}
    tokens = {s.labels["reason"]: s.value for s in samples(
        families, "context_omitted_tokens", "context_omitted_tokens_total")}
    assert tokens == {"budget": 40.0}
    severities = {s.labels["severity"]: s.value for s in samples(
        families, "context_missing_detected", "context_missing_detected_total")}
    assert severities == {"unknown": 1.0}
    for sent in ("BUDGET", "too_long", "critical", "conversation", "web_page"):
        assert f'"{sent}"' not in text

    from otel_agent_context._table import ATTRIBUTES  # the registry, as generated

    severity = ATTRIBUTES["context.missing.severity"]
    assert not severity.has_custom and "custom" not in severity.members
    for name in ("context.scope", "context.omission.reason", "context.item.kind"):
        assert ATTRIBUTES[name].has_custom


# -- numbers ---------------------------------------------------------------------------------------


def _ratios(cid: str, trace: int, utilization: float, coverage: float) -> list[Span]:
    return [
        envelope(cid, 2, trace=trace),
        stage(2, "context.budget", cid, {"context.budget.id": f"{cid}-b",
                                         "context.budget.target": "model",
                                         "context.budget.utilization": utilization},
              trace=trace),
        stage(3, "context.compaction", cid, {"context.compaction.id": f"{cid}-c",
                                             "context.compaction.method": "rolling_summary",
                                             "context.compaction.coverage": coverage},
              trace=trace),
    ]


def test_non_finite_ratios_reach_neither_the_bundle_nor_the_histograms(start_processor):
    processor = start_processor()
    response = post_json(processor, [
        *_ratios("ctx-nan", 0xA, math.nan, math.inf),
        *_ratios("ctx-inf", 0xB, -math.inf, math.nan),
        *_ratios("ctx-ok", 0xC, 0.5, 0.75),
    ])
    message = response["partialSuccess"]["errorMessage"]
    assert "attribute context.budget.utilization=nan: not a finite number: dropped" in message
    assert "attribute context.compaction.coverage=inf: not a finite number: dropped" in message
    found = by_id(bundles(processor, 3))
    for cid in ("ctx-nan", "ctx-inf"):
        (budget,) = found[cid]["context_budgets"]
        (compaction,) = found[cid]["context_compactions"]
        assert "utilization" not in budget and "coverage" not in compaction
        assert {("non_finite", "context.budget.utilization"),
                ("non_finite", "context.compaction.coverage")} <= set(repairs(found[cid]))
    assert found["ctx-ok"]["context_budgets"][0]["utilization"] == 0.5
    assert found["ctx-ok"]["context_compactions"][0]["coverage"] == 0.75
    written = b"".join(p.read_bytes() for p in processor.config.out_dir.glob("bundles-*.jsonl"))
    assert b"NaN" not in written and b"Infinity" not in written and b":null" not in written

    wait_for(lambda: processor.metrics.contract.value(
        "context.envelopes", ("turn", AGENT, "complete")) == 1, message="the metrics")
    _, families = metrics(processor)
    for family, expected in (("context_budget_utilization_ratio", 0.5),
                             ("context_compaction_coverage_ratio", 0.75)):
        (total,) = samples(families, family, f"{family}_sum")
        (count,) = samples(families, family, f"{family}_count")
        assert math.isfinite(total.value) and total.value == expected, family
        assert count.value == 1, family


# -- events ----------------------------------------------------------------------------------------


def test_item_updated_applies_field_by_field_the_latest_update_winning(start_processor):
    processor = start_processor()
    first = at(stage(2, "context.surface", "ctx-upd", {"context.surface.id": "s1"}, events=[
        ("context.item.added", {"context.item.id": "i1", "context.item.kind": "tool_result",
                                "context.item.token_estimate": 10}),
        ("context.item.updated", {"context.item.id": "i1", "context.item.kind": "file_excerpt"}),
        ("context.item.updated", {"context.item.id": "i1", "context.item.kind": "user_message",
                                  "context.item.token_estimate": 20})]),
        T0 + 10, T0 + 30, T0 + 20)  # the last update sent is not the latest
    second = at(stage(3, "context.surface", "ctx-upd", {"context.surface.id": "s2"}, events=[
        ("context.item.updated", {"context.item.id": "i1", "context.item.freshness": "stale"}),
        ("context.item.updated", {"context.item.id": "i1",
                                  "context.item.kind": "system_prompt"})]),
        T0 + 25, T0 + 5)
    post(processor, [second, envelope("ctx-upd", 2), first])
    (bundle,) = bundles(processor)
    (item,) = bundle["context_items"]
    assert item == {"item_id": "i1", "context_kind": "file_excerpt", "token_estimate": 20,
                    "freshness": "stale"}


def test_item_updated_source_fields_too_the_latest_update_winning(start_processor):
    """Each source field and each native mapping is a field of its own."""
    processor = start_processor()
    surface = at(stage(2, "context.surface", "ctx-src", {"context.surface.id": "s1"}, events=[
        ("context.item.added", {"context.item.id": "i1", "context.source.uri": "file:///v1",
                                "context.source.native.a2a.task_id": "T1",
                                "mcp.resource.uri": "mcp://r"}),
        ("context.item.updated", {"context.item.id": "i1", "context.source.uri": "file:///v3",
                                  "context.source.native.a2a.task_id": "T3"}),
        ("context.item.updated", {"context.item.id": "i1", "context.source.uri": "file:///v2",
                                  "context.source.native.a2a.task_id": "T2"}),
        ("context.item.added", {"context.item.id": "i2"}),
        ("context.item.updated", {"context.item.id": "i2", "context.source.uri": "file:///b3"}),
        ("context.item.updated", {"context.item.id": "i2", "context.source.uri": "file:///b2"})]),
        T0 + 10, T0 + 30, T0 + 20, T0 + 10, T0 + 30, T0 + 20)
    post(processor, [envelope("ctx-src", 1), surface])
    (bundle,) = bundles(processor)
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["i1"]["source_refs"] == [{"uri": "file:///v3", "external_mappings": {
        "a2a.task_id": "T3", "mcp.resource_uri": "mcp://r"}}]
    assert items["i2"]["source_refs"] == [{"uri": "file:///b3"}]


def test_an_event_without_a_time_is_dated_at_its_span_start(start_processor):
    processor = start_processor()
    root = at(envelope("ctx-time", 1, events=[
        ("context.missing.detected", {"context.missing.id": "m1"})]), 0)
    assembly = at(stage(2, "context.assembly", "ctx-time", {
        "context.assembly.id": "a1", "context.assembly.block_count": 1}, events=[
        ("context.assembly.block", {"context.block.index": 0, "context.item.id": "i1"}),
        ("context.injection.applied", {"context.injection.id": "inj-1",
                                       "context.injection.target": "model"})]), 0, 0)
    post(processor, [root, assembly])
    (bundle,) = bundles(processor)
    assert bundle["missing_context"][0]["created_at"] == ns_to_rfc3339(T0)
    (injection,) = bundle["context_injections"]
    assert injection["created_at"] == ns_to_rfc3339(assembly.start_time_unix_nano)
    times = [e["occurred_at"] for e in bundle["context_events"]]
    assert times and not any(t.startswith("1970") for t in times)
    assert repairs(bundle).count(("event_time", "context.injection.applied")) == 1
    assert repairs(bundle).count(("event_time", "context.missing.detected")) == 1


def _check_missing(bundle: dict[str, Any]) -> None:
    (gap,) = bundle["missing_context"]
    assert gap["missing_id"] == "m1" and gap["status"] == "requested"


def _check_summary(bundle: dict[str, Any]) -> None:
    assert [s["summary_id"] for s in bundle["context_summaries"]] == ["sum-1"]


def _check_sources(bundle: dict[str, Any]) -> None:
    assert bundle["context_compactions"][0]["source_item_refs"] == ["i1"]


def _check_blocks(bundle: dict[str, Any]) -> None:
    (assembly,) = bundle["context_assemblies"]
    assert assembly["ordered_blocks"] == [{"index": 1, "item_id": "i1"}]
    assert assembly["source_item_refs"] == ["i1"]


def _check_removed(bundle: dict[str, Any]) -> None:
    (surface,) = bundle["context_surfaces"]
    assert surface["removed_item_refs"] == ["i2"] and surface["item_refs"] == ["i1"]


def _check_injections(bundle: dict[str, Any]) -> None:
    assert [i["injection_id"] for i in bundle["context_injections"]] == ["inj-1"]
    assert bundle["context_envelope"]["injection_refs"] == ["inj-1"]


# (event, span that carries it, the event lacking its id, the well-formed events, check)
LACKING = {
    "missing.requested": ("context.missing.requested", None,
                          {"context.missing.requested_from": "user"},
                          [("context.missing.detected", {"context.missing.id": "m1"}),
                           ("context.missing.requested", {"context.missing.id": "m1"})],
                          _check_missing),
    "summary.created": ("context.summary.created", "context.compaction",
                        {"context.summary.token_estimate": 12},
                        [("context.summary.created", {"context.summary.id": "sum-1"})],
                        _check_summary),
    "compaction.source": ("context.compaction.source", "context.compaction",
                          {"context.compaction.covered": True},
                          [("context.compaction.source", {"context.item.id": "i1"})],
                          _check_sources),
    "assembly.block-item": ("context.assembly.block", "context.assembly",
                            {"context.block.index": 0},
                            [("context.assembly.block", {"context.block.index": 1,
                                                         "context.item.id": "i1"})],
                            _check_blocks),
    "assembly.block-index": ("context.assembly.block", "context.assembly",
                             {"context.item.id": "i9"},
                             [("context.assembly.block", {"context.block.index": 1,
                                                          "context.item.id": "i1"})],
                             _check_blocks),
    "item.removed": ("context.item.removed", "context.surface", {},
                     [("context.item.added", {"context.item.id": "i1"}),
                      ("context.item.added", {"context.item.id": "i2"}),
                      ("context.item.removed", {"context.item.id": "i2"})],
                     _check_removed),
    "injection.applied": ("context.injection.applied", "chat gpt-x",
                          {"context.injection.target": "model"},
                          [("context.injection.applied", {"context.injection.id": "inj-1"})],
                          _check_injections),
}


@pytest.mark.parametrize("case", sorted(LACKING))
def test_an_event_lacking_its_id_is_dropped_alone(start_processor, case):
    name, host, lacking, good, check = LACKING[case]
    processor = start_processor()
    cid = f"ctx-{case}"
    selection = stage(2, "context.selection", cid, {"context.selection.id": "keep"},
                      events=[("context.item.selected", {"context.item.id": "kept-1"})])
    if host is None:  # on the envelope span itself
        spans = [envelope(cid, 1, scope="task", events=[*good[:1], (name, lacking), *good[1:]]),
                 selection]
    else:
        spans = [envelope(cid, 2, scope="task"), selection,
                 stage(3, host, cid, {}, events=[*good[:1], (name, lacking), *good[1:]])]
    response = post(processor, spans)
    assert response.partial_success.rejected_spans == 0
    assert f"event {name}: lacks" in response.partial_success.error_message
    (bundle,) = bundles(processor)
    assert bundle["context_envelope"]["scope"] == "task"
    assert bundle["rebuild"]["partial_reasons"] == ["repaired"]
    assert [k for k, _ in repairs(bundle)] == ["event_dropped"]
    assert bundle["context_selections"][0]["selected_item_refs"] == ["kept-1"]
    check(bundle)


# -- what the sender and the operator are told ---------------------------------------------------


def test_serve_tells_the_sender_each_repair_and_warns_the_operator(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    log = ready.with_suffix(f".{len(SPAWNED)}.log")  # where processor_testkit.serve logs
    process, addresses = serve(["--out", str(tmp_path / "out"), "--otlp-grpc", "off",
                                "--otlp-http", "127.0.0.1:0", "--metrics", "off"], ready)
    odd = 0x51
    spans = [envelope("ctx-told", 1), span(TRACE, odd, "context.selection", {
        "context.id": "ctx-told", "context.selection.candidate_count": "3"}, parent=1, events=[
        ("context.item.omitted", {"context.item.id": "i1", "context.omission.reason": "too_long"}),
        ("context.item.omitted", {"context.item.id": "i2"})])]
    response = post(None, spans, service="billing-agent", address=addresses["otlp_http"])
    assert response.partial_success.rejected_spans == 0
    message = response.partial_success.error_message
    assert (f"span {odd:016x} event context.item.omitted attribute context.omission.reason="
            "too_long: not a value of the enum: recorded as custom") in message
    assert f"span {odd:016x} event context.item.omitted: lacks context.omission.reason: " \
        "event dropped" in message
    assert f"span {odd:016x} attribute context.selection.candidate_count=3: a numeric " \
        "string: converted to an int" in message
    warned = wait_for(lambda: [line for line in log.read_text().splitlines()
                               if " WARNING " in line and "off-spec telemetry" in line],
                      message="the WARNING")
    for part in ("billing-agent: 1 enum_custom", "billing-agent: 1 event_dropped",
                 "billing-agent: 1 type"):
        assert part in warned[0], warned
    process.terminate()
    assert process.wait(30) == 0


# -- one trace per envelope ------------------------------------------------------------------------


def test_a_span_of_another_trace_is_left_out_in_process() -> None:
    provider, out = sdk_bundles()
    tracer = provider.get_tracer("boundary-test")
    cid = "ctx-one-trace"
    with tracer.start_as_current_span("invoke_agent", attributes={
            "context.id": cid, "context.scope": "turn", "context.span_count": 1}) as root:
        with tracer.start_as_current_span("context.selection", attributes={
                "context.id": cid, "context.selection.id": "sel"}) as sel:
            sel.add_event("context.item.selected", {"context.item.id": "i1"})
        stray = tracer.start_span("context.selection", context=Context(), attributes={
            "context.id": cid, "context.selection.id": "sel-stray"})  # a new root: new trace
        stray.add_event("context.item.selected", {"context.item.id": "stray-1"})
        stray.end()
    provider.shutdown()
    (bundle,) = out
    trace = format(root.get_span_context().trace_id, "032x")
    assert format(stray.get_span_context().trace_id, "032x") != trace
    assert {r["trace_id"] for r in bundle["context_envelope"]["telemetry_refs"]} == {trace}
    assert [s["selection_id"] for s in bundle["context_selections"]] == ["sel"]
    assert [i["item_id"] for i in bundle["context_items"]] == ["i1"]
    (left_out,) = bundle["rebuild"]["repairs"]
    assert left_out["kind"] == "foreign_trace"
    assert left_out["span_id"] == format(stray.get_span_context().span_id, "016x")
    assert bundle["rebuild"]["status"] == "partial"
    assert "repaired" in bundle["rebuild"]["partial_reasons"]


def test_processor_second_trace_with_the_same_context_id_makes_no_second_bundle(
        start_processor, caplog: pytest.LogCaptureFixture) -> None:
    """The owner complete first, in the same request: the stray span is listed in its
    bundle (before: counted and told, in no bundle); later, once the owner's bundle is
    written, it is told to the sender, counted and logged: no bundle can list it then."""
    processor = start_processor()
    other = 0xD1FF
    reply = post(processor, [
        envelope("ctx-two-traces", 1),
        stage(2, "context.selection", "ctx-two-traces", {"context.selection.id": "s"}),
        stage(3, "context.selection", "ctx-two-traces", {"context.selection.id": "x"},
              trace=other)])
    assert "ctx-two-traces lives in another trace" in reply.partial_success.error_message
    (bundle,) = bundles(processor)
    (left_out,) = bundle["rebuild"]["repairs"]
    assert (left_out["kind"], left_out["span_id"]) == ("foreign_trace", f"{3:016x}")
    assert "repaired" in bundle["rebuild"]["partial_reasons"]
    with caplog.at_level(logging.WARNING):
        reply = post(processor, [stage(4, "context.selection", "ctx-two-traces",
                                       {"context.selection.id": "y"}, trace=other + 1)])
        processor.pipeline.problems.flush(force=True)
    assert f"span {4:016x}: ctx-two-traces lives in another trace: span left out" in \
        reply.partial_success.error_message
    assert f"{AGENT}: 1 foreign_trace" in caplog.text
    processor.stop()
    written = [b for b in read_bundles(processor.config.out_dir)
               if b["context_envelope"]["context_id"] == "ctx-two-traces"]
    assert len(written) == 1, [b["rebuild"] for b in written]
    assert processor.metrics.self.get("context_processor_repairs_total",
                                      ("foreign_trace",)) == 2


def test_which_trace_an_envelope_keeps_does_not_depend_on_arrival_order() -> None:
    """No envelope span: the first span's trace wins, the first by time, stage and id, and
    then by trace id: never by arrival."""
    def views() -> list[SpanView]:
        return [SpanView(f"{trace:032x}", f"{2:016x}", "context.selection", T0, T0 + 10,
                         {"context.id": "ctx-tie", "context.selection.id": f"sel-{trace}"})
                for trace in (0xA, 0xB)]

    forward, backward = views(), views()[::-1]
    first, second = rebuild_envelope(forward), rebuild_envelope(backward)
    assert orjson.dumps(first) == orjson.dumps(second)
    assert [s["selection_id"] for s in first["context_selections"]] == [f"sel-{0xA}"]


# -- values only one of the two paths can carry ------------------------------------------------


def _kv(key: str, *elements: Any) -> KeyValue:
    out = KeyValue(key=key)
    array = out.value.array_value
    array.SetInParent()
    for element in elements:
        value = array.values.add()
        if isinstance(element, bytes):
            value.bytes_value = element
        elif isinstance(element, dict):
            value.kvlist_value.SetInParent()
            for k, v in element.items():
                value.kvlist_value.values.add(key=k, value=AnyValue(string_value=v))
        else:
            value.string_value = element
    return out


def test_an_array_holding_a_kvlist_or_bytes_is_repaired_not_made_text(start_processor):
    processor = start_processor()
    root = envelope("ctx-array", 0)
    root.attributes.extend([_kv("context.actor_refs", {"a": "x"}),
                            _kv("context.policy_refs", "policy:P1", b"\x00\xff"),
                            _kv("context.runtime_refs", "session:s1")])
    response = post(processor, [root])
    assert "attribute context.actor_refs=" in response.partial_success.error_message
    (bundle,) = bundles(processor)
    env = bundle["context_envelope"]
    assert "actor_refs" not in env and "policy_refs" not in env
    assert env["runtime_refs"] == ["session:s1"]
    assert set(repairs(bundle)) == {("type", "context.actor_refs"),
                                    ("type", "context.policy_refs")}
    assert bundle["rebuild"]["status"] == "partial"


def test_nested_kvlists_are_encoded_once_not_escaped_at_every_level(start_processor):
    """A few hundred bytes of kvlists nested 28 deep (upb allows it inside a request): each
    level was JSON text escaped again by the one above, ~4**(n/2) characters (n=30: the
    processor killed for memory). Now one JSON encoding of the whole, as long as its input."""
    from otel_agent_context.processor._wire import any_value

    nested = KeyValue(key="context.producer")
    value = nested.value
    for _ in range(28):
        value = value.kvlist_value.values.add(key="a").value
    value.string_value = "x"
    text = any_value(nested.value, "kvlist_value")
    assert len(text) < 400 and orjson.loads(text)["a"]["a"]["a"]["a"]["a"]["a"]["a"]
    processor = start_processor()
    root = envelope("ctx-nested", 0)
    root.attributes.append(nested)
    response = post(processor, [root])
    assert "attribute context.producer=" in response.partial_success.error_message
    (bundle,) = bundles(processor)
    assert set(repairs(bundle)) == {("type", "context.producer")}
    jsonschema.validate(bundle, SCHEMA)


def test_sdk_values_otlp_cannot_carry_are_dropped_as_the_processor_drops_them() -> None:
    """The SDK keeps a dict, bytes, None or a Python int of any size as an attribute: in
    process they must neither become text nor raise (which loses the whole envelope)."""
    odd = {"context.producer": {"name": "x"}, "context.parent_id": b"ctx-parent",
           "context.lifecycle": None}
    provider, out = sdk_bundles()
    tracer = provider.get_tracer("boundary-test")
    with tracer.start_as_current_span("invoke_agent", attributes={
            "context.id": "ctx-sdk", "context.scope": "turn", "context.span_count": 1, **odd}):
        tracer.start_span("context.budget", attributes={
            "context.id": "ctx-sdk", "context.budget.id": "b1",
            "context.budget.utilization": 10**400, "context.budget.max_tokens": 10**5000,
            "context.budget.actual_tokens": 900}).end()
    provider.shutdown()
    (bundle,) = out
    jsonschema.validate(orjson.loads(orjson.dumps(bundle)), SCHEMA)
    env = bundle["context_envelope"]
    assert not {"producer", "parent_id", "lifecycle"} & set(env)
    assert bundle["context_budgets"][0] == {
        "budget_id": "b1", "actual_tokens": 900,
        "created_at": bundle["context_budgets"][0]["created_at"],
        "completed_at": bundle["context_budgets"][0]["completed_at"]}
    fields = {r["field"]: r for r in bundle["rebuild"]["repairs"]}
    assert set(fields) == {*odd, "context.budget.utilization", "context.budget.max_tokens"}
    assert all(r["kind"] == "type" and r["action"].endswith("dropped") for r in fields.values())
    assert len(fields["context.budget.max_tokens"]["received"]) <= 121

    # the same envelope span over OTLP (a kvlist and bytes) loses the same fields
    root = envelope("ctx-sdk", 0)
    root.attributes.extend([
        KeyValue(key="context.producer", value=AnyValue(kvlist_value={"values": [
            KeyValue(key="name", value=AnyValue(string_value="x"))]})),
        KeyValue(key="context.parent_id", value=AnyValue(bytes_value=b"ctx-parent"))])
    body = request([root]).SerializeToString()
    (accepted,) = decode_request(body, parse_protobuf(body)).accepted
    assert not {"producer", "parent_id"} & set(rebuild_envelope([accepted.view])[
        "context_envelope"])


def test_in_process_rebuild_of_real_sdk_spans_equals_the_processor_path() -> None:
    """The same spans, exported over OTLP and rebuilt in process, give the same bundle."""
    provider, out = sdk_bundles()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("boundary-test")
    with tracer.start_as_current_span("invoke_agent", attributes={
            "context.id": "ctx-same", "context.scope": "Turn", "context.span_count": 1}):
        sel = tracer.start_span("context.selection", attributes={
            "context.id": "ctx-same", "context.selection.candidate_count": "2"})
        sel.add_event("context.item.omitted", {"context.item.id": "i1",
                                               "context.omission.reason": "Budget"})
        sel.add_event("context.item.omitted", {"context.item.id": "i2"})
        sel.end()
    provider.shutdown()
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    views = [a.view for a in decode_request(body, parse_protobuf(body)).accepted]
    (local,) = out
    (remote,) = rebuild(views)
    assert orjson.dumps(local) == orjson.dumps(remote)
    assert local["context_envelope"]["scope"] == "turn"
    assert local["context_selections"][0]["omitted_item_refs"] == [
        {"item_id": "i1", "reason": "budget"}]
    assert rebuild([view_from_readable_span(s) for s in memory.get_finished_spans()]) == [local]


# -- red team: inputs no emitter should send, none of which may break a bundle -------------------


def _with(values: dict[str, Any]) -> list[Span]:
    return [envelope("ctx-red", 1, **values.get("envelope", {})),
            stage(2, "context.selection", "ctx-red", {"context.selection.id": "s1",
                                                      **values.get("selection", {})}, events=[
                ("context.item.selected", {"context.item.id": "good-1"}),
                ("context.item.omitted", {"context.item.id": "good-2",
                                          "context.omission.reason": "budget"}),
                *values.get("events", [])])]


RED_TEAM = {
    "huge strings": {"envelope": {"context.producer": "p" * 1_000_000}, "events": [
        ("context.item.omitted", {"context.item.id": "x" * 200_000,
                                  "context.omission.reason": "r" * 100_000})]},
    "unicode and NUL in ids": {"events": [
        ("context.item.selected", {"context.item.id": "\u0000id\u202e\U0001f600",
                                   "context.item.kind": "T\u0130OL_RESULT"}),
        ("context.item.omitted", {"context.item.id": "\u0000",
                                  "context.omission.reason": "\u212a"})]},
    "negative counts": {"envelope": {"context.span_count": -1},
                        "selection": {"context.selection.candidate_count": -7,
                                      "context.selection.selected_count": -1}},
    "64-bit extremes": {"selection": {"context.selection.candidate_count": -(1 << 63),
                                      "context.selection.omitted_count": (1 << 63) - 1},
                        "events": [("context.item.selected", {
                            "context.item.id": "big", "context.item.token_estimate": (1 << 63) - 1,
                            "context.selection.score": 1.7976931348623157e308})]},
    "numbers as text beyond 64 bits": {"selection": {
        "context.selection.candidate_count": str(1 << 64),
        "context.selection.omitted_count": "1" * 5_000}},
    "empty strings": {"envelope": {"context.scope": "", "context.producer": ""},
                      "events": [("context.item.selected", {"context.item.id": ""}),
                                 ("context.budget.truncated", {"context.item.id": "",
                                                               "context.window.segment": ""})]},
}


@pytest.mark.parametrize("case", sorted(RED_TEAM))
def test_red_team_inputs_make_valid_bundles_and_keep_the_good_records(case):
    body = request(_with(RED_TEAM[case])).SerializeToString()
    decoded = decode_request(body, parse_protobuf(body))
    assert decoded.rejected == 0 and len(decoded.accepted) == 2
    assert len(decoded.error_message()) < 2_000  # repairs are named, values cut short
    bundle = rebuild_envelope([a.view for a in decoded.accepted])
    jsonschema.validate(orjson.loads(orjson.dumps(bundle)), SCHEMA)
    (selection,) = bundle["context_selections"]
    assert "good-1" in selection["selected_item_refs"]
    assert {"item_id": "good-2", "reason": "budget"} in selection["omitted_item_refs"]


def test_a_repeated_key_takes_its_last_occurrence_and_is_reported() -> None:
    # OTLP keys are unique in one list; a repeat is the sender's bug, said in the bundle. The
    # last occurrence decides, checked as any value: an unusable last value leaves none (the
    # earlier "draft" does not come back).
    root = envelope("ctx-dup", 0)
    root.attributes.extend([KeyValue(key="context.lifecycle", value=AnyValue(string_value="draft")),
                            KeyValue(key="context.lifecycle", value=AnyValue(string_value="x"))])
    root.attributes.append(KeyValue(key="context.scope", value=AnyValue(string_value="Task")))
    root.attributes.append(KeyValue(key="context.producer", value=AnyValue(string_value="a")))
    root.attributes.append(KeyValue(key="context.producer", value=AnyValue(string_value="b")))
    body = request([root]).SerializeToString()
    (accepted,) = decode_request(body, parse_protobuf(body)).accepted
    bundle = rebuild_envelope([accepted.view])
    jsonschema.validate(orjson.loads(orjson.dumps(bundle)), SCHEMA)
    envelope_record = bundle["context_envelope"]
    assert envelope_record["scope"] == "task"
    assert "lifecycle" not in envelope_record  # "x" has no custom: dropped, "draft" not kept
    assert envelope_record["producer"] == "b"
    assert sorted((r["kind"], r["field"]) for r in bundle["rebuild"]["repairs"]) == [
        ("duplicate_key", "context.lifecycle"), ("duplicate_key", "context.producer"),
        ("duplicate_key", "context.scope"),  # envelope() sent "turn" before "Task"
        ("enum_case", "context.scope"), ("enum_dropped", "context.lifecycle")]
    assert bundle["rebuild"]["status"] == "partial"


def test_a_repeated_key_whose_earlier_occurrence_was_unusable_is_reported_too() -> None:
    # The order the sender used must not hide the repeat: an unusable value before a usable
    # one (and a value-less KeyValue after a usable one, which must leave none) is a
    # duplicate_key as much as two usable values are.
    root = envelope("ctx-dup2", 0)
    root.attributes.extend([KeyValue(key="context.lifecycle", value=AnyValue(string_value="x")),
                            KeyValue(key="context.lifecycle",
                                     value=AnyValue(string_value="draft")),
                            KeyValue(key="context.producer", value=AnyValue(string_value="a")),
                            KeyValue(key="context.producer", value=AnyValue())])
    body = request([root]).SerializeToString()
    (accepted,) = decode_request(body, parse_protobuf(body)).accepted
    bundle = rebuild_envelope([accepted.view])
    jsonschema.validate(orjson.loads(orjson.dumps(bundle)), SCHEMA)
    assert bundle["context_envelope"]["lifecycle"] == "draft"
    assert "producer" not in bundle["context_envelope"]  # the last occurrence had no value
    kinds = sorted((r["kind"], r["field"]) for r in bundle["rebuild"]["repairs"])
    assert ("duplicate_key", "context.lifecycle") in kinds
    assert ("duplicate_key", "context.producer") in kinds


def test_a_span_id_sent_again_with_other_content_keeps_the_first_and_says_so(
        start_processor) -> None:
    processor = start_processor()
    first = stage(2, "context.selection", "ctx-twice", {"context.selection.id": "s1"}, events=[
        ("context.item.selected", {"context.item.id": "a"})])
    retry = stage(2, "context.selection", "ctx-twice", {"context.selection.id": "s1"}, events=[
        ("context.item.selected", {"context.item.id": "a"})])
    other = stage(2, "context.selection", "ctx-twice", {"context.selection.id": "s1"}, events=[
        ("context.item.selected", {"context.item.id": "b"})])
    post(processor, [first])
    post(processor, [retry])  # a client retry: the same content, nothing to say
    answer = post(processor, [other])
    assert "sent again with other content" in answer.partial_success.error_message
    post(processor, [envelope("ctx-twice", 1)])
    (bundle,) = bundles(processor)
    jsonschema.validate(bundle, SCHEMA)
    assert bundle["context_selections"][0]["selected_item_refs"] == ["a"]
    assert repairs(bundle) == [("duplicate_span", "span_id")]
    text, families = metrics(processor)
    assert [s.value for s in samples(families, "context_processor_repairs",
                                      "context_processor_repairs_total")
            if s.labels.get("kind") == "duplicate_span"] == [1.0]


def test_a_span_id_twice_with_other_content_in_process_is_said_too() -> None:
    def view(item: str) -> SpanView:
        return SpanView(f"{TRACE:032x}", f"{2:016x}", "context.selection", T0, T0 + 5,
                        {"context.id": "c", "context.selection.id": "s1"},
                        [EventView("context.item.selected", T0 + 1, {"context.item.id": item})],
                        parent_span_id=f"{1:016x}")
    bundle = rebuild_envelope([view("a"), view("a"), view("b")])
    assert [(r["kind"], r["received"]) for r in bundle["rebuild"]["repairs"]] == [
        ("duplicate_span", f"{2:016x}")]
    assert bundle["context_selections"][0]["selected_item_refs"] == ["a"]
    assert rebuild_envelope([view("a"), view("a")])["rebuild"].get("repairs") is None


def test_items_spans_nested_in_items_spans_keep_their_events() -> None:
    trace = f"{TRACE:032x}"
    root = SpanView(trace, f"{1:016x}", "invoke_agent a", T0, T0 + 100,
                    {"context.id": "c", "context.scope": "turn", "context.span_count": 3})
    selection = SpanView(trace, f"{2:016x}", "context.selection", T0 + 1, T0 + 50,
                         {"context.id": "c", "context.selection.id": "s1"},
                         [EventView("context.item.selected", T0 + 2, {"context.item.id": "a"})],
                         parent_span_id=f"{1:016x}")
    part = SpanView(trace, f"{3:016x}", "context.items", T0 + 3, T0 + 4,
                    {"context.id": "c", "context.items.part": 1},
                    [EventView("context.item.selected", T0 + 3, {"context.item.id": "b"})],
                    parent_span_id=f"{2:016x}")
    nested = SpanView(trace, f"{4:016x}", "context.items", T0 + 5, T0 + 6,
                      {"context.id": "c", "context.items.part": 2},
                      [EventView("context.item.omitted", T0 + 5, {
                          "context.item.id": "c", "context.omission.reason": "budget"})],
                      parent_span_id=f"{3:016x}")
    bundle = rebuild_envelope([nested, part, selection, root])
    (record,) = bundle["context_selections"]
    assert record["selected_item_refs"] == ["a", "b"]
    assert record["omitted_item_refs"] == [{"item_id": "c", "reason": "budget"}]


def test_an_envelope_span_without_a_span_count_keeps_the_stage_spans_after_it_in_its_request(
        start_processor):
    """Off-spec: no ``context.span_count``, the envelope span first in the request (a foreign
    emitter's order). Its stage spans later in the same request join it (they were refused as
    late), and the bundle is written with that request, without waiting for the timeout; a
    stage span of a later request is late, the sender told."""
    processor = start_processor()
    root = span(TRACE, 1, f"invoke_agent {AGENT}", {
        "context.id": "ctx-nocount", "context.scope": "turn", "gen_ai.agent.name": AGENT},
        start=T0, duration=10_000)
    response = post_json(processor, [
        root,
        stage(2, "context.selection", "ctx-nocount", {"context.selection.id": "s1"}, events=[
            ("context.item.selected", {"context.item.id": "kb:1"}),
            ("context.item.omitted", {"context.item.id": "kb:2",
                                      "context.omission.reason": "BUDGET"})]),
        stage(3, "context.budget", "ctx-nocount", {"context.budget.id": "b1",
                                                    "context.budget.max_tokens": 1000})])
    assert "written before it came" not in response.get("partialSuccess", {}).get(
        "errorMessage", "")
    (bundle,) = bundles(processor)
    assert [s["selection_id"] for s in bundle["context_selections"]] == ["s1"]
    assert bundle["context_selections"][0]["omitted_item_refs"] == [
        {"item_id": "kb:2", "reason": "budget"}]
    assert [b["budget_id"] for b in bundle["context_budgets"]] == ["b1"]
    assert "no_span_count" in bundle["rebuild"]["partial_reasons"]
    assert "timeout" not in bundle["rebuild"]["partial_reasons"]
    late = post(processor, [stage(4, "context.assembly", "ctx-nocount",
                                  {"context.assembly.id": "a1"})])
    assert "ctx-nocount was written before it came" in late.partial_success.error_message
