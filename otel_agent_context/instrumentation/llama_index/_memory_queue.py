"""LlamaIndex's ``Memory`` (the default memory of chat engines in ``llama-index-core`` 0.14):
its token-limit flushes and its memory-block cuts as budgets.

``Memory`` keeps the conversation in a FIFO queue (the active messages of its chat store).
After each ``put`` it holds the queue to ``token_limit * chat_history_token_ratio`` tokens:
the oldest messages are archived in the store and handed to the memory blocks that accept
them (``FactExtractionMemoryBlock`` extracts facts, ``VectorMemoryBlock`` indexes them); with
no such block they simply leave the prompt. Each flush is a ``context.budget`` of that limit
with one truncation record per message flushed (``truncate_middle`` when they are dropped:
the history sits between the system prompt and the new message, as for ``ChatMemoryBuffer``;
``summarize_oldest`` when a block takes them, ``defer_to_retrieval`` when only vector blocks
do) and, when a block takes them, a ``context.compaction`` (method
``semantic_memory_update``, trigger ``token_limit``) whose sources are those messages.

``get`` puts the memory blocks' content (into the system message, or the last user message)
before the history and, when blocks and history exceed ``token_limit``, cuts the blocks of
lowest priority first (``atruncate``): a ``context.budget`` of ``token_limit`` (the same
overflow strategy as the flush's) with one truncation record per block cut (strategy
``custom``, also the budget's once a block is cut: the standard has no value for a cut by
priority), item id ``llama_index_memory_block:<name>``; the text of each block kept is a
``context.surface`` item of that id (kind ``durable_memory``, content only under content
capture), so the prompt block that carries it (the system message ``<memory>...``) names it.

What is read: the queue and the archived messages from the chat store's own calls during the
flush (``SQLAlchemyChatStore.get_messages`` / ``archive_oldest_messages``, watched only while
a flush runs), the blocks' content before and after ``_truncate_memory_blocks``; the token
counts are the memory's own estimator's (``_estimate_token_count``), in its units.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..._api import current_envelope
from ..._attributes import digest_text
from ..._enums import CompactionMethod, ContentMode, ContextKind, OverflowStrategy, Scope
from ..._records import ContextItem
from ._items import message_id
from ._memory import name_messages
from ._state import STATE, failed

__all__ = ["wrap_aget", "wrap_archive", "wrap_get", "wrap_manage_queue", "wrap_read",
           "wrap_truncate_blocks"]

_DROP = OverflowStrategy.TRUNCATE_MIDDLE
_SUMMARIZE = OverflowStrategy.SUMMARIZE_OLDEST
_RETRIEVE = OverflowStrategy.DEFER_TO_RETRIEVAL
_BY_PRIORITY = OverflowStrategy.CUSTOM
#: Blocks that take flushed messages and do nothing with them.
_IGNORING = frozenset({"StaticMemoryBlock"})
_VECTOR = frozenset({"VectorMemoryBlock"})
_BLOCK = "llama_index_memory_block:"


class _Flush:
    """What the chat store returned during one ``_manage_queue``."""

    __slots__ = ("archived", "queue")

    def __init__(self) -> None:
        self.queue: list[Any] | None = None
        self.archived: list[Any] = []


class _Get:
    """What one ``get`` / ``aget`` saw: the blocks' content before and after the cut."""

    __slots__ = ("before", "block_tokens", "cut", "history_tokens")

    def __init__(self) -> None:
        self.before: dict[str, Any] = {}
        self.cut: dict[str, Any] | None = None
        self.block_tokens = 0
        self.history_tokens = 0


_FLUSH: contextvars.ContextVar[_Flush | None] = contextvars.ContextVar(
    "otel_agent_context.llama_index.memory_flush", default=None)
_GET: contextvars.ContextVar[_Get | None] = contextvars.ContextVar(
    "otel_agent_context.llama_index.memory_get", default=None)


def _tokens(memory: Any, value: Any) -> int | None:
    try:
        count = memory._estimate_token_count(value)
    except Exception:  # noqa: BLE001 - content it cannot count: no count
        return None
    return count if isinstance(count, int) else None


