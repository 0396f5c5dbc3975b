"""``opentelemetry-instrument python agent.py``: the unmodified agent in a subprocess, its
spans exported over real OTLP/gRPC to a receiver started here, then rebuilt into bundles."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from importlib.metadata import entry_points
from pathlib import Path

import grpc
import pytest
from llm_helpers import block_rows
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from stub_server import StubServer

from otel_agent_context import _semconv as S
from otel_agent_context.rebuild import EventView, SpanView, rebuild

HERE = Path(__file__).parent
CLIENT = 3  # OTLP SpanKind CLIENT
#: the official GenAI instrumentors, enabled by their entry-point names "openai", "anthropic"
OFFICIAL = {"opentelemetry-instrumentation-genai-openai",
            "opentelemetry-instrumentation-genai-anthropic"}


def _peers_sharing_names() -> list[str]:
    """Other instrumentors registered under the official ones' entry-point names (the
    bench extra's OpenLLMetry and OpenInference): enabling "openai" enables them too."""
    return sorted({ep.dist.name for ep in entry_points(group="opentelemetry_instrumentor")
                   if ep.name in ("openai", "anthropic") and ep.dist is not None
                   and ep.dist.name not in OFFICIAL})


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def _attrs(kvs):
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[tuple[int, SpanView]] = []  # (kind, view)
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - gRPC name
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        view = SpanView(
                            trace_id=sp.trace_id.hex(), span_id=sp.span_id.hex(), name=sp.name,
                            start_time_unix_nano=sp.start_time_unix_nano,
                            end_time_unix_nano=sp.end_time_unix_nano,
                            attributes=_attrs(sp.attributes),
                            events=[EventView(e.name, e.time_unix_nano, _attrs(e.attributes))
                                    for e in sp.events],
                            parent_span_id=sp.parent_span_id.hex() or None,
                            dropped_attributes_count=sp.dropped_attributes_count,
                            dropped_events_count=sp.dropped_events_count,
                            status_code=sp.status.code)
                        self.spans.append((sp.kind, view))
        return trace_service_pb2.ExportTraceServiceResponse()


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


@pytest.mark.parametrize("official", [False, True], ids=["ours_alone", "with_official"])
@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
def test_opentelemetry_instrument(receiver, official: bool, capture: bool) -> None:
    rec, port = receiver
    if official and (peers := _peers_sharing_names()):
        # not a skip: the composed case cannot be tested in such an environment; say why
        pytest.fail("opentelemetry-instrument cannot enable the official instrumentors alone "
                    f"here: {', '.join(peers)} share their entry-point names; run this test "
                    "in a virtual environment without the bench extra")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({
        "OTEL_SERVICE_NAME": "llm-agent-app",
        "OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100",
        "NO_PROXY": "127.0.0.1,localhost",
    })
    # "without the official instrumentor" = not enabling it (it stays installed)
    disabled = ["agent_context_langchain", "langchain", "openai_agents", "llama_index"] + (
        [] if official else ["openai", "anthropic"])
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = ",".join(disabled)
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    with StubServer() as stub:
        env["STUB_URL"] = stub.url
        proc = subprocess.run([str(launcher), sys.executable, str(HERE / "llm_agent_app.py")],
                              env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "openai: The order shipped" in proc.stdout
    assert "anthropic: The order shipped" in proc.stdout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(rec.spans) < 3:
        time.sleep(0.05)
    # the anthropic SDK traces its own HTTP request too ("anthropic.messages.create"), as a
    # child of the one inference span; everything else is ours (or merged into ours)
    spans = [v for _, v in rec.spans if not v.name.startswith("anthropic.")]
    clients = [v for kind, v in rec.spans if kind == CLIENT and v.name.startswith("chat ")]
    sdk = [v for _, v in rec.spans if v.name.startswith("anthropic.")]
    assert all(s.parent_span_id in {c.span_id for c in clients} for s in sdk)
    assert sorted(s.name for s in clients) == ["chat claude-sonnet-4-6", "chat gpt-4o-mini"]
    assert len(spans) == 2, [s.name for s in spans]  # one inference span a call
    for span in clients:
        a = span.attributes
        assert a[S.CONTEXT_SCOPE] == "turn"
        assert a[S.GEN_AI_PROVIDER_NAME] in ("openai", "anthropic")
        assert a[S.GEN_AI_USAGE_INPUT_TOKENS] > 0
        assert a[S.GEN_AI_RESPONSE_ID]
        assert [e.name for e in span.events] == []  # the folded form: no block events
        assert S.ASSEMBLY_HASH not in a and S.INJECTION_HASH not in a  # derived
        assert a[S.BUDGET_MAX_TOKENS] in (128_000, 200_000)
        assert (S.GEN_AI_INPUT_MESSAGES in a) is capture
    blocks = [b for s in clients for b in block_rows(s)]
    assert len(blocks) == 4
    assert all((S.ITEM_CONTENT in b) is capture for b in blocks)
    bundles = rebuild(spans)
    assert [b["rebuild"]["status"] for b in bundles] == ["complete", "complete"]
    assert {b["context_budgets"][0]["max_tokens"] for b in bundles} == {128_000, 200_000}
