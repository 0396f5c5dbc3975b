"""The short paths of reading and recording a call record what the general ones do.

- A plain message (a role and a string, content capture off) is a block remembered beside
  the digests (``plain_block``): the same fields as the block the general path builds for
  the same message, shared by the calls that send it and never changed by one of them
  (a repeat is renamed on a copy).
- A one-pass reader (``Api.plain``) keeps a history as rows and texts (``plain_row``), made
  into the same blocks only when something asks; what it remembers is nothing the garbage
  collector keeps walking (tuples of strings and numbers).
- The folded call's attributes, written without the per-value check when every value is
  ours (``checked``), are the ones the checked write records, in the same order; a value
  that is not ours (an API's item id that is not text, a tool call id) takes the check.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from otel_agent_context import _digest, _envelope, _folded
from otel_agent_context.instrumentation import _common as C
from otel_agent_context.instrumentation._common import (
    KNOWN_MESSAGES,
    Block,
    distinct_ids,
    message_facts,
)
from otel_agent_context.instrumentation.anthropic import _extract as AX
from otel_agent_context.instrumentation.openai import _extract as OX
from otel_agent_context.testing import CapturedTelemetry

HISTORY = [{"role": "system", "content": "You are ACME's support agent."},
           {"role": "developer", "content": "Answer in one line."},
           {"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "It shipped."},
           {"role": "user", "content": ""},
           {"role": "user", "content": "Where is my order?"},
           {"role": "user", "content": "And when will it arrive?"}]


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    """The memo starts empty (one full from earlier tests is forgotten at its next entry,
    maybe between two of a test's calls) and no framework's message ids are current (a
    value an earlier test left set sends every message the known ids' way)."""
    _digest._forget()
    token = KNOWN_MESSAGES.set(None)
    yield
    KNOWN_MESSAGES.reset(token)


def _objects(messages: list[dict[str, Any]]) -> list[Any]:
    """The same messages as objects: the general path reads these."""
    return [SimpleNamespace(**m) for m in messages]


def _fresh(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """New dicts and strings, as an application builds its history again each call."""
    return [{k: "".join(list(v)) for k, v in m.items()} for m in messages]


def test_a_chat_message_block_is_the_general_paths() -> None:
    fast = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    general = OX.chat_request((), {"model": "m", "messages": _objects(HISTORY)}, False).blocks
    assert [b.kind for b in fast][:3] == ["system_prompt", "developer_instruction",
                                          "session_history"]
    assert fast[-1].kind == "user_message"
    assert fast == general
    again = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    assert again == fast
    assert again[2] is fast[2]  # remembered: the same texts in new dicts


def test_a_responses_message_block_is_the_general_paths() -> None:
    items = [{"type": "message", **m} for m in HISTORY[1:]] + [
        {"role": "user", "content": "typeless"}]
    fast = OX.responses_request((), {"model": "m", "input": items,
                                     "instructions": "Be brief."}, False).blocks
    general = OX.responses_request((), {"model": "m", "input": _objects(items),
                                        "instructions": "Be brief."}, False).blocks
    assert fast == general
    # an item with its own id keeps it (the general path)
    (block,) = OX.responses_request((), {"model": "m", "input": [
        {"role": "user", "content": "hi", "id": "msg_1"}]}, False).blocks
    assert block.item_id == "msg_1"


def test_an_anthropic_message_block_is_as_before() -> None:
    messages = _fresh(HISTORY[2:])
    blocks = AX.messages_request((), {"model": "m", "max_tokens": 10,
                                      "messages": messages}, False).blocks
    expected = []
    for i, m in enumerate(messages):
        item_id, tokens, digest = message_facts(m["role"], m["content"])
        kind = "user_message" if i == len(messages) - 1 else "session_history"
        expected.append(Block(item_id, kind, "message_history", "message_history", tokens,
                              digest, None, "inline", None, None, None, False, None,
                              m["content"] or None))
    assert blocks == expected


def test_a_repeat_is_renamed_on_a_copy() -> None:
    first = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    shared = first[5]
    distinct_ids(first)
    assert first[5].item_id == shared.item_id + "#2"
    assert first[5] is not shared and first[5].digest == shared.digest
    second = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    assert second[5] is shared and "#" not in shared.item_id  # unchanged by the first call
    distinct_ids(second)
    assert [b.item_id for b in second] == [b.item_id for b in first]


@pytest.mark.parametrize("ids, names", [
    (["x", "x#2", "x"], ["x", "x#2", "x#3"]),
    (["x", "x", "x#2"], ["x", "x#3", "x#2"]),
    (["x", "x", "x#2", "x", "x#2"], ["x", "x#3", "x#2", "x#4", "x#2#2"]),
    (["a", "b", "a", "b", "a"], ["a", "b", "a#2", "b#2", "a#3"]),
], ids=["taken before", "taken after", "both repeated", "plain repeats"])
def test_a_repeat_takes_no_name_another_block_has(ids: list[str], names: list[str]) -> None:
    """A framework's ids may end in ``#2`` themselves: a repeat's name skips every name
    the call's ids hold or an earlier repeat took, the same in the framework's records
    (``numbered``) as in the assembly's blocks (``distinct_ids``)."""
    assert C.numbered(iter(ids)) == names
    blocks = [Block(i, "session_history", "message_history", "message_history", 1)
              for i in ids]
    assert distinct_ids(blocks) is True
    assert [b.item_id for b in blocks] == names
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("estimator", [None, len], ids=["heuristic", "custom estimator"])
def test_what_a_one_pass_reader_remembers_is_not_left_for_the_garbage_collector(
        estimator: Any) -> None:
    """An agent's calls, each with two new messages and a window that slides, read in one
    pass: after two collections nothing the memo holds is tracked (a
    remembered block object was, until the memo was full, and an agent's new messages drove
    full collections of the application's whole heap; a key holding the token estimator
    function was too). The rows are still the ones made the first time."""
    import gc

    from otel_agent_context.instrumentation import _tokens

    _tokens.set_token_estimator(estimator)
    try:
        system = {"role": "system", "content": "You are ACME's support agent."}
        recent: list[dict[str, str]] = []
        first_rows = None
        for turn in range(30):
            question = {"role": "user", "content": f"Question {turn}?"}
            sent = [system, *recent, question]
            for req in (OX.chat_plain({"model": "m", "messages": sent}),
                        AX.messages_plain({"model": "m", "max_tokens": 9,
                                           "messages": sent[1:]})):
                assert req is not None and req.plain_history is not None
                rows = req.plain_history[0]
                if first_rows is None:
                    first_rows = rows
            recent = [*recent[-6:], question,
                      {"role": "assistant", "content": f"Answer {turn}."}]
        gc.collect()
        gc.collect()
        held = list(_digest._MEMO.items())
        assert len(held) > 100 and any(k[0] == C._PLAIN_ROW for k, _ in held)
        assert [kv for kv in held if gc.is_tracked(kv[0]) or gc.is_tracked(kv[1])] == []
        again = OX.chat_plain({"model": "m", "messages": [
            system, {"role": "user", "content": "Question 0?"}]})
        assert again is not None and again.plain_history is not None
        assert again.plain_history[0] == first_rows
        assert again.plain_history[0][1] is first_rows[1]  # remembered, not made again
    finally:
        _tokens.set_token_estimator(None)


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_a_one_pass_readers_history_becomes_blocks_only_when_asked(api: str) -> None:
    """A one-pass reader keeps the history as rows and texts (its records read the rows);
    its blocks, made when something asks (a provider's compaction, a truncation), are the
    general reader's, after the system prompt's, counted without being made."""
    messages = _fresh(HISTORY[2:4] + HISTORY[6:])
    if api == "chat":
        kwargs = {"model": "m", "messages": [HISTORY[0], *messages]}
        plain, general = OX.chat_plain(kwargs), OX.chat_request((), kwargs, False)
    elif api == "responses":
        kwargs = {"model": "m", "input": messages, "instructions": "Be brief."}
        OX.responses_request((), kwargs, False)  # the instructions' block remembered
        plain, general = OX.responses_plain(kwargs), OX.responses_request((), kwargs, False)
    else:
        kwargs = {"model": "m", "max_tokens": 9, "system": "Be brief.", "messages": messages}
        AX.messages_request((), kwargs, False)  # the system prompt's block remembered
        plain = AX.messages_plain(kwargs)
        general = AX.messages_request((), kwargs, False)
    assert plain is not None
    history = plain.plain_history
    # chat's system message is a message of its history; the others' come first as blocks
    sent = [HISTORY[0], *messages] if api == "chat" else messages
    first = 0 if api == "chat" else 1
    assert history is not None and history[1] == [m["content"] for m in sent]
    assert plain.block_count == len(general.blocks) == first + len(sent)
    assert plain.plain_history is history  # counted, not made
    assert plain.estimated_input == general.estimated_input
    assert plain.plain_history is None  # asked: made
    assert plain.blocks == general.blocks
    assert [b._row for b in plain.blocks[first:]] == list(history[0])
    # blocks set again replace the history; a history set after blocks follows them
    plain.blocks = []
    assert plain.block_count == 0 and plain.plain_history is None
    plain.blocks = general.blocks[:first]
    plain.plain_history = history
    assert plain.block_count == len(general.blocks) and plain.blocks == general.blocks


def test_setting_the_same_estimator_again_keeps_what_was_remembered() -> None:
    """An application that sets its estimator before every turn does not lose the memo (a
    new key each time missed every remembered row: ~20x a call on a 61-message history)."""
    from otel_agent_context.instrumentation import _tokens

    def estimator(text: str) -> int:
        return len(text) // 3

    kwargs = {"model": "m", "messages": _fresh(HISTORY[2:4])}
    try:
        _tokens.set_token_estimator(estimator)
        first = OX.chat_plain(kwargs)
        _tokens.set_token_estimator(estimator)
        again = OX.chat_plain(kwargs)
        assert first is not None and again is not None
        assert first.plain_history is not None and again.plain_history is not None
        assert again.plain_history[0][0] is first.plain_history[0][0]
        assert first.plain_history[0][0][2] == len(HISTORY[2]["content"]) // 3
        # another estimator (or the heuristic again) is another key
        _tokens.set_token_estimator(len)
        other = OX.chat_plain(kwargs)
        assert other is not None and other.plain_history is not None
        assert other.plain_history[0][0][2] == len(HISTORY[2]["content"])
    finally:
        _tokens.set_token_estimator(None)


def test_a_history_made_into_blocks_is_whole_for_a_thread_asking_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads asking for the blocks of one request (unusual) each get the whole list,
    once: the second waits while the first makes them."""
    import threading

    req = OX.chat_plain({"model": "m", "messages": _fresh(HISTORY[2:4] + HISTORY[6:])})
    assert req is not None
    rows, texts, calls = req.plain_history
    assert calls is None  # no message names a tool call
    expected = [C.row_block(r, t) for r, t in zip(rows, texts, strict=True)]
    entered, release = threading.Event(), threading.Event()
    made = C.row_block

    def slow_row_block(row: Any, text: str, call_id: str | None = None) -> Block:
        if not entered.is_set():
            entered.set()
            release.wait(5)
        return made(row, text, call_id)

    monkeypatch.setattr(C, "row_block", slow_row_block)
    seen: dict[str, list[Block]] = {}
    first = threading.Thread(target=lambda: seen.setdefault("first", req.blocks))
    second = threading.Thread(target=lambda: seen.setdefault("second", req.blocks))
    first.start()
    assert entered.wait(5)
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waiting for the first, not reading half a list
    release.set()
    first.join(5)
    second.join(5)
    assert seen["first"] == seen["second"] == expected
    assert req.blocks == expected and req.plain_history is None


def test_known_ids_are_not_remembered() -> None:
    token = KNOWN_MESSAGES.set({("user", "Where is my order?"): ["lc-1", "lc-2"]})
    try:
        blocks = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    finally:
        KNOWN_MESSAGES.reset(token)
    assert [blocks[2].item_id, blocks[5].item_id] == ["lc-1", "lc-2"]
    plain = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks
    assert plain[2].item_id.startswith("user:") and plain[2].item_id == plain[5].item_id


REQUESTS: dict[str, tuple[Any, dict[str, Any], bool]] = {
    "chat": (OX.chat_request, {"messages": HISTORY, "max_completion_tokens": 300}, True),
    "chat with tool calls": (OX.chat_request, {"messages": [
        *HISTORY[:3],
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}]}, False),
    "responses": (OX.responses_request, {"input": HISTORY[2:], "instructions": "Be brief.",
                                         "previous_response_id": "resp_0"}, False),
    "responses, an id not text": (OX.responses_request, {"input": [
        {"type": "message", "role": "user", "content": "hi", "id": 5}]}, False),
    "anthropic": (AX.messages_request, {"max_tokens": 300, "system": "Be brief.",
                                        "messages": HISTORY[2:]}, True),
}


def _folded_span(name: str, monkeypatch: pytest.MonkeyPatch, unchecked: bool
                 ) -> tuple[list[tuple[str, Any]], list[bool]]:
    parse, kwargs, _ = REQUESTS[name]
    req = parse((), {"model": "gpt-4o-mini", **kwargs}, False)
    distinct_ids(req.blocks)
    writes: list[bool] = []
    real = _envelope.set_attributes

    def spy(span: Any, attrs: Any, checked: bool = False) -> None:
        writes.append(checked)
        real(span, attrs, checked)

    with monkeypatch.context() as patch:
        patch.setattr(_envelope, "set_attributes", spy)
        if unchecked:
            patch.setattr(_folded, "_ours", lambda *args: False)
        tel = CapturedTelemetry()
        try:
            span = tel.tracer.start_span("chat gpt-4o-mini")
            env = tel.agent_context._call_envelope(span)
            _folded.fold_call(env, span, max_tokens=128_000,
                              reserved_tokens=req.reserved_output,
                              overflow_strategy=req.overflow_strategy,
                              segments=C._segments(req), blocks=req.blocks, sources=None,
                              capture=False)
            span.end()
            return list(tel.spans()[0].attributes.items()), writes
        finally:
            tel.shutdown()


@pytest.mark.parametrize("name", list(REQUESTS))
def test_the_folded_write_is_the_checked_ones(name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_writes = _folded_span(name, monkeypatch, unchecked=False)
    checked, checked_writes = _folded_span(name, monkeypatch, unchecked=True)
    assert fast == checked
    assert any(k == "context.assembly.block_item_ids" for k, _ in fast)
    assert all(not isinstance(v, list) for _, v in fast)
    assert fast_writes == [REQUESTS[name][2]]
    assert checked_writes == [False]


@pytest.fixture()
def _estimator() -> Iterator[None]:
    yield
    C._tokens.set_token_estimator(None)


@pytest.mark.usefixtures("_estimator")
def test_a_remembered_block_follows_the_token_estimator() -> None:
    """Blocks looked up inline (chat, Anthropic messages and system) are remembered under
    the estimator too: one set later counts the same texts its way."""
    chat = {"model": "m", "messages": _fresh(HISTORY)}
    anthropic = {"model": "m", "max_tokens": 10, "messages": _fresh(HISTORY[2:]),
                 "system": [{"type": "text", "text": "Be brief.",
                             "cache_control": {"type": "ephemeral"}}]}
    before = (OX.chat_request((), dict(chat), False).blocks
              + AX.messages_request((), dict(anthropic), False).blocks)
    C._tokens.set_token_estimator(lambda text: 1000 + len(text))
    after = (OX.chat_request((), dict(chat), False).blocks
             + AX.messages_request((), dict(anthropic), False).blocks)
    assert [b.tokens for b in after] == [1000 + len(b.text) if b.text else 0 for b in before]
    assert [b.digest for b in after] == [b.digest for b in before]


def test_an_anthropic_system_block_is_as_before() -> None:
    """The system prompt's block, remembered without capture: the fields make_block gives,
    its cache breakpoint its own (the same text with and without one), its content only
    under capture."""
    def system(block: Any, capture: bool) -> Block:
        req = AX.messages_request((), {"model": "m", "max_tokens": 10, "system": block,
                                       "messages": [{"role": "user", "content": "hi"}]},
                                  capture)
        return req.blocks[0]

    text = "You are ACME's support agent."
    marked = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    for block, breakpoint_ in ((marked, True), ({"type": "text", "text": text}, False),
                               (text, False), (marked, True)):
        for capture in (False, True):
            expected = C.make_block(f"system:{C.short_digest(text)}", "system_prompt", text,
                                    capture, "system_prompt", "system_prompt",
                                    cache_breakpoint=breakpoint_)
            assert system([block] if isinstance(block, dict) else block, capture) == expected
    assert system([marked], False) is system([marked], False)  # remembered
    assert system([marked], False).content is None


class _Unhashable:
    """A token estimator that is not hashable (it defines equality only)."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __call__(self, text: str) -> int:
        return 7 * len(text)


@pytest.mark.usefixtures("_estimator")
def test_an_estimator_that_is_not_hashable_still_counts() -> None:
    """Blocks are remembered under a token of the estimator's setting, not the estimator:
    one that is not hashable counts every block its way instead of failing the reading."""
    C._tokens.set_token_estimator(_Unhashable())
    anthropic = {"model": "m", "max_tokens": 10, "system": "Be brief.",
                 "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    for _ in range(2):
        blocks = (AX.messages_request((), dict(anthropic), False).blocks
                  + OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)},
                                    False).blocks)
        assert [b.tokens for b in blocks] == [7 * len(b.text) if b.text else 0
                                              for b in blocks]


class _HashFails(_Unhashable):
    def __hash__(self) -> int:
        raise ValueError("no hash")


@pytest.mark.usefixtures("_estimator")
def test_an_estimator_whose_hash_fails_is_set_and_counts() -> None:
    """Setting such an estimator is the application's call: it must not raise there."""
    C._tokens.set_token_estimator(_HashFails())
    block = OX.chat_request((), {"model": "m", "messages": _fresh(HISTORY)}, False).blocks[0]
    assert block.tokens == 7 * len(block.text)


@pytest.mark.usefixtures("_estimator")
def test_an_anthropic_call_with_an_unhashable_estimator_is_recorded(alone: Any, stub: Any,
                                                                     caplog: Any) -> None:
    import anthropic

    C._tokens.set_token_estimator(_Unhashable())
    client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                                 max_retries=0)
    client.messages.create(model="claude-sonnet-4-6", max_tokens=50, system="Be brief.",
                           messages=[{"role": "user",
                                      "content": [{"type": "text", "text": "hello"}]}])
    (span,) = alone.tel.spans()
    assert "failed" not in caplog.text
    assert span.attributes["context.assembly.block_tokens"] == (7 * len("Be brief."),
                                                                7 * len("hello"))


