"""With the OpenAI instrumentor too: ``ChatOpenAI`` calls inside a LangGraph run record their
inference span, with its assembly and budget folded on it, into the run's envelope (one
envelope, one bundle)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from lc_helpers import QUERY, knowledge_base, tree, with_client
from lc_openai_stub import ANSWER, OpenAIStub

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


@pytest.fixture
def both() -> Iterator[CapturedTelemetry]:
    yield from with_client(OpenAIContextInstrumentor())


def test_openai_calls_in_a_graph_join_the_run_envelope(both) -> None:
    retriever = knowledge_base().as_retriever(search_kwargs={"k": 1})
    with OpenAIStub() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.url, api_key="sk-offline",
                           max_retries=0)

        def respond(state: MessagesState) -> dict[str, Any]:
            notes = retriever.invoke(QUERY)[0].page_content
            return {"messages": [model.invoke([SystemMessage(notes, id="notes"),
                                               *state["messages"]])]}

        graph = StateGraph(MessagesState)
        graph.add_node("respond", respond)
        graph.add_edge(START, "respond")
        out = graph.compile(name="openai_agent").invoke(
            {"messages": [HumanMessage("How long do refunds take?", id="q")]})
        assert len(stub.requests) == 1
    assert out["messages"][-1].content == ANSWER

    assert tree(both) == [
        ("context.envelope", None), ("context.surface", "context.envelope"),
        ("context.selection", "context.envelope"), ("chat gpt-4o-mini", "context.envelope")]
    inference = next(s for s in both.spans() if s.name == "chat gpt-4o-mini")
    a = inference.attributes
    assert a[S.CONTEXT_ID] == "ctx_1"
    assert S.CONTEXT_SCOPE not in a  # it joined, it is not an envelope
    assert a[S.ASSEMBLY_BLOCK_COUNT] == 2  # the notes and the question, folded on the span
    assert S.ASSEMBLY_HASH not in a and S.INJECTION_HASH not in a  # derived
    envelope = next(s for s in both.spans() if s.name == "context.envelope")
    assert envelope.attributes[S.CONTEXT_SPAN_COUNT] == 3  # surface, selection, inference
    (bundle,) = both.bundles()
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "openai_agent"
    assert bundle["context_selections"][0]["selected_item_refs"] == ["refunds"]
    (assembly,) = bundle["context_assemblies"]
    assert assembly["assembly_id"] == a[S.ASSEMBLY_ID]
    assert bundle["context_budgets"][0]["budget_id"] == a[S.BUDGET_ID]
    assert len(bundle["context_injections"]) == 1
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["rebuild"]["expected_spans"] == 3


def test_chat_model_outside_any_run_is_an_implicit_envelope(both) -> None:
    with OpenAIStub() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.url, api_key="sk-offline",
                           max_retries=0)
        assert model.invoke("hello").content == ANSWER
    envelope = next(s for s in both.spans() if s.name == "context.envelope")
    assert envelope.attributes[S.CONTEXT_SCOPE] == "turn"
    assert envelope.attributes[S.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    (bundle,) = both.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert len(bundle["context_assemblies"]) == 1


def test_async_graph_leaves_the_callers_context_as_it_found_it(both, caplog) -> None:
    # LangChain ends async runs in another task: nothing we attach at the start may stay
    # behind in the caller's context, and the model call still joins the run's envelope.
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    from otel_agent_context import current_envelope

    app = both.tracer_provider.get_tracer("app")
    with OpenAIStub() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.url, api_key="sk-offline",
                           max_retries=0)

        async def respond(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("respond", respond)
        graph.add_edge(START, "respond")
        compiled = graph.compile(name="async_agent")

        async def run() -> tuple[bool, bool, bool]:
            with app.start_as_current_span("app-request") as span:
                before = otel_context.get_current()
                await compiled.ainvoke({"messages": [HumanMessage("refunds?", id="q")]})
                after = trace.get_current_span()
                return (otel_context.get_current() == before, after is span,
                        current_envelope() is None)

        assert asyncio.run(run()) == (True, True, True)
    assert "Failed to detach context" not in caplog.text
    (bundle,) = both.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert len(bundle["context_injections"]) == 1  # the model call joined the run envelope
    inference = next(s for s in both.spans() if s.name == "chat gpt-4o-mini")
    assert inference.attributes[S.CONTEXT_ID] == bundle["context_envelope"]["context_id"]


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "What is wrong with this kettle?"},
     {"type": "image_url", "image_url": {"url": "https://cdn.example/kettle.png"}}],
    [{"type": "text", "text": "What is wrong "}, {"type": "text", "text": "with this kettle?"}],
    [{"type": "text", "text": "What is wrong with this kettle?"},
     {"type": "image", "source_type": "url", "url": "https://cdn.example/kettle.png"}],
], ids=["openai_image", "two_texts", "standard_image"])
def test_a_message_of_parts_keeps_its_own_id(both, content) -> None:
    """A message of several parts (text and an image, two texts) is the model call's block
    under the message's own id, the one LangChain's records use (one identity per message),
    not a digest of the text the client reads."""
    with OpenAIStub() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.url, api_key="sk-offline",
                           max_retries=0)
        assert model.invoke([SystemMessage("Be brief.", id="sys"),
                             HumanMessage(content, id="photo-1")]).content == ANSWER
    inference = next(s for s in both.spans() if s.name == "chat gpt-4o-mini")
    assert list(inference.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) == ["sys", "photo-1"]
    assert "cdn.example" not in str(both.bundles())


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_the_messages_keep_their_own_ids_over_either_api(both, use_responses_api) -> None:
    """The same conversation through chat completions or the Responses API: each block is
    its message's own id (LangChain converts the messages to input items for the Responses
    API; the ids its trim and summary records use stay the blocks' ids)."""
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    with StubServer() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                           api_key="sk-offline", max_retries=0,
                           use_responses_api=use_responses_api)
        model.invoke([SystemMessage("Be brief.", id="sys"), HumanMessage("Hi", id="h1"),
                      AIMessage("Hello! How can I help?", id="a1"),
                      HumanMessage([{"type": "text", "text": "Refunds? "},
                                    {"type": "text", "text": "For the kettle."}], id="h2")])
        ((path, _),) = stub.requests
    assert path == ("/v1/responses" if use_responses_api else "/v1/chat/completions")
    inference = next(s for s in both.spans() if s.name == "chat gpt-4o-mini")
    a = inference.attributes
    assert list(a[S.ASSEMBLY_BLOCK_ITEM_IDS]) == ["sys", "h1", "a1", "h2"]
    assert list(a[S.ASSEMBLY_BLOCK_KINDS]) == [
        "system_prompt", "session_history", "session_history", "user_message"]


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_a_message_of_parts_is_not_taken_for_another_of_its_text(both,
                                                                use_responses_api) -> None:
    """A message of two text parts and a later message of the same text joined by a newline
    (the reader's text of the first): each keeps its own id; and a system message LangChain
    sends as ``developer`` (to a reasoning model) keeps its id."""
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    with StubServer() as stub:
        model = ChatOpenAI(model="o3-mini", base_url=stub.openai_base_url,
                           api_key="sk-offline", max_retries=0,
                           use_responses_api=use_responses_api)
        model.invoke([SystemMessage("Be brief.", id="sys"),
                      HumanMessage([{"type": "text", "text": "a"},
                                    {"type": "text", "text": "b"}], id="parts"),
                      AIMessage("Noted.", id="a1"), HumanMessage("a\nb", id="str")])
        ((_, body),) = stub.requests
    sent = body["input"] if use_responses_api else body["messages"]
    # what the model is sent: chat completions name the system message "developer"
    assert sent[0]["role"] == ("system" if use_responses_api else "developer")
    inference = next(s for s in both.spans() if s.name == "chat o3-mini")
    assert list(inference.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) == ["sys", "parts", "a1", "str"]


