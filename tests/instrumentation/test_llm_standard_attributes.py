"""Ours alone loses nothing the official GenAI instrumentor records: for the same call on
the stub, every attribute the official one puts on its inference span is on ours (the
values of the call: ids, fingerprints, token counts, compaction), context attributes aside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stub_server import StubServer

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

#: differ from run to run by nature (a new stub per run, a timing)
_VOLATILE = {"server.port", "gen_ai.response.time_to_first_chunk", "gen_ai.response.id"}


def _chat(url: str) -> None:
    openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], seed=3,
        temperature=0.2, max_tokens=50)


def _chat_stream(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    for _ in client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                            messages=[{"role": "user", "content": "hi"}],
                                            stream_options={"include_usage": True}):
        pass


def _responses_compacted(url: str) -> None:
    openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0).responses.create(
        model="gpt-4o-mini", input="hi",
        context_management=[{"type": "compaction", "compact_threshold": 1}])


def _messages(url: str) -> None:
    anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
        model="claude-sonnet-4-6", max_tokens=50, messages=[{"role": "user", "content": "hi"}])


def _messages_stream(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        "".join(stream.text_stream)


def _inference(instrumentor: Any, call: Callable[[str], None]) -> dict[str, Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor.instrument(tracer_provider=provider)
    try:
        with StubServer() as stub:
            call(stub.url)
    finally:
        instrumentor.uninstrument()
    (span,) = [s for s in memory.get_finished_spans() if s.name.startswith("chat ")]
    return dict(span.attributes)


@pytest.mark.parametrize(("call", "ours", "official"), [
    (_chat, OpenAIContextInstrumentor, OpenAIInstrumentor),
    (_chat_stream, OpenAIContextInstrumentor, OpenAIInstrumentor),
    (_responses_compacted, OpenAIContextInstrumentor, OpenAIInstrumentor),
    (_messages, AnthropicContextInstrumentor, AnthropicInstrumentor),
    (_messages_stream, AnthropicContextInstrumentor, AnthropicInstrumentor),
], ids=["chat", "chat_stream", "responses_compacted", "messages", "messages_stream"])
def test_ours_alone_records_what_the_official_instrumentor_records(call, ours,
                                                                   official) -> None:
    theirs = _inference(official(), call)
    mine = _inference(ours(), call)
    assert sorted(set(theirs) - set(mine)) == []
    assert {k: mine[k] for k in theirs if k not in _VOLATILE} == \
        {k: v for k, v in theirs.items() if k not in _VOLATILE}
