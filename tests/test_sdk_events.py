"""Context events handed to SDK spans without the SDK's second check (``_sdk_events``) are
recorded exactly as ``Span.add_event`` records them, limits included."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_context import AgentContext, _sdk_events

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import api_bench  # noqa: E402  - the benchmark's typical turn


def _recorded(limits: SpanLimits | None, fast: bool, monkeypatch: Any) -> list[Any]:
    monkeypatch.setattr(_sdk_events, "_FAST", fast)
    provider = TracerProvider(span_limits=limits) if limits else TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    api_bench.turn_api(AgentContext(tracer_provider=provider, capture_content=True),
                       api_bench._items(), tracer)
    out = []
    for span in memory.get_finished_spans():
        events = [(e.name, _stable(e.attributes), e.dropped_attributes) for e in span.events]
        out.append((span.name, len(span.events), span.dropped_events, events))
    return out


def _stable(attributes: Any) -> dict[str, Any]:
    """Attributes without the ids and hashes each run draws anew (their keys stay)."""
    return {k: "<generated>" if k.endswith((".id", ".hash")) and k != "context.item.id"
            and isinstance(v, str) and v[:3] in ("inj", "asm", "sel", "srf", "bud", "cmp",
                                                  "sum", "mis", "sha") else v
            for k, v in attributes.items()}


@pytest.mark.parametrize("limits", [
    None,
    SpanLimits(max_attribute_length=8),  # values cut: the public path
    SpanLimits(max_event_attributes=3),  # attributes dropped: the public path
    SpanLimits(max_events=20),  # events dropped: the same on both paths
], ids=["default", "value-length", "event-attributes", "events"])
def test_the_fast_path_records_what_add_event_records(limits, monkeypatch) -> None:
    slow = _recorded(limits, False, monkeypatch)
    fast = _recorded(limits, True, monkeypatch)
    assert fast == slow
    assert sum(count for _, count, _, _ in fast) > 80  # the turn's events, recorded
    if limits is not None and limits.max_events == 20:
        assert sum(dropped for _, _, dropped, _ in fast) > 0  # the limit bit, both ways


def test_values_the_table_did_not_type_take_the_public_path() -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    cases = [("a", {"k": ["x", "y"], "n": 1}, None), ("b", {"k": "x", "n": 1}, 5),
             ("c", {"k": {"not": "a value"}}, None), ("d", {"k": b"bytes"}, None)]
    recorded = []
    for add in (_sdk_events.add_event, lambda s, n, a, t: s.add_event(n, a, t)):
        span = tracer.start_span("s")
        for name, attributes, timestamp in cases:
            add(span, name, dict(attributes), timestamp)
        span.end()
        add(span, "late", {"k": "x"}, None)  # ended: ignored with a warning, both ways
        recorded.append([(e.name, dict(e.attributes), e.timestamp if e.name == "b" else 0)
                         for e in memory.get_finished_spans()[-1].events])
    ours, sdk = recorded
    assert ours == sdk
    assert ours[0][1] == {"k": ("x", "y"), "n": 1} and ours[1][2] == 5


def test_a_span_that_overrides_add_event_gets_its_own_add_event() -> None:
    """A subclass of the SDK span (or a proxy around one, which passes ``isinstance``) that
    overrides ``add_event``, e.g. to redact or enrich, sees every context event: the fast
    path is only for the SDK's own ``add_event``."""
    import wrapt  # opentelemetry-instrumentation's dependency, so always installed

    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")

    class Enriching(wrapt.ObjectProxy):  # type: ignore[misc, name-defined]
        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            self.__wrapped__.add_event(name, {**(attributes or {}), "seen": True}, timestamp)

    span = tracer.start_span("s")
    _sdk_events.add_event(Enriching(span), "e", {"k": "v"}, None)
    span.end()
    (event,) = memory.get_finished_spans()[0].events
    assert dict(event.attributes) == {"k": "v", "seen": True}
