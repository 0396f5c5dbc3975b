"""A conversation's history read on the plain path is remembered (``history_start``): the
next call of the conversation reads only the messages added since, and its blocks are the
ones reading the whole history gives, field by field, in every case the start is reused or
not: a history grown by a turn (the latest user message then history), the same history
again, a shorter or changed one, a message with another key, a tool call, a repeat renamed
later, a history that is not the request's own list, and both APIs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest

from otel_agent_context import _digest
from otel_agent_context.instrumentation import _common as C
from otel_agent_context.instrumentation._common import KNOWN_MESSAGES
from otel_agent_context.instrumentation.anthropic import _extract as AX
from otel_agent_context.instrumentation.openai import _extract as OX
from otel_agent_context.testing import CapturedTelemetry

CHAT = C.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator, OX.chat_is_stream,
             OX.PROVIDER)
MESSAGES = C.Api(AX.messages_request, AX.messages_response, AX.MessagesAccumulator,
                 AX.messages_is_stream, AX.PROVIDER)
SYSTEM = {"role": "system", "content": "You are ACME's support agent."}


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    _digest._forget()
    token = KNOWN_MESSAGES.set(None)
    try:
        yield
    finally:
        KNOWN_MESSAGES.reset(token)


def _turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Question {i} about my order?"},
            {"role": "assistant", "content": f"Answer {i}."}]


def _kwargs(api: C.Api, messages: list[Any]) -> dict[str, Any]:
    if api is CHAT:
        return {"model": "gpt-4o-mini", "messages": messages, "max_completion_tokens": 50}
    return {"model": "claude-sonnet-4-6", "max_tokens": 50, "system": "Be brief.",
            "messages": messages}


def _fields(blocks: list[C.Block]) -> list[tuple[Any, ...]]:
    return [tuple(getattr(b, f.name) for f in fields(b) if f.name not in ("_row", "_item"))
            for b in blocks]


def _through_call(api: C.Api, messages: list[Any]) -> list[C.Block]:
    """The blocks an auto-instrumented call reads (``Call._read``: the plain lists known)."""
    tel = CapturedTelemetry()
    try:
        ct = C.ClientTelemetry("test", tracer_provider=tel.tracer_provider,
                               meter_provider=tel.meter_provider)
        call = ct.start(api, (), _kwargs(api, messages), "127.0.0.1", 8000, True)
        assert call.req is not None
        blocks = list(call.req.blocks)
        call.finish(None)
        return blocks
    finally:
        tel.shutdown()


def _whole(api: C.Api, messages: list[Any]) -> list[C.Block]:
    """The blocks of the request read whole (no remembered history: a read outside a call)."""
    req = api.parse_request((), _kwargs(api, [dict(m) for m in messages]), False)
    C.distinct_ids(req.blocks)
    return req.blocks


def _conversation() -> list[list[dict[str, Any]]]:
    """Histories in the order an application might send them."""
    base = [SYSTEM, *_turn(0)]
    grown = [*base, *_turn(1)]
    ask = {"role": "user", "content": "And when will it arrive?"}
    return [
        [*base, ask],  # first call
        [*base, ask],  # the same again (a retry)
        [*base, ask, {"role": "assistant", "content": "Tomorrow."}, *_turn(1)],  # grown
        [*grown, {"role": "user", "content": "Question 0 about my order?"}],  # a repeat
        [*grown, {"role": "user", "content": "Thanks", "name": "ann"}],  # another key
        [*grown, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "c1", "content": "done"}],  # a tool call
        [*base],  # shorter
        [SYSTEM, {"role": "user", "content": "Another question?"}, *_turn(2)],  # changed
        [SYSTEM, {"role": "user", "content": "Another question?"}, *_turn(2), *_turn(3),
         {"role": "user", "content": ""}],
        [],
    ]


@pytest.mark.parametrize("api", [CHAT, MESSAGES], ids=["openai chat", "anthropic messages"])
def test_a_remembered_history_gives_the_blocks_of_the_whole_read(api: C.Api) -> None:
    for messages in _conversation():
        if api is MESSAGES:
            messages = [m for m in messages if m["role"] != "system"]
        assert _fields(_through_call(api, messages)) == _fields(_whole(api, messages)), \
            messages


@pytest.mark.parametrize("api", [CHAT, MESSAGES], ids=["openai chat", "anthropic messages"])
def test_the_next_call_reads_only_the_messages_added(api: C.Api,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = OX if api is CHAT else AX
    read: list[str] = []
    plain_block = module.plain_block

    def counted(role: str, text: str, *rest: Any) -> C.Block:
        read.append(text)
        return plain_block(role, text, *rest)

    monkeypatch.setattr(module, "plain_block", counted)
    monkeypatch.setattr(C, "plain_block", counted)
    start = [*_turn(0), *_turn(1)]
    _through_call(api, [*start, {"role": "user", "content": "Latest?"}])
    read.clear()
    grown = [*start, {"role": "user", "content": "Latest?"},
             {"role": "assistant", "content": "Now."}, {"role": "user", "content": "Next?"}]
    blocks = _through_call(api, grown)
    # the added messages, and the user message that is no longer the latest
    assert read == ["Latest?", "Now.", "Next?"]
    assert _fields(blocks) == _fields(_whole(api, grown))
    read.clear()
    _through_call(api, grown)
    assert read == []  # the same history again: nothing read


def test_a_history_that_is_not_the_requests_own_list_is_read_whole() -> None:
    """Outside a call (``_materialize`` did not see the request) nothing is remembered."""
    messages = [SYSTEM, *_turn(0)]
    OX.chat_request((), _kwargs(CHAT, messages), False)
    assert C.history_start("openai chat", messages) is None
    assert not [k for k in _digest._MEMO if k[0] == "history blocks"]
