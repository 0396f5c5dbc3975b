"""LangGraph runs as envelopes: nested steps join, async too, errors pass through unchanged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages
from langgraph.graph import START, MessagesState, StateGraph
from lc_helpers import QUERY, count_words, knowledge_base, one, strip_times, tree

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.langchain import _retrieval


def support_agent(fail: bool = False, *, is_async: bool = False) -> Any:
    """retrieve -> trim -> model, the shape of a small RAG agent."""
    retriever = knowledge_base().as_retriever(search_kwargs={"k": 2})
    model = FakeListChatModel(responses=["Refunds take up to 14 days."])

    def retrieve(state: MessagesState) -> dict[str, Any]:
        docs = retriever.invoke(state["messages"][-1].content)
        notes = "\n".join(d.page_content for d in docs)
        return {"messages": [SystemMessage(f"Knowledge:\n{notes}", id="knowledge")]}

    async def aretrieve(state: MessagesState) -> dict[str, Any]:
        docs = await retriever.ainvoke(state["messages"][-2].content)
        return {"messages": [SystemMessage("\n".join(d.page_content for d in docs),
                                           id="knowledge")]}

    def respond(state: MessagesState) -> dict[str, Any]:
        if fail:
            raise ValueError("the model is down")
        window = trim_messages(state["messages"], max_tokens=20, token_counter=count_words,
                               strategy="last")
        return {"messages": [model.invoke(window)]}

    async def arespond(state: MessagesState) -> dict[str, Any]:
        window = trim_messages(state["messages"], max_tokens=20, token_counter=count_words,
                               strategy="last")
        return {"messages": [await model.ainvoke(window)]}

    graph = StateGraph(MessagesState)
    graph.add_node("retrieve", aretrieve if is_async else retrieve)
    graph.add_node("respond", arespond if is_async else respond)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "respond")
    return graph.compile(name="support_agent")


def history() -> list[Any]:
    return [HumanMessage("Hi, I bought a kettle last week and it arrived broken.", id="h1"),
            AIMessage("Sorry to hear that! Do you want a refund or a replacement?", id="a1"),
            HumanMessage(QUERY, id="h2")]


CONFIG = {"configurable": {"thread_id": "thread-7"}}


def test_graph_run_is_one_envelope_with_its_stages(tel) -> None:
    out = support_agent().invoke({"messages": history()}, CONFIG)
    assert out["messages"][-1].content == "Refunds take up to 14 days."

    assert tree(tel) == [("context.envelope", None), ("context.surface", "context.envelope"),
                         ("context.selection", "context.envelope"),
                         ("context.budget", "context.envelope")]
    envelope = one(tel, "context.envelope")
    assert dict(envelope.attributes) == {
        S.CONTEXT_ID: "ctx_1", S.CONTEXT_SCOPE: "turn", S.CONTEXT_SCHEMA_VERSION: "0.1",
        S.CONTEXT_PRODUCER: "otel-agent-context/0.1.0", S.GEN_AI_AGENT_NAME: "support_agent",
        S.GEN_AI_CONVERSATION_ID: "thread-7", S.CONTEXT_LIFECYCLE: "selected",
        S.CONTEXT_SPAN_COUNT: 3}
    (bundle,) = tel.bundles()
    env = strip_times(bundle["context_envelope"])
    assert env["metadata"] == {"gen_ai.agent.name": "support_agent",
                               "gen_ai.conversation.id": "thread-7"}
    assert env["item_refs"] == ["refunds", "faq-refunds"]
    assert bundle["context_selections"][0]["selected_item_refs"] == ["refunds", "faq-refunds"]
    (budget,) = strip_times(bundle["context_budgets"])
    records = budget.pop("truncation_records")
    assert budget == {
        "budget_id": "bud_1", "target": "model", "max_tokens": 20, "actual_tokens": 19,
        "actual_items": 2, "overflow_strategy": "custom", "overflow": True,
        "overflow_tokens": 22, "utilization": 0.95}
    # a message's size: an estimate in the counter's units, never another counter call
    assert [(r["item_id"], r["strategy"], r["tokens_after"]) for r in records] == [
        ("h1", "custom", 0), ("a1", "custom", 0)]
    for record, n in zip(records, (11, 12), strict=True):
        assert abs(record["tokens_before"] - n) <= 2
    assert bundle["rebuild"]["status"] == "complete"
    assert tel.metrics()["context.envelopes"] == [
        ({"scope": "turn", "agent": "support_agent", "status": "complete"}, 1)]


def test_graph_inside_an_application_envelope_joins_it(tel) -> None:
    with tel.agent_context.envelope(scope="task", agent_name="outer") as env:
        support_agent().invoke({"messages": history()}, CONFIG)
    assert [s.name for s in tel.spans()].count("context.envelope") == 1
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["context_id"] == env.context_id
    assert bundle["context_envelope"]["scope"] == "task"
    assert len(bundle["context_selections"]) == 1
    assert len(bundle["context_budgets"]) == 1


def test_async_graph_records_the_same_stages(tel) -> None:
    messages = [*history(), AIMessage("One moment.", id="a2")]
    asyncio.run(support_agent(is_async=True).ainvoke({"messages": messages}, CONFIG))
    assert tree(tel) == [("context.envelope", None), ("context.surface", "context.envelope"),
                         ("context.selection", "context.envelope"),
                         ("context.budget", "context.envelope")]
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "support_agent"
    assert bundle["context_selections"][0]["selected_item_refs"] == ["refunds", "faq-refunds"]
    assert bundle["rebuild"]["status"] == "complete"


def test_async_retriever_alone(tel) -> None:
    docs = asyncio.run(knowledge_base().as_retriever(search_kwargs={"k": 1}).ainvoke(QUERY))
    assert [d.id for d in docs] == ["refunds"]
    (bundle,) = tel.bundles()
    assert bundle["context_selections"][0]["selected_item_refs"] == ["refunds"]


def test_model_call_outside_any_run_gets_an_implicit_envelope(tel) -> None:
    FakeListChatModel(responses=["hello"]).invoke("hi")
    envelope = one(tel, "context.envelope")
    assert envelope.attributes[S.CONTEXT_SCOPE] == "turn"
    assert envelope.attributes[S.CONTEXT_SPAN_COUNT] == 0
    assert S.GEN_AI_AGENT_NAME not in envelope.attributes


def test_application_error_passes_through_unchanged(tel) -> None:
    graph = support_agent(fail=True)
    with pytest.raises(ValueError) as caught:
        graph.invoke({"messages": history()}, CONFIG)
    assert type(caught.value) is ValueError
    assert str(caught.value) == "the model is down"
    envelope = one(tel, "context.envelope")
    assert envelope.status.status_code.name == "ERROR"
    assert envelope.status.description == "the model is down"
    assert envelope.attributes[S.ERROR_TYPE] == "ValueError"
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"  # the retrieval before the error is kept
    assert len(bundle["context_selections"]) == 1
    # and the context is clean again after the failed run
    FakeListChatModel(responses=["ok"]).invoke("hi")
    assert [s.parent is None for s in tel.spans() if s.name == "context.envelope"] == [True, True]


def test_internal_error_is_logged_and_the_run_goes_on(tel_lenient, monkeypatch,
                                                     caplog) -> None:
    def broken(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("telemetry bug")

    monkeypatch.setattr(_retrieval.Retrieval, "emit", broken)
    with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
        out = support_agent().invoke({"messages": history()}, CONFIG)
    assert out["messages"][-1].content == "Refunds take up to 14 days."
    assert any("on_retriever_end" in r.getMessage() for r in caplog.records)
    # the rest of the envelope is still recorded
    (bundle,) = tel_lenient.bundles()
    assert "context_selections" not in bundle
    assert len(bundle["context_budgets"]) == 1
    assert bundle["rebuild"]["status"] == "complete"


def test_interrupt_ends_the_envelope_normally(tel) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import interrupt

    retriever = knowledge_base().as_retriever(search_kwargs={"k": 1})

    def ask(state: MessagesState) -> dict[str, Any]:
        retriever.invoke(QUERY)
        approved = interrupt("approve the refund?")
        return {"messages": [AIMessage(f"approved: {approved}", id="done")]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    app = graph.compile(checkpointer=InMemorySaver(), name="approval")
    out = app.invoke({"messages": history()}, CONFIG)
    assert "__interrupt__" in out
    envelope = one(tel, "context.envelope")
    assert envelope.status.status_code.name == "UNSET"
    assert S.ERROR_TYPE not in envelope.attributes
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"


def test_a_sync_stream_leaves_the_callers_context_between_chunks(tel) -> None:
    # The caller's code runs between the chunks of a stream: it must see its own span, not
    # the run's envelope, while it reads and after it abandons the stream.
    from opentelemetry import trace

    app = tel.tracer_provider.get_tracer("app")
    model = FakeListChatModel(responses=["one two three"])
    with app.start_as_current_span("app-request") as span:
        seen = [trace.get_current_span() is span for _ in model.stream("hi")]
        abandoned = model.stream("hi again")
        next(abandoned)
        after_abandoning = trace.get_current_span() is span
    assert len(seen) > 1 and all(seen)
    assert after_abandoning
    abandoned.close()
    envelopes = [s for s in tel.spans() if s.name == "context.envelope"]
    assert len(envelopes) == 2  # both runs were still recorded