def _model(stub: Any, use_responses_api: bool) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url, api_key="sk-offline",
                      max_retries=0, use_responses_api=use_responses_api)


def _block_ids(tel: CapturedTelemetry) -> list[str]:
    """The block ids of the first model call recorded."""
    return list(next(s for s in tel.spans() if s.name == "chat gpt-4o-mini")
                .attributes[S.ASSEMBLY_BLOCK_ITEM_IDS])


def _history_without_ids() -> list[Any]:
    """A conversation LangChain gave no ids (a prompt template's, a chain's), but for one
    tool result: a tool call alone, two results, a question asked twice, one text sent with
    two different images (an OpenAI part, a standard block)."""
    from langchain_core.messages import AIMessage, ToolMessage

    def photo(block: dict[str, Any]) -> HumanMessage:
        return HumanMessage([{"type": "text", "text": "Is this the one?"}, block])

    called = AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "42"},
                                        "id": "call_1"}])
    return [SystemMessage("Be brief."), HumanMessage("Where is order 42?"), called,
            ToolMessage('{"status": "shipped"}', tool_call_id="call_1"),
            ToolMessage('{"status": "shipped"}', tool_call_id="call_2", id="lc_tool_2"),
            AIMessage("It shipped."), HumanMessage("Where is order 42?"),
            photo({"type": "image_url", "image_url": {"url": "https://cdn.example/a.png"}}),
            # a standard block: LangChain hands callbacks a data URL of it, trim the block
            photo({"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}),
            HumanMessage("When will it arrive?")]


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_messages_are_named_alike_in_trim_records_and_blocks(both, use_responses_api) -> None:
    """One identity per message: the blocks of a model call name its messages as
    ``trim_messages``' truncation records name them (a message's own id; else by its type,
    text, tool calls and media; a tool's result by its call), so a message cut before the
    next call is the item an earlier call's block named; a repeat within one call is ``#2``;
    two messages of one text and two images are two items; two results of one output too."""
    from langchain_core.messages import trim_messages
    from stub_server import StubServer

    from otel_agent_context.instrumentation.langchain._items import message_id

    history = _history_without_ids()
    with StubServer() as stub:
        model = _model(stub, use_responses_api)
        model.invoke(history)
        first = _block_ids(both)
        both.span_exporter.clear()
        kept = trim_messages(history, max_tokens=3, token_counter=len, strategy="last",
                             include_system=True)
        model.invoke(kept)
    named = [message_id(m) for m in history]
    assert named[3:5] == ["tool_result:call_1", "lc_tool_2"]
    assert len(set(named)) == len(named) - 1  # the question asked again
    named[6] += "#2"
    # (the Responses API: the message of a tool call alone is the call's input item)
    assert first == named
    spans = both.spans()
    cut = [e.attributes[S.ITEM_ID] for s in spans for e in s.events
           if e.name == S.EVENT_BUDGET_TRUNCATED]
    second = _block_ids(both)
    assert cut == named[1:8]  # the records name these messages, the repeat's copy too
    assert set(cut) <= set(first)
    assert second == [named[0], named[8], named[9]]
    assert "cdn.example" not in str(both.bundles()) and "iVBOR" not in str(both.bundles())


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_messages_of_strings_are_named_alike_without_being_told(both, use_responses_api) -> None:
    """A prompt template's messages (strings, no ids): LangChain's records name each as the
    client instrumentor names its block by itself (``<role>:<digest>``), a repeat ``#2`` in
    the blocks; the same messages given ids keep those."""
    from langchain_core.messages import AIMessage, trim_messages
    from stub_server import StubServer

    from otel_agent_context.instrumentation.langchain._items import message_id

    history = [SystemMessage("Be brief."), HumanMessage("Where is order 42?"),
               AIMessage("It shipped."), HumanMessage("Where is order 42?"),
               HumanMessage("When will it arrive?")]
    named = [message_id(m) for m in history]
    assert [i.split(":")[0] for i in named] == ["system", "user", "assistant", "user", "user"]
    with StubServer() as stub:
        model = _model(stub, use_responses_api)
        model.invoke(history)
        blocks = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in both.spans()
                  if s.name == "chat gpt-4o-mini"]
        trim_messages(history, max_tokens=2, token_counter=len, strategy="last")
        model.invoke([m.model_copy(update={"id": f"m{i}"}) for i, m in enumerate(history)])
    cut = [e.attributes[S.ITEM_ID] for s in both.spans() for e in s.events
           if e.name == S.EVENT_BUDGET_TRUNCATED]
    assert blocks == [[*named[:3], named[3] + "#2", named[4]]]
    assert cut == named[:3]
    assert list(next(s for s in reversed(both.spans()) if s.name == "chat gpt-4o-mini")
                .attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) == ["m0", "m1", "m2", "m3", "m4"]


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_results_of_one_call_keep_their_ids_in_order(both, use_responses_api) -> None:
    """Two results of one tool call (a retry), only the second with an id of its own: each
    block is its message's (``tool_result:<call id>``, then its id), not the other way."""
    from langchain_core.messages import AIMessage, ToolMessage
    from stub_server import StubServer

    from otel_agent_context.instrumentation.langchain._items import message_id

    history = [HumanMessage("Where is order 42?"),
               AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "42"},
                                          "id": "call_1"}]),
               ToolMessage("timeout", tool_call_id="call_1"),
               ToolMessage("shipped", tool_call_id="call_1", id="t_retry"),
               HumanMessage("When will it arrive?")]
    with StubServer() as stub:
        model = _model(stub, use_responses_api)
        model.invoke(history)
    blocks = _block_ids(both)
    assert blocks[2:4] == [message_id(m) for m in history[2:4]] == [
        "tool_result:call_1", "t_retry"]


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
def test_a_message_of_calls_alone_is_its_first_calls_block(both, use_responses_api) -> None:
    """An AI message of two tool calls and no text, which the Responses API sends as two
    input items: the first is the message's item (its id, as its records name it), the
    second its call's; chat completions send one message, the message's block."""
    from langchain_core.messages import AIMessage, ToolMessage
    from stub_server import StubServer

    calls = [{"name": "lookup", "args": {"id": n}, "id": f"call_{n}"} for n in ("1", "2")]
    history = [HumanMessage("Where are orders 1 and 2?", id="q"),
               AIMessage("", tool_calls=calls, id="ai_1"),
               ToolMessage("shipped", tool_call_id="call_1", id="t1"),
               ToolMessage("late", tool_call_id="call_2", id="t2")]
    with StubServer() as stub:
        _model(stub, use_responses_api).invoke(history)
    expected = ["q", "ai_1", "tool_call:call_2", "t1", "t2"] if use_responses_api else [
        "q", "ai_1", "t1", "t2"]
    assert _block_ids(both) == expected


