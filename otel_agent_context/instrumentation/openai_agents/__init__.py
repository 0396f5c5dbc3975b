"""Context instrumentation for the OpenAI Agents SDK (``openai-agents``).

    from otel_agent_context.instrumentation.openai_agents import OpenAIAgentsContextInstrumentor

    OpenAIAgentsContextInstrumentor().instrument()

or ``opentelemetry-instrument python agent.py`` (entry point ``agent_context_openai_agents``).

What it records: each ``Runner.run`` / ``Runner.run_sync`` / ``Runner.run_streamed`` is one
envelope (scope ``turn``) with ``gen_ai.agent.name`` = the starting agent's name and
``gen_ai.conversation.id`` = the session's ``session_id`` (or the run's ``conversation_id``).
The envelope is current for the whole run, so the model calls the SDK makes (through the
``openai`` client, recorded by the OpenAI context instrumentor) join it instead of opening
one loose envelope each. A streamed run's envelope ends when its run loop task ends. An
envelope the application already made current is joined, never doubled; a run started inside
a run (an agent used as a tool, a guardrail's judge) is an envelope of its own, a child of
the outer run's (scope ``tool_invocation`` for a tool call, else ``task``).

Mechanism: ``AgentRunner.run`` and ``AgentRunner.run_streamed`` are wrapped when
``agents.run`` is imported (a post-import hook), so instrumenting imports nothing;
``run_sync`` goes through ``run``. The SDK's own tracing is left as configured (on,
replaced, or disabled): nothing here depends on it. The run's envelope is current in the
OpenTelemetry context for the run, so what the run starts (the official agents
instrumentor's workflow span, the model calls) is in its trace, under its span.

A handoff is an envelope of scope ``handoff`` (:mod:`._handoff`): the history that went
across as selected items, what the handoff's ``input_filter`` removed as omitted items.
A guardrail tripwire that ends a run (:mod:`._guardrails`) is a policy ref of the run's
envelope and a missing-context record of severity ``blocking`` naming what it blocked.
Not yet recorded (see ``docs/frameworks.md``): session history items with one identity
across turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any

from opentelemetry import context as otel_context

from ..._api import Envelope, current_envelope
from ..._enums import Scope
from ..._envelope import _ENVELOPE_KEY
from .._lazy_patch import LazyInstrumentor, LazyPatches, Switch, internal_failure
from ._guardrails import record_rejection, record_tripwire
from ._handoff import filter_name, record_handoff

__all__ = ["OpenAIAgentsContextInstrumentor"]

_log = logging.getLogger("otel_agent_context")

_instruments = ("openai-agents >= 0.24, < 1",)

_MODULE = "agents.run"
_HANDOFF_MODULE = "agents.run_internal.turn_resolution"
_TOOL_GUARDRAILS_MODULE = "agents.tool_guardrails"


_STATE = Switch()


def _internal_failure(what: str) -> None:
    internal_failure("OpenAI Agents", what)


def _conversation(kwargs: dict[str, Any]) -> str | None:
    session = kwargs.get("session")
    sid = getattr(session, "session_id", None) if session is not None else None
    if sid is None:
        sid = kwargs.get("conversation_id")
    return str(sid) if sid is not None else None


#: The envelope of the SDK run under way (ours), to tell a run started inside it (an agent
#: used as a tool, a guardrail's judge) from one inside the application's own envelope.
_AGENT_RUN: contextvars.ContextVar[Envelope | None] = contextvars.ContextVar(
    "otel_agent_context.openai_agents.run", default=None)


def _tool_call_id(kwargs: dict[str, Any]) -> str | None:
    """The tool call an ``Agent.as_tool`` run answers: the SDK runs it with a ToolContext."""
    call_id = getattr(kwargs.get("context"), "tool_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _open(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Envelope | None:
    """A new run envelope, or None (instrumentation off, or the application's envelope
    current: joined). A run inside another SDK run (an agent used as a tool, a judge run by a
    guardrail) is its own envelope, a child of the outer run's: scope ``tool_invocation``
    when it answers a tool call, else ``task``; its model calls are not the outer agent's."""
    ctx = _STATE.ctx
    if ctx is None:
        return None
    outer = current_envelope()
    if outer is not None and outer is not _AGENT_RUN.get():
        return None
    try:
        agent = args[0] if args else kwargs.get("starting_agent")
        name = getattr(agent, "name", None)
        model = getattr(agent, "model", None)
        name = name if isinstance(name, str) and name else None
        model = model if isinstance(model, str) else None
        if outer is None:
            return ctx.envelope(scope=Scope.TURN, agent_name=name,
                                conversation_id=_conversation(kwargs), model=model)
        call_id = _tool_call_id(kwargs)
        # its span: a child of the current one (the outer run's envelope span, or what runs
        # the tool under it, e.g. the official instrumentor's execute_tool span)
        return ctx.envelope(
            scope=Scope.TOOL_INVOCATION if call_id else Scope.TASK, agent_name=name,
            parent_id=outer.context_id, model=model,
            conversation_id=_conversation(kwargs),  # else the outer run's
            runtime_refs=(f"tool_call:{call_id}",) if call_id else ())
    except Exception:
        _internal_failure("run start")
        return None


