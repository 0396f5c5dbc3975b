"""Streams on the light inference path record what util-genai's invocation records.

The light path (``instrumentation/_inference.py``) covers streams too: our stream wrappers
drive ``LightInference`` (ours alone, or ours outermost publishing for the official
instrumentor inside) or ``LightSuppressed`` (the official instrumentor outermost) as
util-genai's wrappers drive its invocations: the span current around each read, the time to
first chunk (a span attribute and a metric point) and the time per output chunk (a point a
chunk) with util-genai's metric attributes, ``gen_ai.request.stream``, the end at the last
chunk, at a terminal event, at ``close()``, at the application's exception, at an error
raised inside the client while reading (the transport's, a decode error: an error, in every
order), or when the stream is dropped unread (abandoned).

For each stream below, on the real clients against the stub, content capture off, alone and
composed with the official instrumentors either way round: once through the light path and
once forced through util-genai, everything recorded is compared: every span (name, kind,
scope, parent, status, attributes in order, events) and every GenAI metric point (scope,
attributes, count; sums too where they are not times). Times differ from run to run: the
time to first chunk attribute is compared as "a float, at least 0".
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from stub_server import StubServer

from otel_agent_context.instrumentation import _common, _inference
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

HISTORY = [{"role": "system", "content": "You are a support agent."},
           {"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "Let me check."},
           {"role": "user", "content": "Order 42, please."}]
TTFC = "gen_ai.response.time_to_first_chunk"
#: metrics whose values are times (compared by count only)
TIMES = ("gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk",
         "gen_ai.client.operation.time_per_output_chunk")


class _Cut(httpx2.SyncByteStream):
    """The first events of an SSE body, then the connection fails."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        yield from self.events
        raise httpx2.ReadError("connection lost mid-stream")


