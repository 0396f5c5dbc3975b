"""The MCP instrumentor on a real MCP client session with a stdio server (the MCP SDK's
``MCPServer``, started by the test): a resource read and a prompt fetched, then put into an
OpenAI call on the loopback stub, all inside the application's envelope; and the same server
over Streamable HTTP and over the legacy HTTP+SSE transport on loopback, for the MCP session
id."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from framework_helpers import framework_on
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_docs_server import POLICY, SHIPPING
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
    # on the wire, the prompt name is OpenTelemetry's gen_ai.prompt.name (mapped back above)
    prompt_events = [e for s in tel.spans() for e in s.events
                     if e.name == "context.item.added"
                     and str(e.attributes.get("context.item.id", "")).startswith("mcp_prompt:")]
    assert prompt_events and all(
        e.attributes["gen_ai.prompt.name"] == "answer_question"
        and "context.source.native.mcp.prompt_name" not in e.attributes
        for e in prompt_events)
    # the JSON-RPC ids of the three requests (the session numbers its requests from 1, and
    # initialize is the first); stdio has no MCP session: no session id
    assert [i["source_refs"][0]["external_mappings"].get("mcp.jsonrpc_request_id")
            for i in (resource, prompt)] == ["2", "3"]
    assert not any("mcp.mcp_session_id" in r["external_mappings"]
                   for i in mcp_items for r in i["source_refs"])
    (tool,) = [i for i in mcp_items if i["item_id"].startswith("mcp_tool:")]
    assert tool["context_kind"] == "tool_result"
    assert tool["content_mode"] == "tool_result_ref"
    assert tool["digest"].startswith("hmac-sha256:")
    assert tool["source_refs"][0]["external_mappings"] == {
        "mcp.tool_name": "order_status", "mcp.server_id": "Docs",
        "mcp.jsonrpc_request_id": "4"}
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _served(transport: str, path: str) -> Iterator[str]:
    """The docs server over ``transport`` on loopback; its endpoint URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, transport, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the MCP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["http", "sse"])
