"""An MCP server written as the MCP Python SDK's docs write one: a resource, a prompt and a
tool (the test starts it as a subprocess): over stdio, or over Streamable HTTP on loopback with
``http PORT``."""

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import EmbeddedResource, ResourceLink, TextResourceContents

mcp = MCPServer("Docs")

POLICY = "Refunds are accepted within 30 days of delivery with the receipt."
SHIPPING = "docs://policies/shipping"


def _policy() -> str:
    # tests/test_canary.py serves its secret through the resource
    return os.environ.get("MCP_DOCS_POLICY", POLICY)


@mcp.resource("docs://policies/refunds")
def refund_policy() -> str:
    """The refund policy."""
    return _policy()


@mcp.prompt()
def answer_question(question: str) -> str:
    """Answer a customer question with the policies."""
    return f"Answer using our policies. Question: {question}"


@mcp.tool()
def order_status(order_id: str) -> str:
    """Where an order is."""
    return f"Order {order_id} was delivered on 2026-11-02."


@mcp.tool()
def policy_documents(topic: str) -> list[EmbeddedResource | ResourceLink]:
    """The policies on a topic: the refund policy itself, and a link to the shipping one."""
    return [EmbeddedResource(type="resource", resource=TextResourceContents(
                uri="docs://policies/refunds", mime_type="text/plain", text=_policy())),
            ResourceLink(type="resource_link", name="shipping", uri=SHIPPING,
                         mime_type="text/markdown")]


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["sse"]:
        mcp.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run("stdio")
