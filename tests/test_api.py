"""Behaviour of the instrumentation API: lifecycle, errors, privacy, counts, metrics."""

from __future__ import annotations

import logging
import tracemalloc

import pytest
from opentelemetry import trace

import otel_agent_context as oac
from otel_agent_context import AgentContext, ContextItem, current_envelope
from otel_agent_context import _semconv as S
from otel_agent_context._api import set_strict
from otel_agent_context._demo_agent import run_demo
from otel_agent_context.testing import CapturedTelemetry


@pytest.fixture
def tel():
    t = CapturedTelemetry()
    yield t
    t.shutdown()


def test_public_surface_is_pinned() -> None:
    assert sorted(oac.__all__) == sorted([
        "AgentContext", "AgentContextError", "Assembly", "AssemblyBlock", "Budget", "Bundle",
        "Compaction", "CompactionMethod", "CompactionSource", "ConfigError", "ContentMode",
        "ContextAssembly", "ContextBudget", "ContextCompaction", "ContextEnvelope",
        "ContextEvent", "ContextInjection", "ContextItem", "ContextKind", "ContextSelection",
        "ContextSourceRef", "ContextSummary", "ContextSurface", "ContextWindow", "Envelope",
        "EventClass", "InjectionPoint", "Lifecycle", "MissingContext", "MissingStatus",
        "OmissionReason", "OmittedRef", "OverflowStrategy", "RankingSignal", "RebuildInfo",
        "RecordError", "RedactionState", "Scope", "Selection", "Severity", "Surface",
        "TelemetryRef", "TruncationRecord", "Visibility", "WindowSegment", "__version__",
        "bundle_json_schema", "current_envelope", "emit_bundle", "records_json_schema",
        # the masking hook (issue 15: what content may leave)
        "builtin_masker", "set_content_masker"])
    for name in oac.__all__:
        assert hasattr(oac, name), name


def test_application_exception_passes_through_unchanged(tel) -> None:
    boom = KeyError("the agent's own error")
    with pytest.raises(KeyError) as caught, tel.agent_context.envelope() as env, \
            env.selection() as sel:
        sel.selected("doc-1")
        raise boom
    assert caught.value is boom
    spans = {s.name: s for s in tel.spans()}
    for name in ("context.selection", "context.envelope"):
        assert spans[name].status.status_code == trace.StatusCode.ERROR
        assert spans[name].attributes["error.type"] == "KeyError"
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"  # a failed turn is still a whole record


def test_internal_error_is_logged_not_raised(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"), \
                tel.agent_context.envelope() as env, env.selection() as sel:
            assert sel.omitted("doc-1", reason="not-a-reason") is None  # misuse: logged
            sel.selected("doc-2")
        assert "Selection.omitted failed" in caplog.text
        (bundle,) = tel.bundles()
        assert bundle["context_selections"][0]["selected_item_refs"] == ["doc-2"]
    finally:
        tel.shutdown()


def test_internal_error_raises_under_strict(tel) -> None:
    with tel.agent_context.envelope() as env, env.selection() as sel, \
            pytest.raises(ValueError):
        sel.omitted("doc-1", reason="not-a-reason")


def test_no_sdk_configured_returns_shared_noop_and_allocates_nothing() -> None:
    ctx = AgentContext(tracer_provider=trace.NoOpTracerProvider())
    env = ctx.envelope(agent_name="x")
    assert env is ctx.envelope() and env.selection() is env  # one shared object
    item = ContextItem(item_id="d", token_estimate=3)
    sel = env.selection()
    sel.selected(item, rank=1, score=0.5)  # warm up
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(1000):
        sel.selected(item, rank=1, score=0.5)
        sel.omitted(item, reason="budget")
        env.budget().truncated(item_id="d")
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if "otel_agent_context" in str(s.traceback))
    assert grown == 0


def test_noop_answers_every_public_method_of_every_recorder() -> None:
    from otel_agent_context._api import _NOOP_ENVELOPE

    for cls in (oac.Envelope, oac.Surface, oac.Selection, oac.Budget, oac.Assembly,
                oac.Compaction):
        for name in dir(cls):
            if not name.startswith("_"):
                assert hasattr(_NOOP_ENVELOPE, name), f"{cls.__name__}.{name}"


def test_content_capture_follows_the_genai_switch(monkeypatch) -> None:
    doc = ContextItem(item_id="d1", content="the refund limit is 500", title="Refunds")
    for value, captured in (("", False), ("NO_CONTENT", False), ("EVENT_ONLY", False),
                            ("SPAN_ONLY", True), ("SPAN_AND_EVENT", True)):
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        tel = CapturedTelemetry(capture_content=None)
        with tel.agent_context.envelope() as env, env.selection(query="refund?") as sel:
            sel.selected(doc)
        (span,) = [s for s in tel.spans() if s.name == "context.selection"]
        attrs = span.events[0].attributes
        assert ("context.item.content" in attrs) is captured, value
        assert ("context.selection.query" in span.attributes) is captured, value
        assert attrs["context.item.digest"].startswith("hmac-sha256:")  # always
        tel.shutdown()


