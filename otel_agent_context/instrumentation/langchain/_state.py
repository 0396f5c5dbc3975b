"""What the callback handler and the patches share: the AgentContext, the on/off switch,
the retrieval or compaction in progress, and the envelope a stage records into."""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeGuard, TypeVar

from ..._api import AgentContext, Envelope, current_envelope
from ..._enums import Scope
from ..._failsafe import is_strict

__all__ = ["ACTIVE_COMPACTION", "ACTIVE_RETRIEVAL", "STATE", "active_retrieval", "guarded",
           "recording",
           "stage_envelope"]

_log = logging.getLogger("otel_agent_context")
_F = TypeVar("_F", bound=Callable[..., Any])


class _State:
    """Set by the instrumentor; every hook reads it and does nothing while it is off."""

    def __init__(self) -> None:
        self.ctx: AgentContext | None = None

    @property
    def active(self) -> bool:
        return self.ctx is not None


STATE = _State()

#: The retrieval (retriever run, or a compressor used on its own) whose candidates and
#: filtering steps are being collected; compressors and filters report into it.
ACTIVE_RETRIEVAL: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "otel_agent_context.langchain.retrieval", default=None)
def active_retrieval() -> Any:
    """The retrieval in progress in this context (one that has ended does not count)."""
    retrieval = ACTIVE_RETRIEVAL.get()
    return None if retrieval is None or retrieval.done else retrieval


#: The summarization in progress: ``trim_messages`` reports what it kept for the summary.
ACTIVE_COMPACTION: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "otel_agent_context.langchain.compaction", default=None)


def log_failure(what: str) -> None:
    """Internal error: raise under the test kit's strict mode, else log and carry on."""
    if is_strict():
        raise
    _log.warning("otel_agent_context: LangChain %s failed; its context telemetry is lost",
                 what, exc_info=True)


def guarded(fn: _F) -> _F:
    """The library's own errors never reach the application (see :func:`log_failure`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            log_failure(fn.__name__)
            return None

    return wrapper  # type: ignore[return-value]


def recording(env: Envelope | None) -> TypeGuard[Envelope]:
    """Whether ``env`` records: no SDK, or a sampled-out envelope, costs nothing further
    (no items built, no extra token counting)."""
    return env is not None and env.span.is_recording()


@contextmanager
def stage_envelope() -> Iterator[Envelope | None]:
    """The current envelope, or an implicit ``turn`` envelope around the block.

    Wrap the host's call in it, so LangChain runs inside (an LLM filter's chain, a
    summary model call) join the implicit envelope instead of opening their own. The
    host's exceptions pass through unchanged (the implicit envelope records them as
    failed).
    """
    ctx = STATE.ctx
    env = current_envelope()
    if env is not None or ctx is None:
        yield env
        return
    implicit = ctx.envelope(scope=Scope.TURN)
    with implicit:
        yield implicit
