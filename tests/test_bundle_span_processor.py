"""The in-process SpanProcessor: bundles as envelopes complete, partial after a wait, never
dropped; and the README's example agent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context import AgentContext
from otel_agent_context.rebuild import BundleSpanProcessor

ROOT = Path(__file__).resolve().parents[1]


def _setup(**kwargs):
    bundles: list[dict] = []
    provider = TracerProvider()
    processor = BundleSpanProcessor(bundles.append, **kwargs)
    provider.add_span_processor(processor)
    return provider, processor, bundles


def test_bundle_emitted_once_as_soon_as_the_envelope_completes(tmp_path) -> None:
    out = tmp_path / "bundles.jsonl"
    bundles: list[dict] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(bundles.append, path=out))
    ctx = AgentContext(tracer_provider=provider)
    with ctx.envelope() as env:
        with env.selection() as sel:
            sel.selected("a")
        assert bundles == []  # the envelope span has not ended yet
    assert len(bundles) == 1 and bundles[0]["rebuild"]["status"] == "complete"
    provider.shutdown()
    assert len(bundles) == 1  # nothing left to drain
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == bundles


def test_a_promised_span_that_never_ends_gives_a_partial_bundle_after_the_wait() -> None:
    provider, processor, bundles = _setup(envelope_timeout=0.05)
    tracer = provider.get_tracer("t")
    env = tracer.start_span("context.envelope", attributes={
        "context.id": "c1", "context.scope": "turn", "context.span_count": 2})
    stage = tracer.start_span("context.selection", trace.set_span_in_context(env),
                              attributes={"context.id": "c1", "context.selection.id": "s"})
    stage.end()
    env.end()  # one of the two promised spans never comes
    assert bundles == []
    time.sleep(0.06)
    processor.force_flush()
    (bundle,) = bundles
    assert bundle["rebuild"]["status"] == "partial"
    assert bundle["rebuild"]["partial_reasons"] == ["timeout", "missing_spans"]
    assert bundle["rebuild"]["expected_spans"] == 2 and bundle["rebuild"]["received_spans"] == 1


def test_shutdown_drains_pending_envelopes_as_partial() -> None:
    provider, _, bundles = _setup(envelope_timeout=3600)
    tracer = provider.get_tracer("t")
    tracer.start_span("context.selection", attributes={"context.id": "orphan"}).end()
    provider.shutdown()
    (bundle,) = bundles
    assert bundle["rebuild"]["partial_reasons"] == ["shutdown", "no_envelope_span"]


def test_example_agent_prints_a_complete_bundle() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "support_agent.py")],
                         capture_output=True, text=True, timeout=60, check=True)
    bundle = json.loads(out.stdout)
    assert bundle["rebuild"]["status"] == "complete"
    assert {o["reason"] for o in bundle["context_selections"][0]["omitted_item_refs"]} == {
        "stale_source", "low_relevance"}
    assert bundle["missing_context"][0]["severity"] == "blocking"
    assert bundle["context_budgets"][0]["truncation_records"][0]["item_id"] == "msg:2"
    assert not any("content" in item for item in bundle["context_items"])  # capture off
