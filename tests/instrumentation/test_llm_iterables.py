"""Generators are valid request parameters for both SDKs (``Iterable[...]``): reading the
request for telemetry must not consume what the SDK then sends."""

from __future__ import annotations

import collections
import operator

import anthropic
import openai
import pytest

from otel_agent_context._api import set_strict

SYSTEM = "You are a careful support agent. " * 20


def _messages(one_shot: bool):
    parts = [{"type": "text", "text": "hello there"}]
    message = {"role": "user", "content": (p for p in parts) if one_shot else parts}
    return (m for m in [message]) if one_shot else [message]


def _usage(stub, one_shot: bool) -> tuple[int, int]:
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)
    system = [{"type": "text", "text": SYSTEM}]
    chat = oc.chat.completions.create(model="gpt-4o", messages=_messages(one_shot))
    message = ac.messages.create(model="claude-3-haiku", max_tokens=50,
                                 system=(b for b in system) if one_shot else system,
                                 messages=_messages(one_shot))
    return chat.usage.prompt_tokens, message.usage.input_tokens


def test_generators_reach_the_provider_unconsumed(alone, stub) -> None:
    # the provider (stub) counts what it received: generators and lists must agree
    assert _usage(stub, one_shot=True) == _usage(stub, one_shot=False)
    bundles = alone.tel.bundles()
    assert len(bundles) == 4
    counts = [b["context_assemblies"][0]["block_count"] for b in bundles]
    assert counts[:2] == counts[2:]  # the telemetry saw the same messages both ways


def test_generators_reach_the_provider_through_the_stream_helper(alone, stub) -> None:
    # messages.stream() keeps the kwargs and sends them on __enter__, after we read them
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)

    def input_tokens(one_shot: bool) -> int:
        with ac.messages.stream(model="claude-3-haiku", max_tokens=50,
                                messages=_messages(one_shot)) as stream:
            return stream.get_final_message().usage.input_tokens

    assert input_tokens(one_shot=True) == input_tokens(one_shot=False)
    counts = [b["context_assemblies"][0]["block_count"] for b in alone.tel.bundles()]
    assert counts[0] == counts[1] > 0


def _nested_requests(one_shot: bool) -> list[tuple[str, dict]]:
    """Iterables deeper in the request: (API, kwargs), as iterators or as lists."""
    def it(items: list) -> object:
        return iter(items) if one_shot else items

    return [
        ("openai", {"model": "gpt-4o", "messages": [
            {"role": "user", "content": "where is my order"},
            {"role": "assistant", "tool_calls": it([{
                "id": "call_1", "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "order 42"}'}}])},
            {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}]}),
        ("anthropic", {"model": "claude-3-haiku", "max_tokens": 10, "messages": (
            {"role": "user", "content": it([{"type": "text", "text": "hello there " * 20}])},)}),
        ("anthropic", {"model": "claude-3-haiku", "max_tokens": 10, "messages": [
            {"role": "user", "content": "where is my order"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "tu1", "name": "lookup", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1",
                                          "content": it([{"type": "text",
                                                          "text": "shipped " * 10}])}]}]}),
        ("anthropic-beta", {"model": "claude-3-haiku", "max_tokens": 10,
                            "messages": [{"role": "user", "content": "hi"}],
                            "context_management": {"edits": it([
                                {"type": "clear_tool_uses_20250919"}])}}),
    ]


def test_nested_iterators_reach_the_provider_unconsumed(alone, stub) -> None:
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)
    send = {"openai": oc.chat.completions.create, "anthropic": ac.messages.create,
            "anthropic-beta": ac.beta.messages.create}
    for one_shot in (True, False):
        for api, kwargs in _nested_requests(one_shot):
            send[api](**kwargs)
    bodies = [body for _, body in stub.requests]
    assert len(bodies) == 8
    assert bodies[:4] == bodies[4:]  # the provider got the same requests both ways
    assert len(alone.tel.bundles()) == 8


def test_an_iterable_that_raises_reaches_the_application_unchanged(alone, stub) -> None:
    # Uninstrumented, the SDK meets the application's error while building the request and
    # sends nothing; reading the request first must not swallow it or send half of it.
    error = ValueError("the application's generator failed")

    def messages():
        yield {"role": "user", "content": "hello there " * 20}
        raise error

    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)

    def stream() -> None:
        with ac.messages.stream(model="claude-3-haiku", max_tokens=10,
                                messages=messages()) as s:
            s.get_final_message()

    set_strict(False)  # production behaviour: our own errors are logged, not raised
    try:
        for call in (lambda: oc.chat.completions.create(model="gpt-4o", messages=messages()),
                     lambda: ac.messages.create(model="claude-3-haiku", max_tokens=10,
                                                messages=messages()),
                     stream):
            with pytest.raises(ValueError) as raised:
                call()
            assert raised.value is error
    finally:
        set_strict(True)
    assert stub.requests == []


