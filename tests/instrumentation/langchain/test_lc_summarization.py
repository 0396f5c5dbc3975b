"""Summarization as a compaction: LangChain 1.x's SummarizationMiddleware (coverage from what
the summarizer saw) and the classic ConversationSummaryMemory."""

from __future__ import annotations

import asyncio
import warnings

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from lc_helpers import count_words, events, one, strip_times, tree

from otel_agent_context import _semconv as S
from otel_agent_context._attributes import digest_text
from otel_agent_context._digest import short_digest
from otel_agent_context.instrumentation import estimate_tokens

SUMMARY = "The customer reported a broken kettle and asked about a refund."
SUMMARY_MESSAGE = f"Here is a summary of the conversation to date:\n\n{SUMMARY}"


def conversation() -> list:
    turns = [("My kettle arrived broken yesterday.", "Sorry! Is the base or the lid damaged?"),
             ("The lid hinge snapped off.", "Thanks. Would you like a replacement?"),
             ("I would rather have a refund.", "Understood, I can arrange that for you.")]
    out: list = []
    for i, (q, a) in enumerate(turns):
        out += [HumanMessage(q, id=f"h{i}"), AIMessage(a, id=f"a{i}")]
    return [*out, HumanMessage("How long will it take?", id="hq")]


def agent(trim_to: int):
    middleware = SummarizationMiddleware(
        model=FakeListChatModel(responses=[SUMMARY]), trigger=("messages", 6),
        keep=("messages", 2), token_counter=count_words, trim_tokens_to_summarize=trim_to)
    return create_agent(model=FakeListChatModel(responses=["About five days."]), tools=[],
                        middleware=[middleware], name="support_agent")


def tokens(text: str) -> int:
    return estimate_tokens(text)


def test_summarization_middleware_is_a_compaction_with_coverage(tel) -> None:
    history = conversation()
    texts = {m.id: m.content for m in history}
    out = agent(trim_to=18).invoke({"messages": history},
                                   {"configurable": {"thread_id": "t-1"}})
    assert [m.content for m in out["messages"]][:1] == [SUMMARY_MESSAGE]

    # the summarizer's input was trimmed to 18 words: h1, a1, h2 kept, h0 and a0 cut. The
    # summarizer works for the agent, not as the agent: its model call and that trim are in
    # an envelope of its own (scope task, linked to the agent's); the compaction is the
    # agent's.
    assert tree(tel) == [("context.envelope", None), ("context.envelope", "context.envelope"),
                         ("context.budget", "context.envelope"),
                         ("context.compaction", "context.envelope")]
    sources = ["h0", "a0", "h1", "a1", "h2"]
    before = sum(tokens(texts[i]) for i in sources)
    covered = sum(tokens(texts[i]) for i in ("h1", "a1", "h2"))
    compaction = one(tel, "context.compaction")
    note = "2 of 5 summarized messages were cut from the summarizer's input " \
           "(trim_tokens_to_summarize)"
    assert dict(compaction.attributes) == {
        S.COMPACTION_ID: "cmp_1", S.COMPACTION_METHOD: "rolling_summary",
        S.COMPACTION_TRIGGER: "threshold:messages", S.COMPACTION_SCOPE: "message_history",
        S.COMPACTION_REPLACEMENT_POLICY: "replace_with_summary", S.CONTEXT_ID: "ctx_1",
        S.COMPACTION_SOURCE_COUNT: 5, S.COMPACTION_TOKENS_BEFORE: before,
        S.COMPACTION_COVERAGE: covered / before,
        S.COMPACTION_TOKENS_AFTER: tokens(SUMMARY_MESSAGE), S.SUMMARY_ID: "sum_1",
        S.COMPACTION_LOSS_NOTES: (note,)}
    kinds = {"h": "user_message", "a": "session_history"}
    assert events(compaction) == [
        *[(S.EVENT_COMPACTION_SOURCE, {S.ITEM_ID: i, S.COMPACTION_COVERED: i in ("h1", "a1", "h2"),
                                       S.ITEM_TOKEN_ESTIMATE: tokens(texts[i]),
                                       S.ITEM_KIND: kinds[i[0]]}) for i in sources],
        (S.EVENT_SUMMARY_CREATED, {S.SUMMARY_ID: "sum_1",
                                   S.SUMMARY_TOKEN_ESTIMATE: tokens(SUMMARY_MESSAGE),
                                   S.SUMMARY_DIGEST: digest_text(SUMMARY_MESSAGE)}),
    ]
    budget = one(tel, "context.budget")  # the trim of the summarizer's input
    assert budget.attributes[S.BUDGET_MAX_TOKENS] == 18
    assert budget.attributes[S.CONTEXT_ID] == "ctx_2"  # the summarizer's envelope
    assert [e[S.ITEM_ID] for _, e in events(budget)] == ["h0", "a0"]

    bundles = {b["context_envelope"]["scope"]: b for b in tel.bundles()}
    assert sorted(bundles) == ["task", "turn"]
    summarizer = bundles["task"]
    assert summarizer["context_envelope"]["parent_id"] == "ctx_1"
    assert summarizer["context_envelope"]["metadata"] == {
        "gen_ai.agent.name": "SummarizationMiddleware", "gen_ai.conversation.id": "t-1"}
    assert [b["max_tokens"] for b in summarizer["context_budgets"]] == [18]
    bundle = bundles["turn"]
    assert "context_budgets" not in bundle  # nothing of the agent's own context was cut
    assert bundle["context_envelope"]["lifecycle"] == "compacted"
    assert bundle["context_envelope"]["metadata"] == {"gen_ai.agent.name": "support_agent",
                                                      "gen_ai.conversation.id": "t-1"}
    (comp,) = strip_times(bundle["context_compactions"])
    assert comp["source_item_refs"] == sources
    assert comp["coverage"] == covered / before
    assert comp["loss_notes"] == [note]
    assert [c["covered"] for c in comp["source_coverage"]] == [False, False, True, True, True]
    (summary,) = strip_times(bundle["context_summaries"])
    assert summary == {"summary_id": "sum_1", "compaction_ref": "cmp_1",
                       "token_estimate": tokens(SUMMARY_MESSAGE),
                       "digest": digest_text(SUMMARY_MESSAGE), "coverage": covered / before,
                       "loss_notes": [note], "source_item_refs": sources}
    metrics = tel.metrics()
    assert metrics["context.compactions"] == [({"agent": "support_agent",
                                                "method": "rolling_summary",
                                                "trigger": "threshold:messages"}, 1)]
    assert metrics["context.compaction.uncovered_sources"] == [
        ({"agent": "support_agent", "method": "rolling_summary"}, 2)]


