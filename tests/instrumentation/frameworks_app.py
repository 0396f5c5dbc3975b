"""An unmodified app using the OpenAI Agents SDK and an MCP client session (as their docs
write them), for ``opentelemetry-instrument python frameworks_app.py``: it knows nothing of
otel-agent-context. ``STUB_URL`` is the loopback stub of the model APIs."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE / "openai_agents"), str(HERE / "mcp_client")]

import agents_app  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

SERVER = str(HERE / "mcp_client" / "mcp_docs_server.py")


async def mcp_then_model(base_url: str) -> str:
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        policy = (await session.read_resource("docs://policies/refunds")).contents[0].text
        status = await session.call_tool("order_status", {"order_id": "A-7"})
        client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
        reply = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "system", "content": policy},
                                           {"role": "user", "content": status.content[0].text}])
        return str(reply.choices[0].message.content)


def main() -> None:
    base_url = os.environ["STUB_URL"] + "/v1"
    with tempfile.TemporaryDirectory() as tmp:
        outputs = agents_app.run(base_url, str(Path(tmp) / "session.db"))
    print("agents:", " | ".join(outputs))
    print("mcp:", asyncio.run(mcp_then_model(base_url)))


if __name__ == "__main__":
    main()