@pytest.mark.parametrize("use_responses_api", [False, True], ids=["chat", "responses"])
@pytest.mark.parametrize("same_texts", [False, True], ids=["own texts", "same texts"])
def test_each_call_of_a_batch_names_its_own_runs_messages(both, use_responses_api,
                                                          same_texts) -> None:
    """``generate`` of three message lists starts the three runs before calling the model
    for any: each call's blocks are its own list's message ids (the last list's were given
    to every call), the same texts sent in every list or not; so with ``agenerate``, whose
    calls run together."""
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    def history(prefix: str) -> list[Any]:
        text = "" if same_texts else f" ({prefix})"
        return [HumanMessage("Where is my order?" + text, id=f"{prefix}-1"),
                AIMessage("It shipped." + text, id=f"{prefix}-2"),
                HumanMessage("When will it arrive?" + text, id=f"{prefix}-3")]

    prefixes = ["first", "second", "third"]
    with StubServer() as stub:
        model = _model(stub, use_responses_api)
        model.generate([history(p) for p in prefixes])
        asyncio.run(model.agenerate([history("a" + p) for p in prefixes]))
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    expected = [[f"{p}-{n}" for n in (1, 2, 3)] for p in prefixes]
    assert calls[:3] == expected
    assert calls[3:] == [[f"a{i}" for i in ids] for ids in expected]