def test_blocked_sensitivity_never_captured_and_gets_a_redaction_event() -> None:
    tel = CapturedTelemetry(capture_content=True)
    secret = ContextItem(item_id="k", content="api key 123", sensitivity="Secret")
    with tel.agent_context.envelope() as env, env.surface() as srf:
        srf.add(secret)
        srf.add(secret)
    (bundle,) = tel.bundles()
    assert "content" not in bundle["context_items"][0]
    assert bundle["context_items"][0]["digest"].startswith("hmac-sha256:")
    redactions = [e for e in bundle["context_events"]
                  if e["event_class"] == "context.redaction.applied"]
    assert len(redactions) == 1  # once per item per envelope
    assert redactions[0]["metadata"]["state"] == "policy_blocked"
    tel.shutdown()


def test_span_count_covers_stage_items_and_inference_spans(tel) -> None:
    tracer = tel.tracer
    with tel.agent_context.envelope() as env:
        assert current_envelope() is env
        with env.selection() as sel:
            for i in range(250):
                sel.omitted(f"d{i}", reason="low_relevance")
        with env.assembly() as asm:
            asm.block("sys", kind="system_prompt", tokens=10)
        with tracer.start_as_current_span("chat gpt-4o") as chat:
            asm.inject(span=chat)
    assert current_envelope() is None
    spans = tel.spans()
    envelope = next(s for s in spans if s.name == "context.envelope")
    members = [s for s in spans if s.attributes.get("context.id") == envelope.attributes[
        "context.id"] and s is not envelope]
    # selection + 2 items parts (150 events) + assembly + the chat span that saw it
    assert envelope.attributes["context.span_count"] == len(members) == 5
    assert max(len(s.events) for s in spans) <= 100
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert len(bundle["context_selections"][0]["omitted_item_refs"]) == 250
    assert bundle["context_injections"][0]["assembly_id"] == asm.assembly_id


def test_envelope_on_a_span_the_caller_owns(tel) -> None:
    with tel.tracer.start_as_current_span("invoke_agent planner") as span:
        env = tel.agent_context.envelope(span=span, scope="task", agent_name="planner")
        env.missing(severity="blocking", needed_for="deploy")
        env.stop()
    (s,) = tel.spans()
    assert s.name == "invoke_agent planner"
    assert s.attributes["context.scope"] == "task"
    assert s.attributes["context.span_count"] == 0
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["scope"] == "task"
    assert bundle["missing_context"][0]["severity"] == "blocking"


def test_metrics_have_the_contract_names_and_labels(tel) -> None:
    run_demo(tel.tracer_provider, turns=9, seed=3, agent_context=tel.agent_context)
    metrics = tel.metrics()
    assert set(metrics) <= set(S.METRIC_LABELS)
    for name in (S.METRIC_ENVELOPES, S.METRIC_ITEMS_OMITTED, S.METRIC_BUDGET_UTILIZATION,
                 S.METRIC_TRUNCATIONS, S.METRIC_COMPACTIONS, S.METRIC_INJECTIONS):
        assert name in metrics, name
    for name, points in metrics.items():
        for labels, _ in points:
            assert set(labels) == set(S.METRIC_LABELS[name]), name
    envelopes = sum(v for _, v in metrics[S.METRIC_ENVELOPES])
    assert envelopes == 9
    omitted = sum(v for _, v in metrics[S.METRIC_ITEMS_OMITTED])
    rebuilt = sum(len(s.get("omitted_item_refs", ())) for b in tel.bundles()
                  for s in b["context_selections"])
    assert omitted == rebuilt > 0


def test_invalid_scope_is_logged_and_turns_into_noop(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
            env = tel.agent_context.envelope(scope="galaxy")
        assert "AgentContext.envelope failed" in caplog.text
        with env as e:
            e.selection().selected("x")  # the agent keeps working
    finally:
        set_strict(False)
        tel.shutdown()


def test_an_envelope_is_entered_on_the_context_it_was_made_in() -> None:
    """Its span's context is made when first needed (often in a stage started on another
    thread, under another request's baggage): still built on the context of its making."""
    import threading

    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    tel = CapturedTelemetry()
    env = tel.agent_context.envelope(scope="session")

    def other_request() -> None:
        token = otel_context.attach(baggage.set_baggage("tenant", "A"))
        try:
            env.budget(max_tokens=1000).stop()  # the first use of the envelope's context
        finally:
            otel_context.detach(token)

    worker = threading.Thread(target=other_request)
    worker.start()
    worker.join()
    with env:
        assert baggage.get_baggage("tenant") is None
        assert trace.get_current_span() is env._span
