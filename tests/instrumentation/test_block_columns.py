"""A call's folded arrays and window segments, read from its blocks in one pass
(``_folded.block_columns``: each block's row kept on it when first read), are what reading
each field of each block gives: on varied requests, on a remembered block read by an
earlier call, on a repeat renamed on a copy, with cache breakpoints.

The reference below is the per-field reading the fold and ``_segments`` did before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion

from otel_agent_context import _digest
from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import _common as C
from otel_agent_context.instrumentation._common import KNOWN_MESSAGES, distinct_ids
from otel_agent_context.instrumentation.anthropic import _extract as AX
from otel_agent_context.instrumentation.openai import _extract as OX
from otel_agent_context.testing import CapturedTelemetry

CHAT = C.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator, OX.chat_is_stream,
             OX.PROVIDER)
MESSAGES = C.Api(AX.messages_request, AX.messages_response, AX.MessagesAccumulator,
                 AX.messages_is_stream, AX.PROVIDER)
COMPLETION = ChatCompletion.model_validate({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Shipped."}}],
    "usage": {"prompt_tokens": 90, "completion_tokens": 3, "total_tokens": 93}})
REPLY = Message.model_validate({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "Shipped."}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 90, "output_tokens": 3}})

SYSTEM = {"role": "system", "content": "You are ACME's support agent."}
ASK = {"role": "user", "content": "Where is my order?"}
ANSWER = {"role": "assistant", "content": "It shipped."}
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}


def _chat(*messages: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": list(messages), "max_completion_tokens": 50}


def _generated() -> dict[str, Any]:
    return {"model": "gpt-4o-mini",
            "messages": (dict(m) for m in (SYSTEM, ASK, ANSWER, ASK))}


REQUESTS: dict[str, tuple[C.Api, Any]] = {
    "plain history": (CHAT, lambda: _chat(SYSTEM, {"role": "developer", "content": "Brief."},
                                          ASK, ANSWER, {"role": "user", "content": ""}, ASK)),
    "content parts": (CHAT, lambda: _chat(SYSTEM, {"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]})),
    "tool calls, None content": (CHAT, lambda: _chat(SYSTEM, ASK, TOOL_CALL, TOOL_RESULT,
                                                     ANSWER)),
    "content not text": (CHAT, lambda: _chat(ASK, {"role": "user", "content": 42},
                                             {"role": "assistant", "content": None})),
    "generator of messages": (CHAT, _generated),
    "repeats": (CHAT, lambda: _chat(ASK, ANSWER, ASK, ANSWER, ASK)),
    "no messages": (CHAT, lambda: _chat()),
    "anthropic, cache breakpoints": (MESSAGES, lambda: {
        "model": "claude-sonnet-4-6", "max_tokens": 50,
        "system": [{"type": "text", "text": "Be brief.",
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [ASK, ANSWER, {"role": "user", "content": [
            {"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}}]},
            ANSWER, ASK]}),
    "anthropic, tool use": (MESSAGES, lambda: {
        "model": "claude-sonnet-4-6", "max_tokens": 50, "messages": [
            ASK, {"role": "assistant", "content": [
                {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "shipped"}]},
            ASK]}),
}


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    _digest._forget()
    token = KNOWN_MESSAGES.set(None)
    yield
    KNOWN_MESSAGES.reset(token)


def _expected(api: C.Api, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arrays and segments, each field read from each block."""
    C._materialize(kwargs)
    req = api.parse_request((), kwargs, False)
    distinct_ids(req.blocks)
    blocks = req.blocks
    used: dict[str, int] = {}
    prefixes: list[int] = []
    prefix = 0
    for b in blocks:
        used[b.segment] = used.get(b.segment, 0) + b.tokens
        prefix += b.tokens
        if b.cache_breakpoint:
            prefixes.append(prefix)
    if req.tool_tokens:
        used["tool_definitions"] = req.tool_tokens
    segments: list[tuple[str, int, int, int]] = []
    for seg in ("system_prompt", "developer_prompt", "tool_definitions", "message_history"):
        if seg in used:
            segments.append((seg, len(segments), -1, used[seg]))
    if req.reserved_output is not None:
        segments.append(("output", len(segments), req.reserved_output, -1))
    segments += [(f"cache_prefix_{n}", -1, -1, p) for n, p in enumerate(prefixes, 1)]
    expected: dict[str, Any] = {
        S.ASSEMBLY_BLOCK_COUNT: len(blocks),
        S.ASSEMBLY_TOKEN_COUNT: sum(b.tokens for b in blocks),
        S.ASSEMBLY_BLOCK_ITEM_IDS: tuple(b.item_id for b in blocks),
        S.ASSEMBLY_BLOCK_KINDS: tuple(b.kind or "" for b in blocks),
        S.ASSEMBLY_BLOCK_TOKENS: tuple(b.tokens for b in blocks),
        S.ASSEMBLY_BLOCK_INJECTION_POINTS: tuple(b.point or "" for b in blocks),
        S.ASSEMBLY_BLOCK_DIGESTS: tuple(b.digest or "" for b in blocks),
        S.ASSEMBLY_BLOCK_TOOL_CALL_IDS: tuple(b.tool_call_id or "" for b in blocks)
        if any(b.tool_call_id for b in blocks) else None,
    }
    if segments:
        names, orders, reserved, used_tokens = zip(*segments, strict=True)
        expected.update({S.WINDOW_SEGMENT_NAMES: names, S.WINDOW_SEGMENT_ORDERS: orders,
                         S.WINDOW_SEGMENT_RESERVED_TOKENS: reserved,
                         S.WINDOW_SEGMENT_USED_TOKENS: used_tokens})
    return expected


