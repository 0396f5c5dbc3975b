"""An ``AgentWorkflow`` handoff as an envelope of scope ``handoff``.

LlamaIndex hands off through a tool: ``AgentWorkflow.get_tools`` gives each agent that may
hand off a ``FunctionTool`` over the module function ``handoff(ctx, to_agent, reason)`` of
``llama_index.core.agent.workflow.multi_agent_workflow`` (made again at every step, from the
module's global, so patching it would work too; no patch is needed: the tool's ``acall`` is a
``dispatcher.span`` with its instance and arguments). The function stores the next agent in the
workflow's context; ``aggregate_tool_results`` switches to it, and the next ``setup_agent``
step (a function span: its event's ``current_agent_name`` and ``input``, the memory's
messages) starts the agent handed to. So:

* the handoff tool's span (``from_agent`` the agent running, ``to_agent`` and ``reason`` its
  arguments) leaves a pending handoff on the turn;
* the next ``setup_agent`` of the agent named turns it into an envelope of scope ``handoff``
  (a refused handoff, an unknown agent, changes no agent and is dropped): ``gen_ai.agent.name``
  the agent handed to, ``context.parent_id`` the sender's envelope (the turn's: ours, or the
  application's that the run joined; or the previous handoff's), ``context.actor_refs``
  ``agent:<from>``, ``agent:<to>``, a child span of the turn's envelope, started when the
  handoff tool was called; a selection (policy and intent ``handoff``, the reason as its
  rationale: content) whose selected items are the reason (a
  ``peer_agent_message``: digest and token estimate, its text only under content capture) and
  the messages that went across (the shared memory's, named as the prompt's blocks name them);
* every later ``run_agent_step`` of that agent (the step that calls the model) has the handoff's
  envelope as the run's envelope, so its model calls are recorded in it: attributed to the
  agent handed to, inside the application's envelope as outside one (``agent_step``). It ends
  at the next handoff or with the turn; the application's envelope is never ended here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..._api import Envelope
from ..._attributes import digest_text
from ..._digest import short_digest
from ..._enums import ContextKind, Scope
from ..._envelope import _ENVELOPE_KEY, _RUN_ENVELOPE
from ..._records import ContextItem
from .._common import message_id as reader_message_id
from .._common import numbered
from .._tokens import estimate_tokens
from ._items import message_id, message_role, message_text
from ._state import STATE

__all__ = ["Pending", "agent_step", "end_handoffs", "is_handoff_tool", "pending_handoff",
           "setup_agent"]

_HANDOFF_MODULE = "llama_index.core.agent.workflow.multi_agent_workflow"
_KINDS = {"user": ContextKind.USER_MESSAGE, "system": ContextKind.SYSTEM_PROMPT,
          "developer": ContextKind.DEVELOPER_INSTRUCTION, "tool": ContextKind.TOOL_RESULT}


class Pending:
    """A handoff the tool accepted or refused: known when the next agent starts."""

    __slots__ = ("from_agent", "reason", "start_ns", "to_agent")

    def __init__(self, from_agent: str | None, to_agent: str, reason: str,
                 start_ns: int) -> None:
        self.from_agent = from_agent
        self.to_agent = to_agent
        self.reason = reason
        self.start_ns = start_ns


def is_handoff_tool(tool: Any) -> bool:
    """``tool`` is an ``AgentWorkflow``'s handoff tool (a ``FunctionTool`` over its function)."""
    fn = getattr(tool, "_async_fn", None)
    return (getattr(fn, "__name__", None) == "handoff"
            and getattr(fn, "__module__", None) == _HANDOFF_MODULE)


def pending_handoff(turn: Any, bound_args: Any) -> Pending | None:
    """The handoff the tool is called for (its ``to_agent`` and ``reason``)."""
    args = getattr(bound_args, "arguments", {}).get("kwargs")
    if not isinstance(args, dict):
        return None
    to_agent, reason = args.get("to_agent"), args.get("reason")
    if not isinstance(to_agent, str):
        return None
    return Pending(turn.agent, to_agent, reason if isinstance(reason, str) else "",
                   time.time_ns())


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _call_message_id(role: str, text: str, calls: Any) -> str | None:
    """An assistant message asking for tool calls: the id the OpenAI instrumentor gives its
    block (the chat completions form LlamaIndex's OpenAI models send), else None."""
    if not isinstance(calls, list) or not calls:
        return None
    full = text
    for call in calls:
        fn = _field(call, "function")
        full += f"\n{_field(fn, 'name')}({_field(fn, 'arguments') or ''})"
    return reader_message_id(role, full)


