"""``events_as="logs"``: the API sends each context event as a log record on its span (the
Logs API with ``event_name``, OTEP 4430) instead of a span event, the envelope span counts
them in ``context.event_count``, and the records rebuild to the same bundle."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from opentelemetry import trace
from opentelemetry._logs import NoOpLoggerProvider
from test_roundtrip import BLOCKED, bundles

from otel_agent_context import AgentContext, Bundle, ContextItem, emit_bundle
from otel_agent_context import _semconv as S
from otel_agent_context._table import EVENTS
from otel_agent_context.testing import CapturedTelemetry

EVENTS_VARIABLE = "OTEL_AGENT_CONTEXT_EVENTS"


def _context_events(spans: list[Any]) -> list[str]:
    return [e.name for s in spans for e in s.events if e.name in EVENTS]


def _envelope_span(spans: list[Any]) -> Any:
    (envelope,) = [s for s in spans if S.CONTEXT_SCOPE in (s.attributes or {})]
    return envelope


def _dated(bundles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bundles without the time of the redaction events the API adds on its own (for
    items whose sensitivity is blocked): dated when emitted, so each run has its own."""
    for bundle in bundles:
        for event in bundle.get("context_events", ()):
            if event["event_class"] == S.EVENT_REDACTION_APPLIED:
                event.pop("occurred_at")
    return bundles


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.data_too_large])
@given(bundle=bundles())
def test_log_events_rebuild_to_the_bundle_span_events_give(bundle: Bundle) -> None:
    spans_tel = CapturedTelemetry(capture_content=True, blocked_sensitivities=[BLOCKED])
    emit_bundle(bundle, spans_tel.agent_context)
    logs_tel = CapturedTelemetry(capture_content=True, blocked_sensitivities=[BLOCKED],
                                 events_as="logs")
    emit_bundle(bundle, logs_tel.agent_context)
    try:
        assert _dated(logs_tel.bundles()) == _dated(spans_tel.bundles())
        spans, logs = logs_tel.spans(), logs_tel.logs()
        assert _context_events(spans) == []  # every context event went as a log record
        assert len(logs) == len(_context_events(spans_tel.spans()))
        envelope = _envelope_span(spans)
        assert envelope.attributes[S.CONTEXT_EVENT_COUNT] == len(logs)
        assert S.CONTEXT_EVENT_COUNT not in _envelope_span(spans_tel.spans()).attributes
    finally:
        spans_tel.shutdown()
        logs_tel.shutdown()


def _turn(ac: AgentContext, tracer: Any) -> None:
    with ac.envelope(agent_name="agent") as env:
        with env.surface() as surface:
            surface.add("doc-1", kind="document_excerpt", token_estimate=10)
        with env.selection() as selection:
            selection.selected("doc-1", rank=1, score=0.5)
            selection.omitted("doc-2", reason="budget")
        with env.budget(max_tokens=100) as budget:
            budget.segment("history", order=0, used_tokens=10)
        with env.assembly() as asm:
            asm.block("doc-1", injection_point="message_history")
        with tracer.start_as_current_span("chat m") as chat:
            asm.inject(span=chat)
        env.missing(question="Which order?", needed_for="refund")


def test_each_log_record_names_its_event_and_its_span() -> None:
    tel = CapturedTelemetry(events_as="logs")
    try:
        _turn(tel.agent_context, tel.tracer)
        spans = {s.context.span_id: s for s in tel.spans()}
        records = [log.log_record for log in tel.logs()]
        assert [(r.event_name, spans[r.span_id].name) for r in records] == [
            (S.EVENT_ITEM_ADDED, S.SPAN_SURFACE),
            (S.EVENT_ITEM_SELECTED, S.SPAN_SELECTION),
            (S.EVENT_ITEM_OMITTED, S.SPAN_SELECTION),
            (S.EVENT_WINDOW_SEGMENT, S.SPAN_BUDGET),
            (S.EVENT_ASSEMBLY_BLOCK, S.SPAN_ASSEMBLY),
            (S.EVENT_INJECTION_APPLIED, "chat m"),
            (S.EVENT_MISSING_DETECTED, S.SPAN_ENVELOPE),
        ]
        for record in records:
            span = spans[record.span_id]
            assert record.trace_id == span.context.trace_id
            assert span.start_time <= record.timestamp <= span.end_time  # dated when emitted
        selected = records[1]
        assert dict(selected.attributes) == {S.ITEM_ID: "doc-1", S.SELECTION_RANK: 1,
                                             S.SELECTION_SCORE: 0.5}
        envelope = _envelope_span(list(spans.values()))
        assert envelope.attributes[S.CONTEXT_EVENT_COUNT] == 7
        assert _context_events(list(spans.values())) == []
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete"
        assert bundle["context_selections"][0]["selected_item_refs"] == ["doc-1"]
    finally:
        tel.shutdown()


