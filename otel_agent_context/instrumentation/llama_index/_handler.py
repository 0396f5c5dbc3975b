"""The span handler on LlamaIndex's root dispatcher.

LlamaIndex calls ``span_enter`` / ``span_exit`` / ``span_drop`` of every span handler around
each ``dispatcher.span`` method (query and chat engines, retrievers, node postprocessors,
synthesizers...), with the instance, the bound arguments and the result, in the context the
method runs in. This module is imported only once ``llama_index_instrumentation`` is.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any

from llama_index_instrumentation.span_handlers import BaseSpanHandler
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..._api import current_envelope
from ..._enums import Scope
from ._handoff import agent_step, is_handoff_tool, pending_handoff, reset_step, setup_agent
from ._state import STATE, TURN, failed
from ._turn import Turn

__all__ = ["make_handler"]

_ENGINE, _RETRIEVE, _POST, _SYNTH = "engine", "retrieve", "postprocess", "synthesize"
_STREAM = "stream"  # a streamed chat answer written to the memory: the turn's real end
_TOOL = "tool"  # a tool's call: an AgentWorkflow's handoff (_handoff)
_STEP = "step"  # an agent's step after a handoff: the handoff's envelope current
_CALL = "call"  # an agent's call_tool step: the tool call an agent run inside it answers
_METHODS = {
    "BaseQueryEngine": (_ENGINE, frozenset({"query", "aquery"})),
    "BaseChatEngine": (_ENGINE, frozenset({"chat", "achat", "stream_chat", "astream_chat"})),
    "BaseRetriever": (_RETRIEVE, frozenset({"retrieve", "aretrieve"})),
    "BaseNodePostprocessor": (_POST, frozenset({"_postprocess_nodes",
                                                 "_apostprocess_nodes"})),
    "BaseSynthesizer": (_SYNTH, frozenset({"synthesize", "asynthesize"})),
    "StreamingAgentChatResponse": (_STREAM, frozenset({"write_response_to_history",
                                                       "awrite_response_to_history"})),
    # an agent's run (the workflow's run span, in the run's own task: its steps inherit it)
    "BaseWorkflowAgent": (_ENGINE, frozenset({"run"})),
    "AgentWorkflow": (_ENGINE, frozenset({"run"})),
    "FunctionTool": (_TOOL, frozenset({"acall"})),
}
_BASES: dict[type, tuple[str, frozenset[str]] | None] = {}
#: A postprocessor span is open in this context (the async default runs the sync one).
_IN_POST: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_agent_context.llama_index.in_postprocessor", default=False)
_MAX_OPEN = 4096
#: The tool call (its id) an agent's ``call_tool`` step runs, in that step's task: an agent
#: run the tool starts answers it.
_TOOL_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "otel_agent_context.llama_index.tool_call", default=None)


#: (class, "Class.method" of the span id) -> our role for that span, or None: one lookup per
#: span (15 a query turn, most of them not ours).
_ROLES: dict[tuple[type, str], str | None] = {}
_UUID = 36  # a span id ends with "-" and a uuid4


def _role(instance: Any, id_: str) -> str | None:
    cls = type(instance)
    if _BASES.get(cls, 0) is None:  # a class with no method of ours (most spans of a turn)
        return None
    cut = len(id_) - _UUID - 1
    prefix = id_[:cut] if cut > 0 and id_[cut] == "-" else id_.split("-", 1)[0]
    key = (cls, prefix)
    try:
        return _ROLES[key]
    except KeyError:
        pass
    if cls in _BASES:
        found = _BASES[cls]
    else:
        found = next((_METHODS[c.__name__] for c in cls.__mro__ if c.__name__ in _METHODS),
                     None)
        _BASES[cls] = found
    role = None
    if found is not None and prefix.rpartition(".")[2] in found[1]:
        role = found[0]
    if len(_ROLES) < _MAX_OPEN:
        _ROLES[key] = role
    return role


def _query_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    text = getattr(value, "query_str", None)
    return text if isinstance(text, str) else None


def _agent_name(instance: Any) -> str | None:
    name = getattr(instance, "name", None)
    if not isinstance(name, str):  # an AgentWorkflow: its starting agent
        name = getattr(instance, "root_agent", None)
    return name if isinstance(name, str) and name else None


def _open_turn(instance: Any, id_: str) -> Turn:
    env = current_envelope()
    if env is not None:  # the application's own envelope: joined, never doubled
        turn = Turn(env, False, id_)
    else:
        env = STATE.ctx.envelope(scope=Scope.TURN, agent_name=_agent_name(instance))
        turn = Turn(env, True, id_)
    turn.enter()
    return turn


def _is_run(id_: str) -> bool:
    """``id_`` is an agent's (a workflow's) run span, not an engine's query or chat."""
    cut = len(id_) - _UUID - 1
    return cut > 0 and id_[:cut].endswith(".run")