def test_a_batch_list_the_readers_name_keeps_its_place(both) -> None:
    """A list whose messages have no ids (the readers name its blocks themselves) before one
    whose messages have: each call its own list's names (the first call took the second
    list's ids)."""
    from stub_server import StubServer

    from otel_agent_context.instrumentation.langchain._items import message_id

    unnamed = [HumanMessage("Where is my order?")]
    with StubServer() as stub:
        _model(stub, False).generate([unnamed, [HumanMessage("Where is my order?", id="x")]])
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    assert calls == [[message_id(unnamed[0])], ["x"]]


def test_a_failed_batch_leaves_no_ids_behind(both) -> None:
    """``generate`` stops at a list whose call fails and never ends the runs after it: none
    of their ids stays for a later call in the same context (a later conversation's
    message of the same text was given the unended run's id)."""
    from stub_server import StubServer

    from otel_agent_context.instrumentation._common import KNOWN_MESSAGES
    from otel_agent_context.instrumentation.langchain._items import message_id

    class Failing(ChatOpenAI):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if messages[0].content == "boom":
                raise RuntimeError("boom")
            return super()._generate(messages, *args, **kwargs)

    with StubServer() as stub:
        model = Failing(model="gpt-4o-mini", base_url=stub.openai_base_url,
                        api_key="sk-offline", max_retries=0)
        with pytest.raises(RuntimeError, match="boom"):
            model.generate([[HumanMessage("boom", id="b")],
                            [HumanMessage("Where is my order?", id="stale-1")]])
        assert KNOWN_MESSAGES.get() is None
        later = [HumanMessage("Where is my order?")]
        model.invoke([HumanMessage("Where is my order?", id="new-1")])
        model.invoke(later)
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    assert calls == [["new-1"], [message_id(later[0])]]