def test_the_environment_variable_chooses_and_the_argument_wins(monkeypatch, caplog) -> None:
    monkeypatch.setenv(EVENTS_VARIABLE, "logs")
    tel = CapturedTelemetry()  # events_as not given: the environment decides
    try:
        _turn(tel.agent_context, tel.tracer)
        assert len(tel.logs()) == 7 and _context_events(tel.spans()) == []
    finally:
        tel.shutdown()
    tel = CapturedTelemetry(events_as="span_events")
    try:
        _turn(tel.agent_context, tel.tracer)
        assert tel.logs() == [] and len(_context_events(tel.spans())) == 7
        assert S.CONTEXT_EVENT_COUNT not in _envelope_span(tel.spans()).attributes
    finally:
        tel.shutdown()
    monkeypatch.setenv(EVENTS_VARIABLE, "carrier-pigeon")
    with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
        tel = CapturedTelemetry(strict=False)
    try:
        _turn(tel.agent_context, tel.tracer)
        assert tel.logs() == [] and len(_context_events(tel.spans())) == 7
        assert any("carrier-pigeon" in r.getMessage() for r in caplog.records)
    finally:
        tel.shutdown()


def test_without_a_logger_provider_events_stay_span_events(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    ac = AgentContext(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                      logger_provider=NoOpLoggerProvider(), events_as="logs")
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
            _turn(ac, tel.tracer)
            _turn(ac, tel.tracer)
        assert len(_context_events(tel.spans())) == 14  # nothing lost
        assert all(S.CONTEXT_EVENT_COUNT not in s.attributes for s in tel.spans())
        warnings = [r for r in caplog.records if "no LoggerProvider" in r.getMessage()]
        assert len(warnings) == 1  # said once, not per envelope
    finally:
        tel.shutdown()


class _BrokenLogger:
    def enabled(self, **kwargs: Any) -> bool:
        return True

    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter on fire")


class _BrokenProvider:
    def get_logger(self, *args: Any, **kwargs: Any) -> _BrokenLogger:
        return _BrokenLogger()


def test_a_failing_logger_never_reaches_the_application(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    ac = AgentContext(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                      logger_provider=_BrokenProvider(), events_as="logs")  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
            _turn(ac, tel.tracer)  # raises nothing
        assert any("exporter on fire" in (r.exc_text or "") or r.exc_info
                   for r in caplog.records)
        assert len([s for s in tel.spans() if s.name == S.SPAN_ENVELOPE]) == 1
    finally:
        tel.shutdown()


def test_log_mode_with_item_events_past_a_span_s_hundred() -> None:
    tel = CapturedTelemetry(events_as="logs")
    spans_tel = CapturedTelemetry()
    try:
        for t in (tel, spans_tel):
            with t.agent_context.envelope(agent_name="a") as env, env.surface() as surface:
                for i in range(150):
                    surface.add(ContextItem(item_id=f"i{i}", token_estimate=1))
        assert len(tel.logs()) == 150
        # the same spans: 100 events on the surface span, the rest on a context.items span
        assert [s.name for s in tel.spans()] == [s.name for s in spans_tel.spans()] == [
            S.SPAN_ITEMS, S.SPAN_SURFACE, S.SPAN_ENVELOPE]
        (bundle,) = tel.bundles()
        (expected,) = spans_tel.bundles()
        assert bundle["rebuild"] == expected["rebuild"]
        assert bundle["rebuild"]["status"] == "complete"
        assert bundle["context_items"] == expected["context_items"]
        assert bundle["context_surfaces"][0]["item_refs"] == [f"i{i}" for i in range(150)]
    finally:
        tel.shutdown()
        spans_tel.shutdown()


def test_sampled_out_envelopes_emit_no_log_records() -> None:
    tel = CapturedTelemetry(events_as="logs")
    try:
        ac = AgentContext(tracer_provider=trace.NoOpTracerProvider(),
                          logger_provider=tel.logger_provider, events_as="logs")
        _turn(ac, trace.NoOpTracer())
        assert tel.logs() == []
    finally:
        tel.shutdown()


@pytest.mark.parametrize("value", ["logs", "LOGS", " logs "])
def test_the_variable_is_read_leniently(monkeypatch, value: str) -> None:
    monkeypatch.setenv(EVENTS_VARIABLE, value)
    tel = CapturedTelemetry()
    try:
        _turn(tel.agent_context, tel.tracer)
        assert len(tel.logs()) == 7
    finally:
        tel.shutdown()
