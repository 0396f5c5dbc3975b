"""Streams behind ``with_raw_response`` (LangChain's ChatOpenAI streams this way when it keeps
response headers): the call is followed through ``raw.parse()`` to the end of the stream."""

from __future__ import annotations

import asyncio
import gc
import warnings

import anthropic
import openai
import pytest
from llm_helpers import assert_folded, assert_genai, inference_spans, one_inference
from opentelemetry import trace
from stub_server import REPLY

from otel_agent_context import _semconv as S

MESSAGES = [{"role": "system", "content": "You are ACME's support agent."},
            {"role": "user", "content": "Where is my order 1234?"}]


def _check(tel, provider: str, model: str) -> None:
    spans = tel.spans()
    inf = assert_folded(spans)
    assert_genai(inf, provider, model)  # response id, model and usage: read from the stream
    assert inf.attributes[S.BUDGET_ACTUAL_TOKENS] == inf.attributes[
        S.GEN_AI_USAGE_INPUT_TOKENS]
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["context_budgets"][0]["actual_tokens"] > 0


def test_openai_raw_response_stream(setup, stub) -> None:
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    raw = oc.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True})
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert inference_spans(setup.tel.spans()) == []  # not finished while the stream is unread
    stream = raw.parse()
    assert raw.parse() is stream  # the SDK's cache still holds
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.strip() == REPLY
    _check(setup.tel, "openai", "gpt-4o-mini")


def test_openai_async_raw_response_stream(setup, stub) -> None:
    async def run() -> str:
        oc = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                max_retries=0)
        raw = await oc.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True,
            stream_options={"include_usage": True})
        stream = raw.parse()
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(run()).strip() == REPLY
    _check(setup.tel, "openai", "gpt-4o-mini")


def test_anthropic_raw_response_stream(setup, stub) -> None:
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                             max_retries=0)
    raw = ac.messages.with_raw_response.create(
        model="claude-sonnet-4-6", max_tokens=200, system="You are ACME's support agent.",
        messages=MESSAGES[1:], stream=True)
    kinds = [event.type for event in raw.parse()]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    _check(setup.tel, "anthropic", "claude-sonnet-4-6")


def test_anthropic_async_raw_response(setup, stub) -> None:
    # AsyncAnthropic's raw response parses in a coroutine: the call is read from the one the
    # application awaits (reading it ourselves left a coroutine never awaited, the warning
    # in the application's process, and the call without its usage)
    async def run() -> tuple[str, list[str]]:
        ac = anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                                      max_retries=0)
        raw = await ac.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=200, system="You are ACME's support agent.",
            messages=MESSAGES[1:])
        message = await raw.parse()
        assert await raw.parse() is message  # the SDK's cache still holds
        raw = await ac.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=200, system="You are ACME's support agent.",
            messages=MESSAGES[1:], stream=True)
        kinds = [event.type async for event in await raw.parse()]
        return message.content[0].text, kinds

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text, kinds = asyncio.run(run())
        gc.collect()
    assert text.strip() == REPLY
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert not [w for w in caught if "never awaited" in str(w.message)]
    spans = inference_spans(setup.tel.spans())
    assert len(spans) == 2
    for inf in spans:
        assert_genai(inf, "anthropic", "claude-sonnet-4-6")
        assert inf.attributes[S.BUDGET_ACTUAL_TOKENS] == inf.attributes[
            S.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == ["complete"] * 2


def test_anthropic_async_raw_response_cancelled_while_parsing(setup, stub, monkeypatch) -> None:
    # another library's hook makes parse() pause (the SDK's does not on a body already
    # read): a cancellation meanwhile reaches the application, and the call has ended
    from anthropic._response import AsyncAPIResponse

    parse = AsyncAPIResponse.parse

    async def paused(self, **kwargs):
        await asyncio.sleep(0.5)
        return await parse(self, **kwargs)

    monkeypatch.setattr(AsyncAPIResponse, "parse", paused)

    async def run() -> bool:
        ac = anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                                      max_retries=0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await ac.messages.with_raw_response.create(
                    model="claude-sonnet-4-6", max_tokens=200, messages=MESSAGES[1:])
        return trace.get_current_span().get_span_context().is_valid

    assert asyncio.run(run()) is False  # nothing of the call left current
    (inf,) = inference_spans(setup.tel.spans())  # ended
    assert inf.attributes[S.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert S.BUDGET_ACTUAL_TOKENS not in inf.attributes  # nothing was read


def test_raw_response_dropped_unparsed_still_ends_the_call(alone, stub) -> None:
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    raw = oc.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert inference_spans(alone.tel.spans()) == []
    del raw
    gc.collect()
    spans = alone.tel.spans()
    inf = assert_folded(spans)  # ended, with its budget and assembly
    assert S.GEN_AI_USAGE_INPUT_TOKENS not in inf.attributes  # nothing was read
    assert S.BUDGET_ACTUAL_TOKENS not in inf.attributes
    assert [s.name for s in spans] == [inf.name]
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_raw_response_closed_unparsed_ends_the_call_there(setup, stub) -> None:
    # its HTTP response closed by the application: nothing can be read any more
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    raw = oc.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True)
    if setup.official == "none":  # the official one ends its span when create returns
        assert inference_spans(setup.tel.spans()) == []
    raw.http_response.close()
    inf = assert_folded(setup.tel.spans())  # ended, raw still held
    assert S.BUDGET_ACTUAL_TOKENS not in inf.attributes  # nothing was read
    assert inf.attributes[S.CONTEXT_SPAN_COUNT] == 0
    assert setup.tel.bundles()[0]["rebuild"]["status"] == "complete"
    raw.http_response.close()  # again: nothing more
    del raw
    gc.collect()
    assert len(inference_spans(setup.tel.spans())) == 1


def test_langchain_chat_openai_streaming_with_response_headers(alone, stub) -> None:
    # ChatOpenAI(include_response_headers=True) streams through with_raw_response
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url, api_key="sk-test",
                     include_response_headers=True, stream_usage=True, max_retries=0)
    chunks = list(llm.stream("Where is my order 1234?"))
    assert "".join(str(c.content) for c in chunks).strip() == REPLY
    assert any("headers" in (c.response_metadata or {}) for c in chunks)
    _check(alone.tel, "openai", "gpt-4o-mini")


