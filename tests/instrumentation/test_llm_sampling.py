"""A call whose span does not record (sampled out) is not read for context: nothing would
be recorded from it. Content capture still reads it (util-genai's log events carry it)."""

from __future__ import annotations

import logging

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from stub_server import REPLY

import otel_agent_context.instrumentation.openai._extract as OX
from otel_agent_context import _semconv as S
from otel_agent_context._failsafe import set_strict
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
@pytest.mark.parametrize(("sampler", "capture", "reads", "spans"), [
    (ALWAYS_OFF, False, 0, 0),
    (ALWAYS_OFF, True, 1, 0),
    (ALWAYS_ON, False, 1, 1),  # one span: the call's assembly is folded on it
    (ALWAYS_ON, True, 1, 1),
], ids=["sampled_out", "sampled_out_capture", "sampled_in", "sampled_in_capture"])
def test_the_request_is_read_only_when_something_records_it(
        stub, monkeypatch, caplog, sampler, capture, reads, spans, strict) -> None:
    """Read or not, nothing of ours fails: no warning logged, nothing raised when strict
    (a sampled-out call read for content capture once began the no-op envelope's stages
    and logged "context stages failed" on every call)."""
    set_strict(strict)
    seen: list[int] = []
    real = OX.chat_request

    def counting(*args):
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(OX, "chat_request", counting)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=provider, capture_content=capture)
    try:
        oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        messages = (m for m in [{"role": "user", "content": "Where is my order 1234?"}])
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
            reply = oc.chat.completions.create(model="gpt-4o-mini", messages=messages)
    finally:
        inst.uninstrument()
        set_strict(False)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("otel_agent_context")
            ] == []
    assert reply.choices[0].message.content == REPLY
    assert reply.usage.prompt_tokens > 3  # the generator reached the provider either way
    assert len(seen) == reads
    finished = exporter.get_finished_spans()
    assert len(finished) == spans
    for span in finished:  # the request was read: its one message is the call's one block
        assert span.attributes[S.ASSEMBLY_BLOCK_COUNT] == 1
        assert span.attributes[S.ASSEMBLY_BLOCK_KINDS] == ("user_message",)
