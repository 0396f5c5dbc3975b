"""An offline OpenAI Agents SDK app (a tool, a handoff, a session), instrumented with one
call, printing what each run put into its context.

    python examples/openai_agents_app.py        # needs: pip install 'otel-agent-context[examples]'

Written as the Agents SDK's docs write an app; the model is the bundled stub of the OpenAI
Responses API on loopback (no key, no network). ``instrument()`` turns on every
otel-agent-context instrumentor whose library is installed (here the Agents SDK's and the
OpenAI client's); ``BundleSpanProcessor`` rebuilds the envelopes in process. Each run is an
envelope of scope ``turn`` with the agent's name and the session as its conversation; the
handoff is an envelope of scope ``handoff`` whose items are what went across.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.rebuild import BundleSpanProcessor

set_tracing_disabled(True)  # no platform key: the SDK's docs advise turning its export off


@function_tool
def order_status(order: int) -> str:
    """Where an order is."""
    return f"Order {order} shipped with DHL yesterday."


def build(base_url: str) -> Agent[Any]:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-offline", max_retries=0)
    model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
    spanish = Agent(name="Spanish agent", instructions="You only speak Spanish.", model=model)
    return Agent(name="Support agent", instructions="Help with orders; hand off Spanish.",
                 tools=[order_status], handoffs=[spanish], model=model)


async def run_app(base_url: str, session_file: str) -> None:
    agent = build(base_url)
    session = SQLiteSession("customer-1234", session_file)
    # The stub answers "[call:NAME {args}]" in the last user message with that call.
    first = await Runner.run(agent, 'Where is order 1234? [call:order_status {"order": 1234}]',
                             session=session)
    print("agent:", first.final_output)
    second = await Runner.run(agent, "En español, por favor. [call:transfer_to_spanish_agent]",
                              session=session)
    print("agent:", second.final_output)


def summary(bundle: dict) -> dict:
    env = bundle["context_envelope"]
    return {
        "context_id": env["context_id"],
        "scope": env["scope"],
        "agent": env["metadata"].get("gen_ai.agent.name"),
        "conversation": env["metadata"].get("gen_ai.conversation.id"),
        "items": [(i["item_id"], i["context_kind"]) for i in bundle.get("context_items", [])],
        "model_calls": len(env.get("assembly_refs", [])),
        "rebuild": bundle["rebuild"]["status"],
    }


def main() -> None:
    provider = TracerProvider()
    bundles: list[dict] = []
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()
    try:
        with StubServer() as stub, tempfile.TemporaryDirectory() as tmp:
            asyncio.run(run_app(stub.openai_base_url, str(Path(tmp) / "session.db")))
    finally:
        uninstrument()
        provider.shutdown()
    for bundle in bundles:
        print(json.dumps(summary(bundle), indent=2))


if __name__ == "__main__":
    main()
