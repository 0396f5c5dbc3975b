"""An MCP server written as the MCP Python SDK's docs write one: a resource, a prompt and a
tool (the test starts it as a subprocess): over stdio, or over Streamable HTTP on loopback with
``http PORT``."""

import os
import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("Docs")

POLICY = "Refunds are accepted within 30 days of delivery with the receipt."


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


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["sse"]:
        mcp.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run("stdio")