def _ids(turn: Any, messages: Sequence[Any]) -> list[str]:
    """The ids the next model call's blocks give these messages (the turn's names, read
    without taking them; a tool result by its call id; a tool call as the OpenAI
    instrumentor names it), else their own; a repeat of one (the same tool called alike
    twice) ``<id>#2``, as the call's blocks name it."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for m in messages:
        role, text = message_role(m), message_text(m)
        extra = getattr(m, "additional_kwargs", None)
        extra = extra if isinstance(extra, dict) else {}
        call_id = extra.get("tool_call_id") if role == "tool" else None
        if isinstance(call_id, str) and call_id:
            out.append(f"tool_result:{call_id}")
            continue
        called = _call_message_id(role, text, extra.get("tool_calls"))
        if called is not None:
            out.append(called)
            continue
        n = seen[(role, text)] = seen.get((role, text), 0) + 1
        names = turn.known.get((role, text)) or ()
        out.append(names[n - 1] if n <= len(names) else message_id(m))
    return numbered(out)


def _item(item_id: str, kind: ContextKind, text: str) -> ContextItem:
    return ContextItem(item_id=item_id, context_kind=kind, content=text or None,
                       token_estimate=estimate_tokens(text),
                       byte_size=len(text.encode("utf-8", "surrogatepass")),
                       digest=digest_text(text))


def _open(turn: Any, pending: Pending, messages: Sequence[Any]) -> Envelope:
    sender = turn.agent_env or turn.env
    actors = [f"agent:{a}" for a in (pending.from_agent, pending.to_agent) if a]
    # a child of the turn's envelope span (not the current span: see _RUN_ENVELOPE)
    token = otel_context.attach(trace.set_span_in_context(turn.env.span))
    try:
        env = STATE.ctx.envelope(scope=Scope.HANDOFF, agent_name=pending.to_agent,
                                 parent_id=sender.context_id, actor_refs=actors,
                                 start_time=pending.start_ns)
    finally:
        otel_context.detach(token)
    if pending.from_agent:
        env.span.set_attribute("llama_index.handoff.from_agent", pending.from_agent)
    reason = pending.reason
    sel = env.selection(policy="handoff", intent="handoff", rationale=reason or None,
                        start_time=pending.start_ns)
    rank = 1
    if reason:
        sel.selected(_item("llama_index_handoff:" + short_digest(
            pending.from_agent or "", pending.to_agent, reason, length=16),
            ContextKind.PEER_AGENT_MESSAGE, reason), rank=rank)
        rank += 1
    for item_id, m in zip(_ids(turn, messages), messages, strict=True):
        role = message_role(m)
        sel.selected(_item(item_id, _KINDS.get(role, ContextKind.SESSION_HISTORY),
                           message_text(m)), rank=rank)
        rank += 1
    sel.stop()
    return env


def setup_agent(turn: Any, bound_args: Any) -> None:
    """An agent starts (an ``AgentInput``): the end of a pending handoff to it."""
    ev = getattr(bound_args, "arguments", {}).get("ev")
    name = getattr(ev, "current_agent_name", None)
    if not isinstance(name, str):
        return
    pending, turn.pending = turn.pending, None
    if pending is not None and name == pending.to_agent and name != turn.agent:
        previous = turn.agent_env
        messages = getattr(ev, "input", None)
        turn.agent_env = _open(turn, pending, messages if isinstance(messages, list) else [])
        if previous is not None:
            previous.stop()
    turn.agent = name


def agent_step(turn: Any, bound_args: Any) -> Any:
    """An agent's step (its model call) after a handoff to it: the handoff's envelope is the
    run's for the step. The tokens to reset, or None.

    When the run joined the application's envelope (made current by its ``with
    ctx.envelope(...)``, in the OpenTelemetry context, where it wins over the run's), that
    envelope is taken out of the step's OpenTelemetry context (nothing else in it changes:
    the current span stays), so the step sees the handoff's envelope as it does when the run's
    envelope is ours; the step's span ends in the context it started in (the dispatcher's
    wrapper awaits the step in one task)."""
    env = turn.agent_env
    if env is None or env._ended:
        return None
    ev = getattr(bound_args, "arguments", {}).get("ev")
    if getattr(ev, "current_agent_name", None) != turn.agent:
        return None
    outer = None
    if isinstance(otel_context.get_value(_ENVELOPE_KEY), Envelope):
        outer = otel_context.attach(otel_context.set_value(_ENVELOPE_KEY, None))
    return _RUN_ENVELOPE.set(env), outer


def reset_step(tokens: Any) -> None:
    run, outer = tokens
    with contextlib.suppress(ValueError):  # reset from another context: leave it
        _RUN_ENVELOPE.reset(run)
    if outer is not None:
        otel_context.detach(outer)


def end_handoffs(turn: Any, error: BaseException | None) -> None:
    """The turn ends: so does the envelope of the last handoff."""
    env, turn.agent_env = turn.agent_env, None
    turn.pending = None
    if env is None:
        return
    if error is None:
        env.stop()
    else:
        env.fail(error)
