"""A plain Anthropic request whose blocks an earlier call read is recorded in one pass
(``Api.plain``: ``messages_plain`` and ``Call._read_plain``) instead of the general reader,
``_begin`` and ``CallRecord.begin``; a response with nothing to record but its usage ends
a call with records in one pass too (``Api.plain_response``: ``messages_plain_response``
and ``Call.finish_plain``) instead of ``parse_response``, ``_record_outcome`` and
``_end_stages``. They must record exactly what the general path records: each shape runs
three times through the real ``anthropic`` client against the stub, alone and composed with
the official instrumentor in both orders, once as shipped and once with both one-pass paths
turned off; spans (attributes in order), events, statuses, metric points and rebuilt
bundles are compared, and the one-pass start must have been taken for the plain shapes and
not for the others (the one-pass end: for every call that recorded its records, plain or
not)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from llm_helpers import untimed
from llm_setup import CAPTURE_ENV, Setup
from opentelemetry.trace import StatusCode
from stub_server import StubServer

from otel_agent_context import ContextItem
from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import _common
from otel_agent_context.testing import CapturedTelemetry

SYSTEM = "You are ACME's support agent. Answer in one sentence."
HISTORY = [{"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "It shipped yesterday."},
           {"role": "user", "content": "When does it arrive?"}]
CACHED = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]

_TOO_LONG = [*HISTORY[:-1], {"role": "user", "content": "Where is it? " * 4000}]
#: a call made through ``messages.stream()`` (the key is not sent)
_HELPER = "_stream_helper"



class _Fresh(list):  # type: ignore[type-arg]
    """Three calls whose arguments ``make`` builds afresh for each run of the calls (an
    iterator among them is read once)."""

    def __init__(self, make: Callable[[], dict[str, Any]]) -> None:
        super().__init__()
        self._make = make

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for _ in range(3):
            yield self._make()

    def __getitem__(self, index: Any) -> Any:
        return self._make() if index == 0 else super().__getitem__(index)


_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"},
                                            "amount": {"type": "number"}},
           "required": ["order_id"]}
ANTHROPIC_TOOLS = [{"name": "lookup_order", "description": "Find an order by its id.",
                    "input_schema": _SCHEMA},
                   {"name": "refund", "description": "Refund an order.",
                    "input_schema": _SCHEMA, "cache_control": {"type": "ephemeral"}}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "lookup_order",
                                                "description": "Find an order by its id.",
                                                "parameters": _SCHEMA}},
              {"type": "function", "function": {"name": "refund", "parameters": _SCHEMA,
                                                "strict": True}}]
RESPONSES_TOOLS = [{"type": "function", "name": "lookup_order", "parameters": _SCHEMA,
                    "strict": False}]

#: name -> (the three calls' arguments, how many of them at least are plain)
_TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
             "input": {"order_id": "42"}}
_TOOL_RESULTS = {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"status": "shipped"}'}]}


def _blocks(*blocks: dict[str, Any]) -> list[Any]:
    """The SDK's content blocks, as a response gives them back (``response.content``)."""
    from anthropic.types import TextBlock, ToolUseBlock

    return [(TextBlock if b["type"] == "text" else ToolUseBlock).model_validate(b)
            for b in blocks]


#: an agent's loop: the model's text and tool use, the tool's result, the model's answer
TOOL_LOOP = [HISTORY[0], {"role": "assistant", "content": [
    {"type": "text", "text": "Looking it up."}, _TOOL_USE]}, _TOOL_RESULTS, *HISTORY[1:]]
#: the same with the assistant's content as the SDK gave it back, two tool uses, one
#: failed
SDK_TOOL_LOOP = [HISTORY[0], {"role": "assistant", "content": _blocks(
    {"type": "text", "text": "Looking both up."}, _TOOL_USE,
    {**_TOOL_USE, "id": "toolu_2", "name": "refund", "input": {}})},
    {"role": "user", "content": [*_TOOL_RESULTS["content"], {
        "type": "tool_result", "tool_use_id": "toolu_2", "content": "", "is_error": True}]},
    *HISTORY[1:]]


def _changed(block: Any, **fields: Any) -> Any:
    """``block`` with ``fields`` set after the SDK built it (its models take any field)."""
    for name, value in fields.items():
        setattr(block, name, value)
    return block


def _odd_loop(assistant: list[Any], results: list[Any] | None = None) -> list[Any]:
    return [HISTORY[0], {"role": "assistant", "content": assistant},
            {"role": "user", "content": results or _TOOL_RESULTS["content"]}, *HISTORY[1:]]


#: tool uses and results in a form the one-pass reader leaves to the general one
ODD_TOOL_LOOPS: dict[str, list[Any]] = {
    "cached_result": _odd_loop([_TOOL_USE], [{**_TOOL_RESULTS["content"][0],
                                              "cache_control": {"type": "ephemeral"}}]),
    "result_in_blocks": _odd_loop([_TOOL_USE], [{**_TOOL_RESULTS["content"][0], "content": [
        {"type": "text", "text": "shipped"}]}]),
    "text_beside_results": _odd_loop([_TOOL_USE], [*_TOOL_RESULTS["content"],
                                                   {"type": "text", "text": "And?"}]),
    "error_not_a_bool": _odd_loop([_TOOL_USE], [{**_TOOL_RESULTS["content"][0],
                                                 "is_error": "yes"}]),
    "thinking": _odd_loop([{"type": "thinking", "thinking": "Hm.", "signature": "s"},
                           _TOOL_USE]),
    "input_too_deep": _odd_loop([{**_TOOL_USE, "input": {"a": {"b": {"c": {"d": {}}}}}}]),
    "input_a_tuple_inside": _odd_loop([{**_TOOL_USE, "input": {"ids": ("42",)}}]),
    "cached_text": _odd_loop([{"type": "text", "text": "Hm.", "cache_control": {
        "type": "ephemeral"}}, _TOOL_USE]),
    "empty_content": _odd_loop([]),
    "result_typed_otherwise": _odd_loop([_TOOL_USE], [{**_TOOL_RESULTS["content"][0],
                                                      "type": "search_result"}]),
    # an empty id names no call (the general path records none)
    "empty_ids": _odd_loop([{**_TOOL_USE, "id": ""}], [{**_TOOL_RESULTS["content"][0],
                                                       "tool_use_id": ""}]),
    # the SDK's blocks changed after it built them: a cache breakpoint marked on the last
    # turn, another type
    "sdk_text_cached": _odd_loop([_changed(_blocks({"type": "text", "text": "Hm."})[0],
                                           cache_control={"type": "ephemeral"}), _TOOL_USE]),
    "sdk_tool_use_cached": _odd_loop([_changed(_blocks(_TOOL_USE)[0],
                                               cache_control={"type": "ephemeral"})]),
    "sdk_text_retyped": _odd_loop([_changed(_blocks({"type": "text", "text": "Hm."})[0],
                                            type="thinking"), _TOOL_USE]),
    "one_use_twice": _odd_loop([_TOOL_USE, _TOOL_USE]),
}

