"""A small support agent instrumented with otel-agent-context, the way the README shows.

    python examples/support_agent.py            # prints the rebuilt bundle of one turn

It configures the OpenTelemetry SDK with an in-process ``BundleSpanProcessor`` (no collector
needed), runs one turn, and prints what the agent put into its context window and what it left
out. Swap the processor for an OTLP exporter to send the same spans to a collector.
"""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context import AgentContext, ContextItem, ContextSourceRef
from otel_agent_context.rebuild import BundleSpanProcessor

KNOWLEDGE_BASE = [
    ContextItem(item_id="kb:refunds#limits", context_kind="document_excerpt",
                token_estimate=420, content="Refunds over 5,000 INR need finance approval.",
                source_refs=[ContextSourceRef(uri="kb://policies/refunds.md",
                                              selector="line_range:12-18")]),
    ContextItem(item_id="kb:refunds#2019", context_kind="document_excerpt",
                token_estimate=380, freshness="stale",
                source_refs=[ContextSourceRef(uri="kb://archive/refunds-2019.md")]),
    ContextItem(item_id="kb:shipping#zones", context_kind="document_excerpt",
                token_estimate=900),
]
HISTORY = [
    ContextItem(item_id="msg:1", context_kind="user_message", token_estimate=40),
    ContextItem(item_id="msg:2", context_kind="session_history", token_estimate=2600),
]


def answer(ctx: AgentContext, tracer: trace.Tracer, question: str) -> None:
    with ctx.envelope(scope="turn", agent_name="support", conversation_id="conv-1") as env:
        with env.surface() as surface:  # everything the agent could have used
            for item in KNOWLEDGE_BASE + HISTORY:
                surface.add(item)

        with env.selection(surface_id=surface.surface_id, intent="answer",
                           query=question) as sel:  # what it picked, what it left out and why
            sel.selected(KNOWLEDGE_BASE[0], rank=1, score=0.91, signals={"bm25": 11.2})
            sel.omitted(KNOWLEDGE_BASE[1], reason="stale_source", score=0.88)
            sel.omitted(KNOWLEDGE_BASE[2], reason="low_relevance", score=0.12)

        with env.budget(max_tokens=4096, reserved_tokens=1024,
                        overflow_strategy="truncate_middle") as budget:
            budget.segment("system", order=0, reserved_tokens=500, used_tokens=310)
            budget.segment("history", order=1, reserved_tokens=1500, used_tokens=1500)
            budget.truncated(item_id="msg:2", strategy="truncate_middle",
                             tokens_before=2600, tokens_after=1460)
            budget.actual(tokens=2270)

        with env.assembly(budget_id=budget.budget_id) as asm:
            asm.block("sys:support", kind="system_prompt", tokens=310,
                      injection_point="system_prompt")
            asm.block(HISTORY[1], tokens=1460, injection_point="message_history")
            asm.block(KNOWLEDGE_BASE[0], injection_point="user_message_appendix")

        env.missing(question="Which order is this about?", severity="blocking",
                    needed_for="refund eligibility", blocked_actions=["issue_refund"])

        with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT) as chat:
            asm.inject(span=chat)  # the model call that saw the assembled context
            # ... call the model here ...


def main() -> None:
    bundles: list[dict] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    ctx = AgentContext(tracer_provider=provider)
    answer(ctx, provider.get_tracer("support-agent"), "Can I get a refund of 7,000 INR?")
    provider.shutdown()
    print(json.dumps(bundles[0], indent=2))


if __name__ == "__main__":
    main()
