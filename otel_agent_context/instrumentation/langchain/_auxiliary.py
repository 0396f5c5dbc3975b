"""Model calls a component makes for the agent, not as the agent: their own envelope.

A summarizer (``SummarizationMiddleware``), an LLM document filter or extractor, a listwise
reranker: each calls a chat model while the agent's envelope is current, so without this
their prompts would be recorded as the agent's own assemblies (the summarizer's prompt of a
thousand tokens as a ``user_message``, four extra assemblies per retrieval). Their work runs
here inside an envelope of its own: scope ``task`` for a summarizer, ``review`` for a filter
or judge, ``gen_ai.agent.name`` the component's class, ``context.parent_id`` the agent's
envelope and the agent's conversation. What the component decides for the agent (the
compaction, the documents it dropped) is still recorded in the agent's envelope.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context

from ..._api import current_envelope
from ..._enums import Scope
from ._state import STATE, log_failure

__all__ = ["JUDGES", "SUMMARIZERS", "auxiliary", "wrap_auxiliary"]

#: Document compressors that call a model for each decision (scope review).
JUDGES = frozenset({"LLMChainFilter", "LLMChainExtractor", "LLMListwiseRerank"})


@contextlib.contextmanager
def auxiliary(component: Any, scope: Scope) -> Iterator[None]:
    """Run the body in an envelope of its own, linked to the current (agent's) envelope;
    nothing changes when no envelope is current or none can be opened."""
    ctx = STATE.ctx
    parent = current_envelope()
    if ctx is None or parent is None:
        yield
        return
    try:
        # a child of the agent's envelope span, also when a framework run (not the
        # OpenTelemetry context) made that envelope current
        token = otel_context.attach(parent._ctx)
        try:
            env = ctx.envelope(scope=scope, agent_name=type(component).__name__,
                               parent_id=parent.context_id)  # its conversation
        finally:
            otel_context.detach(token)
        env.__enter__()
    except Exception:  # noqa: BLE001 - telemetry never breaks the host
        log_failure("an auxiliary envelope")
        yield
        return
    try:
        yield
    except BaseException as exc:
        env.__exit__(type(exc), exc, exc.__traceback__)
        raise
    env.__exit__(None, None, None)


#: (module, class, sync method, async method) of summarizers: their model call (scope task)
SUMMARIZERS = (("langchain.agents.middleware.summarization", "SummarizationMiddleware",
                "_create_summary", "_acreate_summary"),)


def wrap_auxiliary(scope: Scope, is_async: bool) -> Any:
    """A wrapt wrapper running a component's method in its own envelope."""

    def sync(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        if not STATE.active:
            return wrapped(*args, **kwargs)
        with auxiliary(instance, scope):
            return wrapped(*args, **kwargs)

    async def asynchronous(wrapped: Any, instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        if not STATE.active:
            return await wrapped(*args, **kwargs)
        with auxiliary(instance, scope):
            return await wrapped(*args, **kwargs)

    return asynchronous if is_async else sync