SHAPES: dict[str, tuple[list[dict[str, Any]], int]] = {
    # an agent's loop (the API's forms, the SDK's blocks given back), and the call after the
    # tool ran (the history ends with its result)
    "tool_loop": ([{"system": SYSTEM, "messages": TOOL_LOOP, "tools": ANTHROPIC_TOOLS}] * 3,
                  2),
    "sdk_tool_loop": ([{"system": SYSTEM, "messages": SDK_TOOL_LOOP}] * 3, 2),
    "mid_turn": ([{"system": SYSTEM, "messages": TOOL_LOOP[:3]}] * 3, 2),
    "sdk_mid_turn": ([{"messages": SDK_TOOL_LOOP[:3], "stream": True}] * 3, 2),
    # bytes in a tool use's input: written as the general reader writes them
    "tool_input_bytes": ([{"system": SYSTEM, "messages": [HISTORY[0], {
        "role": "assistant", "content": _blocks({**_TOOL_USE, "input": {"blob": b"\x00"}})},
        _TOOL_RESULTS, *HISTORY[1:]]}] * 3, 2),
    **{f"odd_{name}": ([{"system": SYSTEM, "messages": messages}] * 3, 0)
       for name, messages in ODD_TOOL_LOOPS.items()},
    "system_str": ([{"system": SYSTEM, "messages": HISTORY}] * 3, 2),
    "system_cached": ([{"system": CACHED, "messages": HISTORY}] * 3, 2),
    "no_system": ([{"messages": HISTORY}] * 3, 2),
    "empty_system": ([{"system": "", "messages": HISTORY}] * 3, 2),
    "unknown_model": ([{"system": SYSTEM, "messages": HISTORY,
                        "model": "claude-of-tomorrow"}] * 3, 2),
    # an agent's conversation: the last call sends again what the second one sent (the
    # first message was the latest user message, now history: another block)
    # a cache breakpoint asked for once: its block is another one (the third call's is the
    # first's again)
    "cache_toggled": ([{"system": [{**CACHED[0], "cache_control": {}}], "messages": HISTORY},
                       {"system": CACHED, "messages": HISTORY},
                       {"system": [{**CACHED[0], "cache_control": {}}], "messages": HISTORY}],
                      1),
    "growing": ([{"system": SYSTEM, "messages": HISTORY[:1]},
                 {"system": SYSTEM, "messages": HISTORY},
                 {"system": SYSTEM, "messages": HISTORY}], 1),
    # a stream starts in one pass too (``create(stream=True)`` and the ``stream()``
    # helper); it ends through the general end
    "stream": ([{"system": SYSTEM, "messages": HISTORY, "stream": True}] * 3, 2),
    "stream_helper": ([{"system": SYSTEM, "messages": HISTORY, _HELPER: True}] * 3, 2),
    "stream_false": ([{"system": SYSTEM, "messages": HISTORY, "stream": False}] * 3, 2),
    # the provider refuses the request (too long for the stub's smallest window): a failed
    # call, which says whether it was asked to stream
    "stream_too_long": ([{"system": SYSTEM, "messages": _TOO_LONG, "model": "gpt-4",
                          "stream": True}] * 3, 2),
    # not plain: the general path reads every call
    "stream_not_a_bool": ([{"system": SYSTEM, "messages": HISTORY, "stream": 1}] * 3, 0),
    "repeated": ([{"system": SYSTEM, "messages": HISTORY + [
        {"role": "assistant", "content": "It shipped yesterday."},
        {"role": "user", "content": "Where is my order?"}]}] * 3, 0),
    "content_blocks": ([{"system": SYSTEM, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]}]}] * 3,
        0),
    "metadata": ([{"system": SYSTEM, "messages": HISTORY,
                   "metadata": {"user_id": "u-1"}}] * 3, 0),
    # an agent's call: tool definitions, how to choose among them, sampling parameters
    "stop_sequences": ([{"system": SYSTEM, "messages": HISTORY,
                         "stop_sequences": ["END"]}] * 3, 2),
    "tools": ([{"system": SYSTEM, "messages": HISTORY, "tools": ANTHROPIC_TOOLS,
                "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}] * 3, 2),
    "tools_empty": ([{"system": SYSTEM, "messages": HISTORY, "tools": []}] * 3, 2),
    # not plain: an iterator of tools or in the tool choice (the general path settles it),
    # a tuple of stop sequences (the SDK here takes no sampling parameter: see
    # test_an_anthropic_requests_sampling_parameters_are_read_as_the_general_reader_reads_them)
    "tools_iterator": (_Fresh(lambda: {"system": SYSTEM, "messages": HISTORY,
                                       "tools": iter(ANTHROPIC_TOOLS)}), 0),
    "tool_choice_iterator": (_Fresh(lambda: {"system": SYSTEM, "messages": HISTORY,
                                             "tools": ANTHROPIC_TOOLS, "tool_choice": {
                                                 "type": "tool", "name": iter("x")}}), 0),
    "stop_tuple": ([{"system": SYSTEM, "messages": HISTORY,
                     "stop_sequences": ("END",)}] * 3, 0),
    "system_citations": ([{"system": [{"type": "text", "text": SYSTEM, "citations": None}],
                           "messages": HISTORY}] * 3, 0),
    "named_message": ([{"system": SYSTEM, "messages": [
        {"role": "user", "content": "Where is my order?", "name": "ann"}]}] * 3, 0),
}


def _calls(stub: StubServer, calls: list[dict[str, Any]]) -> None:
    client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k", max_retries=0)
    for call in calls:
        call = {"model": "claude-sonnet-4-6", "max_tokens": 50, **call}
        if call.pop(_HELPER, False):
            with client.messages.stream(**call) as stream:
                for _ in stream:
                    pass
            continue
        try:
            result = client.messages.create(**call)
        except anthropic.BadRequestError:
            continue  # a refused request (a shape that asks for it)
        if call.get("stream"):
            for _ in result:
                pass


def _record(official: str, calls: list[dict[str, Any]] | Callable[[StubServer], None],
            plain: bool,
            monkeypatch: pytest.MonkeyPatch, capture: bool = False,
            in_envelope: bool | Callable[[Any], None] = False, strict: bool = True,
            frameworks: tuple[Any, ...] = ()) -> tuple[dict[str, Any], int]:
    taken = [0]
    read_plain = _common.Call._read_plain
    finish_plain = _common.Call.finish_plain

    def counted(self: Any, *args: Any) -> bool:
        done = read_plain(self, *args) if plain else False
        taken[0] += done
        return done

    def ended(self: Any, fields: Any) -> bool:
        done = finish_plain(self, fields) if plain else False
        _ENDED[-1] += done
        return done

    if official.endswith("envelope"):  # "envelope", "outer envelope": the application's
        in_envelope = True
        official = official.split()[0] if " " in official else "none"
    _ENDED.append(0)
    monkeypatch.setattr(_common.Call, "_read_plain", counted)
    monkeypatch.setattr(_common.Call, "finish_plain", ended)
    tel = CapturedTelemetry(capture_content=capture, strict=strict)
    setup = Setup(tel, official, capture)
    setup.start()
    for framework in frameworks:  # a framework's instrumentor (its runs' envelopes)
        framework.instrument(agent_context=tel.agent_context)
    try:
        with StubServer() as stub:
            run = calls if callable(calls) else (lambda stub: _calls(stub, calls))
            if in_envelope:  # the application's envelope around the calls
                with tel.agent_context.envelope(scope="turn") as env:
                    if callable(in_envelope):  # what the application records in it first
                        in_envelope(env)
                    run(stub)
            else:
                run(stub)
    finally:
        for framework in frameworks:
            framework.uninstrument()
        setup.stop()
        monkeypatch.setattr(_common.Call, "_read_plain", read_plain)
        monkeypatch.setattr(_common.Call, "finish_plain", finish_plain)
    spans = [(s.name, s.status.status_code, s.status.description,
              [(k, v) for k, v in s.attributes.items() if k not in _TIMES],
              [(e.name, dict(e.attributes)) for e in s.events]) for s in tel.spans()]
    metrics = {name: sorted((sorted((k, x) for k, x in labels.items() if k not in _TIMES),
                             getattr(v, "sum", v))
                            for labels, v in points)
               for name, points in tel.metrics().items()
               if name.startswith(("context.", "gen_ai.client.token"))}
    return {"spans": spans, "metrics": metrics, "bundles": untimed(tel.bundles())}, taken[0]


def _call_spans(recorded: dict[str, Any]) -> list[Any]:
    """The model calls' spans (the application's envelope's aside: it ends as the
    application ends it)."""
    return [s for s in recorded["spans"] if s[0] != "context.envelope"]


#: ours alone, with the official instrumentor outside or inside ours, and inside the
#: application's envelope (alone, or with the official instrumentor outside): the call joins
#: the envelope, in one pass too
COMPOSITIONS = ["none", "outer", "inner", "envelope", "outer envelope"]
_TIMES = frozenset(("server.port", "gen_ai.response.time_to_first_chunk"))  # a stream's
#: calls that ended through ``Call.finish_plain``, one count per ``_record``, the last one's
#: last
_ENDED: list[int] = []


@pytest.fixture(autouse=True)
def _no_framework_message_ids() -> Iterator[None]:
    """No framework's message ids in this context (a LlamaIndex memory read outside any run
    leaves its ids for the next model call, by design): with them, no request is plain."""
    token = _common.KNOWN_MESSAGES.set(None)
    yield
    _common.KNOWN_MESSAGES.reset(token)


@pytest.mark.parametrize("official", COMPOSITIONS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_plain_request_records_what_the_general_path_records(
        shape: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    calls, plain = SHAPES[shape]
    shipped, taken = _record(official, calls, True, monkeypatch)
    general, none_taken = _record(official, calls, False, monkeypatch)
    assert none_taken == 0
    assert shipped == general
    # the later calls are plain (an earlier one may be too: its blocks remembered by another
    # test); the general path reads the others
    assert taken >= plain if plain else taken == 0
    calls_recorded = [dict(s[3]) for s in shipped["spans"] if S.ASSEMBLY_BLOCK_ITEM_IDS in
                      dict(s[3])]
    assert len(calls_recorded) == 3  # every call carries its records
    # every call's end in one pass (a stream's: the general end), and none when turned off
    streams = bool(calls[0].get("stream")) or _HELPER in calls[0]
    assert _ENDED[-2:] == [0 if streams else 3, 0]
    assert all((s[1] is StatusCode.ERROR) == shape.endswith("too_long")
               for s in _call_spans(shipped))


def test_the_plain_path_records_the_segments_and_blocks_of_the_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The values themselves (the comparison above holds only if both paths are right):
    the system prompt cached, two history messages and the latest user message."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    shipped, taken = _record("none", [{"system": CACHED, "messages": HISTORY}] * 2, True,
                             monkeypatch)
    assert taken >= 1
    attrs = dict(shipped["spans"][-1][3])
    assert attrs[S.WINDOW_SEGMENT_NAMES] == ("system_prompt", "message_history", "output",
                                             "cache_prefix_1")
    system_tokens, history_tokens = attrs[S.WINDOW_SEGMENT_USED_TOKENS][:2]
    tokens = attrs[S.ASSEMBLY_BLOCK_TOKENS]
    assert (system_tokens, history_tokens) == (tokens[0], sum(tokens[1:]))
    assert attrs[S.WINDOW_SEGMENT_USED_TOKENS][3] == tokens[0]  # up to the breakpoint
    assert attrs[S.WINDOW_SEGMENT_ORDERS] == (0, 1, 2, -1)
    assert attrs[S.WINDOW_SEGMENT_RESERVED_TOKENS] == (-1, -1, 50, -1)
    assert attrs[S.ASSEMBLY_BLOCK_KINDS] == ("system_prompt", "session_history",
                                             "session_history", "user_message")
    assert attrs[S.BUDGET_RESERVED_TOKENS] == 50
    assert attrs[S.ASSEMBLY_BLOCK_COUNT] == 4 == attrs[S.BUDGET_ACTUAL_ITEMS]


def test_a_failing_plain_path_is_logged_and_the_call_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Our error in the one-pass path is ours: logged, the application's call returns."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    tel = CapturedTelemetry(strict=False)
    setup = Setup(tel, "none", False)
    setup.start()
    try:
        with StubServer() as stub:
            _calls(stub, [{"system": SYSTEM, "messages": HISTORY}])

            def broken(*args: Any, **kwargs: Any) -> None:
                raise RuntimeError("ours")

            monkeypatch.setattr(_common.CallRecord, "begin_plain", broken)
            reply: Callable[[], Any] = lambda: anthropic.Anthropic(  # noqa: E731
                base_url=stub.anthropic_base_url, api_key="k", max_retries=0
            ).messages.create(model="claude-sonnet-4-6", max_tokens=50, system=SYSTEM,
                              messages=HISTORY)
            assert reply().content
    finally:
        setup.stop()
    assert "context stages failed" in caplog.text
    assert len(tel.spans()) == 2 and all(s.end_time for s in tel.spans())


def test_a_frameworks_message_ids_take_the_general_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A framework's message ids for the call (LangChain, LlamaIndex): the general reader
    gives them to the blocks; the one-pass path is not taken."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    token = _common.KNOWN_MESSAGES.set({("user", "When does it arrive?"): ["msg-7", "msg-8"]})
    try:  # the second call's blocks are remembered: without the ids it would be plain
        shipped, taken = _record("none", [{"system": SYSTEM, "messages": HISTORY}] * 2, True,
                                 monkeypatch)
    finally:
        _common.KNOWN_MESSAGES.reset(token)
    assert taken == 0
    assert [dict(s[3])[S.ASSEMBLY_BLOCK_ITEM_IDS][-1] for s in shipped["spans"]] == [
        "msg-7", "msg-8"]


@pytest.mark.parametrize("mode", ["content_capture", "stage_spans"])
def test_what_the_plain_path_leaves_to_the_general_one(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Content capture, the span-and-event form: the general path records them (the same
    request is plain otherwise)."""
    if mode == "content_capture":
        monkeypatch.setenv(CAPTURE_ENV, "SPAN_ONLY")
    else:
        monkeypatch.delenv(CAPTURE_ENV, raising=False)
    if mode == "stage_spans":
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_STAGE_SPANS", "true")
    options = {"capture": mode == "content_capture"}
    calls = [{"system": SYSTEM, "messages": HISTORY}] * 3
    shipped, taken = _record("none", calls, True, monkeypatch, **options)
    ended = _ENDED[-1]
    general, _ = _record("none", calls, False, monkeypatch, **options)
    assert taken == 0
    assert ended == 0  # no call record (the call's envelope its own), or content captured
    assert shipped == general
    assert shipped["bundles"]


@pytest.mark.parametrize("official", ["none", "outer"])
def test_a_call_in_an_envelope_with_documents_is_left_to_the_general_path(
        official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Items of text selected in the application's envelope: the general path searches the
    blocks for them (``context.assembly.block_source_item_refs``), on the calls whose blocks
    were read before too."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    note = "Refunds take five business days from the day the parcel arrives back."
    system = f"{SYSTEM}\n\nNotes:\n- {note}"
    taken = [0]
    read_plain = _common.Call._read_plain

    def counted(self: Any, *args: Any) -> bool:
        done = read_plain(self, *args)
        taken[0] += done
        return done

    monkeypatch.setattr(_common.Call, "_read_plain", counted)
    tel = CapturedTelemetry(strict=True)
    setup = Setup(tel, official, False)
    setup.start()
    try:
        with StubServer() as stub:
            _calls(stub, [{"system": system, "messages": HISTORY}])  # its blocks remembered
            taken[0] = 0  # (plain outside the envelope, once an earlier test read it)
            with tel.agent_context.envelope(scope="turn", agent_name="support") as env:
                with env.selection(intent="retrieval", policy="top_k") as sel:
                    sel.selected(ContextItem(item_id="kb:refunds",
                                             context_kind="retrieval_result", content=note),
                                 rank=1)
                _calls(stub, [{"system": system, "messages": HISTORY}] * 2)
    finally:
        setup.stop()
    assert taken[0] == 0
    joined = [dict(s.attributes) for s in tel.spans()
              if s.attributes.get(S.CONTEXT_ID) == env.context_id
              and S.ASSEMBLY_BLOCK_ITEM_IDS in s.attributes]
    assert [tuple(a[S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS]) for a in joined] == [
        ("kb:refunds",)] * 2


def test_an_iterator_anywhere_in_a_system_block_is_left_to_the_general_path() -> None:
    """The general path settles one-shot iterators (``_materialize``); the plain path takes
    plain values only, so it never reads one (the blocks remembered first)."""
    from otel_agent_context.instrumentation.anthropic import _extract

    base = {"model": "claude-sonnet-4-6", "max_tokens": 50, "messages": HISTORY}
    for system in (CACHED, SYSTEM):
        _extract.messages_request((), {**base, "system": system}, False)
        for block in _extract.messages_request((), {**base, "system": system}, False).blocks:
            _folded_row(block)
        assert _extract.messages_plain({**base, "system": system}) is not None
    ttl = iter(["1h"])
    odd = [{**CACHED[0], "cache_control": {"type": "ephemeral", "ttl": ttl}}]
    assert _extract.messages_plain({**base, "system": odd}) is None
    assert next(ttl) == "1h"  # not read
    assert _extract.messages_plain({**base, "system": iter(CACHED)}) is None
    assert _extract.messages_plain({**base, "messages": iter(HISTORY)}) is None


@pytest.mark.parametrize(("extras", "plain"), [
    ({"temperature": 0.3, "top_p": 1, "top_k": 5, "stop_sequences": ["END"]}, True),
    ({"temperature": 0, "stop_sequences": [], "tools": ANTHROPIC_TOOLS,
      "tool_choice": {"type": "any"}}, True),
    ({"tools": ANTHROPIC_TOOLS + [{"name": "x", "input_schema": {"enum": (1, 2)}}]}, True),
    ({"temperature": True}, False),
    ({"top_k": 5.0}, False),
    ({"top_p": "1"}, False),
    ({"stop_sequences": ["END", 1]}, False),
    ({"tools": [{"name": "x", "input_schema": {"type": object}}]}, False),
    ({"tools": ({"name": "x"},)}, False),
    ({"tool_choice": {"type": "tool", "name": ("x",)}}, False),
])
def test_an_anthropic_requests_sampling_parameters_are_read_as_the_general_reader_reads_them(
        extras: dict[str, Any], plain: bool) -> None:
    """The Anthropic SDK installed here takes no sampling parameters (older ones do): the
    one-pass reader's fields for them, the tool definitions' estimate and which requests it
    leaves to the general reader, checked on the readers themselves."""
    from otel_agent_context.instrumentation.anthropic import _extract

    kwargs = {"model": "claude-sonnet-4-6", "max_tokens": 50, "system": SYSTEM,
              "messages": HISTORY, **extras}
    general = _extract.messages_request((), dict(kwargs), False)
    for block in general.blocks[:1]:  # the system prompt, remembered as an agent's
        _folded_row(block)
    one_pass = _extract.messages_plain(dict(kwargs))
    if not plain:
        assert one_pass is None
        return
    assert one_pass is not None
    assert one_pass.genai == general.genai
    assert list(one_pass.genai) == list(general.genai)  # written in this order
    assert one_pass.tool_tokens == general.tool_tokens
    assert (one_pass.tool_tokens > 0) == bool(extras.get("tools"))
    assert one_pass.reserved_output == general.reserved_output == 50


def _folded_row(block: Any) -> None:
    from otel_agent_context._folded import block_columns

    block_columns([block])  # what a call's records read of it, kept on it


CHAT = [{"role": "system", "content": SYSTEM}, *HISTORY]
_CALL = {"id": "call_1", "type": "function",
         "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'}}
_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'}
#: a history holding the model's function call and its result (the API's own forms)
AGENT_LOOP = [*CHAT[:2], {"role": "assistant", "tool_calls": [_CALL]}, _RESULT,
              {"role": "assistant", "content": "It shipped."}, *CHAT[2:]]
PARALLEL_CALLS = [*CHAT[:2], {"role": "assistant", "content": "Looking both up.", "tool_calls": [
    _CALL, {**_CALL, "id": "call_2", "function": {"name": "refund", "arguments": ""}}]},
    _RESULT, {**_RESULT, "tool_call_id": "call_2", "content": ""}, *CHAT[2:]]


def _sdk_message(**fields: Any) -> Any:
    """The SDK's assistant message as a response gives it back (appended to the history)."""
    from openai.types.chat import ChatCompletionMessage, ParsedChatCompletionMessage

    cls = ParsedChatCompletionMessage if "parsed" in fields else ChatCompletionMessage
    return cls.model_validate({"role": "assistant", **fields})


#: the same loop with the assistant's messages the SDK's objects
SDK_LOOP = [*CHAT[:2], _sdk_message(content=None, tool_calls=[_CALL], refusal=None), _RESULT,
            _sdk_message(content="It shipped.", annotations=[]), *CHAT[2:]]


def _construct(**fields: Any) -> Any:
    from openai.types.chat import ChatCompletionMessage

    return ChatCompletionMessage.model_construct(**fields)


class _Text(str):
    """An application's own string type."""


def _assigned(message: Any, field: str, convert: Callable[[Any], Any]) -> Any:
    """``message`` with ``field`` converted after the SDK checked it (assignment is not
    checked)."""
    setattr(message, field, convert(getattr(message, field)))
    return message


class _Reply(openai.BaseModel):
    """An application's own model of a message (the SDK sends any model's fields)."""

    role: str
    content: str


def _odd(message: Any) -> list[Any]:
    return [*CHAT[:2], message, _RESULT, *CHAT[2:]]


#: function calls and tool results in a form the one-pass reader leaves to the general one
ODD_CALLS: dict[str, list[Any]] = {
    "sdk_custom_call": _odd(_sdk_message(tool_calls=[{"id": "call_1", "type": "custom",
                                                      "custom": {"name": "grep",
                                                                 "input": "42"}}])),
    "another_model": _odd(_Reply(role="assistant", content="It shipped.")),
    # the deprecated single call (its name and arguments in the block's text)
    "legacy_function_call": _odd({"role": "assistant", "content": None, "function_call": {
        "name": "lookup_order", "arguments": '{"order_id": "42"}'}}),
    "sdk_legacy_function_call": _odd(_sdk_message(content=None, function_call={
        "name": "lookup_order", "arguments": '{"order_id": "42"}'})),
    # built without the SDK's checks: the general reader takes it for the latest user's
    "sdk_message_as_user": [*CHAT, _RESULT, _construct(role="user", content="And now?")],
    "sdk_content_in_parts": _odd(_construct(role="assistant", content=[
        {"type": "text", "text": "It shipped."}])),
    "sdk_calls_a_tuple": _odd(_assigned(_sdk_message(tool_calls=[_CALL]), "tool_calls",
                                        tuple)),
    "sdk_arguments_none": _odd(_sdk_message(tool_calls=[
        {**_CALL, "function": _assigned(_sdk_message(tool_calls=[_CALL]).tool_calls[0].function,
                                        "arguments", lambda _: None)}])),
    "sdk_content_a_str_subclass": _odd(_assigned(_sdk_message(content="It shipped."),
                                                 "content", _Text)),
    "call_index": _odd({"role": "assistant", "tool_calls": [{**_CALL, "index": 0}]}),
    "arguments_a_dict": _odd({"role": "assistant", "tool_calls": [
        {**_CALL, "function": {"name": "lookup_order", "arguments": {"order_id": "42"}}}]}),
    "name_missing": _odd({"role": "assistant", "tool_calls": [
        {**_CALL, "function": {"arguments": "{}"}}]}),
    "calls_a_tuple": _odd({"role": "assistant", "tool_calls": (_CALL,)}),
    "call_id_an_int": _odd({"role": "assistant", "tool_calls": [{**_CALL, "id": 1}]}),
    "refusal": _odd({"role": "assistant", "tool_calls": [_CALL], "refusal": "No."}),
    "annotated": _odd({"role": "assistant", "content": "See [1].", "tool_calls": None,
                       "annotations": [{"type": "url_citation"}]}),
    "dumped_with_a_name": _odd({**_sdk_message(tool_calls=[_CALL]).model_dump(),
                                "name": "bot"}),
    "result_named": [*CHAT[:2], {"role": "assistant", "tool_calls": [_CALL]},
                     {**_RESULT, "name": "lookup_order"}, *CHAT[2:]],
    "result_parts": [*CHAT[:2], {"role": "assistant", "tool_calls": [_CALL]},
                     {**_RESULT, "content": [{"type": "text", "text": "shipped"}]}, *CHAT[2:]],
    "result_without_id": [*CHAT[:2], {"role": "assistant", "tool_calls": [_CALL]},
                          {**_RESULT, "tool_call_id": ""}, *CHAT[2:]],
    # one call answered twice: two blocks of one id, renamed by the general path
    "result_twice": [*CHAT[:2], {"role": "assistant", "tool_calls": [_CALL]}, _RESULT, _RESULT,
                     *CHAT[2:]],
    # the latest user message in parts
    "latest_user_in_parts": [*AGENT_LOOP[:-1], {"role": "user", "content": [
        {"type": "text", "text": "And when?"}]}],
}


#: what an agent framework leaves to the API: the SDK's omit (the Agents SDK's requests)
_OMITTED = {"temperature": openai.omit, "top_p": openai.omit, "tool_choice": openai.omit,
            "parallel_tool_calls": openai.omit, "stream": openai.omit}


class _OptionsWithIterator(list):  # type: ignore[type-arg]
    """Three streaming calls whose ``stream_options`` hold an iterator, made afresh for each
    run of the calls (an iterator is read once)."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for _ in range(3):
            yield {"messages": CHAT, "stream": True,
                   "stream_options": {"include_usage": True, "x": iter([1])}}

#: OpenAI chat: name -> (the three calls' arguments, how many of them at least are
#: plain, whether every call ends in one pass)
CHAT_SHAPES: dict[str, tuple[list[dict[str, Any]], int, bool]] = {
    "plain": ([{"messages": CHAT, "max_completion_tokens": 50}] * 3, 2, True),
    "legacy_max_tokens": ([{"messages": CHAT, "max_tokens": 40}] * 3, 2, True),
    "both_sizes": ([{"messages": CHAT, "max_completion_tokens": 0, "max_tokens": 40}] * 3, 2,
                   True),
    "no_system": ([{"messages": HISTORY}] * 3, 2, True),
    # a stream starts in one pass too; it ends when read to its end, through the general end
    "stream": ([{"messages": CHAT, "max_completion_tokens": 50, "stream": True,
                 "stream_options": {"include_usage": True}}] * 3, 2, False),
    "stream_without_usage": ([{"messages": CHAT, "stream": True}] * 3, 2, False),
    # an agent's call: tool definitions, how to choose among them, sampling parameters
    "temperature": ([{"messages": CHAT, "temperature": 0.2}] * 3, 2, True),
    "tools": ([{"messages": CHAT, "tools": CHAT_TOOLS, "tool_choice": "auto",
                "parallel_tool_calls": False, "temperature": 1, "top_p": 0.9,
                "frequency_penalty": 0.1, "presence_penalty": 0.0, "seed": 7,
                "stop": ["END", "STOP"], "max_completion_tokens": 50}] * 3, 2, True),
    "tools_stream": ([{"messages": CHAT, "tools": CHAT_TOOLS, "stream": True,
                       "tool_choice": {"type": "function", "function": {"name": "refund"}},
                       "stop": "END"}] * 3, 2, False),
    "tools_empty": ([{"messages": CHAT, "tools": []}] * 3, 2, True),
    "stream_false": ([{"messages": CHAT, "stream": False}] * 3, 2, True),
    # the provider refuses the request (the context-length error): a failed call, which
    # says whether it was asked to stream
    "too_long": ([{"messages": CHAT, "max_completion_tokens": 10**6}] * 3, 2, False),
    "stream_too_long": ([{"messages": CHAT, "max_completion_tokens": 10**6,
                          "stream": True}] * 3, 2, False),
    # an agent's loop: the model's function calls and their results in the history
    "tool_result": ([{"messages": [*CHAT, {"role": "tool", "content": "{}",
                                          "tool_call_id": "call_1"}]}] * 3, 2, True),
    "agent_loop": ([{"messages": AGENT_LOOP, "tools": CHAT_TOOLS}] * 3, 2, True),
    "agent_loop_stream": ([{"messages": AGENT_LOOP, "tools": CHAT_TOOLS, "stream": True}] * 3,
                          2, False),
    "parallel_calls": ([{"messages": PARALLEL_CALLS, "tools": CHAT_TOOLS}] * 3, 2, True),
    "sdk_messages": ([{"messages": SDK_LOOP, "tools": CHAT_TOOLS}] * 3, 2, True),
    # the call after the tool ran: the history ends with its result
    "mid_turn": ([{"messages": AGENT_LOOP[:4], "tools": CHAT_TOOLS}] * 3, 2, True),
    "mid_turn_sdk": ([{"messages": SDK_LOOP[:4], "tools": CHAT_TOOLS}] * 3, 2, True),
    # the SDK's messages as their model_dump() (or without the None fields)
    "dumped_messages": ([{"messages": [
        *CHAT[:2], _sdk_message(content=None, tool_calls=[_CALL]).model_dump(), _RESULT,
        _sdk_message(content="It shipped.", annotations=[]).model_dump(),
        _sdk_message(content="Anything else?").model_dump(exclude_none=True),
        {"role": "assistant", "content": "", "tool_calls": []}, *CHAT[2:]]}] * 3, 2, True),
    "sdk_parsed_and_empty": ([{"messages": [
        *CHAT[:2], _sdk_message(content='{"a": 1}', parsed={"a": 1}), _sdk_message(),
        *CHAT[2:]]}] * 3, 2, True),
    "agent_loop_too_long": ([{"messages": AGENT_LOOP, "max_completion_tokens": 10**6}] * 3,
                            2, False),
    # an agent framework's request: the SDK's omit for what it does not set, None, keys
    # the general reader never reads (headers, storage, output options)
    "framework_keys": ([{"messages": AGENT_LOOP, "tools": CHAT_TOOLS, **_OMITTED,
                         "n": openai.NOT_GIVEN, "max_completion_tokens": openai.NOT_GIVEN,
                         "extra_headers": {"User-Agent": "Agents/Python"},
                         "extra_query": None, "extra_body": None, "store": False,
                         "metadata": {"run": "1"}, "reasoning_effort": None,
                         "response_format": {"type": "text"}}] * 3, 2, True),
    # not plain: a developer prompt (a window segment of its own), a system prompt after
    # the history, tools or sampling parameters that are not plain values, a function call
    # or a tool result in another form than the API's own (read by the general reader)
    "developer": ([{"messages": [{"role": "developer", "content": SYSTEM}, *HISTORY]}] * 3,
                  0, True),
    "late_system": ([{"messages": [*HISTORY, {"role": "system", "content": SYSTEM}]}] * 3, 0,
                    True),
    "stream_not_a_bool": ([{"messages": CHAT, "stream": 1}] * 3, 0, False),
    **{f"odd_{name}": ([{"messages": messages}] * 3, 0, True)
       for name, messages in ODD_CALLS.items()},
    "tools_iterator": (_Fresh(lambda: {"messages": CHAT, "tools": iter(CHAT_TOOLS)}), 0,
                       True),
    "tool_choice_iterator": (_Fresh(lambda: {"messages": CHAT, "tools": CHAT_TOOLS,
                                             "tool_choice": {"type": "function", "function":
                                                             {"name": iter("x")}}}), 0, True),
    "seed_a_float": ([{"messages": CHAT, "seed": 1.5}] * 3, 0, True),
    "tool_holding_an_iterator": (_Fresh(lambda: {"messages": CHAT, "tools": [
        {"type": "function", "function": {"name": "refund", "parameters": _SCHEMA},
         "x": iter(["a"])}]}), 0, True),
    # stream options holding an iterator: the general path settles it into a list (as for
    # any request value) before the SDK sends it
    "stream_options_iterator": (_OptionsWithIterator(), 0, False),
    # a key the general reader reads that the one-pass one does not, one it never reads
    # holding what the general path settles, or a value beside the known ones
    "choices": ([{"messages": CHAT, "n": 2}] * 3, 0, True),
    "metadata_iterator": (_Fresh(lambda: {"messages": CHAT, "metadata": iter(["a"])}), 0,
                          True),
    "extra_body": ([{"messages": CHAT, "extra_body": {"messages": []}}] * 3, 0, True),
    "legacy_functions": ([{"messages": CHAT, "functions": [
        {"name": "refund", "parameters": _SCHEMA}]}] * 3, 0, True),
    "stream_options_not_a_dict": ([{"messages": CHAT, "stream": True, "stream_options":
                                    OrderedDict(include_usage=True)}] * 3, 0, False),
}


def _chat_calls(calls: list[dict[str, Any]], asynchronous: bool, api: str = "chat"
                ) -> Callable[[StubServer], None]:
    """The calls through OpenAI's ``chat.completions.create`` (or ``responses.create``)."""
    def create(client: Any) -> Any:
        return client.responses.create if api == "responses" else \
            client.chat.completions.create

    def run(stub: StubServer) -> None:
        if asynchronous:
            client: Any = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="k",
                                             max_retries=0)

            async def all_calls() -> None:
                for call in calls:
                    try:
                        result = await create(client)(model="gpt-4o-mini", **call)
                    except openai.BadRequestError:
                        continue  # a refused request (a shape that asks for it)
                    if call.get("stream"):
                        async for _ in result:
                            pass

            asyncio.run(all_calls())
            return
        client = openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0)
        for call in calls:
            try:
                result = create(client)(model="gpt-4o-mini", **call)
            except openai.BadRequestError:
                continue  # a refused request (a shape that asks for it)
            if call.get("stream"):
                for _ in result:
                    pass

    return run


_FUNCTION_CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup_order",
                  "arguments": '{"order_id": "42"}'}
_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": '{"status": "ok"}'}
_OUTPUT_MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "Looking.", "annotations": []},
                               {"type": "output_text", "text": "Found it.",
                                "annotations": []}]}


