"""A request's tool definitions are not encoded again while they stay the same: an agent
sends them with every call, and encoding a real tool set (~60 us for 15 tools) cost more
than the rest of reading the request. The estimate must stay what encoding them would give:
for the same list sent again, for a list built anew with the same definitions, after a
change in place, under another token estimator, for agents alternating; a list that is not
plain data never takes the one-pass reader because of an earlier equal one; nothing of the
application's is kept alive; an estimator that fails leaves the call as it did."""

from __future__ import annotations

import copy
import gc
import json
import weakref
from collections import UserDict
from collections.abc import Iterator
from typing import Any

import pytest

from otel_agent_context.instrumentation import _tokens, set_token_estimator
from otel_agent_context.instrumentation.openai import _extract

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}},
          "required": ["order_id"]}
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Find it.",
                                           "parameters": copy.deepcopy(SCHEMA)}}
         for i in range(4)]


def _encoded(tools: Any) -> int:
    """What the estimate is without anything remembered."""
    return _tokens.estimate_tokens(json.dumps(list(tools), default=str))


@pytest.fixture()
def encodings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The definitions ``json.dumps`` encoded, nothing remembered before or after."""
    seen: list[Any] = []
    dumps = json.dumps

    def counted(value: Any, **kwargs: Any) -> str:
        seen.append(value)
        return dumps(value, **kwargs)

    monkeypatch.setattr(_extract.json, "dumps", counted)
    monkeypatch.setattr(_extract, "_TOOL_ESTIMATES", [])
    monkeypatch.setattr(_extract, "_TOOL_TEXTS", [])
    yield seen


@pytest.mark.parametrize("read", [_extract._tool_tokens, _extract.plain_tool_tokens])
def test_the_same_definitions_are_encoded_twice_then_compared(read: Any,
                                                              encodings: list[Any]) -> None:
    tools = copy.deepcopy(TOOLS)
    expected = _encoded(tools)
    encodings.clear()
    for _ in range(3):
        assert read(tools) == expected
    assert read(copy.deepcopy(tools)) == expected  # built anew each call: compared, equal
    assert len(encodings) == 2  # once, then once more to be kept


@pytest.mark.parametrize("read", [_extract._tool_tokens, _extract.plain_tool_tokens])
def test_agents_alternating_keep_their_estimates(read: Any, encodings: list[Any]) -> None:
    sets = [copy.deepcopy(TOOLS[:n]) for n in (1, 2, 3)]
    expected = [_encoded(tools) for tools in sets]
    encodings.clear()
    for _ in range(4):
        for tools, tokens in zip(sets, expected, strict=True):
            assert read(copy.deepcopy(tools)) == tokens
    assert len(encodings) == 2 * len(sets)


@pytest.mark.parametrize("read", [_extract._tool_tokens, _extract.plain_tool_tokens])
def test_definitions_changed_in_place_are_encoded_again(read: Any,
                                                        encodings: list[Any]) -> None:
    tools = copy.deepcopy(TOOLS)
    assert read(tools) == _encoded(tools)
    tools[0]["function"]["description"] = "Find the order, whatever its state, by its id. " * 8
    assert read(tools) == _encoded(tools) > _encoded(TOOLS)
    tools.append({"type": "function", "function": {"name": "refund", "parameters": SCHEMA}})
    assert read(tools) == _encoded(tools)
    del tools[1:]
    assert read(tools) == _encoded(tools)
    # another agent's definitions between two calls of this one: each its own estimate
    other = copy.deepcopy(TOOLS[:1])
    other[0]["function"]["name"] = "another"
    assert read(other) == _encoded(other)
    assert read(tools) == _encoded(tools)


def test_another_estimator_estimates_again(encodings: list[Any]) -> None:
    tools = copy.deepcopy(TOOLS)
    heuristic = _extract.plain_tool_tokens(tools)
    set_token_estimator(lambda text: 1000 + len(text))
    try:
        assert _extract.plain_tool_tokens(tools) == 1000 + len(json.dumps(tools))
        assert _extract._tool_tokens(tools) == 1000 + len(json.dumps(tools))
    finally:
        set_token_estimator(None)
    assert _extract.plain_tool_tokens(tools) == heuristic


def test_definitions_that_are_not_plain_data_are_never_taken_for_equal_ones(
        encodings: list[Any]) -> None:
    tools = copy.deepcopy(TOOLS)
    assert _extract.plain_tool_tokens(tools) == _encoded(tools)
    # the same definitions, one of them holding an iterator (the general path settles it)
    odd = copy.deepcopy(TOOLS)
    odd[0]["function"]["x"] = iter(["a"])
    assert _extract.plain_tool_tokens(odd) is None
    odd[0]["function"]["x"] = ("a",)  # JSON can encode a tuple: plain, and not equal
    assert _extract.plain_tool_tokens(odd) == _encoded(odd)


def test_definitions_that_compare_equal_without_being_json_take_the_general_reader(
        encodings: list[Any]) -> None:
    tools = copy.deepcopy(TOOLS)
    for _ in range(2):
        assert _extract.plain_tool_tokens(tools) == _encoded(tools)
    assert _extract.plain_tool_tokens([UserDict(t) for t in tools]) is None


def test_definitions_too_large_are_not_kept(encodings: list[Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_extract, "_TOOL_SET_MAX_CHARS", 100)
    tools = copy.deepcopy(TOOLS)
    for _ in range(3):
        assert _extract.plain_tool_tokens(tools) == _encoded(tools)
    assert not _extract._TOOL_ESTIMATES and not _extract._TOOL_TEXTS
    assert len([e for e in encodings if e is tools]) == 3


def test_the_remembered_definitions_are_bounded(encodings: list[Any]) -> None:
    kept = [[{"name": f"tool_{i}", "input_schema": SCHEMA}] for i in range(3 * _extract._TOOL_SETS)]
    for tools in kept:
        for _ in range(2):
            assert _extract.plain_tool_tokens(tools) == _encoded(tools)
        assert len(_extract._TOOL_ESTIMATES) <= _extract._TOOL_SETS
        assert len(_extract._TOOL_TEXTS) <= _extract._TOOL_SETS
    encodings.clear()
    assert _extract.plain_tool_tokens(kept[-1]) == _encoded(kept[-1])  # the newest kept
    assert _extract.plain_tool_tokens(kept[0]) == _encoded(kept[0])  # the oldest dropped
    assert len([e for e in encodings if e is kept[0]]) == 1
    assert not [e for e in encodings if e is kept[-1]]


def test_nothing_of_the_applications_is_kept_alive(encodings: list[Any]) -> None:
    class Marker(str):
        pass

    marker = Marker("lookup_order")
    tools = [{"name": marker, "input_schema": SCHEMA}]
    alive = weakref.ref(marker)
    for _ in range(3):
        assert _extract.plain_tool_tokens(tools) == _encoded(tools)
        assert _extract._tool_tokens(tools) == _encoded(tools)
    encodings.clear()  # this test's own record of what was encoded
    del tools, marker
    gc.collect()
    assert alive() is None


def test_definitions_that_are_not_json_data_are_not_kept(encodings: list[Any]) -> None:
    tools = [{"name": "lookup_order", "input_schema": {"type": object}}]
    for _ in range(3):
        assert _extract._tool_tokens(tools) == _encoded(tools)
    assert not _extract._TOOL_ESTIMATES and not _extract._TOOL_TEXTS


def test_an_estimator_failing_on_the_definitions_leaves_them_out(
        encodings: list[Any]) -> None:
    def refuses(text: str) -> int:
        if text.startswith("[{"):
            raise ValueError("a special token in the text")
        return len(text)

    tools = copy.deepcopy(TOOLS)
    set_token_estimator(refuses)
    try:
        assert _extract._tool_tokens(tools) == 0  # as before the estimate was remembered
        assert _extract.plain_tool_tokens(tools) is None  # then the general reader's 0
    finally:
        set_token_estimator(None)


def test_an_estimator_switched_while_estimating_keeps_nothing_under_the_new_one(
        encodings: list[Any]) -> None:
    def switching(text: str) -> int:
        set_token_estimator(lambda text: 1000 + len(text))
        return len(text)

    tools = copy.deepcopy(TOOLS)
    try:
        for _ in range(2):
            set_token_estimator(switching)
            assert _extract.plain_tool_tokens(tools) == len(json.dumps(tools))
        # the estimate made by the estimator switched away from is not the new one's
        assert _extract.plain_tool_tokens(tools) == 1000 + len(json.dumps(tools))
    finally:
        set_token_estimator(None)


def test_an_estimator_switched_by_another_thread_meanwhile_keeps_nothing(
        encodings: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread switches the estimator between the key's read and the estimate (here:
    while the definitions are encoded): the estimate made is not kept under the key read."""
    tools = copy.deepcopy(TOOLS)
    heuristic = _encoded(tools)
    dumps = json.dumps

    def switching(value: Any, **kwargs: Any) -> str:
        set_token_estimator(lambda text: 5000 + len(text))
        return dumps(value, **kwargs)

    monkeypatch.setattr(_extract.json, "dumps", switching)
    try:
        for _ in range(3):
            set_token_estimator(None)
            assert _extract.plain_tool_tokens(tools) == 5000 + len(dumps(tools))
    finally:
        set_token_estimator(None)
    monkeypatch.setattr(_extract.json, "dumps", dumps)
    assert _extract.plain_tool_tokens(tools) == heuristic
