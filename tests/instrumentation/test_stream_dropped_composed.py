"""A stream dropped unread with the official GenAI instrumentor outside ours: the official
wrapper is collected first and ends the shared span, before our inner wrapper ends the call.
The call envelope's closing attributes (``context.lifecycle``, ``context.span_count``) are
written when the stream is handed back, so the bundle is whole all the same; and nothing is
written on the ended span (the SDK would warn). Real clients against the stub, the official
instrumentors themselves, the light path (content capture off) and util-genai's (on); the
stream of a raw response (``with_raw_response``) too."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from stub_server import StubServer

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

MESSAGES = [{"role": "user", "content": "Where is my order?"}]


def _openai(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES,
                                            stream=True)
    chunks = iter(stream)
    next(chunks)
    next(chunks)
    del stream, chunks


def _anthropic(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    stream = client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                    messages=MESSAGES, stream=True)
    chunks = iter(stream)
    next(chunks)
    del stream, chunks


def _openai_raw(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True)
    chunks = iter(raw.parse())
    next(chunks)
    del raw, chunks


def _anthropic_raw(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    raw = client.messages.with_raw_response.create(model="claude-sonnet-4-6", max_tokens=50,
                                                   messages=MESSAGES, stream=True)
    chunks = iter(raw.parse())
    next(chunks)
    del raw, chunks


def _raw_async(url: str, api: str) -> None:
    async def dropped() -> None:
        if api == "anthropic":
            raw: Any = await anthropic.AsyncAnthropic(
                base_url=url, api_key="k", max_retries=0).messages.with_raw_response.create(
                model="claude-sonnet-4-6", max_tokens=50, messages=MESSAGES, stream=True)
        else:
            raw = await openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key="k", max_retries=0
            ).chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=MESSAGES, stream=True)
        stream = raw.parse()  # the Anthropic client's is a coroutine, OpenAI's is not
        if inspect.isawaitable(stream):
            stream = await stream
        chunks = stream.__aiter__()
        await chunks.__anext__()
        del raw, stream, chunks
        gc.collect()  # in the loop, as the sync calls' test collects after them

    asyncio.run(dropped())


def _openai_raw_async(url: str) -> None:
    _raw_async(url, "openai")


def _anthropic_raw_async(url: str) -> None:
    _raw_async(url, "anthropic")


@pytest.mark.parametrize("capture", [False, True], ids=["light", "util_genai"])
@pytest.mark.parametrize("call", [_openai, _anthropic, _openai_raw, _anthropic_raw,
                                  _openai_raw_async, _anthropic_raw_async],
                         ids=["openai", "anthropic", "openai_raw", "anthropic_raw",
                              "openai_raw_async", "anthropic_raw_async"])
def test_dropped_stream_keeps_the_envelope(call: Any, capture: bool,
                                           monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "logger_provider": tel.logger_provider}
    # ours wrapped first: the official one, wrapped last, is outside ours
    instrumentors: list[tuple[Any, dict[str, Any]]] = [
        (OpenAIContextInstrumentor(), {**kw, "agent_context": tel.agent_context}),
        (AnthropicContextInstrumentor(), {**kw, "agent_context": tel.agent_context}),
        (OpenAIInstrumentor(), kw), (AnthropicInstrumentor(), kw)]
    for inst, args in instrumentors:
        inst.instrument(**args)
    try:
        with caplog.at_level(logging.WARNING), StubServer() as stub:
            call(stub.url)
            gc.collect()
            # the call is over: its span is no longer current (a raw response's wrappers
            # held from a finalizer would keep the official's invocation attached for good)
            assert not trace.get_current_span().is_recording()
        (span,) = [s for s in tel.spans() if s.name.startswith("chat ")]
        assert span.end_time is not None
        attrs = dict(span.attributes or {})
        assert attrs["context.lifecycle"] == "injected"
        assert attrs["context.span_count"] == 0
        assert attrs["context.id"].startswith("ctx")
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
        assert bundle["context_envelope"]["lifecycle"] == "injected"
        assert not [r for r in caplog.records if "ended span" in r.getMessage()]
    finally:
        for inst, _ in instrumentors:
            inst.uninstrument()
        tel.shutdown()
