"""The MCP instrumentor on a real MCP client session with a stdio server (the MCP SDK's
``MCPServer``, started by the test): a resource read and a prompt fetched, then put into an
OpenAI call on the loopback stub, all inside the application's envelope."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from framework_helpers import framework_on
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_docs_server import POLICY
from stub_server import REPLY, StubServer

from otel_agent_context.instrumentation.mcp import MCPContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

SERVER = str(Path(__file__).with_name("mcp_docs_server.py"))
URI = "docs://policies/refunds"
QUESTION = "Can I return shoes?"
ORDER = "A-1042"


async def _app(base_url: str, envelope: Any) -> tuple[str, str, str]:
    """Read the policy, fetch the prompt, call a tool, ask the model (as the MCP docs show
    a client)."""
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        with envelope():
            resource = await session.read_resource(URI)
            prompt = await session.get_prompt("answer_question", {"question": QUESTION})
            status = await session.call_tool("order_status", {"order_id": ORDER})
            policy = resource.contents[0].text
            ask = prompt.messages[0].content.text
            tool_text = status.content[0].text
            client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
            reply = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "system", "content": policy},
                          {"role": "user", "content": ask + "\n" + tool_text}])
    return policy, str(reply.choices[0].message.content), tool_text


@pytest.fixture
def mcp_on(capture_setup: Any) -> Iterator[CapturedTelemetry]:
    with framework_on(MCPContextInstrumentor(), capture_setup) as tel:
        yield tel


def test_resource_and_prompt_are_surface_items_with_mcp_ids(mcp_on: CapturedTelemetry
                                                             ) -> None:
    tel = mcp_on
    with StubServer() as stub:
        policy, answer, tool_text = asyncio.run(_app(
            stub.openai_base_url,
            lambda: tel.agent_context.envelope(agent_name="support")))
        (path, body), = stub.requests
    assert (policy, answer) == (POLICY, REPLY)
    assert tool_text == f"Order {ORDER} was delivered on 2026-11-02."
    assert path == "/v1/chat/completions" and body["messages"][0]["content"] == POLICY

    (bundle,) = tel.bundles()  # the reads and the model call in the application's envelope
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "support"
    assert len(bundle["context_envelope"]["assembly_refs"]) == 1  # the model call joined
    mcp_items = [i for i in bundle["context_items"] if i["item_id"].startswith("mcp_")]
    resource = next(i for i in mcp_items if i["item_id"].startswith("mcp_resource:"))
    prompt = next(i for i in mcp_items if i["item_id"].startswith("mcp_prompt:"))
    assert resource["context_kind"] == "external_resource"
    assert resource["mime_type"] == "text/plain"
    assert resource["digest"].startswith("hmac-sha256:")
    (source,) = resource["source_refs"]
    assert source["uri"] == URI
    assert source["external_mappings"]["mcp.resource_uri"] == URI
    assert source["external_mappings"]["mcp.server_id"] == "Docs"
    assert prompt["source_refs"][0]["external_mappings"]["mcp.prompt_name"] == "answer_question"
    (tool,) = [i for i in mcp_items if i["item_id"].startswith("mcp_tool:")]
    assert tool["context_kind"] == "tool_result"
    assert tool["content_mode"] == "tool_result_ref"
    assert tool["digest"].startswith("hmac-sha256:")
    assert tool["source_refs"][0]["external_mappings"] == {"mcp.tool_name": "order_status",
                                                           "mcp.server_id": "Docs"}
    # the model call's blocks name the MCP items whose text they carry (ids only): the
    # user message holds the prompt's text and the tool's result
    (assembly,) = bundle["context_assemblies"]
    system, user = assembly["ordered_blocks"]
    assert system["source_item_refs"] == [resource["item_id"]]
    assert set(user["source_item_refs"]) == {prompt["item_id"], tool["item_id"]}
    text = json.dumps(bundle)
    if tel.agent_context.capture_content:
        assert resource["content"] == POLICY
        assert QUESTION in prompt["content"]
        assert tool["content"] == tool_text
    else:
        assert "Refunds are accepted" not in text and QUESTION not in text
        assert "delivered on" not in text
