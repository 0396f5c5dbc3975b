"""``ChatAnthropic`` (langchain-anthropic, the real library) on the local stub, with the
Anthropic instrumentor: the blocks of a model call name LangChain's messages as its records
do, though the client merges them into fewer messages and reads them block by block."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import trim_messages
from lc_helpers import with_client
from stub_server import StubServer
from test_lc_openai import _history_without_ids

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.langchain._items import message_id
from otel_agent_context.testing import CapturedTelemetry


@pytest.fixture
def both() -> Iterator[CapturedTelemetry]:
    yield from with_client(AnthropicContextInstrumentor())


def _block_ids(tel: CapturedTelemetry) -> list[str]:
    span = next(s for s in tel.spans() if s.name == "chat claude-sonnet-4-5")
    return list(span.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS])


def test_messages_are_named_alike_in_trim_records_and_blocks(both) -> None:
    """The system message becomes the request's ``system``, the tool results and the user's
    messages one user message of many blocks; each text block and tool result still is
    its LangChain message's item (its own id, or the one its records derive), so the trim
    records' cut messages are the earlier call's blocks."""
    history = _history_without_ids()
    with StubServer() as stub:
        model = ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                              api_key="sk-offline", max_retries=0)
        model.invoke(history)
        ((_, body),) = stub.requests
        first = _block_ids(both)
        both.span_exporter.clear()
        model.invoke(trim_messages(history, max_tokens=3, token_counter=len, strategy="last",
                                   include_system=True))
        second = _block_ids(both)
    assert len(body["messages"]) < len(history) - 1  # merged by the client
    named = [message_id(m) for m in history]
    named[6] += "#2"  # the question asked again
    cut = [e.attributes[S.ITEM_ID] for s in both.spans() for e in s.events
           if e.name == S.EVENT_BUDGET_TRUNCATED]
    assert cut == named[1:8]
    # every cut message was a block of the first call (the tool call alone its tool_use
    # block); the results of one output are two items
    assert set(cut) <= set(first)
    assert first[2] == named[2]
    assert {"tool_result:call_1", "lc_tool_2"} <= set(first)
    assert named[7] != named[8] and {named[7], named[8]} <= set(first)
    assert [named[0], named[8], named[9]] == [i for i in second if i in named]
    assert len(first) == len(set(first))
    assert "cdn.example" not in str(both.bundles()) and "iVBOR" not in str(both.bundles())


def test_messages_of_strings_are_named_alike_without_being_told(both) -> None:
    """A prompt template's messages (strings, no ids), two questions merged by the client
    into one user message: each block is named as LangChain's records name its message."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    history = [SystemMessage("Be brief."), HumanMessage("Where is order 42?"),
               AIMessage("It shipped."), HumanMessage("Thanks."),
               HumanMessage("When will it arrive?")]
    with StubServer() as stub:
        model = ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                              api_key="sk-offline", max_retries=0)
        model.invoke(history)
        ((_, body),) = stub.requests
    assert len(body["messages"]) == 3
    named = [message_id(m) for m in history]
    assert [i.split(":")[0] for i in named] == ["system", "user", "assistant", "user", "user"]
    assert _block_ids(both) == named


@pytest.mark.parametrize("own_id", [None, "h0"], ids=["without_id", "with_id"])
def test_a_message_of_text_parts_names_its_blocks(both, own_id) -> None:
    """A message of two text parts, which the client sends as two blocks, beside messages
    of its first part's text and of its text joined (merged into one message by the client,
    and later): its blocks are ``<id>`` and ``<id>/2``; the others keep their own ids."""
    from langchain_core.messages import AIMessage, HumanMessage

    history = [HumanMessage("Where is ", id="u0"),
               HumanMessage([{"type": "text", "text": "Where is "},
                             {"type": "text", "text": "order 42?"}], id=own_id),
               AIMessage("Checking.", id="a1"), HumanMessage("Where is "),
               HumanMessage("Where is order 42?"), HumanMessage("Thanks.", id="u9")]
    with StubServer() as stub:
        model = ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                              api_key="sk-offline", max_retries=0)
        model.invoke(history)
        ((_, body),) = stub.requests
    assert len(body["messages"]) == 3  # merged by the client
    named = [message_id(m) for m in history]
    assert _block_ids(both) == [named[0], named[1], f"{named[1]}/2", *named[2:]]