class _AsyncCut(httpx2.AsyncByteStream):
    """:class:`_Cut` for an async client."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event
        raise httpx2.ReadError("connection lost mid-stream")


def _events(body: bytes, keep: int, garble: bool) -> list[bytes]:
    """The first ``keep`` events of an SSE body; ``garble``: then one whose data is not
    JSON (the SDK's decode error), and the body whole after it."""
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    if garble:
        return [*events[:keep], b"data: {not json\n\n", *events[keep:]]
    return events[:keep]


class _CutTransport(httpx2.BaseTransport):
    """Forwards to the stub and cuts a streamed answer after ``keep`` events (or garbles
    the next one)."""

    def __init__(self, keep: int, garble: bool = False) -> None:
        self.keep, self.garble = keep, garble
        self.inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        events = _events(response.read(), self.keep, self.garble)
        return httpx2.Response(response.status_code,
                              headers={"content-type": "text/event-stream"},
                              stream=httpx2.ByteStream(b"".join(events)) if self.garble
                              else _Cut(events))


class _AsyncCutTransport(httpx2.AsyncBaseTransport):
    """:class:`_CutTransport` for an async client (cut only)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        events = _events(await response.aread(), self.keep, False)
        return httpx2.Response(response.status_code,
                              headers={"content-type": "text/event-stream"},
                              stream=_AsyncCut(events))


def _oa(url: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, **kw)


def _an(url: str, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, **kw)


def _an_cut_async(url: str) -> anthropic.AsyncAnthropic:
    """An async client whose streamed answers are cut after 4 events."""
    return anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0,
                                    http_client=httpx2.AsyncClient(
                                        transport=_AsyncCutTransport(4)))


def _chat_kw(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": HISTORY, "stream": True, "seed": 3,
            "temperature": 0.2, "max_completion_tokens": 50, **extra}


def _chat_stream(url: str) -> None:
    chunks = list(_oa(url).chat.completions.create(
        **_chat_kw(stream_options={"include_usage": True})))
    assert len(chunks) > 5


def _chat_stream_no_usage(url: str) -> None:
    for _ in _oa(url).chat.completions.create(**_chat_kw()):
        pass


def _chat_stream_closed_early(url: str) -> None:
    stream = _oa(url).chat.completions.create(**_chat_kw())
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()


def _chat_stream_with_closed_early(url: str) -> None:
    with _oa(url).chat.completions.create(**_chat_kw()) as stream:
        next(iter(stream))


def _chat_stream_app_error(url: str) -> None:
    with pytest.raises(KeyError), _oa(url).chat.completions.create(**_chat_kw()) as stream:
        for _ in stream:
            raise KeyError("the application's own error")


def _cut_chat(url: str) -> None:
    client = _oa(url, http_client=httpx2.Client(transport=_CutTransport(4)))
    for _ in client.chat.completions.create(**_chat_kw()):
        pass


def _cut_messages_async(url: str) -> None:
    async def run() -> None:
        client = _an_cut_async(url)
        async for _ in await client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                                    messages=HISTORY[1:], stream=True):
            pass

    asyncio.run(run())



def _chat_stream_cut(url: str) -> None:
    with pytest.raises(openai.APIConnectionError):
        _cut_chat(url)


def _chat_stream_garbled(url: str) -> None:
    client = _oa(url, http_client=httpx2.Client(transport=_CutTransport(3, garble=True)))
    stream = client.chat.completions.create(**_chat_kw())
    with pytest.raises(ValueError):  # the SDK's JSON decode error
        for _ in stream:
            pass


def _chat_stream_cut_async(url: str) -> None:
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0,
                                    http_client=httpx2.AsyncClient(
                                        transport=_AsyncCutTransport(4)))
        stream = await client.chat.completions.create(**_chat_kw())
        with pytest.raises(openai.APIConnectionError):
            async for _ in stream:
                pass

    asyncio.run(run())


def _chat_stream_helper_cut(url: str) -> None:
    client = _oa(url, http_client=httpx2.Client(transport=_CutTransport(4)))
    with pytest.raises(openai.APIConnectionError), client.chat.completions.stream(
            model="gpt-4o-mini", messages=HISTORY) as stream:
        for _ in stream:
            pass


def _chat_stream_never_iterated(url: str) -> None:
    stream = _oa(url).chat.completions.create(**_chat_kw())
    del stream
    gc.collect()  # abandoned: ended by the wrapper's finalizer


def _chat_stream_helper(url: str) -> None:
    with _oa(url).chat.completions.stream(model="gpt-4o-mini", messages=HISTORY) as stream:
        for _ in stream:
            pass


def _chat_stream_raw(url: str) -> None:
    raw = _oa(url).chat.completions.with_raw_response.create(**_chat_kw())
    for _ in raw.parse():
        pass


def _chat_stream_async(url: str) -> None:
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        stream = await client.chat.completions.create(
            **_chat_kw(stream_options={"include_usage": True}))
        async for _ in stream:
            pass

    asyncio.run(run())


def _chat_stream_async_closed_early(url: str) -> None:
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        stream = await client.chat.completions.create(**_chat_kw())
        async for _ in stream:
            break
        await stream.close()

    asyncio.run(run())


def _responses_stream(url: str) -> None:
    for _ in _oa(url).responses.create(model="gpt-4o-mini", input=HISTORY[1:],
                                       instructions=HISTORY[0]["content"], stream=True,
                                       max_output_tokens=50):
        pass


def _responses_stream_cut(url: str) -> None:
    client = _oa(url, http_client=httpx2.Client(transport=_CutTransport(4)))
    with pytest.raises(openai.APIConnectionError):
        for _ in client.responses.create(model="gpt-4o-mini", input=HISTORY[1:],
                                         stream=True, max_output_tokens=50):
            pass


def _messages_create_stream(url: str) -> None:
    for _ in _an(url).messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                      system=HISTORY[0]["content"], messages=HISTORY[1:],
                                      stream=True):
        pass


def _messages_create_stream_cut(url: str) -> None:
    client = _an(url, http_client=httpx2.Client(transport=_CutTransport(4)))
    with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)):
        for _ in client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                        messages=HISTORY[1:], stream=True):
            pass


def _messages_create_stream_cut_async(url: str) -> None:
    with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)):
        _cut_messages_async(url)


def _messages_stream_cut(url: str) -> None:
    client = _an(url, http_client=httpx2.Client(transport=_CutTransport(4)))
    with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)), \
            client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                   messages=HISTORY[1:]) as stream:
        for _ in stream:
            pass


def _messages_stream_cut_async(url: str) -> None:
    async def run() -> None:
        client = _an_cut_async(url)
        with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)):
            async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                              messages=HISTORY[1:]) as stream:
                async for _ in stream:
                    pass

    asyncio.run(run())


def _messages_stream(url: str) -> None:
    with _an(url).messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                  system=HISTORY[0]["content"], messages=HISTORY[1:],
                                  stop_sequences=["END"]) as stream:
        for _ in stream:
            pass


def _messages_stream_text(url: str) -> None:
    with _an(url).messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                  messages=HISTORY[1:]) as stream:
        assert "".join(stream.text_stream)


def _messages_stream_app_error(url: str) -> None:
    with pytest.raises(KeyError), _an(url).messages.stream(
            model="claude-sonnet-4-6", max_tokens=50, messages=HISTORY[1:]) as stream:
        for _ in stream:
            raise KeyError("the application's own error")


def _messages_stream_async(url: str) -> None:
    async def run() -> None:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
        async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                          messages=HISTORY[1:]) as stream:
            async for _ in stream:
                pass

    asyncio.run(run())


def _messages_create_stream_async(url: str) -> None:
    async def run() -> None:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
        async for _ in await client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                                    messages=HISTORY[1:], stream=True):
            pass

    asyncio.run(run())


STREAMS: dict[str, Callable[[str], None]] = {
    "chat": _chat_stream, "chat_no_usage": _chat_stream_no_usage,
    "chat_closed_early": _chat_stream_closed_early,
    "chat_with_closed_early": _chat_stream_with_closed_early,
    "chat_app_error": _chat_stream_app_error, "chat_cut": _chat_stream_cut,
    "chat_garbled": _chat_stream_garbled, "chat_cut_async": _chat_stream_cut_async,
    "chat_helper_cut": _chat_stream_helper_cut,
    "chat_never_iterated": _chat_stream_never_iterated, "chat_helper": _chat_stream_helper,
    "chat_raw": _chat_stream_raw, "chat_async": _chat_stream_async,
    "chat_async_closed_early": _chat_stream_async_closed_early,
    "responses": _responses_stream, "responses_cut": _responses_stream_cut,
    "messages_create": _messages_create_stream,
    "messages_create_cut": _messages_create_stream_cut,
    "messages_create_cut_async": _messages_create_stream_cut_async,
    "messages_stream_cut": _messages_stream_cut,
    "messages_stream_cut_async": _messages_stream_cut_async,
    "messages_create_async": _messages_create_stream_async,
    "messages_stream": _messages_stream, "messages_stream_text": _messages_stream_text,
    "messages_stream_app_error": _messages_stream_app_error,
    "messages_stream_async": _messages_stream_async,
}


#: the streams ended by an error raised inside the client while reading: its type as
#: util-genai records it
RAISED_WHILE_READING = {
    **dict.fromkeys(("chat_cut", "chat_cut_async", "chat_helper_cut", "responses_cut"),
                    "openai.APIConnectionError"),
    "chat_garbled": "json.decoder.JSONDecodeError",
    **dict.fromkeys(("messages_create_cut", "messages_create_cut_async",
                     "messages_stream_cut", "messages_stream_cut_async"), "httpx2.ReadError")}


def _instrument(tel: CapturedTelemetry, official: str) -> list[Any]:
    """Ours and, unless ``official`` is "none", the official instrumentors: "inner" wrapped
    first (ours outermost), "outer" wrapped last."""
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "logger_provider": tel.logger_provider}
    order: list[tuple[Any, dict[str, Any]]] = [
        (OpenAIContextInstrumentor(), {**kw, "agent_context": tel.agent_context}),
        (AnthropicContextInstrumentor(), {**kw, "agent_context": tel.agent_context})]
    if official != "none":
        order += [(OpenAIInstrumentor(), kw), (AnthropicInstrumentor(), kw)]
    if official == "inner":
        order.reverse()
    for inst, args in order:
        inst.instrument(**args)
    return [inst for inst, _ in order]


def _attrs(attributes: Any) -> list[tuple[str, Any]]:
    """A span's attributes in order, the port (a stub each) left out and the time to first
    chunk as its type (times differ from run to run)."""
    out = []
    for key, value in attributes.items():
        if key == "server.port":
            continue
        if key == TTFC:
            assert isinstance(value, float) and value >= 0.0
            value = "<seconds>"
        out.append((key, value))
    return out


def _record(url: str, call: Callable[[str], None], *, light: bool, official: str,
            monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], list[str]]:
    """Spans and GenAI metric points of ``call``, the light path on or off; which light
    invocations were made."""
    taken: list[str] = []
    real_init = _common.Call.__init__

    def init(call: Any, *args: Any, **kwargs: Any) -> None:
        real_init(call, *args, **kwargs)
        inv = call.invocation
        taken.append("suppressed" if isinstance(inv, _inference.LightSuppressed) else
                     ("published" if inv._data is not None else "own")
                     if isinstance(inv, _inference.LightInference) else "util-genai")

    with monkeypatch.context() as m:
        m.setattr(_common.Call, "__init__", init)
        if not light:
            m.setattr(_common, "light_supported", lambda handler: False)
        tel = CapturedTelemetry()
        instrumentors = _instrument(tel, official)
        try:
            call(url)
            gc.collect()
            spans = [(s.name, s.kind, s.instrumentation_scope.name,
                      s.parent.span_id if s.parent else None, s.status.status_code,
                      s.status.description, _attrs(s.attributes),
                      [(e.name, dict(e.attributes or {})) for e in s.events])
                     for s in tel.spans()]
            points = []
            data = tel.metric_reader.get_metrics_data()
            for rm in data.resource_metrics if data else ():
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        if not metric.name.startswith("gen_ai.client."):
                            continue
                        for p in metric.data.data_points:
                            labels = sorted((k, v) for k, v in (p.attributes or {}).items()
                                            if k != "server.port")
                            value = (p.count,) if metric.name in TIMES else \
                                (p.count, p.sum, p.min, p.max)
                            points.append((metric.name, sm.scope.name, labels, value))
            assert not tel.logs()
        finally:
            for inst in instrumentors:
                inst.uninstrument()
            tel.shutdown()
    return spans, sorted(points, key=repr), taken


ROLE = {"none": "own", "inner": "published", "outer": "suppressed"}


@pytest.mark.parametrize("official", ["none", "outer", "inner"])
@pytest.mark.parametrize("name", list(STREAMS))
def test_light_stream_records_what_util_genai_records(
        name: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:  # a stub each: its ids count up
        light_spans, light_points, taken = _record(stub.url, STREAMS[name], light=True,
                                                   official=official, monkeypatch=monkeypatch)
    with StubServer() as stub:
        util_spans, util_points, util_taken = _record(stub.url, STREAMS[name], light=False,
                                                      official=official,
                                                      monkeypatch=monkeypatch)
    assert taken == [ROLE[official]] and util_taken == ["util-genai"]
    assert light_spans == util_spans
    assert light_points == util_points
    # what was compared is what a stream records
    inference = [s for s in light_spans if s[0].startswith("chat ")]
    assert len(inference) == 1  # one span for the call, composed too
    attrs = dict(inference[0][6])
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["context.scope"] == "turn"
    # our end reached the call's span in every order: with the official manager around
    # ours, its stream wrapper ends the span when the events run out, before the exit
    assert attrs.get("context.span_count") == 0
    assert ("context.budget.actual_tokens" in attrs) is ("gen_ai.usage.input_tokens" in attrs)
    names = [p[0] for p in light_points]
    assert names.count("gen_ai.client.operation.duration") == 1  # one point, composed too
    # which invocation saw the chunks: ours follows every stream but the helper's
    # (messages.stream: read at its end), the official one all but the helper's text_stream
    if name.startswith("messages_stream"):
        seen = official != "none" and name != "messages_stream_text"
        timed = seen and official == "outer"  # the chunks' points are the outer's
    else:
        seen = timed = name != "chat_never_iterated"
    assert (TTFC in attrs) is seen
    assert names.count("gen_ai.client.operation.time_to_first_chunk") == int(timed)
    if name.endswith(("app_error", "never_iterated")):
        assert inference[0][4].name == "ERROR" and attrs["error.type"]
    # a stream ended by an error raised inside the client while reading (the transport's,
    # a decode error): the SDK closes its HTTP response as the error unwinds, and the call
    # ends with the error the application gets (not at that close), in every order
    if name in RAISED_WHILE_READING:
        assert (inference[0][4].name, attrs["error.type"]) == \
            ("ERROR", RAISED_WHILE_READING[name])
        (duration,) = [p for p in light_points if p[0] == "gen_ai.client.operation.duration"]
        assert ("error.type", RAISED_WHILE_READING[name]) in duration[2]
    else:
        assert inference[0][4].name != "ERROR" or name.endswith(("app_error",
                                                                 "never_iterated"))


@pytest.mark.parametrize("official", ["none", "outer", "inner"])
@pytest.mark.parametrize("name", ["chat", "chat_async", "chat_cut", "messages_create_async"])
def test_a_util_genai_keeping_its_stream_elsewhere_is_read_through_its_own_advance(
        name: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inlined read takes the SDK stream from util-genai's wrapper by its private name;
    a util-genai that keeps it under another one is read through its own ``_advance`` (the
    application's loop never meets an AttributeError), recording the same."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:
        util_spans, util_points, _ = _record(stub.url, STREAMS[name], light=False,
                                             official=official, monkeypatch=monkeypatch)
    monkeypatch.setattr(_common, "_ITERATOR", ("_self_renamed", "_self_arenamed"))
    with StubServer() as stub:
        spans, points, taken = _record(stub.url, STREAMS[name], light=True,
                                       official=official, monkeypatch=monkeypatch)
    assert taken == [ROLE[official]]
    assert (spans, points) == (util_spans, util_points)


def test_chunk_points_carry_util_genais_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours alone on a chat stream: a time-to-first-chunk point and a time-per-chunk point
    for each later chunk, with the call's start attributes (the response model is read at
    the stream's end, so the chunks' points have none), on our scope; then the call's
    duration and token points carry the response model."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", raising=False)
    with StubServer() as stub:
        _, points, taken = _record(stub.url, _chat_stream, light=True, official="none",
                                   monkeypatch=monkeypatch)
    assert taken == ["own"]
    by_name = {p[0]: p for p in points}
    first = by_name["gen_ai.client.operation.time_to_first_chunk"]
    later = by_name["gen_ai.client.operation.time_per_output_chunk"]
    assert first[1] == later[1] == "otel_agent_context.instrumentation.openai"
    start = [("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "openai"),
             ("gen_ai.request.model", "gpt-4o-mini"), ("server.address", "127.0.0.1")]
    assert first[2] == later[2] == start
    assert first[3] == (1,)
    assert later[3][0] > 5  # every chunk after the first
    duration = by_name["gen_ai.client.operation.duration"]
    assert ("gen_ai.response.model", "gpt-4o-mini") in duration[2]


def test_span_is_current_while_a_light_stream_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """util-genai's wrappers make the call's span current again around each read of a
    suspended stream (and not in between): so does the light path."""
    from opentelemetry import trace

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    seen = []
    for light in (True, False):
        with monkeypatch.context() as m:
            if not light:
                m.setattr(_common, "light_supported", lambda handler: False)
            tel = CapturedTelemetry()
            instrumentors = _instrument(tel, "none")
            try:
                with StubServer() as stub:
                    stream = _oa(stub.url).chat.completions.create(**_chat_kw())
                    assert (stream._self_light is not None) is light
                    reads: list[Any] = []

                    def spy(chunks: Iterator[Any], reads: list[Any] = reads
                            ) -> Iterator[Any]:
                        for chunk in chunks:  # runs inside the wrapper's read
                            reads.append(trace.get_current_span())
                            yield chunk

                    stream._self_iterator = spy(stream._self_iterator)
                    between = [trace.get_current_span() for _ in stream]
                (span,) = tel.spans()
                seen.append((len(reads) > 5,
                             {s.get_span_context().span_id for s in reads}
                             == {span.context.span_id},
                             any(s.get_span_context().is_valid for s in between)))
            finally:
                for inst in instrumentors:
                    inst.uninstrument()
                tel.shutdown()
    assert seen == [(True, True, False)] * 2


# -- the three roles with a stream, field by field, against util-genai's own invocations ---


def _chunk(inv: Any, light: bool, at: float) -> None:
    """A chunk ``at`` seconds after the invocation's start (the same times either way)."""
    inv._on_stream_chunk((inv._start if light else inv._monotonic_start_s) + at)


def _recorded(tel: CapturedTelemetry) -> tuple[Any, ...]:
    (span,) = tel.spans()
    points = []
    data = tel.metric_reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    value = (p.count,) if metric.name == TIMES[0] else \
                        (p.count, round(p.sum, 9), round(p.min, 9), round(p.max, 9))
                    points.append((metric.name, sm.scope.name,
                                   sorted((p.attributes or {}).items()), value))
    return (span.name, span.status.status_code, list(span.attributes.items()),
            sorted(points, key=repr))


@pytest.mark.parametrize("role", ["own", "published", "published_unseen", "suppressed"])
def test_stream_roles_record_what_util_genai_records(role: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Driven as a stream wrapper drives them (``_request_stream`` set, suspended, chunks at
    fixed times after the start, one after the end), the light invocations record the same
    span attributes (the time to first chunk exactly) and the same points (the chunks'
    times exactly) as util-genai's: ours alone (the response model set between two chunks:
    the later points carry it); ours outermost with another instrumentor's suppressed
    invocation inside that saw the chunks too (ours' time wins) or alone saw them
    ("published_unseen": the helper's stream, read by the other one only); ours inside
    another's inference (its time published into the outer data)."""
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    outcomes, published = [], []
    for light in (True, False):
        tel = CapturedTelemetry()
        kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
              "logger_provider": tel.logger_provider}
        ours = TelemetryHandler(instrumentation_scope_name="ours", **kw)
        theirs = TelemetryHandler(instrumentation_scope_name="theirs", **kw)
        where = {"request_model": "gpt-x", "server_address": "h", "server_port": 1}
        try:
            outer = theirs.inference("openai", operation_name="chat", **where) \
                if role == "suppressed" else None
            if light and role == "suppressed":
                data = otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY)
                inv: Any = _inference.LightSuppressed(data, "openai", context=None, **where)
            elif light:
                inv = _inference.LightInference(ours, "openai", context=None,
                                                publish=role != "own", **where)
            else:
                inv = ours.inference("openai", operation_name="chat", **where)
            inner = theirs.inference("openai", operation_name="chat", **where) \
                if role.startswith("published") else None
            for invocation in (inv, inner):
                if invocation is not None:
                    invocation._request_stream = True  # what the stream wrappers set
                    invocation.suspend()
            if inner is not None:
                _chunk(inner, False, 0.125)
                inner.response_model_name = "m-theirs"
                inner.stop()
            if role != "published_unseen":
                _chunk(inv, light, 0.25)
                _chunk(inv, light, 0.5)
                inv.response_model_name = "m-ours"
                _chunk(inv, light, 0.625)
            inv.input_tokens, inv.output_tokens = 9, 3
            inv.stop()
            if role != "published_unseen":
                _chunk(inv, light, 0.75)  # read after the end (an outer wrapper's chunk)
            if outer is not None:
                data = otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY)
                published.append({f: getattr(data, f) for f in data.__dataclass_fields__})
                outer.stop()
            outcomes.append(_recorded(tel))
        finally:
            tel.shutdown()
    assert outcomes[0] == outcomes[1]
    attrs = dict(outcomes[0][2])
    assert attrs["gen_ai.request.stream"] is True
    assert attrs[TTFC] == (0.125 if role == "published_unseen" else 0.25)
    points = {(p[0], p[1]) for p in outcomes[0][3]}
    if role == "own":
        (first,) = [p for p in outcomes[0][3] if p[0].endswith("time_to_first_chunk")]
        assert first[3] == (1, 0.25, 0.25, 0.25)
        later = {p[3]: p[2] for p in outcomes[0][3] if p[0].endswith("time_per_output_chunk")}
        # the second chunk without the response model; the third with it, and the one
        # after the end with the call's final attributes (the same: one point of two)
        assert sorted(later) == [(1, 0.25, 0.25, 0.25), (2, 0.25, 0.125, 0.125)]
        assert ("gen_ai.response.model", "m-ours") not in later[(1, 0.25, 0.25, 0.25)]
        assert ("gen_ai.response.model", "m-ours") in later[(2, 0.25, 0.125, 0.125)]
    if role == "suppressed":
        assert published[0] == published[1]
        assert published[0]["response_time_to_first_chunk"] == 0.25
        assert published[0]["request_stream"] is True
        assert ("gen_ai.client.operation.time_to_first_chunk", "ours") not in points


