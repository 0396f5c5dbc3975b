"""Which retrieved documents reached the prompt in an OpenAI Agents SDK run: a function tool
retrieves three documents (recorded with the API in the run's envelope) and returns two;
the next model call's tool-output block names the two it carries, the third is selected but
never injected. The app's outputs and requests are the same with and without us."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from framework_helpers import framework_on
from openai import AsyncOpenAI
from stub_server import REPLY, StubServer

from otel_agent_context import ContextItem, current_envelope
from otel_agent_context.instrumentation.openai_agents import OpenAIAgentsContextInstrumentor

set_tracing_disabled(True)

DOCS = {
    "kb:refunds": "Refunds are issued within 14 days of the return reaching our warehouse.",
    "kb:returns": "Returns need the receipt and the original packaging, within 30 days.",
    "kb:hours": "Support answers from 9:00 to 18:00 on weekdays, Lisbon time.",
}
ASK = 'How do refunds work? [call:search_docs {"query": "refunds"}]'


@function_tool
def search_docs(query: str) -> str:
    """Search the knowledge base."""
    env = current_envelope()  # the run's envelope (None when nothing records)
    if env is not None:
        with env.selection(intent="retrieval", query=query, policy="top_3") as sel:
            for rank, (item_id, text) in enumerate(DOCS.items(), start=1):
                sel.selected(ContextItem(item_id=item_id, context_kind="retrieval_result",
                                         content=text), rank=rank)
    return "\n\n".join(list(DOCS.values())[:2])  # the app keeps two for the model


def _run() -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    with StubServer() as stub:
        client = AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        agent = Agent(name="Support agent", instructions="Answer from the knowledge base.",
                      tools=[search_docs],
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        result = asyncio.run(Runner.run(agent, ASK))
        return str(result.final_output), stub.requests


def test_the_tool_output_block_names_the_documents_it_carries(capture_setup: Any) -> None:
    plain_output, plain_requests = _run()  # before the Agents SDK is instrumented
    capture_setup.tel.span_exporter.clear()  # (its model calls were recorded, loose)
    with framework_on(OpenAIAgentsContextInstrumentor(), capture_setup) as tel:
        output, requests = _run()
    assert output == plain_output == REPLY
    assert json.dumps(requests) == json.dumps(plain_requests)  # the same bodies

    (bundle,) = tel.bundles()  # one run: one envelope, both model calls in it
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "Support agent"
    first, second = bundle["context_assemblies"]
    assert not any("source_item_refs" in b for b in first["ordered_blocks"])
    carrying = [b for b in second["ordered_blocks"] if "source_item_refs" in b]
    assert [(b["context_kind"], b["source_item_refs"]) for b in carrying] == [
        ("tool_result", ["kb:refunds", "kb:returns"])]
    (selection,) = bundle["context_selections"]
    assert selection["not_injected_item_refs"] == ["kb:hours"]
    metric = {(labels["agent"], labels["kind"]): value
              for labels, value in tel.metrics()["context.items.not_injected"]}
    assert metric == {("Support agent", "retrieval_result"): 1}
    exported = json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                           for s in tel.spans()], default=str)
    assert (DOCS["kb:hours"] in exported) is capture_setup.capture