def _sdk_item(item: dict[str, Any]) -> Any:
    """A response's output item as the SDK gives it back (``response.output``)."""
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseReasoningItem,
    )

    return {"function_call": ResponseFunctionToolCall, "message": ResponseOutputMessage,
            "reasoning": ResponseReasoningItem}[item["type"]].model_validate(item)


#: the loop with the response's output items given back as the SDK's objects
SDK_ITEMS = [HISTORY[0], _sdk_item({**_FUNCTION_CALL, "id": "fc_1", "status": "completed"}),
             _OUTPUT, _sdk_item(_OUTPUT_MESSAGE), *HISTORY[1:]]
FUNCTION_CALLS = [HISTORY[0], {**_FUNCTION_CALL, "id": "fc_1", "status": "completed"},
                  _OUTPUT, {**_FUNCTION_CALL, "call_id": "call_2", "arguments": ""},
                  {**_OUTPUT, "call_id": "call_2", "output": ""}, *HISTORY[1:]]


#: the loop's output items as dicts: the model_dump() of each (None fields and all), an
#: output message without the fields it did not set, with an annotation and logprobs
DUMPED_ITEMS = [HISTORY[0],
                _sdk_item({**_FUNCTION_CALL, "id": "fc_1", "status": "completed"}).model_dump(),
                _OUTPUT, _sdk_item(_OUTPUT_MESSAGE).model_dump(),
                _sdk_item({**_OUTPUT_MESSAGE, "id": "msg_0"}).model_dump(exclude_unset=True),
                {**_OUTPUT_MESSAGE, "id": "msg_2", "phase": "final_answer", "content": [
                    {"type": "output_text", "text": "See [1].", "logprobs": [], "annotations": [
                        {"type": "url_citation", "url": "https://example.com", "title": "x",
                         "start_index": 4, "end_index": 7}]}]},
                *HISTORY[1:]]


