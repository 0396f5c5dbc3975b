"""A LlamaIndex agent as its docs write one, offline: a ``FunctionAgent`` with a function
tool, run twice in one ``Context`` (the second run sees the first in its memory), its
function-calling model speaking the OpenAI chat API through the ``openai`` client to the
loopback stub (LlamaIndex's ``FunctionCallingLLM`` pattern, since ``llama-index-llms-openai``
pins ``openai<3``; the example's, ``examples/llama_index_agents_app.py``). The stub answers
``[call:NAME {args}]`` with that tool call, ``[react:NAME {args}]`` with that ReAct action.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, CodeActAgent, FunctionAgent, ReActAgent
from llama_index.core.memory import Memory

from otel_agent_context import AgentContext, current_envelope

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from llama_index_agents_app import OpenAIToolsLLM, order_status  # noqa: E402

ORDER = "A-1042"
FIRST = f'Where is my order? [call:order_status {{"order_id": "{ORDER}"}}]'
SECOND = "Thanks. When will it arrive?"


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


async def run_workflow(base_url: str, question: str = HANDOFF,
                       chat_history: list[Any] | None = None) -> str:
    """A two-agent ``AgentWorkflow``: the triage agent hands off to the order agent
    (``chat_history``: the conversation before the question, as the application gives it)."""
    llm = OpenAIToolsLLM(api_base=base_url)
    triage = FunctionAgent(name="Triage agent", description="Routes questions.", tools=[],
                           llm=llm, system_prompt="You route questions.",
                           can_handoff_to=["Order agent"], streaming=False)
    workflow = AgentWorkflow(agents=[triage, make_agent(base_url)], root_agent="Triage agent")
    return str(await workflow.run(user_msg=question, chat_history=chat_history))


SESSION = "support-7"


async def run_workflow_in_envelope(base_url: str, ctx: AgentContext,
                                   question: str = HANDOFF) -> tuple[str, bool]:
    """The same workflow run inside the application's own envelope (``with ctx.envelope``,
    as an app that records its own turn writes it); after the run the app records on in it.
    The answer, and whether the app's envelope was still the current one after the run."""
    with ctx.envelope(scope="turn", agent_name="Support desk",
                      conversation_id=SESSION) as env:
        answer = await run_workflow(base_url, question)
        still_current = current_envelope() is env
        env.missing(question="Which carrier?", needed_for="delivery_date", severity="low")
    return answer, still_current


ASK_ORDERS = ('Where is my order? [call:ask_order_agent '
              '{"question": "Where is order A-1042?"}]')


async def run_agent_as_tool(base_url: str) -> str:
    """An agent used as a tool (the pattern LlamaIndex's multi-agent docs show beside
    ``AgentWorkflow``): the triage agent's tool runs the order agent and returns its answer."""
    orders = make_agent(base_url)

    async def ask_order_agent(question: str) -> str:
        """Ask the order agent about an order."""
        return str(await orders.run(user_msg=question))

    triage = FunctionAgent(name="Triage agent", description="Routes questions.",
                           tools=[ask_order_agent], llm=OpenAIToolsLLM(api_base=base_url),
                           system_prompt="You route questions.", streaming=False)
    return str(await triage.run(user_msg=ASK_ORDERS))


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


CODE = f'Where is my order? [execute:order_status("{ORDER}")]'


async def execute(code: str) -> str:
    """The code executor a ``CodeActAgent`` is given (its docs' pattern: run the code with
    the app's functions in scope, return what it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"order_status": order_status})  # noqa: S102 - the stub's own code
    return out.getvalue()


async def run_codeact(base_url: str) -> str:
    """A ``CodeActAgent``: the model writes code calling the tool, the executor runs it, the
    model answers from its result (the stub answers ``[execute:CODE]`` so)."""
    agent = CodeActAgent(name="Code agent", tools=[order_status], code_execute_fn=execute,
                         llm=OpenAIToolsLLM(api_base=base_url), streaming=False)
    return str(await agent.run(user_msg=CODE))


if __name__ == "__main__":  # under ``opentelemetry-instrument`` (test_frameworks_subprocess)
    import asyncio
    import os

    url = os.environ["STUB_URL"] + "/v1"
    print("workflow:", asyncio.run(run_workflow(url)))
    answer, still_current = asyncio.run(run_workflow_in_envelope(url, AgentContext()))
    print("in envelope:", answer, still_current)
    print("react:", " | ".join(asyncio.run(run_react(url))))
