"""A small offline OpenAI agent, instrumented with one call, printing its rebuilt bundles.

    python examples/openai_agent.py

It starts the bundled stub of the OpenAI API on loopback (no key, no network), turns on
otel-agent-context's auto-instrumentation with ``instrument()``, and runs a two-turn support
agent with a tool call. Each model call becomes an envelope (the inference span with
``context.scope = turn``); ``BundleSpanProcessor`` rebuilds each one in-process and the agent
prints them at the end. On an existing agent the one-line way is
``opentelemetry-instrument python agent.py``.
"""

from __future__ import annotations

import json

import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.rebuild import BundleSpanProcessor


def summary(bundle: dict) -> dict:
    """The parts of a bundle worth reading on a terminal."""
    budget = bundle["context_budgets"][0]
    return {
        "context_id": bundle["context_envelope"]["context_id"],
        "scope": bundle["context_envelope"]["scope"],
        "blocks": [(b["item_id"], b["context_kind"], b["injection_point"], b.get("tokens"))
                   for b in bundle["context_assemblies"][0]["ordered_blocks"]],
        "budget": {k: budget.get(k) for k in ("max_tokens", "reserved_tokens", "actual_tokens",
                                              "utilization", "overflow")},
        "rebuild": bundle["rebuild"]["status"],
    }


def run_agent(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-offline", max_retries=0)
    messages = [{"role": "system", "content": "You are ACME's support agent. Be brief."},
                {"role": "user", "content": "Where is my order 1234?"}]
    tools = [{"type": "function", "function": {"name": "orders_lookup", "parameters": {
        "type": "object", "properties": {"order": {"type": "integer"}}}}}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools,
                                           max_completion_tokens=300)
    messages.append({"role": "assistant", "content": first.choices[0].message.content,
                     "tool_calls": [{"id": "call_1", "type": "function", "function": {
                         "name": "orders_lookup", "arguments": '{"order": 1234}'}}]})
    messages.append({"role": "tool", "tool_call_id": "call_1",
                     "content": '{"status": "shipped", "carrier": "DHL"}'})
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                            tools=tools, max_completion_tokens=300,
                                            stream=True, stream_options={"include_usage": True})
    answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    print("agent:", answer.strip())


def main() -> None:
    provider = TracerProvider()
    bundles: list[dict] = []  # on_bundle runs on the processor's worker thread
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()  # the in-process equivalent of `opentelemetry-instrument`
    try:
        with StubServer() as stub:
            run_agent(stub.openai_base_url)
    finally:
        uninstrument()
        provider.shutdown()  # every bundle is out
    for bundle in bundles:
        print(json.dumps(summary(bundle), indent=2))


if __name__ == "__main__":
    main()