def _in_envelope(record: Any) -> None:
    env = current_envelope()
    implicit = None
    if env is None:
        implicit = env = STATE.ctx.envelope(scope=Scope.TURN)
    try:
        record(env)
    finally:
        if implicit is not None:
            implicit.stop()


# -- the flush after put -------------------------------------------------------------------

async def wrap_read(wrapped: Any, instance: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    """The chat store's ``get_messages``: the queue a flush starts from."""
    result = await wrapped(*args, **kwargs)
    flush = _FLUSH.get()
    if flush is not None and flush.queue is None and isinstance(result, list):
        flush.queue = result
    return result


async def wrap_archive(wrapped: Any, instance: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
    """The chat store's ``archive_oldest_messages``: the messages a flush took out."""
    result = await wrapped(*args, **kwargs)
    flush = _FLUSH.get()
    if flush is not None and isinstance(result, list):
        flush.archived.extend(result)
    return result


def _takers(memory: Any) -> list[Any]:
    blocks = getattr(memory, "memory_blocks", None) or ()
    return [b for b in blocks if getattr(b, "accept_short_term_memory", False) is True
            and type(b).__name__ not in _IGNORING]


def _strategy(takers: Sequence[Any]) -> OverflowStrategy:
    """What the memory does with the messages it flushes."""
    if not takers:
        return _DROP
    if all(type(b).__name__ in _VECTOR for b in takers):
        return _RETRIEVE
    return _SUMMARIZE


def _record_flush(memory: Any, flush: _Flush, start: int) -> None:
    limit, ratio = getattr(memory, "token_limit", None), getattr(
        memory, "chat_history_token_ratio", None)
    if not isinstance(limit, int) or not isinstance(ratio, (int, float)) or not flush.queue:
        return
    flushed, kept = flush.archived, flush.queue[len(flush.archived):]
    takers = _takers(memory)
    strategy = _strategy(takers)
    counts = [_tokens(memory, m) for m in flushed]
    after = sum(c for c in (_tokens(memory, m) for m in kept) if c is not None)

    def record(env: Any) -> None:
        budget = env.budget(max_tokens=int(limit * ratio), overflow_strategy=strategy,
                            start_time=start)
        for message, count in zip(flushed, counts, strict=True):
            budget.truncated(item_id=message_id(message), strategy=strategy,
                             tokens_before=count, tokens_after=0)
        budget.actual(tokens=after, items=len(kept))
        before = after + sum(c for c in counts if c is not None)
        budget.overflowed(overflow_tokens=max(0, round(before - limit * ratio)) or None)
        budget.stop()
        if not takers:
            return
        names = ", ".join(f"{b.name} ({type(b).__name__})" for b in takers)
        compaction = env.compaction(method=CompactionMethod.SEMANTIC_MEMORY_UPDATE,
                                    trigger="token_limit", scope="session",
                                    replacement_policy=f"memory blocks: {names}",
                                    start_time=start)
        for message, count in zip(flushed, counts, strict=True):
            compaction.source(message_id(message), kind=ContextKind.SESSION_HISTORY,
                              token_estimate=count)
        compaction.stop()

    _in_envelope(record)


async def wrap_manage_queue(wrapped: Any, instance: Any, args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> Any:
    if STATE.ctx is None or _FLUSH.get() is not None:
        return await wrapped(*args, **kwargs)
    flush = _Flush()
    start = time.time_ns()
    token = _FLUSH.set(flush)
    try:
        result = await wrapped(*args, **kwargs)
    finally:
        _FLUSH.reset(token)
    if flush.archived and STATE.ctx is not None:
        try:
            _record_flush(instance, flush, start)
        except Exception:
            failed("memory flush")
    return result


# -- the memory blocks' cut in get ---------------------------------------------------------

async def wrap_truncate_blocks(wrapped: Any, instance: Any, args: tuple[Any, ...],
                               kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    seen = _GET.get()
    if seen is not None and seen.cut is None and isinstance(result, dict):
        content = args[0] if args else kwargs.get("content_per_memory_block")
        blocks = args[1] if len(args) > 1 else kwargs.get("memory_blocks_tokens")
        history = args[2] if len(args) > 2 else kwargs.get("chat_history_tokens")
        if isinstance(content, dict):
            seen.before = dict(content)
        seen.block_tokens = blocks if isinstance(blocks, int) else 0
        seen.history_tokens = history if isinstance(history, int) else 0
        seen.cut = dict(result)
    return result


def _text(content: Any) -> str | None:
    """A memory block's content as the text the memory puts in the prompt (None for a block
    that returns chat messages: they join the history)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(getattr(b, "block_type", None) == "text"
                                         for b in content):
        return "\n".join(str(getattr(b, "text", "")) for b in content)
    return None


def _record_get(memory: Any, seen: _Get, result: Sequence[Any], start: int) -> None:
    limit = getattr(memory, "token_limit", None)
    if not isinstance(limit, int) or seen.cut is None:
        return
    cut = seen.cut
    truncated = []
    for name, content in seen.before.items():
        before = _tokens(memory, content)
        after = _tokens(memory, cut[name]) if cut.get(name) else 0
        if before is not None and after is not None and after < before:
            truncated.append((name, before, after))
    kept_blocks = sum(_tokens(memory, c) or 0 for c in cut.values() if c)
    kept = [(name, text) for name, text in ((n, _text(c)) for n, c in cut.items() if c)
            if text]

    def record(env: Any) -> None:
        budget = env.budget(max_tokens=limit, overflow_strategy=_strategy(_takers(memory)),
                            start_time=start)
        for name, before, after in truncated:
            budget.truncated(item_id=f"{_BLOCK}{name}", strategy=_BY_PRIORITY,
                             tokens_before=before, tokens_after=after)
        budget.actual(tokens=seen.history_tokens + kept_blocks, items=len(result))
        over = seen.history_tokens + seen.block_tokens - limit
        if truncated or over > 0:
            budget.overflowed(overflow_tokens=over if over > 0 else None,
                              strategy=_BY_PRIORITY if truncated else None)
        budget.stop()
        if kept:
            surface = env.surface(start_time=start)
            for name, text in kept:
                surface.add(ContextItem(
                    item_id=f"{_BLOCK}{name}", context_kind=ContextKind.DURABLE_MEMORY,
                    content_mode=ContentMode.INLINE, content=text,
                    token_estimate=_tokens(memory, text), digest=digest_text(text)))
            surface.stop()

    _in_envelope(record)


def _finish_get(instance: Any, seen: _Get, result: Any, input_: Any, start: int) -> None:
    if STATE.ctx is None or not isinstance(result, list):
        return
    try:
        name_messages(result, input_)
        _record_get(instance, seen, result, start)
    except Exception:
        failed("memory get")


@contextlib.contextmanager
def _watching() -> Iterator[tuple[_Get, int]]:
    """What the ``get`` under way sees (its ``_truncate_memory_blocks``), and when it began."""
    seen = _Get()
    token = _GET.set(seen)
    try:
        yield seen, time.time_ns()
    finally:
        _GET.reset(token)


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("input")


def wrap_get(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    """``Memory.get``: ``asyncio_run(self.aget(...))`` in a copy of this context; recorded
    here so that the prompt's message ids are set in the caller's context."""
    if STATE.ctx is None or _GET.get() is not None:
        return wrapped(*args, **kwargs)
    with _watching() as (seen, start):
        result = wrapped(*args, **kwargs)
    _finish_get(instance, seen, result, _input(args, kwargs), start)
    return result


async def wrap_aget(wrapped: Any, instance: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    if STATE.ctx is None or _GET.get() is not None:  # inside get: recorded there
        return await wrapped(*args, **kwargs)
    with _watching() as (seen, start):
        result = await wrapped(*args, **kwargs)
    _finish_get(instance, seen, result, _input(args, kwargs), start)
    return result
