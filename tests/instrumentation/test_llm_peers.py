"""Composed with a peer that wraps the Anthropic ``messages.stream()`` manager around ours
and leaves its block by closing the stream itself, never calling the manager it wraps
(ours) on exit: OpenInference's does so (openinference-instrumentation-anthropic 3.1). Our
call stayed open: no span, no bundle.

A stand-in of that peer's manager is used here, as small as the behaviour: OpenInference's
instrumentors register under the entry-point names of the official GenAI ones
(``openai``, ``anthropic``), so installing them in the test environment would stop
``test_llm_subprocess`` enabling the official instrumentors alone. The real one was run
by hand the same way (benchmarks' ``bench`` extra; the closing notes)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
import wrapt
from anthropic.resources.messages import AsyncMessages, Messages
from llm_helpers import block_rows, inference_spans
from opentelemetry.instrumentation.utils import unwrap
from stub_server import REPLY

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

MESSAGES = [{"role": "user", "content": "Where is my order 1234?"}]


class _PeerManager(wrapt.ObjectProxy):  # type: ignore[misc]
    """The peer's manager: enters the one it wraps, closes the stream on exit."""

    def __enter__(self) -> Any:
        self._self_stream = self.__wrapped__.__enter__()
        return self._self_stream

    def __exit__(self, *exc: Any) -> None:
        self._self_stream.close()

    async def __aenter__(self) -> Any:
        self._self_stream = await self.__wrapped__.__aenter__()
        return self._self_stream

    async def __aexit__(self, *exc: Any) -> None:
        await self._self_stream.close()


def _peer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return _PeerManager(wrapped(*args, **kwargs))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_the_stream_helper_under_a_peer_that_closes_the_stream(stub, is_async: bool) -> None:
    tel = CapturedTelemetry()
    ours = AnthropicContextInstrumentor()
    ours.instrument(tracer_provider=tel.tracer_provider, agent_context=tel.agent_context)
    method = "AsyncMessages.stream" if is_async else "Messages.stream"
    wrapt.wrap_function_wrapper("anthropic.resources.messages", method, _peer)  # outermost
    try:
        if is_async:
            async def run() -> str:
                client = anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url,
                                                  api_key="k", max_retries=0)
                async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                                  messages=MESSAGES) as stream:
                    return "".join([text async for text in stream.text_stream])
            text = asyncio.run(run())
        else:
            client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k",
                                         max_retries=0)
            with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                        messages=MESSAGES) as stream:
                text = "".join(stream.text_stream)
        assert text.strip() == REPLY
        (span,) = inference_spans(tel.spans())
        assert len(block_rows(span)) == 1
        assert span.attributes[S.GEN_AI_USAGE_INPUT_TOKENS] > 0  # the stream's end read
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete"
    finally:
        unwrap(AsyncMessages if is_async else Messages, "stream")  # the peer's, outermost
        ours.uninstrument()
        tel.shutdown()


@pytest.mark.parametrize("peer", [True, False], ids=["peer_closes", "ours_exits"])
def test_the_call_fails_with_the_blocks_error(stub, peer: bool) -> None:
    """Under the peer, its exit closes the stream while the block's error leaves (the
    interpreter runs ``__exit__`` as its handler); alone, our exit ends the call first
    (the SDK's exit closes the stream inside it): either way the call fails with the
    application's error, and a stream closed outside any error, or in the application's
    own handler of an error it handled, is a success."""
    tel = CapturedTelemetry()
    ours = AnthropicContextInstrumentor()
    ours.instrument(tracer_provider=tel.tracer_provider, agent_context=tel.agent_context)
    if peer:
        wrapt.wrap_function_wrapper("anthropic.resources.messages", "Messages.stream", _peer)
    try:
        client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k",
                                     max_retries=0)
        with pytest.raises(KeyError), client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=50, messages=MESSAGES) as stream:
            next(iter(stream.text_stream))
            raise KeyError("the application's")
        (span,) = inference_spans(tel.spans())
        assert span.attributes["error.type"] == "KeyError"
        with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                    messages=MESSAGES) as stream:
            stream.get_final_message()
        # closed in the application's own handler of an error it handled: not the call's
        with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                    messages=MESSAGES) as stream:
            try:
                next(iter(stream.text_stream))
                raise ValueError("handled")
            except ValueError:
                stream.close()
        for span in inference_spans(tel.spans())[1:]:
            assert "error.type" not in span.attributes
        assert len(inference_spans(tel.spans())) == 3
    finally:
        if peer:
            unwrap(Messages, "stream")
        ours.uninstrument()
        tel.shutdown()
