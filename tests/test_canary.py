"""A canary: one unique secret placed in every kind of input, then every byte exported over
OTLP (a real gzip-compressed OTLP/gRPC export to a loopback receiver), every bundle and the
metrics page are searched for it and for its plain sha256 digest (whole, and the 12 and 16
hex prefixes ids use).

- capture off: it appears nowhere (neither the text nor a plain digest of it);
- capture on: the text appears (so the search can see it);
- capture on with a masker: only the masked form appears.

Integrations: the API (items, titles, queries, summaries, missing-context questions), the
real ``openai`` and ``anthropic`` clients against the local stub (system prompt, user and
assistant messages, tool arguments and results), a LangChain retriever's documents, a
Context Runtime ABI session (its summary file), a ContextOS compiled context, and an MCP
resource and prompt (a stdio server) put into a model call.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import anthropic
import grpc
import openai
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_agent_context import AgentContext, ContextItem, emit_bundle, set_content_masker
from otel_agent_context._measure import measure
from otel_agent_context.adapters import compiled_context_bundle, read_session
from otel_agent_context.adapters._abi import emit_snapshot
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.processor._metrics import MetricsRegistry
from otel_agent_context.rebuild import BundleSpanProcessor

SECRET = "canary-3b1f9e77-do-not-leak"
PLAIN = hashlib.sha256(SECRET.encode()).hexdigest()
FIXTURES = Path(__file__).parent / "adapters" / "fixtures" / "contextos"
SEED_SESSION = Path(__file__).parent / "adapters" / "fixtures" / "abi" / "seed_session"


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - gRPC name
        with self.lock:
            self.bodies.append(request.SerializeToString())
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[_Receiver, int]]:
    rec = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield rec, port
    finally:
        server.stop(grace=None)


def _api(ctx: AgentContext) -> None:
    with ctx.envelope(agent_name="canary-agent") as env:
        with env.surface() as surface:
            surface.add(ContextItem(item_id="doc-1", context_kind="document_excerpt",
                                    content=f"The refund code is {SECRET}.",
                                    title=f"Title {SECRET}"))
        with env.selection(query=f"find {SECRET}") as selection:
            selection.selected("doc-1", rank=1)
        with env.compaction(method="rolling_summary") as compaction:
            compaction.source("doc-1")
            compaction.summary(content=f"Summary mentioning {SECRET}")
        env.missing(question=f"Which order has {SECRET}?", needed_for="refund")


def _clients(url: str) -> None:
    oa = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    oa.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": f"System {SECRET}"},
        {"role": "user", "content": f"User {SECRET}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": json.dumps({"q": SECRET})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": f"Result {SECRET}"},
    ])
    an = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    an.messages.create(model="claude-sonnet-4-6", max_tokens=100, system=f"System {SECRET}",
                       messages=[{"role": "user", "content": f"User {SECRET}"},
                                 {"role": "assistant", "content": f"Assistant {SECRET}"},
                                 {"role": "user", "content": "and?"}])


def _langchain(ctx: AgentContext) -> None:
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    inst = LangChainContextInstrumentor()
    inst.instrument(agent_context=ctx)
    try:
        store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
        store.add_documents([Document(f"Doc {SECRET}", metadata={"source": "kb/a.md"}),
                             Document("Other text", metadata={"source": "kb/b.md"})])
        store.as_retriever(search_kwargs={"k": 1}).invoke(f"query {SECRET}")
    finally:
        inst.uninstrument()


def _mcp(ctx: AgentContext, url: str) -> None:
    """An MCP resource and prompt (a stdio server started here) put into an OpenAI call."""
    import asyncio
    import os
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from otel_agent_context.instrumentation.mcp import MCPContextInstrumentor

    server = Path(__file__).parent / "instrumentation" / "mcp_client" / "mcp_docs_server.py"

    async def run() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(server)],
                                       env={**os.environ, "MCP_DOCS_POLICY": f"Policy {SECRET}"})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with ctx.envelope(agent_name="mcp-agent"):
                resource = await session.read_resource("docs://policies/refunds")
                prompt = await session.get_prompt("answer_question",
                                                  {"question": f"Why {SECRET}?"})
                client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
                await client.chat.completions.create(model="gpt-4o-mini", messages=[
                    {"role": "system", "content": resource.contents[0].text},
                    {"role": "user", "content": prompt.messages[0].content.text}])

    inst = MCPContextInstrumentor()
    inst.instrument(agent_context=ctx)
    try:
        asyncio.run(run())
    finally:
        inst.uninstrument()


def _runtimes(ctx: AgentContext, tmp_path: Path) -> None:
    session = tmp_path / "agent" / "coder" / "session" / "default"
    shutil.copytree(SEED_SESSION, session)
    (session / "context" / "summary.md").write_text(f"# Summary\n\n{SECRET}\n")
    emit_snapshot(read_session(session), ctx)
    compiled = json.loads((FIXTURES / "compiled_context.json").read_text())
    compiled = copy.deepcopy(compiled)
    compiled["compiled_prompt"]["system"] = f"System {SECRET}"
    compiled["compiled_prompt"]["task"] = f"Task {SECRET}"
    emit_bundle(compiled_context_bundle(compiled), ctx)


def _everything(receiver, monkeypatch, tmp_path: Path, capture: bool) -> str:
    rec, port = receiver
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    bundles: list[dict] = []
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"127.0.0.1:{port}", insecure=True, compression=grpc.Compression.Gzip)))
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    ctx = AgentContext(tracer_provider=provider, capture_content=capture)
    instrumentors = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    for inst in instrumentors:
        inst.instrument(tracer_provider=provider, capture_content=capture)
    try:
        _api(ctx)
        with StubServer() as stub:
            _clients(stub.url)
            _mcp(ctx, stub.url)
        _langchain(ctx)
        _runtimes(ctx, tmp_path)
    finally:
        for inst in instrumentors:
            inst.uninstrument()
        provider.shutdown()
    registry = MetricsRegistry()
    for bundle in bundles:
        registry.record(measure(bundle))
    metrics_page = registry.render(None)[0].decode()
    exported = b"".join(rec.bodies).decode("utf-8", "replace")
    assert len(bundles) >= 7 and exported  # every integration made telemetry
    return exported + json.dumps(bundles) + metrics_page


def _plain_digests(text: str) -> list[str]:
    return [p for p in (PLAIN, PLAIN[:16], PLAIN[:12]) if p in text]


def test_with_capture_off_the_secret_appears_nowhere(receiver, monkeypatch,
                                                     tmp_path: Path) -> None:
    text = _everything(receiver, monkeypatch, tmp_path, capture=False)
    assert SECRET not in text
    assert _plain_digests(text) == []


def test_with_capture_on_the_secret_is_there_so_the_search_can_see_it(
        receiver, monkeypatch, tmp_path: Path) -> None:
    text = _everything(receiver, monkeypatch, tmp_path, capture=True)
    assert SECRET in text
    assert _plain_digests(text) == []


def test_with_capture_on_and_a_masker_only_the_masked_form_leaves(
        receiver, monkeypatch, tmp_path: Path) -> None:
    set_content_masker(lambda content: content.replace(SECRET, "[MASKED]"))
    try:
        text = _everything(receiver, monkeypatch, tmp_path, capture=True)
    finally:
        set_content_masker(None)
    assert SECRET not in text
    assert "[MASKED]" in text
    assert _plain_digests(text) == []