def remote_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The docs server over Streamable HTTP or the legacy HTTP+SSE transport: (transport,
    endpoint URL)."""
    with _served(request.param, "/mcp" if request.param == "http" else "/sse") as url:
        yield request.param, url


@contextlib.asynccontextmanager
async def _connected(transport: str, url: str, sessions: list[str]) -> Any:
    """A client session over ``transport``; ``sessions``: the session ids the app itself sees
    (the ``Mcp-Session-Id`` header its HTTP client receives, or what the SSE client reports
    to ``on_session_created``)."""
    import httpx2

    async def seen(response: Any) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in sessions:
            sessions.append(sid)

    async with contextlib.AsyncExitStack() as stack:
        if transport == "http":
            http = await stack.enter_async_context(
                httpx2.AsyncClient(event_hooks={"response": [seen]}))
            read, write = await stack.enter_async_context(
                streamable_http_client(url, http_client=http))
        else:
            read, write = await stack.enter_async_context(
                sse_client(url, on_session_created=sessions.append))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        yield session


async def _remote_app(transport: str, url: str, envelope: Any, sessions: list[str]) -> str:
    """Read the policy and call the tool over ``transport``."""
    async with _connected(transport, url, sessions) as session:
        with envelope():
            resource = await session.read_resource(URI)
            await session.call_tool("order_status", {"order_id": ORDER})
    return str(resource.contents[0].text)


def test_http_items_carry_the_mcp_session_id(mcp_on: CapturedTelemetry,
                                            remote_server: tuple[str, str]) -> None:
    tel = mcp_on
    sessions: list[str] = []
    policy = asyncio.run(_remote_app(*remote_server, tel.agent_context.envelope, sessions))
    assert policy == POLICY
    (session_id,) = sessions  # one session, as the server named it
    (bundle,) = tel.bundles()
    mcp_items = [i for i in bundle["context_items"] if i["item_id"].startswith("mcp_")]
    assert [(i["context_kind"], i["source_refs"][0]["external_mappings"].get(
        "mcp.mcp_session_id"), i["source_refs"][0]["external_mappings"].get(
        "mcp.jsonrpc_request_id")) for i in mcp_items] == [
        ("external_resource", session_id, "2"), ("tool_result", session_id, "3")]
    # on the wire: OpenTelemetry's own names
    events = [e for s in tel.spans() for e in s.events if e.name == "context.item.added"]
    assert {(e.attributes["mcp.session.id"], e.attributes["jsonrpc.request.id"])
            for e in events} == {(session_id, "2"), (session_id, "3")}


async def _documents_app(base_url: str, transport: str, url: str, envelope: Any,
                         sessions: list[str]) -> tuple[list[str], str]:
    """Call the tool that answers with an embedded resource and a resource link (over stdio,
    or Streamable HTTP), put the embedded policy into a model call: the blocks' types and the
    model's answer."""
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            params = StdioServerParameters(command=sys.executable, args=[SERVER])
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
        else:
            session = await stack.enter_async_context(_connected(transport, url, sessions))
        with envelope():
            result = await session.call_tool("policy_documents", {"topic": "returns"})
            embedded = next(b for b in result.content if b.type == "resource")
            client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
            reply = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "system", "content": embedded.resource.text},
                          {"role": "user", "content": QUESTION}])
    return [b.type for b in result.content], str(reply.choices[0].message.content)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_tool_embedded_resource_and_resource_link_content_modes(
        mcp_on: CapturedTelemetry, transport: str) -> None:
    """A tool result holding an embedded resource and a resource link: two items of the
    resources they carry, content modes ``embedded_resource`` and ``resource_link``, with the
    resource URI, the tool, the server, the request id (and over HTTP the session id); the
    embedded text, placed in a model call, is the block's source; no text unless captured."""
    tel = mcp_on
    sessions: list[str] = []
    with contextlib.ExitStack() as stack:
        url = "" if transport == "stdio" else stack.enter_context(_served(transport, "/mcp"))
        stub = stack.enter_context(StubServer())
        types, answer = asyncio.run(_documents_app(
            stub.openai_base_url, transport, url, tel.agent_context.envelope, sessions))
        (_, body), = stub.requests
    assert (types, answer) == (["resource", "resource_link"], REPLY)
    assert body["messages"][0]["content"] == POLICY

    (bundle,) = tel.bundles()
    items = {i["item_id"]: i for i in bundle["context_items"]
             if i["item_id"].startswith("mcp_")}
    assert len(items) == 2  # one item a block, no loose text item for either
    by_mode = {i["content_mode"]: i for i in items.values()}
    embedded, link = by_mode["embedded_resource"], by_mode["resource_link"]
    session = {} if transport == "stdio" else {"mcp.mcp_session_id": sessions[0]}
    assert len(sessions) == (0 if transport == "stdio" else 1)
    for item, uri in ((embedded, URI), (link, SHIPPING)):
        assert item["item_id"].startswith("mcp_resource:")
        assert item["context_kind"] == "external_resource"
        (source,) = item["source_refs"]
        assert source["uri"] == uri
        assert source["external_mappings"] == {
            "mcp.resource_uri": uri, "mcp.server_id": "Docs",
            "mcp.tool_name": "policy_documents", "mcp.jsonrpc_request_id": "2", **session}
    assert embedded["mime_type"] == "text/plain"
    assert embedded["digest"].startswith("hmac-sha256:")
    assert link["mime_type"] == "text/markdown"
    assert "digest" not in link and "content" not in link  # a link carries no text
    # two resources, two identities
    assert embedded["item_id"] != link["item_id"]
    # the model call's system block is the embedded policy: it names that item
    (assembly,) = bundle["context_assemblies"]
    assert assembly["ordered_blocks"][0]["source_item_refs"] == [embedded["item_id"]]
    # on the wire: OpenTelemetry's MCP names
    added = [e.attributes for s in tel.spans() for e in s.events
             if e.name == "context.item.added" and e.attributes["context.item.id"] in items]
    assert sorted((a["mcp.resource.uri"], a["context.item.content_mode"],
                   a["jsonrpc.request.id"], a.get("mcp.session.id")) for a in added) == sorted(
        [(URI, "embedded_resource", "2", session.get("mcp.mcp_session_id")),
         (SHIPPING, "resource_link", "2", session.get("mcp.mcp_session_id"))])
    text = json.dumps(bundle)
    if tel.agent_context.capture_content:
        assert embedded["content"] == POLICY
    else:
        assert "Refunds are accepted" not in text and "content" not in embedded
