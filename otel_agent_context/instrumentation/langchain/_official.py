"""The official GenAI LangChain instrumentor's context for a run, so that composed with it
(``opentelemetry-instrumentation-genai-langchain``) a run is one trace, not two.

Both instrumentors follow a run through LangChain's callbacks. The official one's handler
sits before ours in every callback manager (it is added when the manager is made, ours when
it is configured), so when ours opens the run's envelope the official one has already
started its span for that run (``invoke_workflow``, ``invoke_agent``, ``chat``), but not yet
made it current: it does that once every handler has returned. Without this, our envelope
was the root of a trace of its own, and its model calls could not join the official chat
span in the other trace: each model call was recorded twice, once in each trace.

That order holds for LangChain's synchronous callback managers. Its asynchronous ones run
inline handlers (ours) before the others (the official one), so there the official span does
not exist yet when ours is called. So a top-level run's envelope is opened once every
handler has returned (:func:`wrap_start` around the managers' start methods, sync and async,
and the handler's deferred open), dated when the run started (or its parent span, if later).
When a handler raises in the start (a guardrail refusing the input), LangChain reports no end
for the run, and no envelope is opened for it.

The official instrumentor keeps its runs in private state, read here defensively: any name
missing (another version) and the envelope is opened as before, from the current context.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from opentelemetry.context import Context

from ._state import STATE, log_failure

__all__ = ["MANAGER_MODULE", "START_METHODS", "deferring", "official_run_context",
           "wrap_start"]

_log = logging.getLogger("otel_agent_context")

_MODULE = "opentelemetry.instrumentation.genai.langchain"


MANAGER_MODULE = "langchain_core.callbacks.manager"
#: the callback managers' methods that start a run our handler may open an envelope for
START_METHODS = ("on_chain_start", "on_chat_model_start", "on_llm_start", "on_retriever_start")

#: An envelope our handler put off: (open it, drop it).
Deferred = tuple[Callable[[], None], Callable[[], None]]

#: While a start method of a top-level run runs: the envelopes our handler put off until
#: every handler has returned, and the thread and task they belong to (a handler run
#: elsewhere, in an executor's copy of the context or another task, opens its own at once).
DEFERRED_OPENS: contextvars.ContextVar[tuple[list[Deferred], Any] | None] = \
    contextvars.ContextVar("otel_agent_context.langchain.deferred_opens", default=None)


def _owner() -> tuple[int, Any]:
    """Where a start method is running: its thread, and its task if an event loop runs."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop running in this thread
        task = None
    return threading.get_ident(), task


def deferring() -> list[Deferred] | None:
    """Where to put off an envelope now, or None to open it at once."""
    state = DEFERRED_OPENS.get()
    if state is None:
        return None
    return state[0] if _owner() == state[1] else None


def _official_handler() -> Any:
    """The official instrumentor's callback handler while it instruments, else None."""
    module = sys.modules.get(_MODULE)
    if module is None:  # not imported: not instrumenting (the common case, one lookup)
        return None
    try:
        instrumentor: Any = getattr(module.LangChainInstrumentor, "_instance", None)
        if instrumentor is None or not instrumentor.is_instrumented_by_opentelemetry:
            return None
        handler = instrumentor._callback_handler
        if handler is None or not getattr(handler, "_enabled", True):
            return None
        return handler
    except Exception:  # another version of its internals: open the envelope as before
        _log.debug("otel_agent_context: the official LangChain instrumentor's state is not "
                   "readable", exc_info=True)
        return None


def _settle(pending: list[Deferred], started: bool) -> None:
    """Open the envelopes put off once the start method returned; drop them when it raised
    (a handler raised, or the task was cancelled): LangChain then reports no end for the run,
    so an envelope opened for it would never end and stay current."""
    for open_envelope, drop in pending:
        try:
            (open_envelope if started else drop)()
        except Exception:
            log_failure("run start")


@contextmanager
def _putting_off() -> Iterator[None]:
    """Put off the envelopes our handler opens while a start method runs: open them when it
    returned, drop them when it raised."""
    pending: list[Deferred] = []
    token = DEFERRED_OPENS.set((pending, _owner()))
    try:
        yield
    except BaseException:
        DEFERRED_OPENS.reset(token)
        _settle(pending, started=False)
        raise
    DEFERRED_OPENS.reset(token)
    _settle(pending, started=True)


def _started_sync(wrapped: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    with _putting_off():
        return wrapped(*args, **kwargs)


async def _started_async(wrapped: Callable[..., Any], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
    with _putting_off():
        return await wrapped(*args, **kwargs)


def wrap_start(asynchronous: bool) -> Callable[..., Any]:
    """A wrapper for a callback manager's start method: a top-level run's envelope opens once
    the method has called every handler (with the official instrumentor on, its span for the
    run exists then: the async managers call our inline handler before it), and none opens
    when the method raised. Child runs, which open nothing, go straight through; so does
    everything while our instrumentor is off (another wrapper above this one keeps it in
    place)."""
    run = _started_async if asynchronous else _started_sync

    def started(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        if not STATE.active or getattr(instance, "parent_run_id", None) is not None:
            return wrapped(*args, **kwargs)
        return run(wrapped, args, kwargs)
    return started


def official_run_context(run_id: UUID) -> Context | None:
    """The context of the official instrumentor's span for ``run_id`` (or of its nearest
    ancestor it recorded), or None when it is not instrumenting or records no such run."""
    handler = _official_handler()
    if handler is None:
        return None
    try:
        context = handler._invocation_manager.get_parent_context(run_id)
    except Exception:  # another version of its internals: open the envelope as before
        _log.debug("otel_agent_context: the official LangChain instrumentor's run state "
                   "is not readable", exc_info=True)
        return None
    return context if isinstance(context, Context) else None