def _close(env: Envelope, error: BaseException | None) -> None:
    try:
        if error is not None:
            record_tripwire(env, error)
        if error is None:
            env.stop()
        else:
            env.fail(error)
    except Exception:
        _internal_failure("run end")


def _enter(env: Envelope) -> tuple[object, contextvars.Token[Envelope | None]]:
    """Make the run's envelope current in the OpenTelemetry context (its span the parent of
    what the run starts: the official agents instrumentor's workflow span, the model calls
    under its agent span, the application's own spans), on this task: ``run`` ends on the
    task it started on, ``run_streamed``'s loop task copies the context when created."""
    run = otel_context.set_value(_ENVELOPE_KEY, env, env._ctx)
    return otel_context.attach(run), _AGENT_RUN.set(env)


def _leave(tokens: tuple[object, contextvars.Token[Envelope | None]]) -> None:
    otel_token, run_token = tokens
    with contextlib.suppress(ValueError):
        _AGENT_RUN.reset(run_token)
    otel_context.detach(otel_token)  # type: ignore[arg-type]


def _joined() -> contextvars.Token[Envelope | None] | None:
    """A run that joined the application's envelope: that envelope counts as the SDK run
    under way, so a run started inside it (an agent used as a tool) is an envelope of its own
    rather than joining it too. The token to reset, or None (nothing joined)."""
    if _STATE.ctx is None:
        return None
    env = current_envelope()
    if env is None or env is _AGENT_RUN.get():
        return None
    return _AGENT_RUN.set(env)


async def _wrap_run(wrapped: Any, instance: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    env = _open(args, kwargs)
    if env is None:
        joined = _joined()
        if joined is None:
            return await wrapped(*args, **kwargs)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            with contextlib.suppress(ValueError):
                _AGENT_RUN.reset(joined)
    tokens = _enter(env)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as error:
        _close(env, error)
        raise
    finally:
        _leave(tokens)
    _close(env, None)
    return result


async def _wrap_handoff(wrapped: Any, instance: Any, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    ctx = _STATE.ctx
    if ctx is not None:
        try:
            record_handoff(ctx, kwargs, result, filter_name(kwargs))
        except Exception:
            _internal_failure("handoff")
    return result


def _wrap_run_streamed(wrapped: Any, instance: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
    env = _open(args, kwargs)
    if env is None:
        joined = _joined()  # set before the run loop task copies the context
        try:
            return wrapped(*args, **kwargs)
        finally:
            if joined is not None:
                _AGENT_RUN.reset(joined)
    # the run loop task copies this context when it is created: its model calls join
    tokens = _enter(env)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _close(env, error)
        raise
    finally:
        _leave(tokens)
    task = getattr(result, "run_loop_task", None)
    if task is None:
        _close(env, None)
        return result

    def _done(done: Any) -> None:
        # a cancelled run did not complete (as a cancelled Runner.run fails its envelope)
        error = asyncio.CancelledError() if done.cancelled() else done.exception()
        _close(env, error)

    try:
        task.add_done_callback(_done)
    except Exception:
        _internal_failure("streamed run")
        _close(env, None)
    return result


def _guardrail_wrapper(kind: str) -> Any:
    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
        output = await wrapped(*args, **kwargs)
        env = current_envelope() if _STATE.ctx is not None else None
        if env is not None:
            try:
                data = args[0] if args else kwargs.get("data")
                record_rejection(env, kind, instance, data, output)
            except Exception:
                _internal_failure("tool guardrail")
        return output
    return wrapper


def _tool_input_guardrail(module: Any) -> Any:
    return getattr(module, "ToolInputGuardrail", None)


def _tool_output_guardrail(module: Any) -> Any:
    return getattr(module, "ToolOutputGuardrail", None)


def _module(module: Any) -> Any:
    return module


def _runner(module: Any) -> Any:
    return getattr(module, "AgentRunner", None)


_PATCHES = LazyPatches({
    _MODULE: [(_runner, "run", _wrap_run), (_runner, "run_streamed", _wrap_run_streamed)],
    _HANDOFF_MODULE: [(_module, "execute_handoffs", _wrap_handoff)],
    _TOOL_GUARDRAILS_MODULE: [
        (_tool_input_guardrail, "run", _guardrail_wrapper("tool_input")),
        (_tool_output_guardrail, "run", _guardrail_wrapper("tool_output"))],
}, _STATE.on)


class OpenAIAgentsContextInstrumentor(LazyInstrumentor):
    """Records each OpenAI Agents SDK run as an envelope (see the module doc).

    ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and
    ``capture_content``, or a ready ``agent_context`` instead.
    """

    _instruments = _instruments
    _switch = _STATE
    _patches = _PATCHES