def test_an_interrupt_in_the_applications_generator_ends_the_call(setup, stub) -> None:
    """Ctrl-C while the application's message generator runs (read before the SDK sends):
    the interrupt reaches the application unchanged, the call's span ends, and nothing of
    it stays in the context: later calls get spans and metric points of their own (an open
    invocation left attached used to swallow them, with the official instrumentor too)."""
    from opentelemetry import context as otel_context

    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)

    def interrupted():
        yield {"role": "user", "content": "hello"}
        raise KeyboardInterrupt

    before = otel_context.get_current()
    with pytest.raises(KeyboardInterrupt):
        oc.chat.completions.create(model="gpt-4o-mini", messages=interrupted())
    assert otel_context.get_current() == before
    setup.tel.span_exporter.clear()
    for _ in range(2):
        oc.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": "hi"}])
    chats = [s for s in setup.tel.spans() if s.name.startswith("chat ")]
    assert len(chats) == 2 and all(s.parent is None for s in chats)
    durations = [v for labels, v in setup.tel.metrics()["gen_ai.client.operation.duration"]]
    assert sum(p.count for p in durations) == 3  # the interrupted call's, then the two


def test_a_history_of_plain_messages_is_checked_at_once_and_an_iterator_still_settled(
        alone, stub) -> None:
    # _materialize checks a list of plain dict messages in one pass and leaves it alone; a
    # message holding anything else (an iterator, a nested list) still goes the long way
    from otel_agent_context.instrumentation._common import _materialize

    history = [{"role": "user", "content": f"question {i}"} for i in range(5)]
    kwargs = {"model": "gpt-4o", "messages": history}
    assert _materialize(kwargs) and kwargs["messages"] is history
    assert history == [{"role": "user", "content": f"question {i}"} for i in range(5)]
    for late in ({"role": "user", "content": iter([{"type": "text", "text": "late"}])},
                 {"role": "user", "content": [{"type": "text", "text": iter(["x"])}]}):
        settled = {"model": "gpt-4o", "messages": [*history, late]}
        assert _materialize(settled)
        content = settled["messages"][-1]["content"]
        assert type(content) is list and type(content[0]["text"]) in (str, list)
        assert settled["messages"][-1]["content"][0]["text"] in ("late", ["x"])

    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    for one_shot in (True, False):
        part = {"type": "text", "text": "and the last one " * 10}
        oc.chat.completions.create(model="gpt-4o", messages=[
            *history, {"role": "user", "content": iter([part]) if one_shot else [part]}])
    bodies = [body for _, body in stub.requests]
    assert len(bodies) == 2 and bodies[0] == bodies[1]


def test_a_raising_iterator_inside_a_listed_message_reaches_the_application(
        alone, stub, caplog) -> None:
    # The chat reader settles a listed history itself, message by message: an iterator that
    # raises there (after plain messages were read) must leave the request unread, every
    # later message settled as before (in the request's copies: the application's messages
    # keep their own iterators), and the SDK meet the application's own error.
    error = ValueError("the application's part generator failed")

    def parts():
        yield {"type": "text", "text": "first part"}
        raise error

    later = iter([{"type": "text", "text": "later"}])
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "question"},
               {"role": "user", "name": "ann", "content": parts()},
               {"role": "user", "content": later}]
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    set_strict(False)
    try:
        with pytest.raises(ValueError) as raised:
            oc.chat.completions.create(model="gpt-4o", messages=history)
    finally:
        set_strict(True)
    assert raised.value is error
    assert stub.requests == []
    assert history[3]["content"] is later  # the application's message left as it was
    assert not [r for r in caplog.records if r.name.startswith("otel_agent_context")]
    chat = [s for s in alone.tel.spans() if s.name.startswith("chat ")]
    assert len(chat) == 1 and not any(
        k.startswith("context.assembly") for k in chat[0].attributes or {})


def _tool_call_history(calls, bad: dict) -> list[dict]:
    return [{"role": "user", "content": "q"}, bad,
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
            {"role": "user", "content": "and?"}]


_CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def test_a_message_the_reader_fails_on_still_leaves_later_iterators_settled(
        alone, stub) -> None:
    # Our reader raises on a malformed message (tool_calls a number) before it reaches a
    # later message's iterator: that iterator is still made a list before the SDK (or an
    # instrumentor inside ours, which would drain it) reads it, as when nothing raised.
    history = _tool_call_history(iter([_CALL]), {"role": "user", "content": "x",
                                                 "tool_calls": 5})
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    set_strict(False)
    try:
        oc.chat.completions.create(model="gpt-4o", messages=history)
    finally:
        set_strict(True)
    assert type(history[2]["tool_calls"]) is not list  # the application's: its iterator
    assert stub.requests[0][1]["messages"][2]["tool_calls"] == [_CALL]


def test_the_applications_iterator_error_comes_before_a_message_the_reader_fails_on(
        alone, stub) -> None:
    # strict mode raises our own reading errors, but the application's error wins, as it
    # did when every iterator was settled before the request was read
    error = ValueError("the application's tool-call generator failed")

    def calls():
        yield _CALL
        raise error

    history = _tool_call_history(calls(), {"role": "user", "content": "x", "tool_calls": 5})
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with pytest.raises(ValueError) as raised:
        oc.chat.completions.create(model="gpt-4o", messages=history)
    assert raised.value is error and stub.requests == []
    chat = [s for s in alone.tel.spans() if s.name.startswith("chat ")]
    assert len(chat) == 1 and chat[0].attributes["error.type"] == "ValueError"


