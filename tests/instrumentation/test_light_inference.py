"""The light inference path records what util-genai's ``InferenceInvocation`` records.

For the same calls on the stub (the real clients; chat completions, responses, Anthropic
messages, async, raw responses, a context-length error), once through the light path and once
forced through util-genai, everything recorded is compared: every span's name, kind, parent,
status, attributes and events, and the points of ``gen_ai.client.operation.duration`` (count
and attributes) and ``gen_ai.client.token.usage`` (attributes and sums). Then: the light
path is the one taken when nothing else is in play and composed with the official instrumentor
either way round (the same comparison, composed), and not under content capture nor with
util-genai's event switch (streams: ``test_light_streams.py``). Last, the two composed roles
field by field against util-genai's outer and suppressed invocations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
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


def _instrument(tel: CapturedTelemetry, ours: list[Any], theirs: list[Any],
                official: str) -> None:
    """Ours and the official instrumentors on ``tel``; ``official`` "inner": wrapped first
    (the instrumentor wrapped last runs outermost), else last."""
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "logger_provider": tel.logger_provider}
    order = [(i, {**kw, "agent_context": tel.agent_context}) for i in ours] + \
        [(i, kw) for i in theirs]
    if official == "inner":
        order.reverse()
    for inst, args in order:
        inst.instrument(**args)


def _record(url: str, call: Callable[[str], None], *, light: bool,
            monkeypatch: pytest.MonkeyPatch, official: str = "none", capture: bool = False
            ) -> tuple[list[tuple[Any, ...]], dict[str, Any], list[Any]]:
    """Spans and GenAI metric points of ``call``, the light path on or off; ``official``:
    the official GenAI instrumentors too, "outer" (wrapped last: outermost) or "inner"."""
    taken: list[str] = []
    real, real_suppressed = _common.LightInference, _common.LightSuppressed

    def light_inference(*args: Any, **kwargs: Any) -> Any:
        taken.append("published" if kwargs.get("publish") else "own")
        return real(*args, **kwargs)

    def light_suppressed(*args: Any, **kwargs: Any) -> Any:
        taken.append("suppressed")
        return real_suppressed(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(_common, "LightInference", light_inference)
        m.setattr(_common, "LightSuppressed", light_suppressed)
        if not light:
            m.setattr(_common, "light_supported", lambda handler: False)
        tel = CapturedTelemetry(capture_content=capture)
        ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
        theirs = [OpenAIInstrumentor(), AnthropicInstrumentor()] if official != "none" else []
        _instrument(tel, ours, theirs, official)
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
            for inst in ours + theirs:
                inst.uninstrument()
            tel.shutdown()
    expected = {"none": "own", "inner": "published", "outer": "suppressed"}[official]
    assert taken == ([expected] if light and not capture else []), \
        "the light path was (not) taken"
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


@pytest.mark.parametrize("official", ["outer", "inner"])
@pytest.mark.parametrize("name", list(CALLS))
def test_composed_light_path_records_what_util_genai_records(
        name: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Composed with the official instrumentor, either way round: the one inference span
    (the official's gen_ai.* and our context.* on it) and the GenAI metric points (no
    duplicate) are the same whether ours took the light path or util-genai's."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:
        light_spans, light_metrics, _ = _record(stub.url, CALLS[name], light=True,
                                                monkeypatch=monkeypatch, official=official)
    with StubServer() as stub:
        util_spans, util_metrics, _ = _record(stub.url, CALLS[name], light=False,
                                              monkeypatch=monkeypatch, official=official)
    assert light_spans == util_spans
    assert light_metrics == util_metrics
    inference = [s for s in light_spans if s[0].startswith("chat ")]
    assert len(inference) == 1  # one span for the two instrumentors
    attrs = inference[0][5]
    assert attrs["context.scope"] == "turn" and "context.assembly.block_item_ids" in attrs
    # one point per call of each GenAI metric: the inner invocation records none
    assert [p[0] for _, p in light_metrics["gen_ai.client.operation.duration"]] == [1]
    if name.endswith("too_long"):
        assert inference[0][3].name == "ERROR" and attrs["error.type"]
    else:
        assert attrs["gen_ai.usage.input_tokens"] > 0
        assert sorted(dict(labels)["gen_ai.token.type"]
                      for labels, _ in light_metrics["gen_ai.client.token.usage"]) == \
            ["input", "output"]


def _taken(url: str, call: Callable[[str], None], monkeypatch: pytest.MonkeyPatch, *,
           official: str = "none", capture: bool = False) -> int:
    """How many calls took the light path (an inference of ours or ours suppressed)."""
    taken: list[bool] = []
    real, real_suppressed = _common.LightInference, _common.LightSuppressed

    def light_inference(*args: Any, **kwargs: Any) -> Any:
        taken.append(True)
        return real(*args, **kwargs)

    def light_suppressed(*args: Any, **kwargs: Any) -> Any:
        taken.append(True)
        return real_suppressed(*args, **kwargs)

    monkeypatch.setattr(_common, "LightInference", light_inference)
    monkeypatch.setattr(_common, "LightSuppressed", light_suppressed)
    tel = CapturedTelemetry(capture_content=capture)
    ours = [AnthropicContextInstrumentor()]
    theirs = [AnthropicInstrumentor()] if official != "none" else []
    _instrument(tel, ours, theirs, official)
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
        # composed with the official instrumentor, either way round: one span all the same
        # (ours publishes for the official one inside, or publishes into the one outside)
        assert _taken(stub.url, _messages, monkeypatch, official="inner") == 1
        assert _taken(stub.url, _messages, monkeypatch, official="outer") == 1
        assert _taken(stub.url, _messages, monkeypatch, official="outer", capture=True) == 0
        # streams too (the light invocation times their chunks as util-genai's does; see
        # test_light_streams.py), alone and composed, not under content capture
        assert _taken(stub.url, _messages_stream, monkeypatch) == 1
        assert _taken(stub.url, _messages_create_stream, monkeypatch) == 1
        assert _taken(stub.url, _messages_stream, monkeypatch, official="outer") == 1
        assert _taken(stub.url, _messages_stream, monkeypatch, official="inner") == 1
        assert _taken(stub.url, _messages_create_stream, monkeypatch, official="outer") == 1
        assert _taken(stub.url, _messages_create_stream, monkeypatch, official="inner") == 1
        assert _taken(stub.url, _messages_stream, monkeypatch, capture=True) == 0
        assert _taken(stub.url, _messages_create_stream, monkeypatch, capture=True) == 0
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


# -- the two composed roles, field by field, against util-genai's own invocations ---------

#: every field ours sets, with values no other field has
_OURS = {"temperature": 0.3, "top_p": 0.8, "max_tokens": 77, "stop_sequences": ("X",),
         "seed": 9, "finish_reasons": ("stop",), "response_model_name": "m-ours",
         "response_id": "r-ours", "input_tokens": 11, "output_tokens": 5,
         "request_choice_count": 2, "cache_read_input_tokens": 4,
         "cache_write_input_tokens": 0, "thinking_tokens": 3, "previous_response_id": "p",
         "conversation_compacted": True}


def _publish_theirs(inv: Any) -> None:
    """What another instrumentor's suppressed invocation may publish: fields ours leaves
    unset (and some ours sets: ours must win), attributes and metric attributes."""
    inv.top_k = 40
    inv.frequency_penalty = 0.5
    inv.response_model_name = "m-theirs"
    inv.output_type = "text"
    inv.reasoning_level = "low"
    inv.prompt_name = "support"
    inv.set_input_tokens([("text", 9), ("image", 2)])
    inv.set_output_tokens([("text", 5)])
    inv.attributes["openai.api.type"] = "chat_completions"
    inv.attributes["gen_ai.output.type"] = "json"
    inv.metric_attributes["openai.response.service_tier"] = "default"


def _handlers(tel: CapturedTelemetry) -> tuple[Any, Any]:
    from opentelemetry.util.genai.handler import TelemetryHandler

    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "logger_provider": tel.logger_provider}
    return (TelemetryHandler(instrumentation_scope_name="ours", **kw),
            TelemetryHandler(instrumentation_scope_name="theirs", **kw))


@contextlib.contextmanager
def _in_conversation() -> Iterator[tuple[CapturedTelemetry, Any, Any]]:
    """Captured telemetry, our handler and another instrumentor's, a conversation id in
    the context."""
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai._conversation_context import CONVERSATION_ID_KEY

    tel = CapturedTelemetry()
    token = otel_context.attach(otel_context.set_value(CONVERSATION_ID_KEY, "conv-1"))
    try:
        yield (tel, *_handlers(tel))
    finally:
        otel_context.detach(token)
        tel.shutdown()


def _outcome(tel: CapturedTelemetry) -> tuple[Any, ...]:
    (span,) = tel.spans()
    metrics = {name: sorted((sorted(labels.items()), _point(name, v)) for labels, v in points)
               for name, points in tel.metrics().items() if name.startswith("gen_ai.")}
    return (span.name, span.status.status_code, span.status.description,
            list(span.attributes.items()), metrics)


@pytest.mark.parametrize("error", [False, True])
@pytest.mark.parametrize("model", ["gpt-x", None])
def test_published_light_inference_is_util_genais_outer_invocation(
        error: bool, model: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours outermost: our light invocation with another util-genai invocation inside it
    records the span (attributes in util-genai's order) and metric points util-genai's
    outer invocation records, the inner one's published data merged under ours."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    outcomes = []
    for light in (True, False):
        with _in_conversation() as (tel, ours, theirs):
            if light:
                inv: Any = _inference.LightInference(
                    ours, "openai", request_model=model, server_address="h",
                    server_port=1, context=None, publish=True)
            else:
                inv = ours.inference("openai", request_model=model, server_address="h",
                                     server_port=1, operation_name="chat")
            inner = theirs.inference("openai", request_model="gpt-theirs",
                                     server_address="h", server_port=1,
                                     operation_name="chat")
            assert type(inner).__name__ == "SuppressedInferenceInvocation"
            for name, value in _OURS.items():
                setattr(inner, name, value)  # the same values: ours win either way
            _publish_theirs(inner)
            inner.stop()
            for name, value in _OURS.items():
                setattr(inv, name, value)
            if error:
                inv.fail(ValueError("no"))
            else:
                inv.stop()
            outcomes.append(_outcome(tel))
    assert outcomes[0] == outcomes[1]
    attrs = dict(outcomes[0][3])
    assert attrs["gen_ai.response.model"] == "m-ours" and attrs["gen_ai.request.top_k"] == 40
    assert attrs["openai.api.type"] == "chat_completions"
    assert attrs["gen_ai.request.model"] == (model or "gpt-theirs")


def test_light_suppressed_publishes_what_util_genais_suppressed_invocation_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours inside another util-genai inference: the outer invocation's data after ours ends
    is the same as after util-genai's suppressed invocation ends, and so is the span."""
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    outcomes, published = [], []
    for light in (True, False):
        with _in_conversation() as (tel, ours, theirs):
            outer = theirs.inference("openai", request_model=None, server_address="h",
                                     operation_name="chat")
            data = otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY)
            if light:
                mode = _inference.light_mode(None)
                assert mode is data
                inv: Any = _inference.LightSuppressed(
                    mode, "openai", request_model="gpt-ours", server_address="h",
                    server_port=2, context=None)
            else:
                inv = ours.inference("openai", request_model="gpt-ours", server_address="h",
                                     server_port=2, operation_name="chat")
            assert inv.span is outer.span
            for name, value in _OURS.items():
                setattr(inv, name, value)
            inv.fail(ValueError("no"))  # a suppressed invocation publishes no error
            published.append({f: getattr(data, f) for f in data.__dataclass_fields__})
            outer.frequency_penalty = 0.1  # the outer one's own values stay
            outer.stop()
            outcomes.append(_outcome(tel))
    assert published[0] == published[1]
    assert published[0]["request_max_tokens"] == 77
    assert published[0]["conversation_id"] == "conv-1"
    assert outcomes[0] == outcomes[1]
    assert dict(outcomes[0][3])["gen_ai.request.model"] == "gpt-ours"


