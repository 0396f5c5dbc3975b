"""An OpenAI Agents SDK app written as the SDK's docs write one (a tool, a handoff, a
session, a streamed run), on the loopback stub's Responses API."""

from __future__ import annotations

import asyncio
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

set_tracing_disabled(True)  # no platform key: the SDK's docs advise turning its export off


@function_tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"The weather in {city} is sunny."


# The stub answers "[call:NAME {args}]" in the last user message with that function call.
PARIS = 'What is the weather in Paris? [call:get_weather {"city": "Paris"}]'
SPANISH = "Please answer in Spanish. [call:transfer_to_spanish_agent]"
ROME = 'And in Rome? [call:get_weather {"city": "Rome"}]'


def build(base_url: str) -> Agent[Any]:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
    spanish = Agent(name="Spanish agent", instructions="You only speak Spanish.", model=model)
    return Agent(name="Triage agent", instructions="Help the user; hand off Spanish requests.",
                 tools=[get_weather], handoffs=[spanish], model=model)


async def main(base_url: str, session_path: str) -> list[str]:
    agent = build(base_url)
    session = SQLiteSession("conversation-42", session_path)
    outputs = []
    first = await Runner.run(agent, PARIS, session=session)
    outputs.append(str(first.final_output))
    second = await Runner.run(agent, SPANISH, session=session)
    outputs.append(str(second.final_output))
    streamed = Runner.run_streamed(agent, ROME, session=session)
    async for _event in streamed.stream_events():
        pass
    outputs.append(str(streamed.final_output))
    return outputs


def run(base_url: str, session_path: str) -> list[str]:
    return asyncio.run(main(base_url, session_path))