def test_a_raising_tools_iterator_still_settles_the_messages(alone, stub) -> None:
    error = ValueError("the application's tool generator failed")

    def tools():
        yield {"type": "function", "function": {"name": "lookup", "parameters": {}}}
        raise error

    parts = iter([{"type": "text", "text": "hello"}])
    history = [{"role": "user", "content": parts}]
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with pytest.raises(ValueError) as raised:
        oc.chat.completions.create(model="gpt-4o", messages=history, tools=tools())
    assert raised.value is error and stub.requests == []
    assert history[0]["content"] is parts  # settled in the request's copy, not here


def test_a_read_an_iterator_stops_takes_no_framework_ids(alone, stub) -> None:
    # A framework (llama_index) hands the ids of the messages it sends; a read stopped by the
    # application's iterator must leave them all for the SDK's retry or the next read.
    from otel_agent_context.instrumentation._common import KNOWN_MESSAGES

    def parts():
        yield {"type": "text", "text": "part"}
        raise ValueError("the application's part generator failed")

    known = {("system", "Be brief."): ["id-s"], ("user", "hi"): ["id-a", "id-b"]}
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
               {"role": "user", "content": parts()}]
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    token = KNOWN_MESSAGES.set(known)
    try:
        with pytest.raises(ValueError):
            oc.chat.completions.create(model="gpt-4o", messages=history)
    finally:
        KNOWN_MESSAGES.reset(token)
    assert known == {("system", "Be brief."): ["id-s"], ("user", "hi"): ["id-a", "id-b"]}


_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {}}}


class _OneShot:
    """An iterable that yields its items once (a cursor, a queue's view): not an iterator."""

    def __init__(self, items: list) -> None:
        self._items: list | None = items

    def __iter__(self):
        items, self._items = self._items or [], None
        return iter(items)


def test_an_iterable_that_yields_once_reaches_the_provider(setup, stub) -> None:
    """Reading such an iterable first would leave the SDK an empty one: the provider got
    no messages. It is not read; what the SDK does with it (sends it for chat, refuses it
    for the others) is unchanged."""
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)
    message = {"role": "user", "content": "Where is order 42?"}
    sent = oc.chat.completions.create(model="gpt-4o", messages=_OneShot([message]))
    listed = oc.chat.completions.create(model="gpt-4o", messages=[message])
    assert sent.usage.prompt_tokens == listed.usage.prompt_tokens > 0
    for call in (lambda: ac.messages.create(model="claude-3-haiku", max_tokens=50,
                                            messages=_OneShot([message])),
                 lambda: oc.responses.create(model="gpt-4o", input=_OneShot([message]))):
        with pytest.raises(TypeError, match="not JSON serializable"):
            call()
    # the first call's inference span carries no context (its request was not read);
    # iterables read again as often as asked are read (a deque of the last turns, a
    # dict's values)
    oc.chat.completions.create(model="gpt-4o", messages=collections.deque([message],
                                                                          maxlen=20))
    oc.chat.completions.create(model="gpt-4o", messages=[message],
                               tools={"lookup": _TOOL}.values())
    assert [b["context_assemblies"][0]["block_count"]
            for b in setup.tel.bundles()] == [1, 1, 1]


class _Tracked(dict):
    """An application's dict that notes every write into it."""

    writes: list[str] = []

    def __setitem__(self, key: str, value: object) -> None:
        _Tracked.writes.append(key)
        super().__setitem__(key, value)


def test_the_applications_own_lists_and_dicts_are_left_as_they_were(setup, stub) -> None:
    """The SDK never writes into the request it is given: neither do we. An iterator read
    for telemetry goes to the SDK as a list in a copy of the message holding it."""
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)
    _Tracked.writes.clear()
    for send in (lambda history: oc.chat.completions.create(model="gpt-4o", messages=history),
                 lambda history: ac.messages.create(model="claude-3-haiku", max_tokens=50,
                                                    messages=history)):
        parts = iter([{"type": "text", "text": "hello there"}])
        calls = iter([{"type": "text", "text": "and more"}])
        tracked = _Tracked({"role": "user", "content": calls})
        history = [{"role": "user", "content": parts}, {"role": "assistant", "content": "hi"},
                   tracked]
        as_given = list(history)
        send(history)
        assert history == as_given and all(map(operator.is_, history, as_given))
        assert history[0]["content"] is parts and tracked["content"] is calls
        sent = stub.requests[-1][1]["messages"]
        assert sent[0]["content"] == [{"type": "text", "text": "hello there"}]
        assert sent[2]["content"] == [{"type": "text", "text": "and more"}]
    assert _Tracked.writes == []
    assert [b["context_assemblies"][0]["block_count"] for b in setup.tel.bundles()] == [3, 3]
