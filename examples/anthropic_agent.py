"""A small offline Anthropic agent, instrumented with one call, printing its rebuilt bundles.

    python examples/anthropic_agent.py

Runs against the bundled stub of the Anthropic API on loopback (no key, no network): a
cached system prompt, a tool loop, and a request with context editing
(``clear_tool_uses_20250919``), which the bundle shows as a ``provider_context_editing``
compaction naming the tool results that were cleared. On an existing agent the one-line way
is ``opentelemetry-instrument python agent.py``.
"""

from __future__ import annotations

import json

import anthropic
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.rebuild import BundleSpanProcessor

MODEL = "claude-sonnet-4-6"
SYSTEM = [{"type": "text", "text": "You are ACME's support agent. Policies: ... " * 30,
           "cache_control": {"type": "ephemeral"}}]


def summary(bundle: dict) -> dict:
    budget = bundle["context_budgets"][0]
    out = {
        "context_id": bundle["context_envelope"]["context_id"],
        "blocks": [(b["item_id"], b["context_kind"], b.get("tokens"))
                   for b in bundle["context_assemblies"][0]["ordered_blocks"]],
        "budget": {k: budget.get(k) for k in ("max_tokens", "reserved_tokens", "actual_tokens",
                                              "utilization")},
        "window": [(s["segment"], s.get("used_tokens", s.get("reserved_tokens")))
                   for s in budget.get("window_segments", [])],
        "rebuild": bundle["rebuild"]["status"],
    }
    for c in bundle.get("context_compactions", []):
        out["compaction"] = {k: c.get(k) for k in ("method", "trigger", "source_item_refs",
                                                   "loss_notes", "coverage")}
    return out


def run_agent(base_url: str) -> None:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-offline", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Where are my orders 1, 2 and 3?"}]
    for i in range(3):  # a tool loop: the model looks each order up
        client.messages.create(model=MODEL, max_tokens=400, system=SYSTEM, messages=messages)
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "orders_lookup",
             "input": {"order": i + 1}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}",
             "content": json.dumps({"order": i + 1, "status": "shipped"}) * 20}]})
    with client.beta.messages.stream(
            model=MODEL, max_tokens=400, system=SYSTEM, messages=messages,
            betas=["context-management-2025-06-27"],
            context_management={"edits": [{
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 300},
                "keep": {"type": "tool_uses", "value": 1}}]}) as stream:
        print("agent:", "".join(stream.text_stream))


def main() -> None:
    provider = TracerProvider()
    bundles: list[dict] = []  # on_bundle runs on the processor's worker thread
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()
    try:
        with StubServer() as stub:
            run_agent(stub.anthropic_base_url)
    finally:
        uninstrument()
        provider.shutdown()  # every bundle is out
    for bundle in bundles:
        print(json.dumps(summary(bundle), indent=2))


if __name__ == "__main__":
    main()
