"""The light inference path records what util-genai's ``InferenceInvocation`` records.

For the same calls on the stub (the real clients; chat completions, responses, Anthropic
messages, async, raw responses, a context-length error), once through the light path and once
forced through util-genai, everything recorded is compared: every span's name, kind, parent,
status, attributes and events, and the points of ``gen_ai.client.operation.duration`` (count
and attributes) and ``gen_ai.client.token.usage`` (attributes and sums). Then: the light
path is the one taken when nothing else is in play, and not under content capture, with the
official instrumentor composed either way, with util-genai's event switch, nor for streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
from stub_server import StubServer

from otel_agent_context._api import set_strict
from otel_agent_context.instrumentation import _common, _inference
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

HISTORY = [{"role": "system", "content": "You are a support agent."},
           {"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "Let me check."},
           {"role": "user", "content": "Order 42, please."}]


def _chat(url: str) -> None:
    openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=HISTORY, seed=3, temperature=0.2, top_p=0.9,
        max_completion_tokens=50, stop=["END"], n=1)


def _chat_async(url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    asyncio.run(client.chat.completions.create(model="gpt-4o-mini", messages=HISTORY))


def _chat_raw(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    client.chat.completions.with_raw_response.create(model="gpt-4o-mini",
                                                     messages=HISTORY).parse()


def _chat_too_long(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gpt-4", max_completion_tokens=50,
                                       messages=[{"role": "user", "content": "x " * 20_000}])


def _responses(url: str) -> None:
    openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0).responses.create(
        model="gpt-4o-mini", input=HISTORY[1:], instructions=HISTORY[0]["content"],
        max_output_tokens=50, context_management=[{"type": "compaction",
                                                    "compact_threshold": 1}])


def _messages(url: str) -> None:
    anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
        model="claude-sonnet-4-6", max_tokens=50, system=HISTORY[0]["content"],
        messages=HISTORY[1:], stop_sequences=["END"])


def _messages_too_long(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="claude-3-haiku", max_tokens=50,
                               messages=[{"role": "user", "content": "x " * 500_000}])


CALLS = {"chat": _chat, "chat_async": _chat_async, "chat_raw": _chat_raw,
         "chat_too_long": _chat_too_long, "responses": _responses, "messages": _messages,
         "messages_too_long": _messages_too_long}


def _record(url: str, call: Callable[[str], None], *, light: bool,
            monkeypatch: pytest.MonkeyPatch
            ) -> tuple[list[tuple[Any, ...]], dict[str, Any], list[Any]]:
    """Spans and GenAI metric points of ``call``, the light path on or off."""
    taken: list[bool] = []
    real = _common.LightInference

    def light_inference(*args: Any, **kwargs: Any) -> Any:
        taken.append(True)
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(_common, "LightInference", light_inference)
        if not light:
            m.setattr(_common, "light_supported", lambda handler: False)
        tel = CapturedTelemetry()
        kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
              "logger_provider": tel.logger_provider, "agent_context": tel.agent_context}
        ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
        for inst in ours:
            inst.instrument(**kw)
        try:
            call(url)
            spans = [(s.name, s.kind, s.parent.span_id if s.parent else None,
                      s.status.status_code, s.status.description,
                      {k: v for k, v in s.attributes.items() if k != "server.port"},
                      [(e.name, dict(e.attributes or {})) for e in s.events])
                     for s in tel.spans()]
            # a stub each: its port differs
            metrics = {name: sorted(((sorted((k, v) for k, v in labels.items()
                                             if k != "server.port"), _point(name, value))
                                     for labels, value in points), key=repr)
                       for name, points in tel.metrics().items()
                       if name.startswith("gen_ai.client.")}
            logs = tel.logs()
            points = [p for name, ps in tel.metrics().items() if name.startswith("gen_ai.")
                      for p in ps]
        finally:
            for inst in ours:
                inst.uninstrument()
            tel.shutdown()
    assert taken == ([True] if light else []), "the light path was (not) taken"
    assert not logs
    return spans, metrics, points


def _point(name: str, value: Any) -> tuple[Any, ...]:
    if name == "gen_ai.client.operation.duration":
        return (value.count,)  # a duration's value differs from run to run
    return (value.count, value.sum, value.min, value.max)


@pytest.mark.parametrize("name", list(CALLS))
def test_light_path_records_what_util_genai_records(name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:  # a stub each: its ids count up
        light_spans, light_metrics, light_points = _record(stub.url, CALLS[name], light=True,
                                             monkeypatch=monkeypatch)
    with StubServer() as stub:
        util_spans, util_metrics, _ = _record(stub.url, CALLS[name], light=False,
                                           monkeypatch=monkeypatch)
    assert light_spans == util_spans
    assert light_metrics == util_metrics
    assert "gen_ai.client.operation.duration" in light_metrics
    assert all("server.port" in labels for labels, _ in light_points)
    if not name.endswith("too_long"):
        assert any(dict(labels).get("gen_ai.token.type") == "output"
                   for labels, _ in light_metrics["gen_ai.client.token.usage"])
    else:
        assert all(dict(labels).get("error.type")
                   for labels, _ in light_metrics["gen_ai.client.operation.duration"])


def _taken(url: str, call: Callable[[str], None], monkeypatch: pytest.MonkeyPatch, *,
           official: str = "none", capture: bool = False) -> int:
    """How many calls took the light path."""
    taken: list[bool] = []
    real = _common.LightInference

    def light_inference(*args: Any, **kwargs: Any) -> Any:
        taken.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(_common, "LightInference", light_inference)
    tel = CapturedTelemetry(capture_content=capture)
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "logger_provider": tel.logger_provider}
    ours = [AnthropicContextInstrumentor()]
    theirs = [AnthropicInstrumentor()] if official != "none" else []
    order = [(i, {**kw, "agent_context": tel.agent_context}) for i in ours] + \
        [(i, kw) for i in theirs]
    if official == "inner":  # the instrumentor wrapped last runs outermost
        order.reverse()
    for inst, args in order:
        inst.instrument(**args)
    try:
        call(url)
        inference = [s for s in tel.spans() if s.name.startswith("chat ")]
        assert len(inference) == 1  # one inference span a call, whichever path
        assert inference[0].attributes["context.scope"] == "turn"
    finally:
        for inst in ours + theirs:
            inst.uninstrument()
        tel.shutdown()
    return len(taken)


def _messages_stream(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                messages=HISTORY[1:]) as stream:
        "".join(stream.text_stream)


def _messages_create_stream(url: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    for _ in client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                    messages=HISTORY[1:], stream=True):
        pass


def test_when_the_light_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:
        assert _taken(stub.url, _messages, monkeypatch) == 1
        # composed with the official instrumentor, either way round: util-genai merges
        assert _taken(stub.url, _messages, monkeypatch, official="inner") == 0
        assert _taken(stub.url, _messages, monkeypatch, official="outer") == 0
        # streams: util-genai's stream wrappers follow them
        assert _taken(stub.url, _messages_stream, monkeypatch) == 0
        assert _taken(stub.url, _messages_create_stream, monkeypatch) == 0
        # content capture, ours or util-genai's
        assert _taken(stub.url, _messages, monkeypatch, capture=True) == 0
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        assert _taken(stub.url, _messages, monkeypatch) == 0
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        # util-genai's event switch: it would emit an operation details event
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "true")
        assert _taken(stub.url, _messages, monkeypatch) == 0


def test_light_inference_covers_what_the_instrumentors_set() -> None:
    """Every InferenceInvocation property the request readers set exists on the light one
    (its slots refuse any other: a new one must be added to both)."""
    inv = object.__new__(_inference.LightInference)
    for name in ("temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty",
                 "max_tokens", "stop_sequences", "seed", "request_choice_count",
                 "previous_response_id", "response_id", "response_model_name",
                 "finish_reasons", "input_tokens", "output_tokens", "cache_read_input_tokens",
                 "cache_write_input_tokens", "thinking_tokens", "conversation_compacted"):
        setattr(inv, name, 1)
    with pytest.raises(AttributeError):
        inv.input_messages = []  # type: ignore[attr-defined]


def _chat_empty_conversation(url: str) -> None:
    """An empty conversation id left in the context by other code: util-genai writes none."""
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai._conversation_context import CONVERSATION_ID_KEY

    token = otel_context.attach(otel_context.set_value(CONVERSATION_ID_KEY, ""))
    try:
        _chat(url)
    finally:
        otel_context.detach(token)


def test_an_empty_conversation_id_is_left_out_as_util_genai_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:
        light_spans, _, _ = _record(stub.url, _chat_empty_conversation, light=True,
                                    monkeypatch=monkeypatch)
    with StubServer() as stub:
        util_spans, _, _ = _record(stub.url, _chat_empty_conversation, light=False,
                                   monkeypatch=monkeypatch)
    assert light_spans == util_spans
    assert all("gen_ai.conversation.id" not in attrs for *_, attrs, _ in light_spans)


class _Unprintable(BaseException):
    """Raised by the transport; a BaseException, so that the client passes it on as it is."""

    def __str__(self) -> str:
        raise TypeError("no text for this error")


class _FailingTransport:
    """An httpx transport that raises the application's own exception."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def handle_request(self, request: Any) -> Any:
        raise self.error

    def close(self) -> None:
        pass


