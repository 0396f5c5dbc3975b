"""Offline LlamaIndex agents (an ``AgentWorkflow`` whose triage agent hands off to an order
agent, then a ``ReActAgent`` with a tool), instrumented with one call, printing what each
run recorded.

    python examples/llama_index_agents_app.py   # needs: pip install 'otel-agent-context[examples]'

Written as LlamaIndex's agent docs write them: ``FunctionAgent(name=..., tools=[...],
can_handoff_to=[...])`` in an ``AgentWorkflow(agents=[...], root_agent=...)``, and
``ReActAgent(tools=[...])``, each run with ``await agent.run(user_msg=...)``. Offline: the
chat model is LlamaIndex's ``FunctionCallingLLM`` pattern speaking the OpenAI chat API
through the ``openai`` client to the bundled stub on loopback (``llama-index-llms-openai``
pins ``openai<3``; with it installed, ``OpenAI(model=..., api_base=...)`` is the usual choice
and is recorded the same way). The stub decides by the question: ``[call:NAME {args}]`` asks
it for that tool call, ``[react:NAME {args}]`` for that action in the ReAct text format.

What comes out: the workflow's run is an envelope of scope ``turn`` named after its root
agent, holding the triage agent's model call; the handoff is an envelope of scope
``handoff`` (the agent handed to, a child of the run's, its actors ``agent:<from>`` and
``agent:<to>``) whose selection is the reason and the messages that went across, and which
holds the order agent's model call. The ReAct agent's run is one ``turn`` with both of its
model calls (the action, the answer after the tool's observation).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import ChatMessage, ChatResponse, LLMMetadata, MessageRole
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index_app import run_offline  # the engines example, beside this one
from openai import AsyncOpenAI

MODEL = "gpt-4o-mini"


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


async def run_app(api_base: str) -> None:
    llm = OpenAIToolsLLM(api_base=api_base)
    triage = FunctionAgent(name="Triage agent", description="Routes questions.",
                           llm=llm, system_prompt="You route questions.",
                           can_handoff_to=["Order agent"], streaming=False)
    orders = FunctionAgent(name="Order agent", description="Answers about orders.",
                           tools=[order_status], llm=llm,
                           system_prompt="You answer questions about orders.", streaming=False)
    workflow = AgentWorkflow(agents=[triage, orders], root_agent="Triage agent")
    print("workflow:", await workflow.run(user_msg=(
        'Where is my order? [call:handoff {"to_agent": "Order agent", '
        '"reason": "an order question"}]')))

    react = ReActAgent(name="ReAct order agent", tools=[order_status], llm=llm,
                       streaming=False)
    print("react:", await react.run(
        user_msg='Where is order A-1042? [react:order_status {"order_id": "A-1042"}]'))


def summary(bundle: dict) -> dict:
    env = bundle["context_envelope"]
    handed = [s for s in bundle.get("context_selections", []) if s.get("intent") == "handoff"]
    return {
        "context_id": env["context_id"],
        "scope": env["scope"],
        "agent": env.get("metadata", {}).get("gen_ai.agent.name"),
        "parent_id": env.get("parent_id"),
        "actors": env.get("actor_refs", []),
        "handed_over": [s.get("selected_item_refs", []) for s in handed],
        "model_calls": len(bundle.get("context_assemblies", [])),
        "rebuild": bundle["rebuild"]["status"],
    }


def main() -> None:
    run_offline(lambda url: asyncio.run(run_app(url)), summary)


if __name__ == "__main__":
    main()
