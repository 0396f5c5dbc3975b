"""LangChain 1.x trimming in a ``@before_model`` middleware (``RemoveMessage``): each removed
message a truncation record of a budget, named by the message's id; the agent's answer the
same with and without the instrumentor."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain.agents.middleware import before_model
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from lc_helpers import events, one, tree

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import estimate_tokens
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

HISTORY = [
    SystemMessage("Answer in one sentence.", id="sys"),
    HumanMessage("Where is my order number 42?", id="h1"),
    AIMessage("It left the warehouse on Monday.", id="a1"),
    HumanMessage("When will it arrive at my door?", id="h2"),
    AIMessage("Expect it by Thursday afternoon.", id="a2"),
    HumanMessage("Can I change the address?", id="h3"),
]


@before_model
def keep_system_and_last_two(state, runtime):
    """What the LangChain 1.x docs teach: replace the history with what is kept."""
    messages = state["messages"]
    if len(messages) <= 3:
        return None
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), messages[0], *messages[-2:]]}


@before_model
def drop_oldest_exchange(state, runtime):
    """The other way the docs show: one RemoveMessage per message to drop."""
    messages = state["messages"]
    return {"messages": [RemoveMessage(id=m.id) for m in messages[1:3]]}


def _agent(middleware):
    return create_agent(model=FakeListChatModel(responses=["Yes, until it ships."]), tools=[],
                        middleware=[middleware], name="support_agent")


def _answer(middleware) -> list[tuple[str, str]]:
    out = _agent(middleware).invoke({"messages": list(HISTORY)})
    return [(m.type, m.content) for m in out["messages"]]


def test_remove_all_messages_is_a_budget_naming_each_removed_message(tel) -> None:
    answer = _answer(keep_system_and_last_two)
    assert [c for _, c in answer][:3] == ["Answer in one sentence.",
                                         "Expect it by Thursday afternoon.",
                                         "Can I change the address?"]
    assert tree(tel) == [("context.envelope", None), ("context.budget", "context.envelope")]
    envelope = one(tel, "context.envelope")
    assert envelope.attributes[S.GEN_AI_AGENT_NAME] == "support_agent"
    budget = one(tel, "context.budget")
    kept = [HISTORY[0], *HISTORY[-2:]]
    assert budget.attributes[S.BUDGET_OVERFLOW_STRATEGY] == "truncate_middle"
    assert budget.attributes[S.BUDGET_ACTUAL_ITEMS] == 3
    assert budget.attributes[S.BUDGET_ACTUAL_TOKENS] == sum(
        estimate_tokens(m.content) for m in kept)
    assert S.BUDGET_MAX_TOKENS not in budget.attributes  # the node's limit is its own
    assert [(name, a[S.ITEM_ID], a[S.TRUNCATION_STRATEGY], a[S.TRUNCATION_TOKENS_BEFORE],
             a[S.TRUNCATION_TOKENS_AFTER]) for name, a in events(budget)] == [
        (S.EVENT_BUDGET_TRUNCATED, m.id, "truncate_middle", estimate_tokens(m.content), 0)
        for m in HISTORY[1:4]]
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    (record,) = bundle["context_budgets"]
    assert [t["item_id"] for t in record["truncation_records"]] == ["h1", "a1", "h2"]


def test_one_remove_message_per_message_is_recorded_the_same_way(tel) -> None:
    _answer(drop_oldest_exchange)
    budget = one(tel, "context.budget")
    assert [a[S.ITEM_ID] for _, a in events(budget)] == ["h1", "a1"]
    assert budget.attributes[S.BUDGET_OVERFLOW_STRATEGY] == "truncate_middle"
    assert budget.attributes[S.BUDGET_ACTUAL_ITEMS] == len(HISTORY) - 2


def test_a_node_that_removes_nothing_records_no_budget(tel) -> None:
    _agent(keep_system_and_last_two).invoke({"messages": list(HISTORY[:2])})
    assert tree(tel) == [("context.envelope", None)]


def test_the_agent_answers_the_same_with_and_without_the_instrumentor(tel) -> None:
    with_instrumentor = _answer(keep_system_and_last_two)
    LangChainContextInstrumentor().uninstrument()
    without = _answer(keep_system_and_last_two)
    assert with_instrumentor == without


def test_a_named_chain_names_the_agent_and_a_default_name_does_not(tel) -> None:
    from langchain_core.runnables import RunnableLambda

    chain = RunnableLambda(lambda x: x) | RunnableLambda(lambda x: x)
    chain.invoke(1)
    chain.with_config(run_name="triage_agent").invoke(1)
    first, second = sorted((s for s in tel.spans() if s.name == S.SPAN_ENVELOPE),
                           key=lambda s: s.start_time)
    assert S.GEN_AI_AGENT_NAME not in first.attributes
    assert second.attributes[S.GEN_AI_AGENT_NAME] == "triage_agent"


def test_a_message_holding_only_tool_calls_is_not_zero_tokens(tel) -> None:
    from langchain_core.messages import ToolMessage

    @before_model
    def drop_tool_exchange(state, runtime):
        return {"messages": [RemoveMessage(id="call-ai"), RemoveMessage(id="call-result")]}

    history = [HumanMessage("Where is order 42?", id="q"),
               AIMessage("", id="call-ai", tool_calls=[
                   {"id": "c1", "name": "lookup_order", "args": {"order_id": 42}}]),
               ToolMessage("shipped", tool_call_id="c1", id="call-result"),
               HumanMessage("Thanks, and when?", id="q2")]
    _agent(drop_tool_exchange).invoke({"messages": history})
    budget = one(tel, "context.budget")
    before = {a[S.ITEM_ID]: a[S.TRUNCATION_TOKENS_BEFORE] for _, a in events(budget)}
    assert before["call-ai"] > 0  # its tool call is what the model reads