def _tagged(tag: str) -> list[Any]:
    """A list of the same two messages (with ids of its own) and a question naming it."""
    from langchain_core.messages import AIMessage

    return [HumanMessage("Where is my order?", id=f"{tag}-1"),
            AIMessage("It shipped.", id=f"{tag}-2"), HumanMessage(f"And {tag}?")]


def _calls_by_question(tel: CapturedTelemetry, stub: Any) -> dict[str, list[str]]:
    """Each model call's block ids by the last question it sent, each question asked once:
    a span's last block is the question's (a plain message's id), whatever order the
    concurrent calls started in and their requests reached the stub (the two orders
    differ under load)."""
    from otel_agent_context.instrumentation.langchain._items import message_id

    spans = [s for s in tel.spans() if s.name == "chat gpt-4o-mini"]
    asked = [body["messages"][-1]["content"] for _, body in stub.requests]
    assert len(spans) == len(asked) == len(set(asked))
    question_of = {message_id(HumanMessage(q)): q for q in asked}
    out = {}
    for span in spans:
        ids = list(span.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS])
        question = question_of[ids[-1]]  # the call that sent it
        assert question not in out
        out[question] = ids[:-1]
    return out


def test_a_batch_whose_calls_start_out_of_order_names_each_its_own(both) -> None:
    """``agenerate`` with a cache whose lookup waits (the later lists less): the calls
    start in the reverse order of their runs, each still names its own list's messages."""
    from langchain_core.caches import BaseCache
    from stub_server import StubServer

    class Slow(BaseCache):
        def lookup(self, prompt: str, llm_string: str) -> Any:
            return None

        def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
            pass

        def clear(self, **kwargs: Any) -> None:
            pass

        async def alookup(self, prompt: str, llm_string: str) -> Any:
            tag = next(t for t in ("p0", "p1", "p2", "p3") if f"And {t}?" in prompt)
            await asyncio.sleep(0.05 * (3 - int(tag[1])))
            return None

    tags = ["p0", "p1", "p2", "p3"]
    with StubServer() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                           api_key="sk-offline", max_retries=0, cache=Slow())
        asyncio.run(model.agenerate([_tagged(t) for t in tags]))
        calls = _calls_by_question(both, stub)
    assert list(calls) == [f"And {t}?" for t in reversed(tags)]  # started out of order
    assert calls == {f"And {t}?": [f"{t}-1", f"{t}-2"] for t in tags}