def _recorded(api: C.Api, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """The folded attributes of an auto-instrumented call of the request."""
    tel = CapturedTelemetry()
    try:
        ct = C.ClientTelemetry("test", tracer_provider=tel.tracer_provider,
                               meter_provider=tel.meter_provider)
        reply = COMPLETION if api is CHAT else REPLY
        call = ct.start(api, (), kwargs, "127.0.0.1", 8000, True)
        C._complete(call, api, reply)
        out = []
        for span in tel.spans():
            attrs = dict(span.attributes or {})
            keys = [k for k in attrs if k.startswith(("context.assembly.", "context.window."))
                    and k != S.ASSEMBLY_ID]  # a new id each call
            out.append({k: attrs[k] for k in keys})
        return out
    finally:
        tel.shutdown()


def _compare(recorded: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, value in expected.items():
        if value is None:
            assert key not in recorded, key
        else:
            assert recorded[key] == value, key
            assert type(recorded[key]) is type(value), key


@pytest.mark.parametrize("name", list(REQUESTS))
def test_the_folded_arrays_are_each_blocks_fields(name: str) -> None:
    api, make = REQUESTS[name]
    expected = _expected(api, make())
    _digest._forget()
    (first,) = _recorded(api, make())
    (second,) = _recorded(api, make())  # reads the blocks the first remembered
    _compare(first, expected)
    _compare(second, expected)
    assert first == second


def test_a_remembered_block_renamed_later_records_its_new_id() -> None:
    """A block read (its row kept) by one call and repeated in the next is renamed on a
    copy there: the copy's row has the new id, the remembered one keeps its own."""
    (alone,) = _recorded(CHAT, _chat(SYSTEM, ASK))
    ask_id = alone[S.ASSEMBLY_BLOCK_ITEM_IDS][1]
    (twice,) = _recorded(CHAT, _chat(SYSTEM, ASK, ANSWER, ASK))
    ids = twice[S.ASSEMBLY_BLOCK_ITEM_IDS]
    assert ids[1] == ask_id and ids[3] == ask_id + "#2"
    (again,) = _recorded(CHAT, _chat(SYSTEM, ASK))
    assert again == alone
    _compare(twice, _expected(CHAT, _chat(SYSTEM, ASK, ANSWER, ASK)))


def test_the_overflow_strategy_still_reads_the_estimate_when_it_truncates() -> None:
    """The input estimate is read only for a truncating request now: one that does not fit
    the window and came back smaller still records the cut and the overflow."""
    tel = CapturedTelemetry()
    try:
        ct = C.ClientTelemetry("test", tracer_provider=tel.tracer_provider,
                               meter_provider=tel.meter_provider)
        api = C.Api(OX.responses_request, OX.responses_response, OX.ResponsesAccumulator,
                    OX.responses_is_stream, OX.PROVIDER)
        long = "word " * 40_000
        call = ct.start(api, (), {"model": "gpt-4", "input": [
            {"role": "user", "content": long}], "truncation": "auto",
            "max_output_tokens": 10}, "127.0.0.1", 8000, True)
        call.finish(C.Outcome(response_id="resp_1", input_tokens=100, output_tokens=3))
        (span,) = tel.spans()
        attrs = span.attributes or {}
        assert attrs[S.BUDGET_OVERFLOW] is True
        assert any(e.name == S.EVENT_BUDGET_TRUNCATED for e in span.events)
    finally:
        tel.shutdown()


def test_a_later_usage_chunk_without_details_replaces_the_earlier_counts() -> None:
    """Servers that send usage on every chunk: the last one wins, details and all (a cache
    or reasoning count of an earlier chunk is not kept when the last has none)."""
    from openai.types.chat import ChatCompletionChunk

    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    first = ChatCompletionChunk.model_validate({**base, "choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 1}}})
    last = ChatCompletionChunk.model_validate({**base, "choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})
    for chunks in ([first, last], [first.model_dump(), last.model_dump(exclude_none=True)]):
        acc = OX.ChatAccumulator(False)
        for chunk in chunks:
            acc.add(chunk)
        out = acc.result()
        assert (out.input_tokens, out.output_tokens) == (10, 2)
        assert (out.cache_read, out.cache_write, out.reasoning_tokens) == (None, None, None)
    acc = OX.ChatAccumulator(False)
    acc.add(first)
    out = acc.result()
    assert (out.cache_read, out.reasoning_tokens) == (8, 1)
