"""A simulated support agent that exercises every lifecycle stage (used by ``demo``).

Each turn: candidates surface from history, a knowledge base and tool results; a selection
keeps what fits and omits the rest with reasons; a budget lays out the window and truncates
history in the middle when it is too long; every third turn older history is compacted into a
rolling summary that sometimes loses a decision; the assembled blocks are injected into a
GenAI ``chat`` span (every fourth turn without the last document selected: selected, never
injected); now and then the agent knows it lacks an order id (blocking) and asks
for it. Deterministic for a given seed; no model, no network.
"""

from __future__ import annotations

import random

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from . import _semconv as S
from ._api import AgentContext
from ._enums import ContentMode, ContextKind
from ._records import ContextItem, ContextSourceRef

__all__ = ["run_demo"]

MODEL = "demo-model-8k"
WINDOW = 8192
RESERVED_OUTPUT = 1024

_TOPICS = ("refunds", "shipping", "warranty", "invoices", "returns", "accounts", "payments")


def _kb(rng: random.Random) -> list[ContextItem]:
    docs = []
    for i in range(60):
        topic = _TOPICS[i % len(_TOPICS)]
        docs.append(ContextItem(
            item_id=f"kb:{topic}:{i}", context_kind=ContextKind.DOCUMENT_EXCERPT,
            content_mode=ContentMode.REF,
            title=f"{topic.title()} policy, section {i}",
            content=f"Policy text about {topic}, section {i}.",
            token_estimate=rng.randint(120, 900),
            freshness="stale" if i % 11 == 0 else "current",
            sensitivity="pii" if i % 17 == 0 else "internal",
            source_refs=[ContextSourceRef(uri=f"kb://policies/{topic}.md",
                                          selector=f"line_range:{i * 10}-{i * 10 + 9}",
                                          authority="support-kb")],
        ))
    return docs


def run_demo(tracer_provider: trace.TracerProvider | None = None, *, turns: int = 3,
             seed: int = 0, agent_context: AgentContext | None = None) -> list[str]:
    """Emit ``turns`` envelopes through the public API; returns their context ids."""
    rng = random.Random(seed)
    ctx = agent_context or AgentContext(tracer_provider=tracer_provider)
    tracer = trace.get_tracer("otel_agent_context.demo", tracer_provider=tracer_provider)
    kb = _kb(rng)
    history: list[ContextItem] = []
    summary_tokens = 0
    conversation = f"conv-{seed:04d}"
    ids = []
    for turn in range(turns):
        question = rng.choice(_TOPICS)
        history.append(ContextItem(
            item_id=f"msg:{conversation}:{2 * turn}", context_kind=ContextKind.USER_MESSAGE,
            content=f"Customer asks about {question}.", token_estimate=rng.randint(30, 200)))
        with tracer.start_as_current_span("invoke_agent support-agent", kind=SpanKind.INTERNAL,
                                          attributes={S.GEN_AI_OPERATION_NAME: "invoke_agent",
                                                      S.GEN_AI_AGENT_NAME: "support-agent"}):
            ids.append(_turn(ctx, tracer, rng, turn, question, kb, history, conversation,
                             summary_tokens))
        if turn % 3 == 2:
            summary_tokens = rng.randint(200, 400)
        history.append(ContextItem(
            item_id=f"msg:{conversation}:{2 * turn + 1}", context_kind=ContextKind.SESSION_HISTORY,
            content=f"Agent answered about {question}.", token_estimate=rng.randint(80, 600)))
    return ids