def _odd_message(**fields: Any) -> list[dict[str, Any]]:
    return [HISTORY[0], {**_OUTPUT_MESSAGE, **fields}, *HISTORY[1:]]


def _odd_item(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [HISTORY[0], item, _OUTPUT, *HISTORY[1:]]


#: function calls and outputs in a form the one-pass reader leaves to the general one
ODD_ITEMS: dict[str, list[dict[str, Any]]] = {
    "status_none": _odd_item({**_FUNCTION_CALL, "status": None}),
    "arguments_missing": _odd_item({k: v for k, v in _FUNCTION_CALL.items()
                                    if k != "arguments"}),
    "call_id_an_int": _odd_item({**_FUNCTION_CALL, "call_id": 1}),
    "namespace": _odd_item({**_FUNCTION_CALL, "namespace": "x"}),
    "output_parts": [HISTORY[0], _FUNCTION_CALL, {**_OUTPUT, "output": [
        {"type": "input_text", "text": "ok"}]}, *HISTORY[1:]],
    "custom_tool_call": _odd_item({"type": "custom_tool_call", "call_id": "call_1",
                                   "name": "lookup_order", "input": "42"}),
    "one_call_twice": [HISTORY[0], _FUNCTION_CALL, _FUNCTION_CALL, _OUTPUT, *HISTORY[1:]],
    "sdk_reasoning": [HISTORY[0], _sdk_item({"type": "reasoning", "id": "rs_1",
                                             "summary": []}), *HISTORY[1:]],
    "sdk_refusal": [HISTORY[0], _sdk_item({**_OUTPUT_MESSAGE, "content": [
        {"type": "refusal", "refusal": "No."}]}), *HISTORY[1:]],
    "sdk_message_without_id": [HISTORY[0], _sdk_item({**_OUTPUT_MESSAGE, "id": ""}),
                               *HISTORY[1:]],
    # an empty id names no call (the general path records none)
    "empty_call_ids": [HISTORY[0], {**_FUNCTION_CALL, "call_id": ""},
                       {**_OUTPUT, "call_id": ""}, *HISTORY[1:]],
    "sdk_empty_call_id": [HISTORY[0], _sdk_item({**_FUNCTION_CALL, "call_id": ""}),
                          _OUTPUT, *HISTORY[1:]],
    # a role set on the SDK's function call after it was built: the general reader takes
    # it for the latest user message
    "sdk_call_given_a_user_role": [HISTORY[0], _changed(_sdk_item(_FUNCTION_CALL),
                                                        role="user"), _OUTPUT, HISTORY[1]],
    # output messages as dicts the general reader reads otherwise
    "message_a_refusal": _odd_message(content=[{"type": "refusal", "refusal": "No."}]),
    "message_without_id": _odd_message(id=""),
    "message_of_a_user": _odd_message(role="user"),
    "message_of_a_string": _odd_message(content="Looking."),
    "message_with_a_name": _odd_message(name="agent"),
    "message_phase_a_number": _odd_message(phase=1),
    "message_part_of_input_text": _odd_message(content=[{"type": "input_text", "text": "x"}]),
    "message_part_without_text": _odd_message(content=[{"type": "output_text",
                                                        "annotations": []}]),
    "message_part_annotations_a_tuple": _odd_message(content=[
        {"type": "output_text", "text": "x", "annotations": ()}]),
    "message_part_with_a_name": _odd_message(content=[
        {"type": "output_text", "text": "x", "name": "y"}]),
}

#: OpenAI Responses: name -> (the three calls' arguments, how many of them at least are
#: plain, whether every call ends in one pass)
RESPONSES_SHAPES: dict[str, tuple[list[dict[str, Any]], int, bool]] = {
    "plain": ([{"instructions": SYSTEM, "input": HISTORY, "max_output_tokens": 50}] * 3, 2,
              True),
    "no_instructions": ([{"input": HISTORY}] * 3, 2, True),
    "empty_instructions": ([{"instructions": "", "input": HISTORY}] * 3, 2, True),
    "string_input": ([{"instructions": SYSTEM, "input": "Where is my order?"}] * 3, 2, True),
    "system_message": ([{"input": CHAT, "max_output_tokens": 50}] * 3, 2, True),
    "growing": ([{"instructions": SYSTEM, "input": HISTORY[:1]},
                 {"instructions": SYSTEM, "input": HISTORY},
                 {"instructions": SYSTEM, "input": HISTORY}], 1, True),
    "stream": ([{"instructions": SYSTEM, "input": HISTORY, "stream": True}] * 3, 2, False),
    "stream_false": ([{"instructions": SYSTEM, "input": HISTORY, "stream": False}] * 3, 2,
                     True),
    "temperature": ([{"input": HISTORY, "temperature": 0.2}] * 3, 2, True),
    "tools": ([{"instructions": SYSTEM, "input": HISTORY, "tools": RESPONSES_TOOLS,
                "tool_choice": "required", "parallel_tool_calls": True, "top_p": 0.5}] * 3,
              2, True),
    "tools_iterator": (_Fresh(lambda: {"instructions": SYSTEM, "input": HISTORY,
                                       "tools": iter(RESPONSES_TOOLS)}), 0, True),
    "stream_too_long": ([{"instructions": SYSTEM, "input": HISTORY, "stream": True,
                          "max_output_tokens": 10**6}] * 3, 2, False),
    # an agent's loop: function calls and their outputs as input items (the API's own
    # forms, with or without the ids and status of the items the API gave back)
    "function_calls": ([{"instructions": SYSTEM, "input": FUNCTION_CALLS,
                         "tools": RESPONSES_TOOLS}] * 3, 2, True),
    "function_calls_stream": ([{"input": FUNCTION_CALLS, "stream": True}] * 3, 2, False),
    "sdk_items": ([{"instructions": SYSTEM, "input": SDK_ITEMS}] * 3, 2, True),
    "sdk_items_mid_turn": ([{"input": SDK_ITEMS[:3]}] * 3, 2, True),
    # the response's output items given back as dicts (``model_dump()``, with or without
    # the unset or None fields: an agent framework's input list)
    "dumped_items": ([{"instructions": SYSTEM, "input": DUMPED_ITEMS}] * 3, 2, True),
    # an agent framework's request (the Agents SDK's): the SDK's omit for what it does not
    # set, None, and keys the general reader never reads
    "framework_keys": ([{"instructions": SYSTEM, "input": DUMPED_ITEMS,
                         "tools": RESPONSES_TOOLS, **_OMITTED,
                         "previous_response_id": openai.omit, "conversation": openai.omit,
                         "truncation": openai.omit, "max_output_tokens": openai.omit,
                         "prompt": openai.omit, "include": [],
                         "extra_headers": {"User-Agent": "Agents/Python"},
                         "extra_query": None, "extra_body": None, "text": openai.omit,
                         "store": openai.omit, "reasoning": openai.omit,
                         "metadata": openai.omit, "prompt_cache_retention": openai.omit,
                         "context_management": openai.omit}] * 3, 2, True),
    "framework_keys_stream": ([{"input": DUMPED_ITEMS, "stream": True,
                                "include": ["message.output_text.logprobs"],
                                "text": {"verbosity": "low"}, "store": True,
                                "stream_options": {"include_obfuscation": False}}] * 3, 2,
                              False),
    # not plain: typed items, a sampling parameter, a developer prompt (a window segment
    # of its own), the provider's truncation (whose end is the general one too), function
    # calls and outputs in another form
    "typed_messages": ([{"input": [{**m, "type": "message"} for m in HISTORY]}] * 3, 0, True),
    "developer": ([{"input": [{"role": "developer", "content": SYSTEM}, *HISTORY]}] * 3, 0,
                  True),
    "truncation": ([{"input": HISTORY, "truncation": "auto"}] * 3, 0, False),
    "stream_not_a_bool": ([{"input": HISTORY, "stream": 1}] * 3, 0, False),
    **{f"odd_{name}": ([{"input": items}] * 3, 0, True) for name, items in ODD_ITEMS.items()},
    # what a framework's request may hold that the general reader reads (a conversation
    # the server keeps, a stored prompt, the server's compaction), or that the general path
    # settles
    "conversation": ([{"input": HISTORY, "conversation": "conv_1"}] * 3, 0, True),
    "include_iterator": (_Fresh(lambda: {"input": HISTORY, "include": iter([])}), 0, True),
    "include_a_tuple": ([{"input": HISTORY, "include": ()}] * 3, 0, True),
}


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("official", COMPOSITIONS)
@pytest.mark.parametrize(("api", "shape"), [("chat", s) for s in sorted(CHAT_SHAPES)]
                         + [("responses", s) for s in sorted(RESPONSES_SHAPES)])
def test_a_plain_openai_request_records_what_the_general_path_records(
        api: str, shape: str, official: str, asynchronous: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    calls, plain, one_pass_end = (CHAT_SHAPES if api == "chat" else RESPONSES_SHAPES)[shape]
    run = _chat_calls(calls, asynchronous, api)
    shipped, taken = _record(official, run, True, monkeypatch)
    general, none_taken = _record(official, run, False, monkeypatch)
    assert none_taken == 0
    assert shipped == general
    assert taken >= plain if plain else taken == 0
    recorded = [dict(s[3]) for s in shipped["spans"] if S.ASSEMBLY_BLOCK_ITEM_IDS in dict(s[3])]
    assert len(recorded) == 3
    # the API's type, alone and composed, on a refused call too (the GenAI instrumentor
    # writes it at the request)
    assert all(r.get("openai.api.type") == ("responses" if api == "responses" else None)
               for r in recorded)
    assert _ENDED[-2:] == [3 if one_pass_end else 0, 0]
    assert all((s[1] is StatusCode.ERROR) == shape.endswith("too_long")
               for s in _call_spans(shipped))


def test_the_plain_responses_path_records_the_instructions_and_the_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The values themselves: the instructions block (its own id) and the history."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    calls = [{"instructions": SYSTEM, "input": HISTORY, "max_output_tokens": 50}] * 2
    shipped, taken = _record("none", _chat_calls(calls, False, "responses"), True, monkeypatch)
    assert taken >= 1
    attrs = dict(shipped["spans"][-1][3])
    assert attrs[S.ASSEMBLY_BLOCK_ITEM_IDS][0].startswith("instructions:")
    assert attrs[S.ASSEMBLY_BLOCK_KINDS] == ("system_prompt", "session_history",
                                             "session_history", "user_message")
    assert attrs[S.WINDOW_SEGMENT_RESERVED_TOKENS][2] == 50
    assert attrs[S.BUDGET_ACTUAL_TOKENS] > 0



def _agent_turns(api: str) -> tuple[Callable[[StubServer], None], int]:
    """An agent's three calls, each sending the last one's messages, its reply and a new
    question, all of them text no call has sent before (unique to this test run): the
    one-pass start makes the new messages' blocks as the general reader does. And how many
    of the calls are plain at least (a system prompt or instructions are remembered only
    once a call read them)."""
    fresh = uuid.uuid4().hex
    history: list[dict[str, Any]] = []
    turns = []
    for n in range(3):
        if history:
            history = [*history, {"role": "assistant", "content": f"Answer {n} {fresh}."}]
        history = [*history, {"role": "user", "content": f"Question {n} {fresh}?"}]
        turns.append(history)
    if api == "anthropic":
        return (lambda stub: _calls(stub, [{"system": SYSTEM + fresh, "messages": t}
                                           for t in turns])), 2
    if api == "responses":
        return _chat_calls([{"instructions": SYSTEM + fresh, "input": t} for t in turns],
                           False, "responses"), 2
    return _chat_calls([{"messages": [{"role": "system", "content": SYSTEM + fresh}, *t]}
                        for t in turns], False), 3


@pytest.mark.parametrize("official", COMPOSITIONS)
@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_new_messages_are_recorded_in_one_pass_as_the_general_path_records_them(
        api: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    run, plain = _agent_turns(api)
    shipped, taken = _record(official, run, True, monkeypatch)  # first: the text is new
    general, none_taken = _record(official, run, False, monkeypatch)
    assert none_taken == 0
    assert taken == plain
    assert shipped == general
    recorded = [dict(s[3]) for s in shipped["spans"] if S.ASSEMBLY_BLOCK_ITEM_IDS in dict(s[3])]
    assert [len(r[S.ASSEMBLY_BLOCK_ITEM_IDS]) for r in recorded] == [2, 4, 6]
    # the same message has the same item id in every call that sends it
    assert recorded[1][S.ASSEMBLY_BLOCK_ITEM_IDS][:2] == recorded[2][S.ASSEMBLY_BLOCK_ITEM_IDS][:2]



def test_a_call_in_an_envelope_names_the_selected_items_it_carries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Items the application selected by the API's own ids, with a digest and no text
    (nothing to search the blocks for): a one-pass call joining the envelope names the
    ones its blocks carry, as the general path does; the others are not injected."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)

    def select(env: Any) -> None:
        with env.selection(intent="history", policy="all") as sel:
            for rank, item_id in enumerate(("msg_1", "msg_9"), start=1):
                sel.selected(ContextItem(item_id=item_id, context_kind="session_history",
                                         digest="sha256:" + "0" * 64), rank=rank)

    # msg_1 in the second call only (the first reads the instructions)
    run = _chat_calls([{"instructions": SYSTEM, "input": HISTORY},
                       {"instructions": SYSTEM, "input": DUMPED_ITEMS}], False, "responses")
    shipped, taken = _record("none", run, True, monkeypatch, in_envelope=select)
    general, _ = _record("none", run, False, monkeypatch, in_envelope=select)
    assert taken >= 1
    assert shipped == general
    (selection,) = [s for b in shipped["bundles"] for s in b.get("context_selections", ())]
    assert selection["not_injected_item_refs"] == ["msg_9"]
    assert shipped["metrics"]["context.items.not_injected"] == [
        ([("agent", "unknown"), ("kind", "session_history")], 1)]


def _agents_runs(stub: StubServer) -> None:
    """A conversation of three OpenAI Agents SDK runs on the Responses API, each given the
    last one's items back (``to_input_list()``), the first calling a tool: the SDK's own
    requests (its omit values, headers, the items as dicts) inside each run's envelope."""
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Find an order by its id."""
        return f"Order {order_id} shipped yesterday."

    client = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0)
    agent = Agent(name="Support agent", instructions=SYSTEM, tools=[lookup_order],
                  model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
    history: list[Any] = []
    for question in ('Where is order 42? [call:lookup_order {"order_id": "42"}]',
                     "When does it arrive?", "Thanks."):
        result = Runner.run_sync(agent, [*history, {"role": "user", "content": question}])
        history = result.to_input_list()


@pytest.mark.parametrize("official", ["none", "outer"])
def test_an_agents_sdk_conversation_is_recorded_in_one_pass_as_the_general_path_records_it(
        official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model calls of an Agents SDK run join the run's envelope; every call after the
    first (whose instructions no call read before) is read and ended in one pass, and
    records what the general path records."""
    from agents import set_tracing_disabled

    from otel_agent_context.instrumentation.openai_agents import (
        OpenAIAgentsContextInstrumentor,
    )

    set_tracing_disabled(True)
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    frameworks = (OpenAIAgentsContextInstrumentor(),)
    shipped, taken = _record(official, _agents_runs, True, monkeypatch,
                             frameworks=frameworks)
    ended = _ENDED[-1]
    general, none_taken = _record(official, _agents_runs, False, monkeypatch,
                                  frameworks=frameworks)
    assert none_taken == 0
    assert shipped == general
    calls = [attrs for s in _call_spans(shipped)
             if S.ASSEMBLY_BLOCK_ITEM_IDS in (attrs := dict(s[3]))]
    assert len(calls) == 4  # the tool's round and three answers
    assert taken >= 3 and ended == 4
    envelopes = {b["context_envelope"]["context_id"] for b in shipped["bundles"]}
    assert {c[S.CONTEXT_ID] for c in calls} <= envelopes and len(envelopes) == 3
    # the call after the tool ran: the call and its result, named by the call's id
    second = calls[1]
    assert second[S.ASSEMBLY_BLOCK_KINDS][-2:] == ("session_history", "tool_result")
    call_ids = second[S.ASSEMBLY_BLOCK_TOOL_CALL_IDS]
    assert call_ids[-1] == call_ids[-2] != ""
    # the last run sends the whole conversation: the same items under the same ids
    assert calls[3][S.ASSEMBLY_BLOCK_ITEM_IDS][:5] == calls[2][S.ASSEMBLY_BLOCK_ITEM_IDS][:5]


@pytest.mark.parametrize("where", ["chat_plain", "chat_plain_response", "responses_plain",
                                   "responses_plain_response"])
def test_a_failing_one_pass_reader_leaves_the_call_to_the_general_reader(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our error in a one-pass reader, before anything is recorded: the general reader
    reads the call instead and nothing is lost; in strict mode the error is raised with
    the call ended (no span left current for the application's next call)."""
    from opentelemetry import trace

    from otel_agent_context.instrumentation.openai import _extract

    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    api = "responses" if where.startswith("responses") else "chat"
    run = _chat_calls((CHAT_SHAPES if api == "chat" else RESPONSES_SHAPES)["plain"][0],
                      False, api)
    general, _ = _record("none", run, False, monkeypatch)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ours")

    monkeypatch.setattr(_extract, where, broken)
    shipped, _ = _record("none", run, True, monkeypatch, strict=False)
    assert shipped == general
    with pytest.raises(RuntimeError, match="ours"):
        _record("none", run, True, monkeypatch)
    assert not trace.get_current_span().get_span_context().is_valid


@pytest.mark.parametrize(("api", "shape"), [
    ("chat", "agent_loop"), ("chat", "parallel_calls"), ("chat", "tool_result"),
    ("chat", "sdk_messages"), ("chat", "sdk_parsed_and_empty"), ("chat", "dumped_messages"),
    ("responses", "sdk_items"),
    ("chat", "plain"), ("responses", "function_calls"), ("responses", "plain"),
    ("anthropic", "tool_loop"), ("anthropic", "sdk_tool_loop"), ("anthropic", "plain")])
def test_a_one_pass_readers_blocks_are_the_general_readers(api: str, shape: str) -> None:
    """The blocks a one-pass request makes from its history when something asks for them
    (a context-length error, an edit) are the general reader's, a tool call's or result's
    with the call's id; made twice (the history's rows remembered the second time)."""
    from otel_agent_context.instrumentation.anthropic import _extract as _anthropic
    from otel_agent_context.instrumentation.openai import _extract

    if api == "anthropic":
        kwargs = {"model": "claude-sonnet-4-6", "max_tokens": 50,
                  **SHAPES["system_str" if shape == "plain" else shape][0][0]}
        plain, general = _anthropic.messages_plain, _anthropic.messages_request
    else:
        kwargs = {"model": "gpt-4o-mini",
                  **(CHAT_SHAPES if api == "chat" else RESPONSES_SHAPES)[shape][0][0]}
        plain, general = ((_extract.chat_plain, _extract.chat_request) if api == "chat"
                          else (_extract.responses_plain, _extract.responses_request))
    expected = general((), kwargs, False)  # the system prompt's block remembered
    for _ in range(2):
        req = plain(kwargs)
        assert req is not None
        assert req.block_count == len(expected.blocks)
        assert req.blocks == expected.blocks
        assert (req.tool_tokens, req.genai) == (expected.tool_tokens, expected.genai)
    assert any(b.tool_call_id for b in expected.blocks) == (
        shape not in ("plain", "sdk_parsed_and_empty"))


def test_a_block_naming_nothing_that_is_not_plain_leaves_the_call_to_the_general_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-pass request whose history names tool calls may hold no other block that is not
    plain (one with a response id here): the one-pass path records only the call ids."""
    from otel_agent_context.instrumentation.openai import _extract

    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    chat_plain = _extract.chat_plain

    def with_a_reference(kwargs: dict[str, Any]) -> Any:
        req = chat_plain(kwargs)
        if req is not None:
            req._blocks = [_common.make_block(
                "response:resp_1", "session_history", None, False, "message_history",
                "message_history", content_mode="ref", tokens=None, response_id="resp_1",
                content_ref="openai:responses/resp_1")]
        return req

    monkeypatch.setattr(_extract, "chat_plain", with_a_reference)
    run = _chat_calls([{"messages": AGENT_LOOP[1:]}] * 2, False)  # no system prompt
    _, taken = _record("none", run, True, monkeypatch)
    assert taken == 0
    monkeypatch.setattr(_extract, "chat_plain", chat_plain)
    _, taken = _record("none", run, True, monkeypatch)
    assert taken >= 1


# -- the call's end: a response with nothing but its usage to record ----------------------

_MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": [{"type": "text", "text": "Tomorrow."}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 3}}
_COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
               "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_1",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "Tomorrow."}}],
               "usage": {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}}
_RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
             "model": "gpt-4o-mini-2024-07-18", "output": [
                 {"type": "message", "id": "msg_1", "status": "completed",
                  "role": "assistant", "content": [{"type": "output_text",
                                                    "text": "Tomorrow.", "annotations": []}]}],
             "usage": {"input_tokens": 40, "output_tokens": 3, "total_tokens": 43,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}},
             "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
             "incomplete_details": None, "error": None, "instructions": None,
             "metadata": {}, "temperature": 1.0, "top_p": 1.0}
_EDITED = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 1,
                              "cleared_input_tokens": 12}]}

#: name -> (provider, the response as the SDK parses it, or a dict; whether it is plain)
RESPONSES: dict[str, tuple[str, Any, bool]] = {
    "message": ("anthropic", _MESSAGE, True),
    "message_cached": ("anthropic", {**_MESSAGE, "usage": {
        "input_tokens": 4, "output_tokens": 3, "cache_read_input_tokens": 30,
        "cache_creation_input_tokens": 6}}, True),
    "message_cache_zero": ("anthropic", {**_MESSAGE, "usage": {
        "input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": None}}, True),
    "message_no_stop": ("anthropic", {**_MESSAGE, "stop_reason": None}, True),
    "message_refusal": ("anthropic", {**_MESSAGE, "stop_reason": "refusal"}, True),
    "message_edited": ("anthropic beta", {**_MESSAGE, "context_management": _EDITED}, False),
    "message_beta_unedited": ("anthropic beta", {**_MESSAGE, "context_management": None},
                              True),
    "message_no_usage": ("anthropic unchecked", {**_MESSAGE, "usage": None}, False),
    "message_dict": ("anthropic dict", _MESSAGE, False),
    "completion": ("openai", _COMPLETION, True),
    "completion_details": ("openai", {**_COMPLETION, "usage": {
        **_COMPLETION["usage"], "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 2}}}, True),
    "completion_no_usage": ("openai", {**_COMPLETION, "usage": None}, True),
    "completion_no_fingerprint": ("openai", {**_COMPLETION, "system_fingerprint": None},
                                  True),
    # the second choice's reason then set to None (the SDK builds a response unvalidated)
    "completion_two_choices": ("openai", {**_COMPLETION, "choices": [
        {"index": 0, "finish_reason": "length", "message": {"role": "assistant"}},
        {"index": 1, "finish_reason": "stop", "message": {"role": "assistant"}}]}, True),
    "completion_dict": ("openai dict", _COMPLETION, False),
    "response": ("openai responses", _RESPONSE, True),
    "response_details": ("openai responses", {**_RESPONSE, "usage": {
        **_RESPONSE["usage"], "input_tokens_details": {"cached_tokens": 30,
                                                      "cache_write_tokens": 6},
        "output_tokens_details": {"reasoning_tokens": 2}}}, True),
    "response_incomplete": ("openai responses", {
        **_RESPONSE, "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"}}, True),
    "response_no_status": ("openai responses", {**_RESPONSE, "status": None}, True),
    "response_no_usage": ("openai responses", {**_RESPONSE, "usage": None}, True),
    # usage details then set to dicts (an object the SDK did not build: read as dicts)
    "response_dict_details": ("openai responses", _RESPONSE, True),
    # a compaction item: the general end records the provider's compaction
    "response_compaction": ("openai responses", {**_RESPONSE, "output": [
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"},
        *_RESPONSE["output"]]}, False),
    "response_dict": ("openai responses dict", _RESPONSE, False),
}


def _response(provider: str, body: dict[str, Any]) -> Any:
    from anthropic.types import Message
    from anthropic.types.beta import BetaMessage
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

    if provider.endswith("dict"):
        return body
    if provider == "anthropic unchecked":  # a field the SDK's model would refuse
        return Message.model_construct(**body)
    if provider == "openai responses":  # as the SDK builds it: unvalidated, fields missing
        return openai._models.construct_type(type_=Response, value=body)
    return {"anthropic": Message, "anthropic beta": BetaMessage,
            "openai": ChatCompletion}[provider].model_validate(body)


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_a_plain_response_reads_what_the_general_reader_reads(name: str) -> None:
    """``Api.plain_response`` gives ``parse_response``'s fields for the SDK's own response
    when usage is all it records, and None for anything else (a dict, applied context
    edits, a response without usage)."""
    from otel_agent_context.instrumentation.anthropic import _extract as anthropic_reader
    from otel_agent_context.instrumentation.openai import _extract as openai_reader

    provider, body, plain = RESPONSES[name]
    result = _response(provider, body)
    if name == "completion_two_choices":
        result.choices[1].finish_reason = None
    if name == "response_dict_details":
        result.usage.input_tokens_details = {"cached_tokens": 30, "cache_write_tokens": 6}
        result.usage.output_tokens_details = {"reasoning_tokens": 2}
    reader = anthropic_reader if provider.startswith("anthropic") else openai_reader
    general, one_pass = ((reader.messages_response, reader.messages_plain_response)
                         if reader is anthropic_reader
                         else (reader.responses_response, reader.responses_plain_response)
                         if provider.startswith("openai responses")
                         else (reader.chat_response, reader.chat_plain_response))
    fields = one_pass(result)
    if not plain:
        assert fields is None
        return
    out = general(result, False)
    assert fields is not None
    assert fields[:2] == (out.response_id, out.response_model)
    assert (fields[2] or None) == (out.finish_reasons or None)  # falsy: not recorded
    assert fields[3:8] == (out.input_tokens, out.output_tokens, out.cache_read,
                           out.cache_write, out.reasoning_tokens)
    assert (fields[8] or {}) == out.attributes


def test_an_odd_input_count_ends_through_the_general_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A count ``Budget.actual`` refuses (negative, not an int) is the general path's: it
    logs it as the budget would; the one-pass end declines, having changed nothing."""
    from otel_agent_context.instrumentation.anthropic import _extract

    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    plain_response = _extract.messages_plain_response
    declined: list[bool] = []

    def odd(result: Any) -> Any:
        fields = plain_response(result)
        assert fields is not None
        return (*fields[:3], -1, *fields[4:])

    original = _common.Call.finish_plain

    def finish_plain(self: Any, fields: Any) -> bool:
        done = original(self, fields)
        declined.append(not done)
        return done

    monkeypatch.setattr(_extract, "messages_plain_response", odd)
    general, _ = _record("none", [{"system": SYSTEM, "messages": HISTORY}] * 2, False,
                         monkeypatch)  # both one-pass paths off
    monkeypatch.setattr(_common.Call, "finish_plain", finish_plain)
    tel = CapturedTelemetry()
    setup = Setup(tel, "none", False)
    setup.start()
    try:
        with StubServer() as stub:
            _calls(stub, [{"system": SYSTEM, "messages": HISTORY}] * 2)
    finally:
        setup.stop()
    assert declined == [True, True]
    spans = [[(k, v) for k, v in s.attributes.items() if k not in _TIMES]
             for s in tel.spans()]
    assert spans == [s[3] for s in general["spans"]]
    assert all(dict(s)[S.BUDGET_ACTUAL_TOKENS] > 0 for s in spans)  # the response's own


@pytest.mark.parametrize("in_envelope", [False, True])
def test_a_failing_plain_end_is_logged_and_the_call_ends(
        in_envelope: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Our error while the one-pass end sets the response's fields is ours: logged, the
    records still stopped and written (without the usage, as the general end), the span
    ended, the application's reply returned; in the application's envelope too."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("ours")

    monkeypatch.setattr(_common, "_put_response", broken)
    tel = CapturedTelemetry(strict=False)
    setup = Setup(tel, "none", False)
    setup.start()
    try:
        with StubServer() as stub, (tel.agent_context.envelope(scope="turn") if in_envelope
                                    else contextlib.nullcontext()):
            client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k",
                                         max_retries=0)
            reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                           system=SYSTEM, messages=HISTORY)
    finally:
        setup.stop()
    assert reply.content[0].text
    assert "_record_outcome failed" in caplog.text
    (span, *envelope) = tel.spans()
    assert span.end_time is not None
    assert len(envelope) == in_envelope
    # the records' stop ran: the call's envelope's, or the budget's in the application's
    final = (envelope[0] if in_envelope else span).attributes
    assert final[S.CONTEXT_LIFECYCLE] == "injected"
    assert S.BUDGET_ACTUAL_TOKENS not in span.attributes
    assert (S.BUDGET_UTILIZATION in span.attributes) is False
    assert tel.bundles()


def test_a_truncated_input_is_left_to_the_general_end() -> None:
    """The provider's own truncation (OpenAI ``truncation="auto"``) is recorded from the
    response's count by the general end; the one-pass end declines such a call, having
    changed nothing (through the real client: the ``truncation`` shape of
    ``test_a_plain_openai_request_records_what_the_general_path_records``)."""
    call = _common.Call.__new__(_common.Call)
    call.done = False
    call.budget = None
    call.record = object()  # type: ignore[assignment]
    call.req = _common.Request("openai", "gpt-4o-mini", 50)
    call.req.overflow_strategy = "truncate_middle"
    fields = ("resp_1", "gpt-4o-mini", ["stop"], 40, 3, None, None, None, None)
    assert call.finish_plain(fields) is False
    assert call.done is False and call.record is not None
    call.req.overflow_strategy = None
    call.done = True  # ended already: declined as well
    assert call.finish_plain(fields) is False
