"""A plain Anthropic request whose blocks an earlier call read is recorded in one pass
(``Api.plain``: ``messages_plain`` and ``Call._read_plain``) instead of the general reader,
``_begin`` and ``CallRecord.begin``. It must record exactly what the general path records:
each shape runs three times through the real ``anthropic`` client against the stub, alone
and composed with the official instrumentor in both orders, once as shipped and once with
the one-pass path turned off; spans (attributes in order), events, statuses, metric points
and rebuilt bundles are compared, and the one-pass path must have been taken for the plain
shapes and not for the others."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from llm_helpers import untimed
from llm_setup import CAPTURE_ENV, Setup
from stub_server import StubServer

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import _common
from otel_agent_context.testing import CapturedTelemetry

SYSTEM = "You are ACME's support agent. Answer in one sentence."
HISTORY = [{"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "It shipped yesterday."},
           {"role": "user", "content": "When does it arrive?"}]
CACHED = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]

#: name -> (the three calls' arguments, how many of them at least are plain)
SHAPES: dict[str, tuple[list[dict[str, Any]], int]] = {
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
    # not plain: the general path reads every call
    "repeated": ([{"system": SYSTEM, "messages": HISTORY + [
        {"role": "assistant", "content": "It shipped yesterday."},
        {"role": "user", "content": "Where is my order?"}]}] * 3, 0),
    "content_blocks": ([{"system": SYSTEM, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Where is my order?"}]}]}] * 3,
        0),
    "metadata": ([{"system": SYSTEM, "messages": HISTORY,
                   "metadata": {"user_id": "u-1"}}] * 3, 0),
    "stop_sequences": ([{"system": SYSTEM, "messages": HISTORY,
                         "stop_sequences": ["END"]}] * 3, 0),
    "system_citations": ([{"system": [{"type": "text", "text": SYSTEM, "citations": None}],
                           "messages": HISTORY}] * 3, 0),
    "named_message": ([{"system": SYSTEM, "messages": [
        {"role": "user", "content": "Where is my order?", "name": "ann"}]}] * 3, 0),
}


def _calls(stub: StubServer, calls: list[dict[str, Any]]) -> None:
    client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k", max_retries=0)
    for call in calls:
        client.messages.create(**{"model": "claude-sonnet-4-6", "max_tokens": 50, **call})


def _record(official: str, calls: list[dict[str, Any]] | Callable[[StubServer], None],
            plain: bool,
            monkeypatch: pytest.MonkeyPatch, capture: bool = False,
            in_envelope: bool = False) -> tuple[dict[str, Any], int]:
    taken = [0]
    read_plain = _common.Call._read_plain

    def counted(self: Any, *args: Any) -> bool:
        done = read_plain(self, *args) if plain else False
        taken[0] += done
        return done

    monkeypatch.setattr(_common.Call, "_read_plain", counted)
    tel = CapturedTelemetry(capture_content=capture)
    setup = Setup(tel, official, capture)
    setup.start()
    try:
        with StubServer() as stub:
            run = calls if callable(calls) else (lambda stub: _calls(stub, calls))
            if in_envelope:  # the application's envelope around the calls
                with tel.agent_context.envelope(scope="turn"):
                    run(stub)
            else:
                run(stub)
    finally:
        setup.stop()
        monkeypatch.setattr(_common.Call, "_read_plain", read_plain)
    spans = [(s.name, s.status.status_code, s.status.description,
              [(k, v) for k, v in s.attributes.items() if k not in _TIMES],
              [(e.name, dict(e.attributes)) for e in s.events]) for s in tel.spans()]
    metrics = {name: sorted((sorted((k, x) for k, x in labels.items() if k not in _TIMES),
                             getattr(v, "sum", v))
                            for labels, v in points)
               for name, points in tel.metrics().items()
               if name.startswith(("context.", "gen_ai.client.token"))}
    return {"spans": spans, "metrics": metrics, "bundles": untimed(tel.bundles())}, taken[0]


_TIMES = frozenset(("server.port",))


@pytest.fixture(autouse=True)
def _no_framework_message_ids() -> Iterator[None]:
    """No framework's message ids in this context (a LlamaIndex memory read outside any run
    leaves its ids for the next model call, by design): with them, no request is plain."""
    token = _common.KNOWN_MESSAGES.set(None)
    yield
    _common.KNOWN_MESSAGES.reset(token)


@pytest.mark.parametrize("official", ["none", "outer", "inner"])
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


@pytest.mark.parametrize("mode", ["application_envelope", "content_capture", "stage_spans"])
def test_what_the_plain_path_leaves_to_the_general_one(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An application's envelope around the call, content capture, the span-and-event form:
    the general path records them (the same request is plain otherwise)."""
    if mode == "content_capture":
        monkeypatch.setenv(CAPTURE_ENV, "SPAN_ONLY")
    else:
        monkeypatch.delenv(CAPTURE_ENV, raising=False)
    if mode == "stage_spans":
        monkeypatch.setenv("OTEL_AGENT_CONTEXT_STAGE_SPANS", "true")
    options = {"capture": mode == "content_capture",
               "in_envelope": mode == "application_envelope"}
    calls = [{"system": SYSTEM, "messages": HISTORY}] * 3
    shipped, taken = _record("none", calls, True, monkeypatch, **options)
    general, _ = _record("none", calls, False, monkeypatch, **options)
    assert taken == 0
    assert shipped == general
    assert shipped["bundles"]


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