def test_a_call_id_used_again_names_its_own_message(both) -> None:
    """A client that numbers its calls per turn (``call_0`` in two turns): the second
    turn's message of calls alone is its tool use's block; the first turn's call, made
    with text, stays ``tool_use:<call id>``."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    def called(text: str) -> AIMessage:
        return AIMessage(text, tool_calls=[{"name": "lookup", "args": {}, "id": "call_0"}])

    history = [HumanMessage("Order 1?"), called("Looking."),
               ToolMessage("shipped", tool_call_id="call_0"), AIMessage("Shipped."),
               HumanMessage("Order 2?"), called(""),
               ToolMessage("late", tool_call_id="call_0"), HumanMessage("Thanks.")]
    with StubServer() as stub:
        model = ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                              api_key="sk-offline", max_retries=0)
        model.invoke(history)
    named = [message_id(m) for m in history]
    assert _block_ids(both) == [named[0], named[1], "tool_use:call_0", named[2], named[3],
                                named[4], named[5], f"{named[6]}#2", named[7]]


def test_an_async_run_leaves_no_ids_for_a_later_call(both) -> None:
    """``ainvoke`` ends its run in another task (a copy of the context): the ids handed for
    its call (here a message of parts, which the OpenAI reader names by its joined text and
    leaves its parts' entry) are gone after it, so a later call of messages of those texts,
    which hands none, gets the reader's own ids."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    from otel_agent_context.instrumentation._common import KNOWN_MESSAGES
    from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

    openai_inst = OpenAIContextInstrumentor()
    openai_inst.instrument(tracer_provider=both.tracer_provider,
                           meter_provider=both.meter_provider, agent_context=both.agent_context)
    later = [HumanMessage("alpha"), HumanMessage("beta")]

    async def main() -> None:
        with StubServer() as stub:
            await ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                             api_key="sk-offline", max_retries=0).ainvoke(
                [HumanMessage([{"type": "text", "text": "alpha"},
                               {"type": "text", "text": "beta"}], id="LC-H")])
            assert not KNOWN_MESSAGES.get()
            both.span_exporter.clear()
            await ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                                api_key="sk-offline", max_retries=0).ainvoke(later)

    try:
        asyncio.run(main())
    finally:
        openai_inst.uninstrument()
    assert _block_ids(both) == [message_id(m) for m in later]


def test_each_call_of_a_batch_names_its_blocks_as_alone(both) -> None:
    """``generate`` of three lists (a system message, a message of text parts, tool calls
    and results, messages with and without ids, the same texts in two lists): each call's
    blocks are what the same list invoked alone gives."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    def history(tag: str, same: bool = False) -> list:
        text = "" if same else f" ({tag})"
        return [SystemMessage("You are ACME's support agent." + text, id=f"{tag}-s"),
                HumanMessage([{"type": "text", "text": "Where is "},
                              {"type": "text", "text": "order 42?" + text}], id=f"{tag}-q"),
                AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "42"},
                                           "id": f"toolu_{tag}"}], id=f"{tag}-a"),
                ToolMessage("shipped", tool_call_id=f"toolu_{tag}"),
                HumanMessage("When will it arrive?" + text)]

    lists = [history("one"), history("two", same=True), history("three", same=True)]
    with StubServer() as stub:
        model = ChatAnthropic(model="claude-sonnet-4-5", base_url=stub.anthropic_base_url,
                              api_key="sk-offline", max_retries=0)
        alone = []
        for messages in lists:
            model.invoke(messages)
            alone.append(_block_ids(both))
            both.span_exporter.clear()
        model.generate(lists)
    batch = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat claude-sonnet-4-5"]
    assert batch == alone
    assert alone[1] != alone[2]  # the same texts, their own ids
