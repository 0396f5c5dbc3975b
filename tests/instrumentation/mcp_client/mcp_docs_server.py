"""A stdio MCP server written as the MCP Python SDK's docs write one: a resource and a
prompt (the test starts it as a subprocess)."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("Docs")

POLICY = "Refunds are accepted within 30 days of delivery with the receipt."


@mcp.resource("docs://policies/refunds")
def refund_policy() -> str:
    """The refund policy."""
    return POLICY


@mcp.prompt()
def answer_question(question: str) -> str:
    """Answer a customer question with the policies."""
    return f"Answer using our policies. Question: {question}"


if __name__ == "__main__":
    mcp.run("stdio")
