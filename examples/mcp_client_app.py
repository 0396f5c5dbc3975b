"""An offline MCP client app: it reads a resource, fetches a prompt and calls a tool on an
MCP server, then asks a model with what it got; instrumented with one call.

    python examples/mcp_client_app.py           # needs: pip install 'otel-agent-context[examples]'

Written as the MCP Python SDK's docs write a client and a server; this file is both (the
client starts it again with ``--server`` as a stdio MCP server). The model is the bundled
stub of the OpenAI API on loopback. Each resource, prompt message and tool result becomes an
item of the application's envelope with its MCP ids (resource URI, prompt and tool names,
server); the model call is the envelope's assembly.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from openai import AsyncOpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context import AgentContext
from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.rebuild import BundleSpanProcessor


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("Support docs")

    @server.resource("docs://policies/refunds")
    def refund_policy() -> str:
        """The refund policy."""
        return "Refunds are accepted within 30 days of delivery with the receipt."

    @server.prompt()
    def answer_question(question: str) -> str:
        """Answer a customer question with the policies."""
        return f"Answer using our policies. Question: {question}"

    @server.tool()
    def order_status(order: int) -> str:
        """Where an order is."""
        return f"Order {order} was delivered on 2026-11-02."

    server.run("stdio")


async def run_app(base_url: str, context: AgentContext) -> None:
    params = StdioServerParameters(command=sys.executable, args=[__file__, "--server"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        with context.envelope(agent_name="support-agent", conversation_id="customer-1234"):
            policy = (await session.read_resource("docs://policies/refunds")).contents[0].text
            prompt = await session.get_prompt("answer_question",
                                              {"question": "Can I return order 1234?"})
            status = await session.call_tool("order_status", {"order": 1234})
            client = AsyncOpenAI(base_url=base_url, api_key="sk-offline", max_retries=0)
            reply = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "system", "content": policy},
                          {"role": "user", "content": prompt.messages[0].content.text},
                          {"role": "user", "content": status.content[0].text}])
            print("agent:", reply.choices[0].message.content)


def main() -> None:
    provider = TracerProvider()
    bundles: list[dict] = []
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()
    try:
        with StubServer() as stub:
            asyncio.run(run_app(stub.openai_base_url, AgentContext()))
    finally:
        uninstrument()
        provider.shutdown()
    for bundle in bundles:
        print(json.dumps({
            "context_id": bundle["context_envelope"]["context_id"],
            "items": [(i["item_id"], i["context_kind"], i.get("content_mode"),
                       (i.get("source_refs") or [{}])[0].get("external_mappings"))
                      for i in bundle["context_items"] if i["item_id"].startswith("mcp_")],
            "model_calls": len(bundle["context_envelope"].get("assembly_refs", [])),
            "rebuild": bundle["rebuild"]["status"],
        }, indent=2))


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--server"] else main()
