"""A third party that follows the contract with nothing but the OpenTelemetry SDK gets the
same bundle: spans below are written from docs/contract.md alone, no project code."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_context import Bundle
from otel_agent_context.rebuild import rebuild, view_from_readable_span

T0 = 1_790_000_000_000_000_000


def _provider(limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _emit_turn(tracer: trace.Tracer, n_omitted: int = 2) -> None:
    env = tracer.start_span("context.envelope", start_time=T0, attributes={
        "context.id": "ctx-raw", "context.scope": "turn", "context.schema_version": "0.1",
        "context.producer": "third-party/1.0", "gen_ai.agent.name": "raw-agent"})
    parent = trace.set_span_in_context(env)
    sel = tracer.start_span("context.selection", parent, start_time=T0 + 10, attributes={
        "context.id": "ctx-raw", "context.selection.id": "sel-1",
        "context.selection.intent": "answer"})
    sel.add_event("context.item.selected", {
        "context.item.id": "doc-1", "context.item.kind": "document_excerpt",
        "context.item.token_estimate": 120, "context.selection.rank": 1,
        "context.selection.score": 0.9, "context.selection.signal.bm25": 7.5,
        "context.source.uri": "kb://a.md", "context.source.selector": "line_range:1-9"},
        timestamp=T0 + 11)
    for i in range(n_omitted):
        sel.add_event("context.item.omitted", {
            "context.item.id": f"doc-{i + 2}", "context.item.kind": "document_excerpt",
            "context.item.token_estimate": 500, "context.omission.reason": "budget",
            "context.omission.detail": "over budget"}, timestamp=T0 + 12 + i)
    sel.set_attributes({"context.selection.candidate_count": n_omitted + 1,
                        "context.selection.selected_count": 1,
                        "context.selection.omitted_count": n_omitted})
    sel.end(end_time=T0 + 20)
    bud = tracer.start_span("context.budget", parent, start_time=T0 + 30, attributes={
        "context.id": "ctx-raw", "context.budget.id": "b-1", "context.budget.target": "model",
        "context.budget.max_tokens": 8192, "context.budget.actual_tokens": 9000,
        "context.budget.overflow": True, "context.budget.overflow_tokens": 808,
        "context.budget.overflow_strategy": "truncate_tail"})
    bud.add_event("context.budget.truncated", {
        "context.item.id": "doc-1", "context.truncation.strategy": "truncate_tail",
        "context.truncation.tokens_before": 120, "context.truncation.tokens_after": 60},
        timestamp=T0 + 31)
    bud.set_attribute("context.id", "ctx-raw")  # last, so span limits never drop it
    bud.end(end_time=T0 + 40)
    env.add_event("context.missing.detected", {
        "context.missing.id": "m-1", "context.missing.severity": "blocking",
        "context.missing.needed_for": "refund", "context.missing.status": "open"},
        timestamp=T0 + 50)
    env.set_attributes({"context.lifecycle": "selected", "context.span_count": 2})
    env.end(end_time=T0 + 60)


def test_raw_sdk_spans_rebuild_into_expected_bundle() -> None:
    provider, exporter = _provider()
    _emit_turn(provider.get_tracer("third-party"))
    (bundle,) = rebuild(view_from_readable_span(s) for s in exporter.get_finished_spans())
    trace_id = bundle["context_envelope"]["telemetry_refs"][0]["trace_id"]
    del bundle["context_envelope"]["telemetry_refs"]
    assert Bundle.from_dict(bundle)  # schema-valid records
    assert bundle == {
        "context_envelope": {
            "context_id": "ctx-raw", "scope": "turn", "schema_version": "0.1",
            "lifecycle": "selected", "created_at": "2026-09-21T14:13:20Z",
            "completed_at": "2026-09-21T14:13:20.00000006Z", "producer": "third-party/1.0",
            "metadata": {"gen_ai.agent.name": "raw-agent"},
            "item_refs": ["doc-1"], "selection_refs": ["sel-1"], "budget_ref": "b-1",
            "missing_context_refs": ["m-1"],
        },
        "context_items": [
            {"item_id": "doc-1", "context_kind": "document_excerpt", "token_estimate": 120,
             "source_refs": [{"uri": "kb://a.md", "selector": "line_range:1-9"}]},
            {"item_id": "doc-2", "context_kind": "document_excerpt", "token_estimate": 500},
            {"item_id": "doc-3", "context_kind": "document_excerpt", "token_estimate": 500},
        ],
        "context_selections": [{
            "selection_id": "sel-1", "intent": "answer", "candidate_count": 3,
            "candidate_item_refs": ["doc-1", "doc-2", "doc-3"], "selected_item_refs": ["doc-1"],
            "omitted_item_refs": [
                {"item_id": "doc-2", "reason": "budget", "detail": "over budget"},
                {"item_id": "doc-3", "reason": "budget", "detail": "over budget"}],
            "ranking_signals": [{"item_id": "doc-1", "rank": 1, "score": 0.9,
                                 "signals": {"bm25": 7.5}}],
            "created_at": "2026-09-21T14:13:20.00000001Z",
            "completed_at": "2026-09-21T14:13:20.00000002Z"}],
        "context_budgets": [{
            "budget_id": "b-1", "target": "model", "max_tokens": 8192, "actual_tokens": 9000,
            "overflow_strategy": "truncate_tail", "overflow": True, "overflow_tokens": 808,
            "truncation_records": [{"item_id": "doc-1", "strategy": "truncate_tail",
                                    "tokens_before": 120, "tokens_after": 60}],
            "created_at": "2026-09-21T14:13:20.00000003Z",
            "completed_at": "2026-09-21T14:13:20.00000004Z"}],
        "missing_context": [{
            "missing_id": "m-1", "needed_for": "refund", "severity": "blocking",
            "status": "open", "created_at": "2026-09-21T14:13:20.00000005Z"}],
        "context_events": [
            {"event_class": c, "occurred_at": t, "context_id": "ctx-raw", "subject_ref": s,
             "trace_id": trace_id, "span_id": sp}
            for c, t, s, sp in [
                ("context.selection.started", "2026-09-21T14:13:20.00000001Z", "selection:sel-1",
                 bundle["context_events"][0]["span_id"]),
                ("context.selection.completed", "2026-09-21T14:13:20.00000002Z",
                 "selection:sel-1", bundle["context_events"][0]["span_id"]),
                ("context.budget.applied", "2026-09-21T14:13:20.00000004Z", "budget:b-1",
                 bundle["context_events"][2]["span_id"]),
                ("context.missing.detected", "2026-09-21T14:13:20.00000005Z", "missing:m-1",
                 bundle["context_events"][3]["span_id"]),
            ]],
        "rebuild": {"status": "complete", "expected_spans": 2, "received_spans": 2,
                    "dropped_events": 0, "dropped_attributes": 0},
    }


def test_rebuild_takes_the_exporters_readable_spans_as_the_readme_says() -> None:
    provider, exporter = _provider()
    _emit_turn(provider.get_tracer("third-party"))
    spans = exporter.get_finished_spans()
    assert rebuild(spans) == rebuild(view_from_readable_span(s) for s in spans)
    assert rebuild(spans)[0]["context_envelope"]["context_id"] == "ctx-raw"


def test_lowered_span_limits_make_the_bundle_partial_with_numbers() -> None:
    # 10 events and 7 attributes a span: the SDK drops silently, the rebuild must not.
    provider, exporter = _provider(SpanLimits(max_events=10, max_span_attributes=7))
    _emit_turn(provider.get_tracer("third-party"), n_omitted=30)
    (bundle,) = rebuild(view_from_readable_span(s) for s in exporter.get_finished_spans())
    info = bundle["rebuild"]
    assert info["status"] == "partial"
    assert info["dropped_events"] == 21  # 31 selection events, 10 kept
    assert info["dropped_attributes"] > 0
    assert "dropped_data" in info["partial_reasons"]
    assert any("dropped 21 events" in n for n in info["notes"])