def _turn(ctx: AgentContext, tracer: trace.Tracer, rng: random.Random, turn: int, question: str,
          kb: list[ContextItem], history: list[ContextItem], conversation: str,
          summary_tokens: int) -> str:
    system = ContextItem(item_id="sys:support-v3", context_kind=ContextKind.SYSTEM_PROMPT,
                         content="You are a careful support agent.", token_estimate=420)
    tool = ContextItem(item_id=f"tool:orders.lookup:{turn}", context_kind=ContextKind.TOOL_RESULT,
                       content_mode=ContentMode.TOOL_RESULT_REF,
                       token_estimate=rng.randint(100, 1500),
                       source_refs=[ContextSourceRef(
                           external_mappings={"model_api.tool_call_id": f"call_{turn}"})])
    candidates = rng.sample(kb, rng.randint(20, 50))
    with ctx.envelope(scope="turn", agent_name="support-agent", conversation_id=conversation,
                      model=MODEL, runtime_refs=[f"turn:{turn}"]) as env:
        # a known gap first: the agent can tell before it selects
        gap = None
        if turn == 0 or rng.random() < 0.3:  # the first turns show every failure mode
            gap = env.missing(question="Which order is this about?",
                              needed_for="refund eligibility", severity="blocking",
                              blocked_actions=["issue_refund"],
                              candidate_sources=["user", "orders.lookup"])
            env.missing_requested(gap, requested_from="user")

        with env.surface() as surface:
            surface.add(system)
            for msg in history:
                surface.add(msg)
            surface.add(tool)
            for doc in candidates:
                surface.add(doc)

        budget_for_docs = rng.randint(1500, 4000)
        used = 0
        picked: list[ContextItem] = []
        seen_topics: set[str] = set()
        with env.selection(surface_id=surface.surface_id, intent="answer_support_question",
                           query=f"{question} policy", policy="relevance_then_budget") as sel:
            scored = sorted(((rng.random() + (0.5 if question in d.item_id else 0.0), d)
                             for d in candidates), key=lambda p: -p[0])
            for rank, (score, doc) in enumerate(scored, start=1):
                topic = doc.item_id.split(":")[1]
                tokens = doc.token_estimate or 0
                if doc.sensitivity == "pii":
                    sel.omitted(doc, reason="privacy_risk", score=score)
                elif doc.freshness == "stale":
                    sel.omitted(doc, reason="stale_source", score=score)
                elif score < 0.35:
                    sel.omitted(doc, reason="low_relevance", score=score)
                elif topic in seen_topics and rng.random() < 0.5:
                    sel.omitted(doc, reason="duplicate_coverage", score=score,
                                detail=f"covered by an earlier {topic} excerpt")
                elif used + tokens > budget_for_docs:
                    sel.omitted(doc, reason="budget", score=score,
                                detail=f"{tokens} tokens over the remaining retrieval budget")
                else:
                    sel.selected(doc, rank=rank, score=score,
                                 signals={"bm25": round(score * 12, 3), "recency": rng.random()})
                    picked.append(doc)
                    seen_topics.add(topic)
                    used += tokens

        history_tokens = sum(m.token_estimate or 0 for m in history)
        history_limit = 2000 if turn < 2 else 1200
        with env.budget(target="model", max_tokens=WINDOW, reserved_tokens=RESERVED_OUTPUT,
                        overflow_strategy="truncate_middle", window_id=f"win-{turn}") as budget:
            budget.segment("system", order=0, reserved_tokens=600, used_tokens=420)
            budget.segment("summary", order=1, reserved_tokens=500, used_tokens=summary_tokens)
            budget.segment("history", order=2, reserved_tokens=history_limit,
                           used_tokens=min(history_tokens, history_limit))
            budget.segment("retrieval", order=3, reserved_tokens=4000, used_tokens=used)
            budget.segment("output", order=4, reserved_tokens=RESERVED_OUTPUT)
            if history_tokens > history_limit or turn == 1:
                for msg in history[1:-1][: rng.randint(1, 3)]:
                    before = msg.token_estimate or 0
                    budget.truncated(item_id=msg.item_id, strategy="truncate_middle",
                                     tokens_before=before, tokens_after=before // 4)
            actual = 420 + summary_tokens + min(history_tokens, history_limit) + used + (
                tool.token_estimate or 0)
            if turn == 1 or rng.random() < 0.2:  # a long tool result overflows the window
                actual += WINDOW - actual - RESERVED_OUTPUT + rng.randint(50, 900)
            budget.actual(tokens=actual, items=len(picked) + len(history) + 2)

        if turn % 3 == 2:
            with env.compaction(method="rolling_summary", trigger="history_over_budget",
                                scope="session_history", replacement_policy="replace_in_window",
                                validation="sampled_qa") as comp:
                lose = turn == 2 or rng.random() < 0.5
                for i, msg in enumerate(history[:-1]):
                    comp.source(msg, covered=not (lose and i == 1))
                comp.summary(content="Customer discussed refunds and shipping; agent "
                                     "confirmed policy sections.",
                             token_estimate=rng.randint(200, 400), refresh_policy="every_3_turns")
                if lose:
                    comp.loss_note("the agreed refund amount was not carried into the summary")

        # every fourth turn the prompt builder has no room left for the last document it was
        # handed: selected, never injected
        placed = picked[:-1] if turn % 4 == 1 else picked
        with env.assembly(target="model", budget_id=budget.budget_id) as asm:
            asm.block(system, injection_point="system_prompt")
            for msg in history:
                asm.block(msg, injection_point="message_history")
            asm.block(tool, injection_point="message_history")
            for doc in placed:
                asm.block(doc, injection_point="user_message_appendix")

        with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT) as chat:
            chat.set_attributes({S.GEN_AI_OPERATION_NAME: "chat", S.GEN_AI_REQUEST_MODEL: MODEL,
                                 S.GEN_AI_PROVIDER_NAME: "demo",
                                 S.GEN_AI_REQUEST_MAX_TOKENS: RESERVED_OUTPUT,
                                 S.GEN_AI_USAGE_INPUT_TOKENS: min(actual, WINDOW),
                                 S.GEN_AI_USAGE_OUTPUT_TOKENS: rng.randint(50, 400)})
            asm.inject(injection_point="message_history", span=chat)
            if summary_tokens:
                env.mark_compacted(chat)
        if gap is not None and turn > 0 and rng.random() < 0.5:  # the order lookup found it
            env.missing_resolved(gap, resolution_refs=[tool.item_id])
        return env.context_id
