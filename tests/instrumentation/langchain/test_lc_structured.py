"""A LangChain v1 agent with structured output (``create_agent(..., response_format=Order)``,
as the LangChain docs write it) on ``ChatOpenAI`` against the loopback stub, with the
LangChain and OpenAI instrumentors: the run is one turn envelope whose model call has its
assembly and budget (a structured-output agent once recorded an empty envelope), and the
agent's answer and request bodies are the same with and without the instrumentors. Both
strategies: the provider's native structured output (what ``Order`` alone picks for
``gpt-4o-mini``) and ``ToolStrategy`` (the model calls a tool named after the schema)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_openai import ChatOpenAI
from pydantic import BaseModel
from stub_server import StubServer

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


class Order(BaseModel):
    order_id: str
    eta_days: int


# the stub answers "[call:NAME {args}]" in the last user message with that tool call
QUESTION = 'Where is order 42? [call:Order {"order_id": "42", "eta_days": 3}]'


def _run(response_format: Any) -> tuple[Any, list[Any], list[Any]]:
    """The agent's structured response, its messages (type, text, tool calls) and the
    request bodies the stub got."""
    with StubServer() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                           api_key="sk-test", max_retries=0)
        agent = create_agent(model=model, tools=[], response_format=response_format,
                             name="order_agent")
        out = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]})
        bodies = [body for _, body in stub.requests]
    messages = [(m.type, m.content, [(c["name"], c["args"]) for c in
                                     getattr(m, "tool_calls", None) or ()])
                for m in out["messages"]]
    return out["structured_response"], messages, bodies


@pytest.mark.parametrize("strategy", ["provider", "tool"])
@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
def test_structured_output_agent_records_its_model_call(strategy: str, capture: bool) -> None:
    response_format = Order if strategy == "provider" else ToolStrategy(Order)
    bare = _run(response_format)

    tel = CapturedTelemetry(capture_content=capture)
    ours = [LangChainContextInstrumentor(), OpenAIContextInstrumentor()]
    for inst in ours:
        inst.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                        agent_context=tel.agent_context)
    try:
        instrumented = _run(response_format)
    finally:
        for inst in ours:
            inst.uninstrument()
    assert instrumented == bare  # the same answer, messages and request bodies
    answer, _, bodies = instrumented
    assert isinstance(answer, Order) and len(bodies) == 1
    if strategy == "tool":
        assert answer == Order(order_id="42", eta_days=3)
        assert bodies[0]["tool_choice"] == "required"
    else:
        assert bodies[0]["response_format"]["type"] == "json_schema"

    (bundle,) = tel.bundles()  # one envelope: the run, the model call joined
    env = bundle["context_envelope"]
    assert env["scope"] == "turn"
    assert env["metadata"]["gen_ai.agent.name"] == "order_agent"
    (chat,) = [s for s in tel.spans() if s.name == "chat gpt-4o-mini"]
    assert chat.attributes[S.CONTEXT_ID] == env["context_id"]
    assert chat.attributes[S.ASSEMBLY_BLOCK_COUNT] == 1  # the question
    (assembly,) = bundle["context_assemblies"]  # not an empty envelope
    assert assembly["assembly_id"] == chat.attributes[S.ASSEMBLY_ID]
    assert env["assembly_refs"] == [assembly["assembly_id"]]
    (budget,) = bundle["context_budgets"]
    assert budget["budget_id"] == chat.attributes[S.BUDGET_ID]
    assert [b["context_kind"] for b in assembly["ordered_blocks"]] == ["user_message"]
    assert ("Where is order 42?" in json.dumps(bundle)) is capture
    tel.shutdown()