@pytest.mark.parametrize("cut", [_cut_chat, _cut_messages_async])
def test_error_raised_while_reading_reaches_the_application_unchanged(
        cut: Callable[[str], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """The error that ends a stream inside the client reaches the application as without
    instrumentation (its type, its traceback's last frames), ours alone or composed, and
    our call (the turn's inference span) ends with it."""
    import traceback

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)

    def raised(official: str | None) -> tuple[Any, ...]:
        tel = CapturedTelemetry()
        instrumentors = _instrument(tel, official) if official else []
        try:
            with StubServer() as stub, pytest.raises(Exception) as caught:
                cut(stub.url)
            frames = [(f.filename, f.name) for f in
                      traceback.extract_tb(caught.value.__traceback__)[-3:]]
            spans = [(s.status.status_code.name, s.attributes.get("error.type"))
                     for s in tel.spans()]
            return type(caught.value), frames, spans
        finally:
            for inst in instrumentors:
                inst.uninstrument()
            tel.shutdown()

    bare_type, bare_frames, _ = raised(None)
    for official in ("none", "outer", "inner"):
        kind, frames, spans = raised(official)
        assert (kind, frames) == (bare_type, bare_frames), official
        name = f"{bare_type.__module__}.{bare_type.__qualname__}"
        assert spans == [("ERROR", name)], official