def test_a_text_past_the_memo_cap_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system prompt or history message longer than the memo's share for one text is
    counted and recorded, never kept (its digest is not kept either)."""
    monkeypatch.setattr(_digest, "_MEMO_MAX_CHARS", 8 * 100)
    long_text = "x" * 101
    anthropic = {"model": "m", "max_tokens": 10, "system": long_text,
                 "messages": [{"role": "user", "content": long_text + "y"}]}
    chat = {"model": "m", "messages": [{"role": "system", "content": long_text + "z"},
                                       {"role": "user", "content": long_text + "w"}]}
    blocks = (AX.messages_request((), dict(anthropic), False).blocks
              + OX.chat_request((), dict(chat), False).blocks)
    assert [b.tokens for b in blocks] == [(len(b.text) + 3) // 4 for b in blocks]
    assert all(b.digest == C.digest_text(b.text) for b in blocks)
    kept = [k for k in _digest._MEMO
            if k == long_text or (isinstance(k, tuple) and any(
                isinstance(p, str) and p.startswith(long_text) for p in k))]
    assert kept == []
    short = {"model": "m", "messages": [{"role": "user", "content": "x" * 100}]}
    OX.chat_request((), dict(short), False)
    assert any(isinstance(k, tuple) and "x" * 100 in k for k in _digest._MEMO)


class _Text(str):
    pass


def test_a_str_subclass_system_prompt_keeps_its_type() -> None:
    """A system prompt of a ``str`` subclass equal to one seen before gets a block with the
    text as given, as the general path builds it (the same ids, digest and tokens)."""
    def system(text: str) -> Block:
        return AX.messages_request((), {"model": "m", "max_tokens": 10, "system": text,
                                        "messages": [{"role": "user", "content": "hi"}]},
                                   False).blocks[0]

    plain = system("Be brief.")
    given = system(_Text("Be brief."))
    assert type(given.text) is _Text
    assert given == plain
