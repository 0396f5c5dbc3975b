"""The two ways to turn it on, with an unmodified agent (``lc_agent_app.py``):
``opentelemetry-instrument python agent.py`` in a subprocess, its spans sent over real
OTLP/gRPC to a receiver started here and rebuilt from the protobuf; and
``otel_agent_context.instrumentation.instrument()`` in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.rebuild import EventView, SpanView, rebuild
from otel_agent_context.testing import CapturedTelemetry

HERE = Path(__file__).parent
APP = HERE / "lc_agent_app.py"
ANSWERS = ["Refunds take up to 14 days.", "About five days."]


def check_bundles(bundles: list[dict[str, Any]], capture: bool) -> None:
    """What the app's two agent runs must rebuild into, however it was instrumented."""
    by_agent = {b["context_envelope"]["metadata"]["gen_ai.agent.name"]: b for b in bundles}
    # the two agents' turns, and the summarizer's model call in an envelope of its own
    assert sorted(by_agent) == ["SummarizationMiddleware", "rag_agent", "summarizing_agent"]
    for bundle in bundles:
        assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    assert by_agent["rag_agent"]["context_envelope"]["scope"] == "turn"
    assert by_agent["summarizing_agent"]["context_envelope"]["scope"] == "turn"
    summarizer = by_agent["SummarizationMiddleware"]["context_envelope"]
    assert summarizer["scope"] == "task"
    assert summarizer["parent_id"] == \
        by_agent["summarizing_agent"]["context_envelope"]["context_id"]

    rag = by_agent["rag_agent"]
    assert rag["context_envelope"]["metadata"]["gen_ai.conversation.id"] == "thread-1"
    (sel,) = rag["context_selections"]
    assert sel["selection_policy"] == "ContextualCompressionRetriever"
    assert sel["selected_item_refs"] == ["faq-refunds"]
    assert [(o["item_id"], o["reason"]) for o in sel["omitted_item_refs"]] == [
        ("refunds", "duplicate_coverage"), ("about", "low_relevance"),
        ("shipping", "low_relevance")]
    assert ("query" in sel) is capture
    items = {i["item_id"]: i for i in rag["context_items"]}
    assert all(("content" in items[i]) is capture for i in ("refunds", "faq-refunds"))
    assert all(items[i]["digest"].startswith("hmac-sha256:") for i in ("refunds", "faq-refunds"))
    (budget,) = rag["context_budgets"]
    assert (budget["max_tokens"], budget["actual_tokens"], budget["overflow"]) == (12, 12, True)
    assert [r["item_id"] for r in budget["truncation_records"]] == ["h1", "a1"]

    summ = by_agent["summarizing_agent"]
    (comp,) = summ["context_compactions"]
    assert (comp["method"], comp["trigger"], comp["coverage"]) == (
        "rolling_summary", "threshold:messages", 1.0)
    assert comp["source_item_refs"] == ["h1", "a1", "h2"]
    (summary,) = summ["context_summaries"]
    assert ("content" in summary) is capture


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def views(requests: list[Any]) -> list[SpanView]:
    """OTLP protobuf spans as the rebuild's neutral span views."""
    return [
        SpanView(trace_id=sp.trace_id.hex(), span_id=sp.span_id.hex(), name=sp.name,
                 start_time_unix_nano=sp.start_time_unix_nano,
                 end_time_unix_nano=sp.end_time_unix_nano, attributes=_attrs(sp.attributes),
                 events=[EventView(e.name, e.time_unix_nano, _attrs(e.attributes))
                         for e in sp.events],
                 parent_span_id=sp.parent_span_id.hex() or None,
                 dropped_attributes_count=sp.dropped_attributes_count,
                 dropped_events_count=sp.dropped_events_count, status_code=sp.status.code)
        for request in requests for rs in request.resource_spans for ss in rs.scope_spans
        for sp in ss.spans]


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """A minimal OTLP/gRPC trace receiver: keeps each request as it came."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - the gRPC method name
        with self.lock:
            self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def envelopes(self) -> int:
        with self.lock:
            return sum(1 for r in self.requests for rs in r.resource_spans
                       for ss in rs.scope_spans for sp in ss.spans
                       if sp.name == S.SPAN_ENVELOPE)


@pytest.fixture
def receiver():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rec = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield rec, port
    finally:
        server.stop(grace=None)


@pytest.mark.parametrize(("capture", "official"), [(False, False), (True, False), (False, True)],
                         ids=["no_content", "content", "with_official_langchain"])
def test_opentelemetry_instrument_launcher(receiver, capture: bool, official: bool) -> None:
    """With ``official``, the official GenAI LangChain instrumentor is on too: the same
    bundles, and each envelope a child of the official run span, in its trace."""
    rec, port = receiver
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({
        "OTEL_SERVICE_NAME": "lc-agent-app", "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100",
        # only ours: the LLM client instrumentors have nothing to do in this app
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS":
            "agent_context_openai,agent_context_anthropic,openai,anthropic"
            + ("" if official else ",langchain"),
        "NO_PROXY": "127.0.0.1,localhost",
    })
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    proc = subprocess.run([str(launcher), sys.executable, str(APP)], env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ANSWERS
    assert "otel_agent_context" not in proc.stderr  # no internal error was logged
    deadline = time.monotonic() + 10
    while rec.envelopes() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)

    bundles = rebuild(views(rec.requests))  # groups the spans that carry context.id
    assert len(bundles) == 3
    check_bundles(bundles, capture)
    for bundle in bundles:
        spans = {r["span_name"] for r in bundle["context_envelope"]["telemetry_refs"]}
        assert S.SPAN_ENVELOPE in spans
    official_spans = [v for v in views(rec.requests)
                      if v.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert bool(official_spans) is official
    if official:  # each agent turn's envelope sits under the official invoke_agent span
        by_id = {v.span_id: v for v in views(rec.requests)}
        turns = [v for v in by_id.values() if v.name == S.SPAN_ENVELOPE
                 and v.attributes.get("context.scope") == "turn"]
        assert len(turns) == 2
        for env in turns:
            parent = by_id[env.parent_span_id]
            assert parent.attributes["gen_ai.operation.name"] == "invoke_agent"
            assert parent.trace_id == env.trace_id


@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
def test_instrument_in_process(capture: bool) -> None:
    sys.path.insert(0, str(HERE))
    try:
        import lc_agent_app
    finally:
        sys.path.remove(str(HERE))
    tel = CapturedTelemetry(capture_content=capture)
    try:
        done = instrument(tracer_provider=tel.tracer_provider,
                          meter_provider=tel.meter_provider, capture_content=capture)
        assert "LangChainContextInstrumentor" in done
        assert lc_agent_app.run() == ANSWERS
    finally:
        uninstrument()
        tel.shutdown()
    check_bundles(tel.bundles(), capture)