def test_light_mode_leaves_util_genai_the_cases_it_does_not_cover(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY
    from opentelemetry.util.genai.invocation import InferenceData

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    assert _inference.light_mode(None) is True
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "true")
    assert _inference.light_mode(None) is False
    data = InferenceData()
    ctx = otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, data)
    assert _inference.light_mode(ctx) is data  # the outer one decides about events
    data.capture_content = True  # content published to the outer one: util-genai's path
    assert _inference.light_mode(ctx) is False
    data.capture_content, data.upload_completion = False, True
    assert _inference.light_mode(ctx) is False
    assert _inference.light_mode(
        otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, object())) is False


def test_composed_roles_need_the_util_genai_fields_they_were_written_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The composed roles read and write util-genai's ``InferenceData`` by field name. With
    the installed util-genai the fields are the known ones (a release that renames, removes
    or adds one fails here first); with any other set, a composed call goes through
    util-genai's own invocations (one span a call still), and ours alone keeps its path."""
    from otel_agent_context.instrumentation import _inference

    assert _inference._data_fields_known()
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    monkeypatch.setattr(_inference, "_KNOWN_DATA_FIELDS",
                        _inference._KNOWN_DATA_FIELDS - {"usage_cache_write_input_tokens"})
    assert not _inference._data_fields_known()
    monkeypatch.setattr(_inference, "COMPOSABLE", False)
    monkeypatch.setattr(_common, "COMPOSABLE", False)
    with StubServer() as stub:
        assert _taken(stub.url, _messages, monkeypatch, official="inner") == 0
        assert _taken(stub.url, _messages, monkeypatch, official="outer") == 0
        assert _taken(stub.url, _messages, monkeypatch) == 1


def test_published_data_is_a_new_inference_data_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``new_data`` copies ``InferenceData()``'s defaults instead of calling its generated
    ``__init__``: the same fields in the same order, and dicts of its own each time (what
    one call's other instrumentor publishes never reaches the next call's data)."""
    from opentelemetry.util.genai.invocation import InferenceData

    assert _inference._DATA_DEFAULTS is not None  # the installed util-genai takes the copy
    first = _inference.new_data()
    assert type(first) is InferenceData
    assert list(vars(first).items()) == list(vars(InferenceData()).items())
    first.attributes["other.key"] = "v"
    first.metric_attributes["other.metric"] = "m"
    first.response_id = "resp_1"
    second = _inference.new_data()
    assert vars(second) == vars(InferenceData())
    assert second.attributes == {} and second.metric_attributes == {}
    assert second.attributes is not first.attributes
    # a util-genai whose defaults are not all plain values: its own __init__
    monkeypatch.setattr(_inference, "_DATA_DEFAULTS", None)
    assert vars(_inference.new_data()) == vars(InferenceData())
