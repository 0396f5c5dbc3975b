"""Summarization as a compaction: LangChain 1.x's ``SummarizationMiddleware`` and the
classic summary memories (``ConversationSummaryMemory``, ``ConversationSummaryBufferMemory``).

``SummarizationMiddleware.before_model`` (a public agent hook) is wrapped: when it returns
the replacement (remove everything, a summary message, the preserved tail), the messages
that are not preserved are the compaction's sources and the summary message is its summary.
Coverage comes from what the summarizer actually saw: the middleware trims its input with
``trim_messages`` (``trim_tokens_to_summarize``), and the trim patch reports which messages
it kept whole; the others are sources the summary does not account for (``covered=false``)
and a loss note says so. Both summarize older history into a summary that is itself
summarized again next time: method ``rolling_summary``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..._api import Envelope
from ..._digest import short_digest
from ..._enums import CompactionMethod, ContextKind
from ..._records import ContextItem
from .._common import numbered
from .._tokens import estimate_tokens
from ._items import message_id, message_item, message_kind, message_text, positional_ids
from ._state import ACTIVE_COMPACTION, STATE, guarded, recording, stage_envelope

__all__ = ["MEMORIES", "MIDDLEWARE", "wrap_memory", "wrap_middleware"]

#: (module, class, sync method, async method)
MIDDLEWARE = (("langchain.agents.middleware.summarization", "SummarizationMiddleware",
               "before_model", "abefore_model"),)
MEMORIES = tuple((f"{pkg}.memory.summary", "SummarizerMixin", "predict_new_summary",
                  "apredict_new_summary") for pkg in ("langchain_classic", "langchain"))

_SCOPE = "message_history"
_REPLACE = "replace_with_summary"


class _Collector:
    """What ``trim_messages`` kept whole of the summarizer's input."""

    def __init__(self) -> None:
        self.kept: set[str] | None = None

    def trimmed(self, messages: Sequence[Any], result: Sequence[Any]) -> None:
        whole = {id(m) for m in messages}
        kept = {message_id(r) for r in result if id(r) in whole}
        self.kept = kept if self.kept is None else self.kept & kept

    def covers(self, message: Any) -> bool:
        return self.kept is None or message_id(message) in self.kept


def _trigger(middleware: Any) -> str:
    kinds: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, tuple) and len(t) == 2 and isinstance(t[0], str):
            kinds.add(t[0])
        elif isinstance(t, Mapping):
            kinds.update(k for k in t if isinstance(k, str))
        elif isinstance(t, list):
            for part in t:
                walk(part)

    walk(getattr(middleware, "trigger", None))
    return "threshold:" + "+".join(sorted(kinds)) if kinds else "threshold"


@guarded
def _record_middleware(env: Envelope | None, middleware: Any, messages: list[Any],
                       result: Any, collector: _Collector, start: int) -> None:
    if not recording(env) or not isinstance(result, Mapping):
        return
    new = result.get("messages")
    if not isinstance(new, Sequence):
        return
    at = next((i for i, m in enumerate(new)
               if message_kind(m) == ContextKind.THREAD_SUMMARY), None)
    if at is None:
        return
    summary = new[at]
    preserved = {message_id(m) for m in new[at + 1:]}
    ids = [message_id(m) for m in messages]
    sources = [(m, named) for m, mid, named in zip(messages, ids, numbered(ids), strict=True)
               if mid not in preserved]
    compaction = env.compaction(method=CompactionMethod.ROLLING_SUMMARY,
                                trigger=_trigger(middleware), scope=_SCOPE,
                                replacement_policy=_REPLACE, start_time=start)
    uncovered = 0
    for m, named in sources:
        covered = collector.covers(m)
        uncovered += not covered
        compaction.source(message_item(m, named), covered=covered)
    text = message_text(summary)
    compaction.summary(content=text, token_estimate=estimate_tokens(text))
    if uncovered:
        compaction.loss_note(f"{uncovered} of {len(sources)} summarized messages were cut "
                             "from the summarizer's input (trim_tokens_to_summarize)")
    compaction.stop()


@guarded
def _record_memory(env: Envelope | None, memory: Any, messages: Any, existing: Any,
                   result: Any, start: int) -> None:
    if not recording(env) or not isinstance(result, str) or not isinstance(messages, Sequence):
        return
    buffered = hasattr(memory, "max_token_limit")
    compaction = env.compaction(method=CompactionMethod.ROLLING_SUMMARY,
                                trigger="token_limit" if buffered else "every_turn",
                                scope=_SCOPE, replacement_policy=_REPLACE, start_time=start)
    if isinstance(existing, str) and existing:
        digest = short_digest(existing, length=16)
        compaction.source(ContextItem(item_id=f"summary_{digest}",
                                      context_kind=ContextKind.THREAD_SUMMARY,
                                      token_estimate=estimate_tokens(existing)), covered=True)
    for m, named in zip(messages, positional_ids(messages), strict=True):
        compaction.source(message_item(m, named), covered=True)
    compaction.summary(content=result, token_estimate=estimate_tokens(result))
    compaction.stop()


def _state_messages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    state = args[0] if args else kwargs.get("state")
    messages = state.get("messages") if isinstance(state, Mapping) else None
    return list(messages) if isinstance(messages, Sequence) else None


def wrap_middleware(is_async: bool) -> Any:
    """Wrapper for ``SummarizationMiddleware.before_model`` / ``abefore_model``."""

    def sync(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        messages = _state_messages(args, kwargs) if STATE.active else None
        if messages is None:
            return wrapped(*args, **kwargs)
        collector = _Collector()
        token = ACTIVE_COMPACTION.set(collector)
        try:
            with stage_envelope() as env:
                start = time.time_ns()
                result = wrapped(*args, **kwargs)
                _record_middleware(env, instance, messages, result, collector, start)
        finally:
            ACTIVE_COMPACTION.reset(token)
        return result

    async def asynchronous(wrapped: Any, instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        messages = _state_messages(args, kwargs) if STATE.active else None
        if messages is None:
            return await wrapped(*args, **kwargs)
        collector = _Collector()
        token = ACTIVE_COMPACTION.set(collector)
        try:
            with stage_envelope() as env:
                start = time.time_ns()
                result = await wrapped(*args, **kwargs)
                _record_middleware(env, instance, messages, result, collector, start)
        finally:
            ACTIVE_COMPACTION.reset(token)
        return result

    return asynchronous if is_async else sync


def _memory_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    messages = args[0] if args else kwargs.get("messages")
    existing = args[1] if len(args) > 1 else kwargs.get("existing_summary")
    return messages, existing


def wrap_memory(is_async: bool) -> Any:
    """Wrapper for ``SummarizerMixin.predict_new_summary`` / ``apredict_new_summary``."""

    def sync(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        if not STATE.active:
            return wrapped(*args, **kwargs)
        messages, existing = _memory_args(args, kwargs)
        with stage_envelope() as env:
            start = time.time_ns()
            result = wrapped(*args, **kwargs)
            _record_memory(env, instance, messages, existing, result, start)
        return result

    async def asynchronous(wrapped: Any, instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        if not STATE.active:
            return await wrapped(*args, **kwargs)
        messages, existing = _memory_args(args, kwargs)
        with stage_envelope() as env:
            start = time.time_ns()
            result = await wrapped(*args, **kwargs)
            _record_memory(env, instance, messages, existing, result, start)
        return result

    return asynchronous if is_async else sync