def test_a_batch_run_failing_before_its_call_or_calling_twice(both) -> None:
    """A list of ``agenerate`` that fails before its call, and a run that makes a call of
    its own first (a guard): every call of a list names its list's messages, the extra
    call none of theirs."""
    from stub_server import StubServer

    class Guarded(ChatOpenAI):
        async def _agenerate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if messages[-1].content == "And p0?":
                raise RuntimeError("refused")
            if messages[-1].content == "And p1?":
                await self.async_client.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "Is it safe?"}])
            return await super()._agenerate(messages, *args, **kwargs)

    with StubServer() as stub:
        model = Guarded(model="gpt-4o-mini", base_url=stub.openai_base_url,
                        api_key="sk-offline", max_retries=0)
        with pytest.raises(RuntimeError, match="refused"):
            asyncio.run(model.agenerate([_tagged(t) for t in ("p0", "p1", "p2")]))
        calls = _calls_by_question(both, stub)
    assert calls == {"Is it safe?": [], "And p1?": ["p1-1", "p1-2"],
                     "And p2?": ["p2-1", "p2-2"]}


def test_a_batch_of_a_conversation_and_its_start(both) -> None:
    """Lists of which one is the start of another (successive prefixes of a conversation):
    the longer answered from the cache (no call of its own), or called after the shorter
    (its cache lookup waits): each call names its own list's messages, not the list that
    holds its texts and more."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    def lists(tag: str) -> tuple[list[Any], list[Any]]:
        long = [HumanMessage("Where is my order?", id=f"{tag}L-1"),
                AIMessage("It shipped.", id=f"{tag}L-2"),
                HumanMessage("When will it arrive?", id=f"{tag}L-3")]
        return long, [HumanMessage("Where is my order?", id=f"{tag}S-1")]

    def block_ids() -> list[list[str]]:
        return [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
            both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]

    class Waiting(InMemoryCache):
        async def alookup(self, prompt: str, llm_string: str) -> Any:
            if "When will it arrive?" in prompt:
                await asyncio.sleep(0.1)
            return None

    with StubServer() as stub:
        cache = InMemoryCache()
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                           api_key="sk-offline", max_retries=0, cache=cache)
        long, short = lists("a")
        model.invoke(long)  # now in the cache
        both.span_exporter.clear()
        model.generate([long, short])
        assert block_ids() == [["aS-1"]]
        both.span_exporter.clear()
        model.cache = Waiting()
        long, short = lists("b")
        asyncio.run(model.agenerate([long, short]))
        assert block_ids() == [["bS-1"], ["bL-1", "bL-2", "bL-3"]]


def test_a_runs_own_call_sending_its_question_first(both) -> None:
    """A run that sends its question in a call of its own first (a guard), then the
    model's call: the model's call is still its own run's (the guard took the question's
    id; the system message, whose text both lists share, keeps its run's)."""
    from stub_server import StubServer

    class Guarded(ChatOpenAI):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self.client.create(model="gpt-4o-mini", messages=[
                {"role": "user", "content": messages[-1].content}])
            return super()._generate(messages, *args, **kwargs)

    def conversation(tag: str) -> list[Any]:
        return [SystemMessage("You are ACME's support agent.", id=f"{tag}-s"),
                HumanMessage(f"Where is {tag}?", id=f"{tag}-q")]

    with StubServer() as stub:
        model = Guarded(model="gpt-4o-mini", base_url=stub.openai_base_url,
                        api_key="sk-offline", max_retries=0)
        model.generate([conversation("A"), conversation("B")])
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    assert [ids[0] for ids in calls] == ["A-q", "A-s", "B-q", "B-s"]


