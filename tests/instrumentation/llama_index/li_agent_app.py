"""A LlamaIndex agent as its docs write one, offline: a ``FunctionAgent`` with a function
tool, run twice in one ``Context`` (the second run sees the first in its memory), its
function-calling model speaking the OpenAI chat API through the ``openai`` client to the
loopback stub (LlamaIndex's ``FunctionCallingLLM`` pattern, since ``llama-index-llms-openai``
pins ``openai<3``). The stub answers ``[call:NAME {args}]`` with that tool call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import ChatMessage, ChatResponse, LLMMetadata, MessageRole
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.memory import Memory
from openai import AsyncOpenAI

MODEL = "gpt-4o-mini"
ORDER = "A-1042"
FIRST = f'Where is my order? [call:order_status {{"order_id": "{ORDER}"}}]'
SECOND = "Thanks. When will it arrive?"


def order_status(order_id: str) -> str:
    """Where an order is."""
    return f"Order {order_id} was delivered on 2026-11-02."


def _wire(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role.value, "content": message.content or ""}
    if message.role == MessageRole.TOOL:
        out["tool_call_id"] = message.additional_kwargs.get("tool_call_id")
    calls = message.additional_kwargs.get("tool_calls")
    if calls:
        out["tool_calls"] = calls
    return out


class OpenAIToolsLLM(FunctionCallingLLM):
    """A function-calling chat model behind an OpenAI-compatible chat completions endpoint."""

    api_base: str
    _client: AsyncOpenAI | None = PrivateAttr(default=None)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL, is_chat_model=True, is_function_calling_model=True)

    def _prepare_chat_with_tools(self, tools: Sequence[Any], user_msg: Any = None,
                                 chat_history: list[ChatMessage] | None = None,
                                 verbose: bool = False, allow_parallel_tool_calls: bool = False,
                                 tool_required: bool = False, **kwargs: Any) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(user_msg if isinstance(user_msg, ChatMessage)
                            else ChatMessage(role="user", content=user_msg))
        return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools]}

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> list[ToolSelection]:
        return [ToolSelection(tool_id=c["id"], tool_name=c["function"]["name"],
                              tool_kwargs=json.loads(c["function"]["arguments"] or "{}"))
                for c in response.message.additional_kwargs.get("tool_calls") or ()]

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        if self._client is None:
            self._client = AsyncOpenAI(base_url=self.api_base, api_key="sk-offline",
                                       max_retries=0)
        extra = {"tools": kwargs["tools"]} if kwargs.get("tools") else {}
        reply = await self._client.chat.completions.create(
            model=MODEL, messages=[_wire(m) for m in messages], **extra)
        message = reply.choices[0].message
        calls = [c.model_dump(include={"id", "type", "function"})
                 for c in message.tool_calls or ()]
        return ChatResponse(message=ChatMessage(
            role="assistant", content=message.content or "",
            additional_kwargs={"tool_calls": calls} if calls else {}))

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        raise NotImplementedError("async only")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError("chat only")

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError("chat only")

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        raise NotImplementedError("not streamed")

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        raise NotImplementedError("not streamed")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError("not streamed")

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> Any:
        raise NotImplementedError("not streamed")


def make_agent(base_url: str) -> FunctionAgent:
    return FunctionAgent(name="Order agent", description="Answers about orders.",
                         tools=[order_status], llm=OpenAIToolsLLM(api_base=base_url),
                         system_prompt="You answer questions about orders.", streaming=False)


async def run(base_url: str) -> list[str]:
    """Two runs of the agent over one memory: the tool call, then a follow-up."""
    agent = make_agent(base_url)
    memory = Memory.from_defaults(session_id="orders-42", token_limit=4000)
    return [str(await agent.run(user_msg=q, memory=memory)) for q in (FIRST, SECOND)]


REASON = "an order question"
HANDOFF = ('Where is my order? [call:handoff {"to_agent": "Order agent", '
           f'"reason": "{REASON}"}}]')


async def run_workflow(base_url: str, question: str = HANDOFF) -> str:
    """A two-agent ``AgentWorkflow``: the triage agent hands off to the order agent."""
    llm = OpenAIToolsLLM(api_base=base_url)
    triage = FunctionAgent(name="Triage agent", description="Routes questions.", tools=[],
                           llm=llm, system_prompt="You route questions.",
                           can_handoff_to=["Order agent"], streaming=False)
    workflow = AgentWorkflow(agents=[triage, make_agent(base_url)], root_agent="Triage agent")
    return str(await workflow.run(user_msg=question))


REACT = f'Where is my order? [react:order_status {{"order_id": "{ORDER}"}}]'


def make_react_agent(base_url: str) -> ReActAgent:
    """A ``ReActAgent`` (its tools described in its prompt, its calls parsed from the reply
    text: the stub answers ``[react:NAME {args}]`` in that format)."""
    return ReActAgent(name="Order agent", description="Answers about orders.",
                      tools=[order_status], llm=OpenAIToolsLLM(api_base=base_url),
                      streaming=False)


async def run_react(base_url: str) -> list[str]:
    """Two runs of the ReAct agent over one memory: the tool call, then a follow-up."""
    agent = make_react_agent(base_url)
    memory = Memory.from_defaults(session_id="orders-43", token_limit=4000)
    return [str(await agent.run(user_msg=q, memory=memory)) for q in (REACT, SECOND)]