def test_streaming_response_body_stays_the_applications(setup, stub) -> None:
    # with_streaming_response leaves the body unread: reading it for telemetry would take it
    # from the application. The call is read from the application's own parse().
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with oc.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=MESSAGES) as response:
        completion = response.parse()
    assert completion.choices[0].message.content == REPLY
    _check(setup.tel, "openai", "gpt-4o-mini")


def test_streaming_response_read_as_bytes_is_untouched(alone, stub) -> None:
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                             max_retries=0)
    with ac.messages.with_streaming_response.create(
            model="claude-sonnet-4-6", max_tokens=50, messages=MESSAGES[1:]) as response:
        body = b"".join(response.iter_bytes())
    assert REPLY.encode() in body  # all of it reached the application
    del response
    gc.collect()
    inf = one_inference(alone.tel.spans())  # the call still ended, without response data
    assert S.GEN_AI_USAGE_INPUT_TOKENS not in inf.attributes


@pytest.mark.parametrize("stream", [False, True], ids=["response", "stream"])
def test_a_streaming_response_closed_unparsed_ends_the_call_there(setup, stub,
                                                                  stream: bool) -> None:
    """Read as lines (a proxy forwarding the events as they are) and closed by its block:
    our call ends when the body is read to its end (which closes the HTTP response) or at
    the block's end, while the application still holds the response (it ended only when
    the response was collected: never, or with a wrong duration), its records in the one
    inference span however composed, the record's end too (with the official one's proxy
    of a stream outside ours, the HTTP response's close ends its span: ours ended after it,
    a partial bundle)."""
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with oc.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=stream) as response:
        if setup.official == "none":  # composed, the official instrumentor's span ends
            # when the client's method returns (its own timing, in either order)
            assert not inference_spans(setup.tel.spans())  # not ended before it is read
        lines = list(response.iter_lines())
    assert lines
    inf = one_inference(setup.tel.spans())  # ``response`` still held
    assert inf.attributes[S.ASSEMBLY_BLOCK_COUNT] == len(MESSAGES)
    if setup.official == "none":  # (the official instrumentor reads a plain response)
        assert S.GEN_AI_USAGE_INPUT_TOKENS not in inf.attributes
    response.close()  # again: nothing more
    assert len(inference_spans(setup.tel.spans())) == 1

    async def run() -> None:
        aoc = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                 max_retries=0)
        async with aoc.chat.completions.with_streaming_response.create(
                model="gpt-4o-mini", messages=MESSAGES, stream=stream) as response:
            assert [line async for line in response.iter_lines()]
        assert len(inference_spans(setup.tel.spans())) == 2
        del response

    asyncio.run(run())
    # left: the official instrumentor outside ours ends the span of an async plain response
    # when the method returns (its parse() not awaited), before ours can end on it
    late = setup.official == "outer" and not stream
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == \
        ["complete", "partial" if late else "complete"]
    assert [inf.attributes.get(S.CONTEXT_SPAN_COUNT)
            for inf in inference_spans(setup.tel.spans())] == [0, None if late else 0]


def test_async_streaming_response_is_read_from_the_awaited_parse(alone, stub) -> None:
    async def run() -> str:
        oc = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                max_retries=0)
        async with oc.chat.completions.with_streaming_response.create(
                model="gpt-4o-mini", messages=MESSAGES) as response:
            completion = await response.parse()
        return completion.choices[0].message.content

    assert asyncio.run(run()) == REPLY
    _check(alone.tel, "openai", "gpt-4o-mini")


@pytest.mark.parametrize("read", ["read", "text", "json"])
def test_a_streaming_response_read_before_its_parse_is_read_from_the_parse(
        setup, stub, read: str) -> None:
    """The body read first (which closes the HTTP response at its end), then parsed: the
    call is read from the parse, not ended at that close; ``parse(to=...)`` first, on the
    async client too."""
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with oc.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=MESSAGES) as response:
        getattr(response, read)()
        assert response.parse().choices[0].message.content == REPLY
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                             max_retries=0)
    with ac.messages.with_streaming_response.create(
            model="claude-sonnet-4-6", max_tokens=50, messages=MESSAGES[1:]) as response:
        getattr(response, read)()
        assert response.parse().content[0].text == REPLY

    async def run() -> None:
        aoc = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                 max_retries=0)
        async with aoc.chat.completions.with_streaming_response.create(
                model="gpt-4o-mini", messages=MESSAGES) as response:
            assert REPLY in await response.parse(to=str)
            assert (await response.parse()).choices[0].message.content == REPLY

    asyncio.run(run())
    spans = inference_spans(setup.tel.spans())
    assert len(spans) == 3
    # left: the official instrumentor outside ours ends the span of Anthropic's plain
    # response when it has read the body, and of the async client's when create returns,
    # before the application's parse() (docs/instrumentation.md)
    late = [False, setup.official == "outer", setup.official == "outer"]
    for inf, left in zip(spans, late, strict=True):
        if not left:
            assert inf.attributes[S.CONTEXT_SPAN_COUNT] == 0
            assert inf.attributes[S.BUDGET_ACTUAL_TOKENS] == inf.attributes[
                S.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == [
        "partial" if left else "complete" for left in late]