def test_summary_content_is_recorded_only_under_capture(tel_content) -> None:
    asyncio.run(agent(trim_to=1000).ainvoke({"messages": conversation()}))
    compaction = one(tel_content, "context.compaction")
    assert compaction.attributes[S.COMPACTION_COVERAGE] == 1.0
    assert S.COMPACTION_LOSS_NOTES not in compaction.attributes
    (summary,) = [e for e in compaction.events if e.name == S.EVENT_SUMMARY_CREATED]
    assert summary.attributes[S.SUMMARY_CONTENT] == SUMMARY_MESSAGE
    (bundle,) = [b for b in tel_content.bundles() if b["context_envelope"]["scope"] == "turn"]
    assert bundle["context_summaries"][0]["content"] == SUMMARY_MESSAGE


def test_no_compaction_below_the_trigger(tel) -> None:
    agent(trim_to=16).invoke({"messages": conversation()[-3:]})
    assert [s.name for s in tel.spans()] == ["context.envelope"]


def test_conversation_summary_memory_is_a_rolling_summary(tel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the classic memories are deprecated
        from langchain_classic.memory import ConversationSummaryMemory

        memory = ConversationSummaryMemory(llm=FakeListLLM(responses=["S1", "S2"]))
        memory.save_context({"input": "My kettle broke."}, {"output": "Sorry about that."})
        memory.save_context({"input": "Refund please."}, {"output": "Done."})
    assert memory.buffer == "S2"
    first, second = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["context_id"])
    (c1,) = first["context_compactions"]
    assert (c1["method"], c1["trigger"], c1["source_count"], c1["coverage"]) == (
        "rolling_summary", "every_turn", 2, 1.0)
    (c2,) = second["context_compactions"]
    # the second summary rolls the first one in
    summary_id = "summary_" + short_digest("S1", length=16)
    assert c2["source_item_refs"][0] == summary_id
    assert c2["source_count"] == 3
    kinds = {i["item_id"]: i.get("context_kind") for i in second["context_items"]}
    assert kinds[summary_id] == "thread_summary"
    # the memory's own LLM chain ran inside the compaction's envelope
    assert [s.name for s in tel.spans()].count("context.envelope") == 2