def _folded_row(block: Any) -> None:
    from otel_agent_context._folded import block_columns

    block_columns([block])  # what a call's records read of it, kept on it


CHAT = [{"role": "system", "content": SYSTEM}, *HISTORY]

#: OpenAI chat: name -> (the three calls' arguments, how many of them at least are plain)
CHAT_SHAPES: dict[str, tuple[list[dict[str, Any]], int]] = {
    "plain": ([{"messages": CHAT, "max_completion_tokens": 50}] * 3, 2),
    "legacy_max_tokens": ([{"messages": CHAT, "max_tokens": 40}] * 3, 2),
    "both_sizes": ([{"messages": CHAT, "max_completion_tokens": 0, "max_tokens": 40}] * 3, 2),
    "no_system": ([{"messages": HISTORY}] * 3, 2),
    # not plain: a developer prompt (a window segment of its own), a sampling parameter, a
    # system prompt after the history, a tool message
    "developer": ([{"messages": [{"role": "developer", "content": SYSTEM}, *HISTORY]}] * 3,
                  0),
    "temperature": ([{"messages": CHAT, "temperature": 0.2}] * 3, 0),
    "late_system": ([{"messages": [*HISTORY, {"role": "system", "content": SYSTEM}]}] * 3, 0),
    "tool_result": ([{"messages": [*CHAT, {"role": "tool", "content": "{}",
                                          "tool_call_id": "call_1"}]}] * 3, 0),
}


def _chat_calls(calls: list[dict[str, Any]], asynchronous: bool
                ) -> Callable[[StubServer], None]:
    def run(stub: StubServer) -> None:
        if asynchronous:
            client: Any = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="k",
                                             max_retries=0)

            async def all_calls() -> None:
                for call in calls:
                    await client.chat.completions.create(model="gpt-4o-mini", **call)

            asyncio.run(all_calls())
            return
        client = openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0)
        for call in calls:
            client.chat.completions.create(model="gpt-4o-mini", **call)

    return run


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("official", ["none", "outer", "inner"])
@pytest.mark.parametrize("shape", sorted(CHAT_SHAPES))
def test_a_plain_chat_request_records_what_the_general_path_records(
        shape: str, official: str, asynchronous: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    calls, plain = CHAT_SHAPES[shape]
    shipped, taken = _record(official, _chat_calls(calls, asynchronous), True, monkeypatch)
    general, none_taken = _record(official, _chat_calls(calls, asynchronous), False,
                                  monkeypatch)
    assert none_taken == 0
    assert shipped == general
    assert taken >= plain if plain else taken == 0
    recorded = [dict(s[3]) for s in shipped["spans"] if S.ASSEMBLY_BLOCK_ITEM_IDS in dict(s[3])]
    assert len(recorded) == 3