def test_a_runs_own_call_sending_only_the_shared_system_prompt(both) -> None:
    """A run's call of its own (a check) sending only the system prompt every list shares
    and a text of its own: no list's ids (the shortest list's were taken), and each model
    call its own."""
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    class Checked(ChatOpenAI):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self.client.create(model="gpt-4o-mini", messages=[
                {"role": "system", "content": messages[0].content},
                {"role": "user", "content": "ok?"}])
            return super()._generate(messages, *args, **kwargs)

    system = "You are ACME's support agent."
    first = [SystemMessage(system, id="A-s"), HumanMessage("Where is A?", id="A-q"),
             AIMessage("Shipped.", id="A-a"), HumanMessage("When?", id="A-q2")]
    second = [SystemMessage(system, id="B-s"), HumanMessage("Where is B?", id="B-q")]
    with StubServer() as stub:
        Checked(model="gpt-4o-mini", base_url=stub.openai_base_url, api_key="sk-offline",
                max_retries=0).generate([first, second])
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        both.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    assert calls[1] == ["A-s", "A-q", "A-a", "A-q2"]
    assert calls[3] == ["B-s", "B-q"]
    assert not {"A-s", "B-s"} & {*calls[0], *calls[2]}


def test_a_batch_call_whose_run_cannot_be_told_takes_no_ids(monkeypatch, caplog) -> None:
    """Our error telling a batch's runs apart (outside the test kit's strict mode): the
    call names its blocks itself, logged, rather than by the last run's ids."""
    from stub_server import StubServer

    from otel_agent_context.instrumentation.langchain import _handler

    def broken(*args: Any) -> Any:
        raise RuntimeError("ours")

    monkeypatch.setattr(_handler, "_texts", broken)
    tel = CapturedTelemetry(strict=False)
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "agent_context": tel.agent_context}
    insts = [LangChainContextInstrumentor(), OpenAIContextInstrumentor()]
    for inst in insts:
        inst.instrument(**kw)
    try:
        with StubServer() as stub:
            _model(stub, False).generate([[HumanMessage("Where is A?", id="A-q")],
                                          [HumanMessage("Where is B?", id="B-q")]])
    finally:
        for inst in insts:
            inst.uninstrument()
        tel.shutdown()
    calls = [list(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS]) for s in sorted(
        tel.spans(), key=lambda s: s.start_time) if s.name == "chat gpt-4o-mini"]
    assert len(calls) == 2
    assert not {"A-q", "B-q"} & {*calls[0], *calls[1]}
    assert [r.message for r in caplog.records].count(
        "otel_agent_context: could not tell which framework run a call is") == 2


def test_a_model_call_inside_an_async_run_leaves_the_outer_its_ids(both) -> None:
    """A model whose run awaits another model's ``ainvoke`` first (LangChain ends the inner
    run in a task of its own, whose context takes the value put back): the outer call
    still names its messages by their ids."""
    from stub_server import StubServer

    class Outer(ChatOpenAI):
        inner: Any = None

        async def _agenerate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            await self.inner.ainvoke([HumanMessage("Is it safe?")])
            return await super()._agenerate(messages, *args, **kwargs)

    with StubServer() as stub:
        inner = _model(stub, False)
        model = Outer(model="gpt-4o-mini", base_url=stub.openai_base_url,
                      api_key="sk-offline", max_retries=0, inner=inner)
        asyncio.run(model.ainvoke(_tagged("p0")))
        calls = _calls_by_question(both, stub)
    assert calls == {"Is it safe?": [], "And p0?": ["p0-1", "p0-2"]}


def test_runs_started_together_leave_no_ids_behind(both) -> None:
    """``generate`` of two message lists starts both runs, calls the model for each, then
    ends both (the first first): no run's ids stay for a later call in the same context
    (a later conversation's messages of the same texts were given the first run's ids)."""
    from langchain_core.messages import AIMessage
    from stub_server import StubServer

    from otel_agent_context.instrumentation._common import KNOWN_MESSAGES
    from otel_agent_context.instrumentation.langchain._items import message_id

    def history(prefix: str) -> list[Any]:
        return [HumanMessage("a", id=f"{prefix}-1"), AIMessage("b", id=f"{prefix}-2"),
                HumanMessage("c", id=f"{prefix}-3")]

    with StubServer() as stub:
        model = _model(stub, False)
        model.generate([history("first"), history("second")])
        assert KNOWN_MESSAGES.get() is None
        both.span_exporter.clear()
        later = [HumanMessage("a"), AIMessage("b"), HumanMessage("c")]
        model.invoke(later)
    assert _block_ids(both) == [message_id(m) for m in later]
    assert all(":" in i for i in _block_ids(both))