def test_an_error_without_text_still_ends_the_light_span(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """util-genai's ``Error.from_exception`` needs ``str(exc)``; when that raises, the call's
    span still ends, the context is restored, and the application gets its exception."""
    import httpx
    from opentelemetry import trace

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    error = _Unprintable()
    tel = CapturedTelemetry()
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                    agent_context=tel.agent_context)
    try:
        client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
                               http_client=httpx.Client(transport=_FailingTransport(error)))
        before = trace.get_current_span()
        with pytest.raises(_Unprintable) as raised:
            client.chat.completions.create(model="gpt-4o-mini", messages=HISTORY)
        assert raised.value is error  # the application's own exception, unchanged
        assert trace.get_current_span() is before
        (span,) = tel.spans()
        assert span.name == "chat gpt-4o-mini"
        assert span.status.status_code.name == "ERROR"
        assert span.attributes["error.type"].endswith("._Unprintable")
    finally:
        inst.uninstrument()
        tel.shutdown()


class _Undecided:
    """A ``stream`` argument that cannot say whether it is true."""

    def __bool__(self) -> bool:
        raise ValueError("truth value is ambiguous")


def test_a_stream_argument_we_cannot_read_is_the_clients_error_on_the_span(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The client rejects it, as without instrumentation, and the call is recorded with that
    error (our reading of it does not raise first). Outside strict test mode: reading the
    request fails too, which is logged."""
    set_strict(False)
    monkeypatch.setattr("otel_agent_context.instrumentation._common._strict_now", lambda: False)
    tel = CapturedTelemetry()
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                    agent_context=tel.agent_context)
    try:
        with StubServer() as stub:
            client = openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0)
            with pytest.raises(ValueError, match="ambiguous") as raised:
                client.chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                               stream=_Undecided())  # type: ignore[call-overload]
        frames = [f.name for f in raised.traceback]
        assert "_stream_call" not in frames and "is_stream_call" not in frames
        (span,) = tel.spans()
        assert span.status.status_code.name == "ERROR"
        assert span.attributes["error.type"] == "ValueError"
    finally:
        set_strict(True)
        inst.uninstrument()
        tel.shutdown()
