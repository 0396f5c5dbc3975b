"""The OpenAI Agents SDK instrumentor (ours alone) however the application configures the
SDK's own tracing: off (``set_tracing_disabled(True)``, as ``agents_app`` does), on with the
SDK's default processor (its batch exporter pointed at a loopback sink, so nothing leaves the
machine), and replaced with ``set_trace_processors([...])`` holding a processor of the
application's. The bundles are the same each time, and the SDK's processors still get its
traces and spans."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import agents_app
from agents import (
    TracingProcessor,
    flush_traces,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.tracing.processors import default_exporter, default_processor
from framework_helpers import framework_on
from stub_server import REPLY, StubServer

from otel_agent_context.instrumentation.openai_agents import OpenAIAgentsContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


class Recorder(TracingProcessor):
    """An application's own tracing processor: records what the SDK hands it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.started: list[str] = []
        self.ended: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        self.events.append(("trace_start", "trace", trace.name))

    def on_trace_end(self, trace: Any) -> None:
        self.events.append(("trace_end", "trace", trace.name))

    def on_span_start(self, span: Any) -> None:
        self.started.append(span.span_id)
        self.events.append(("span_start", span.span_data.type, _span_name(span.span_data)))

    def on_span_end(self, span: Any) -> None:
        self.ended.append(span.span_id)
        self.events.append(("span_end", span.span_data.type, _span_name(span.span_data)))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


def _span_name(data: Any) -> str:
    name = getattr(data, "name", None)
    if name is None and getattr(data, "type", None) == "handoff":
        name = f"{data.from_agent}->{data.to_agent}"
    return str(name or "")


@contextmanager
def _sdk_tracing(processors: list[Any]) -> Iterator[None]:
    """The SDK's tracing on with ``processors``; off again (as the suite keeps it) after."""
    set_trace_processors(processors)
    set_tracing_disabled(False)
    try:
        yield
    finally:
        flush_traces()
        set_tracing_disabled(True)
        set_trace_processors([])


def _shape(tel: CapturedTelemetry, tmp_path: Path, name: str) -> list[Any]:
    """Run ``agents_app`` (3 runs: a tool, a handoff, a streamed run) and check its outputs
    and model calls; each bundle's scope, agent, conversation, joined model calls, assemblies
    and item ids (the stub's numbered ids normalised), in order."""
    tel.clear()
    with StubServer() as stub:
        outputs = agents_app.run(stub.openai_base_url, str(tmp_path / f"{name}.db"))
        paths = [path for path, _ in stub.requests]
    assert outputs == [REPLY] * 3
    assert paths == ["/v1/responses"] * 6
    bundles = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
    shape = []
    for bundle in bundles:
        env = bundle["context_envelope"]
        shape.append((
            env["scope"], env["metadata"].get("gen_ai.agent.name"),
            env["metadata"].get("gen_ai.conversation.id"),
            len([r for r in env["telemetry_refs"] if r["span_name"].startswith("chat ")]),
            len(env.get("assembly_refs", [])),
            [re.sub(r"(call|fc|msg)_\d+", r"\1_N", i["item_id"])
             for i in bundle.get("context_items", [])]))
    return shape


def _check_turns(shape: list[Any]) -> None:
    turns = [s for s in shape if s[0] == "turn"]
    assert len(shape) == 4 and len(turns) == 3  # + the handoff; no loose envelope
    for _, agent, conversation, chats, assemblies, _items in turns:
        assert (agent, conversation, chats, assemblies) == (
            "Triage agent", "conversation-42", 2, 2)
    (handoff,) = [s for s in shape if s[0] == "handoff"]
    assert handoff[1] == "Spanish agent"


def _off_shape(setup: Any, tmp_path: Path) -> list[Any]:
    with framework_on(OpenAIAgentsContextInstrumentor(), setup) as tel:
        shape = _shape(tel, tmp_path, "off")
    _check_turns(shape)
    return shape


def test_tracing_on_with_the_sdks_default_processor(alone: Any, tmp_path: Path) -> None:
    """The SDK's default batch processor and exporter, the exporter posting to a loopback
    sink (its endpoint and key set as the SDK lets one): same bundles as with tracing off,
    and the exporter still ships the SDK's three traces and their spans."""
    off = _off_shape(alone, tmp_path)
    exporter = default_exporter()
    endpoint, key = exporter.endpoint, exporter._api_key
    with StubServer() as sink:
        exporter.endpoint = f"{sink.url}/v1/traces/ingest"  # answered 404: not retried
        exporter.set_api_key("sk-test")  # without a key the exporter skips the batch
        try:
            with framework_on(OpenAIAgentsContextInstrumentor(), alone) as tel, \
                    _sdk_tracing([default_processor()]):
                on = _shape(tel, tmp_path, "default")
        finally:
            exporter.endpoint, exporter.api_key = endpoint, key
        posted = sink.requests
    assert on == off
    assert posted and {path for path, _ in posted} == {"/v1/traces/ingest"}
    data = [item for _, body in posted for item in body["data"]]
    traces = [d for d in data if d["object"] == "trace"]
    spans = [d for d in data if d["object"] == "trace.span"]
    assert len(traces) == 3 and {t["workflow_name"] for t in traces} == {"Agent workflow"}
    agents_seen = sorted(s["span_data"]["name"] for s in spans
                         if s["span_data"]["type"] == "agent")
    assert agents_seen == ["Spanish agent"] + ["Triage agent"] * 3
    assert len([s for s in spans if s["span_data"]["type"] == "response"]) == 6
    assert {s["trace_id"] for s in spans} == {t["id"] for t in traces}


def test_tracing_replaced_with_the_applications_processor(alone: Any, tmp_path: Path) -> None:
    """``set_trace_processors([Recorder()])``: same bundles as with tracing off, and the
    application's processor gets every trace and span of the three runs, started and ended."""
    off = _off_shape(alone, tmp_path)
    recorder = Recorder()
    with framework_on(OpenAIAgentsContextInstrumentor(), alone) as tel, \
            _sdk_tracing([recorder]):
        on = _shape(tel, tmp_path, "replaced")
    assert on == off

    events = recorder.events
    assert events.count(("trace_start", "trace", "Agent workflow")) == 3
    assert events.count(("trace_end", "trace", "Agent workflow")) == 3
    ended = [(kind, name) for what, kind, name in events if what == "span_end"]
    assert sorted(recorder.ended) == sorted(recorder.started)  # every span started is ended
    assert len(recorder.ended) == len(ended) == len(set(recorder.ended))
    assert sorted(n for k, n in ended if k == "agent") == ["Spanish agent"] + ["Triage agent"] * 3
    assert len([k for k, _ in ended if k == "response"]) == 6
    assert ended.count(("function", "get_weather")) == 2
    assert ended.count(("handoff", "Triage agent->Spanish agent")) == 1