def _open_nested(instance: Any, id_: str, outer: Turn) -> Turn:
    """An agent run started inside an agent's run (by a tool of that agent: an agent used as
    a tool): an envelope of its own, so its model calls are not the outer agent's, a child of
    the envelope of the agent that started it (the run's: ours or the application's it joined;
    a handoff's), its span a child of that envelope's span; scope ``tool_invocation`` naming
    the tool call (``context.runtime_refs`` ``tool_call:<id>``, the id the tool's result
    block has), else ``task``. As the Agents SDK layer records a run inside a run."""
    sender = outer.agent_env
    if sender is None or sender._ended:
        sender = outer.env
    call_id = _TOOL_CALL.get()
    token = otel_context.attach(trace.set_span_in_context(sender.span))
    try:
        env = STATE.ctx.envelope(
            scope=Scope.TOOL_INVOCATION if call_id else Scope.TASK,
            agent_name=_agent_name(instance), parent_id=sender.context_id or None,
            runtime_refs=(f"tool_call:{call_id}",) if call_id else ())
    finally:
        otel_context.detach(token)
    turn = Turn(env, True, id_)
    turn.enter()
    return turn


class _Open:
    """The spans of ours that are open, by LlamaIndex span id."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[str, Turn, Any, Any]] = {}
        self.lock = threading.Lock()

    def put(self, id_: str, entry: tuple[str, Turn, Any, Any]) -> None:
        with self.lock:
            if len(self.spans) >= _MAX_OPEN:  # spans never closed (a dropped future)
                self.spans.clear()
            self.spans[id_] = entry

    def pop(self, id_: str) -> tuple[str, Turn, Any, Any] | None:
        return self.spans.pop(id_, None)  # one dict operation: atomic


_OPEN = _Open()


def _enter(id_: str, bound_args: Any, instance: Any) -> None:
    role = _role(instance, id_)  # instance: not None
    if role is None:
        return
    args = getattr(bound_args, "arguments", {})
    turn = TURN.get()
    if role == _ENGINE:
        if turn is None:
            turn = _open_turn(instance, id_)
        elif turn.agent is not None and _is_run(id_):  # an agent run inside an agent's
            turn = _open_nested(instance, id_, turn)
        else:  # a nested engine: in its root's turn
            return
        _OPEN.put(id_, (role, turn, None, None))
    elif role == _RETRIEVE:
        root = turn is None
        if root:
            turn = _open_turn(instance, id_)
        if turn is None or turn.open_retrievals:  # a retriever inside a retriever
            return
        turn.open_retrievals.add(id_)
        _OPEN.put(id_, (role, turn, _query_text(args.get("str_or_query_bundle")), root))
    elif role == _POST:
        nodes = args.get("nodes")
        if turn is None or _IN_POST.get() or not isinstance(nodes, list):
            return
        _OPEN.put(id_, (role, turn, list(nodes), _IN_POST.set(True)))
    elif role == _SYNTH and turn is not None:
        nodes = args.get("nodes")
        turn.flush(list(nodes) if isinstance(nodes, list) else None)
    elif role == _TOOL:
        if turn is not None and is_handoff_tool(instance):
            pending = pending_handoff(turn, bound_args)
            if pending is not None:
                _OPEN.put(id_, (role, turn, pending, None))
    elif role == _STREAM and turn is not None:
        # in the thread (task) the chat engine started, in a copy of the turn's context;
        # it may start before the engine's span ends
        _OPEN.put(id_, (role, turn, None, None))


def _streams(result: Any) -> bool:
    """A streamed chat answer whose writer (a thread or task the engine started) is on its
    way: the turn ends when it has written the answer to the memory."""
    return (getattr(result, "write_response_to_history_thread", None) is not None
            or getattr(result, "awrite_response_to_history_task", None) is not None)


def _exit(id_: str, instance: Any, result: Any, error: BaseException | None) -> None:
    entry = _OPEN.pop(id_)
    if entry is None:
        return
    role, turn, data, extra = entry
    if role == _ENGINE:
        if error is None and _streams(result):
            turn.stream()  # the answer (and its model call) comes while the stream is read
        else:
            turn.finish(error)
    elif role == _STREAM:
        turn.written(error)
    elif role == _RETRIEVE:
        turn.open_retrievals.discard(id_)
        if error is None:
            turn.retrieved(instance, data, result)
        if extra:  # the retriever was the root: an implicit turn
            turn.finish(error)
    elif role == _POST:
        with contextlib.suppress(ValueError):  # reset from another context: leave it
            _IN_POST.reset(extra)
        if error is None:
            turn.filtered(instance, data, result)
    elif role == _TOOL:
        if error is None:
            turn.pending = data  # the next agent's start tells whether it was accepted
    elif role == _STEP:
        reset_step(data)
    elif role == _CALL:
        with contextlib.suppress(ValueError):  # reset from another context: leave it
            _TOOL_CALL.reset(data)


def _step(id_: str, bound_args: Any) -> None:
    """A function's span: an agent workflow's step (``setup_agent`` starts an agent,
    ``run_agent_step`` calls its model), seen for its handoffs."""
    turn = TURN.get()
    if turn is None:
        return
    cut = len(id_) - _UUID - 1
    method = id_[:cut].rpartition(".")[2] if cut > 0 else ""
    if method == "setup_agent":
        setup_agent(turn, bound_args)
    elif method == "run_agent_step" and turn.agent_env is not None:
        token = agent_step(turn, bound_args)
        if token is not None:
            _OPEN.put(id_, (_STEP, turn, token, None))
    elif method == "call_tool":
        call_id = getattr(getattr(bound_args, "arguments", {}).get("ev"), "tool_id", None)
        if isinstance(call_id, str) and call_id:
            _OPEN.put(id_, (_CALL, turn, _TOOL_CALL.set(call_id), None))


class ContextSpanHandler(BaseSpanHandler[Any]):  # type: ignore[misc]
    """Records LlamaIndex queries, retrievals and chat turns (see the package doc)."""

    @classmethod
    def class_name(cls) -> str:
        return "OtelAgentContextSpanHandler"

    def span_enter(self, id_: str, bound_args: Any, instance: Any = None,
                   parent_id: str | None = None, tags: Any = None, **kwargs: Any) -> None:
        if STATE.ctx is None:
            return
        try:
            if instance is None:  # a function's span: a workflow's step
                _step(id_, bound_args)
            else:
                _enter(id_, bound_args, instance)
        except Exception:
            failed("span start")

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None,
                  result: Any = None, **kwargs: Any) -> None:
        if not _OPEN.spans:
            return
        try:
            _exit(id_, instance, result, None)
        except Exception:
            failed("span end")

    def span_drop(self, id_: str, bound_args: Any, instance: Any = None,
                  err: BaseException | None = None, **kwargs: Any) -> None:
        try:
            _exit(id_, instance, None, err)
        except Exception:
            failed("span drop")

    def new_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
        return None

    def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
        return None


def make_handler() -> Any:
    return ContextSpanHandler()
