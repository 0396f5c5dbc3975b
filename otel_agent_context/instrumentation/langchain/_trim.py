"""``trim_messages`` as a token budget with truncation records.

LangChain's ``trim_messages`` hands the work to ``_first_max_tokens`` (``strategy="first"``)
or ``_last_max_tokens`` (``strategy="last"``), looking them up in its module at call time.
Wrapping those two catches every trim, whether the application calls ``trim_messages``
directly, uses it as a runnable in a chain, or imported it before instrumentation (and the
summarization middleware's own trim of the summarizer input). They receive the messages
already converted, ``max_tokens`` and the token counter ``trim_messages`` normalised, which
is exactly what a budget needs: the same counter measures before and after, so the numbers
are in the application's own units. ``token_counter=len`` counts messages: the budget is
then ``max_items`` and the truncation records carry estimated tokens.

Strategy mapping (the contract has no ``truncate_head``): ``"first"`` keeps the first
messages and cuts the newest, ``truncate_tail``; ``"last"`` with ``include_system=True``
keeps the system message and cuts the oldest after it, ``truncate_middle``; ``"last"``
without a kept system message cuts the oldest, ``custom``.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..._api import Envelope
from ..._enums import OverflowStrategy
from ._items import message_text, message_tokens, positional_ids
from ._state import ACTIVE_COMPACTION, STATE, guarded, recording, stage_envelope

__all__ = ["TRIM_MODULE", "wrap_trim"]

TRIM_MODULE = "langchain_core.messages.utils"

# _last_max_tokens calls _first_max_tokens: only the outermost call records
_IN_TRIM: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_agent_context.langchain.in_trim", default=False)


def _strategy(strategy: str, messages: Sequence[Any], result: Sequence[Any],
              include_system: bool) -> OverflowStrategy:
    if strategy == "first":
        return OverflowStrategy.TRUNCATE_TAIL
    if (include_system and messages and getattr(messages[0], "type", None) == "system"
            and any(r is messages[0] for r in result)):
        return OverflowStrategy.TRUNCATE_MIDDLE
    return OverflowStrategy.CUSTOM


def _match_cut(result: Sequence[Any], messages: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(original, shortened) for each message ``trim_messages`` cut with allow_partial."""
    whole = {id(m) for m in messages}
    free = [m for m in messages if not any(r is m for r in result)]
    pairs = []
    for r in result:
        if id(r) in whole:
            continue
        same = [m for m in free if getattr(m, "type", None) == getattr(r, "type", None)]
        rid = getattr(r, "id", None)
        text = message_text(r)
        orig = next((m for m in same if rid is not None and getattr(m, "id", None) == rid),
                    None)
        if orig is None:
            orig = next((m for m in same if message_text(m).startswith(text)
                         or message_text(m).endswith(text)), None)
        if orig is None and same:
            orig = same[0]
        if orig is not None:
            free.remove(orig)
            pairs.append((orig, r))
    return pairs


def _key(messages: Sequence[Any]) -> tuple[int, ...]:
    # which messages, not their order: _last_max_tokens counts the reversed list
    return tuple(sorted(map(id, messages)))


class _SeenCounts:
    """The application's token counter, remembering what it returned for which messages."""

    __slots__ = ("counter", "seen")

    def __init__(self, counter: Callable[[list[Any]], int]) -> None:
        self.counter = counter
        self.seen: dict[tuple[int, ...], tuple[int, list[Any]]] = {}

    def __call__(self, messages: list[Any]) -> int:
        count = self.counter(messages)
        if isinstance(count, int):
            self.seen[_key(messages)] = (count, messages)  # the trim's own slices
        return count


@guarded
def _record(env: Envelope | None, strategy: str, start: int, messages: Sequence[Any],
            result: Any, kwargs: dict[str, Any]) -> None:
    if not recording(env) or not isinstance(result, list):
        return
    counter = kwargs["token_counter"]
    max_tokens = kwargs["max_tokens"]
    include_system = bool(kwargs.get("include_system", False))
    by_items = counter is len
    mapped = _strategy(strategy, messages, result, include_system)

    def estimate(ms: Sequence[Any]) -> int:
        return sum(message_tokens(m) for m in ms)

    tokens: Callable[[Sequence[Any]], int] = estimate  # per message: never the app's counter
    if by_items:
        budget = env.budget(max_items=max_tokens, overflow_strategy=mapped, start_time=start)
        before, after = len(messages), len(result)
    else:
        # The counter may be a paid API (a chat model's count-tokens call): the totals are
        # what the trim itself counted (the whole list first, then the prefixes it tried),
        # counted here only if it did not; a message's size is our estimate in the
        # counter's units (scaled by its largest count), never another call.
        budget = env.budget(max_tokens=max_tokens, overflow_strategy=mapped, start_time=start)
        seen = counter.seen if isinstance(counter, _SeenCounts) else {}
        scale = 1.0
        if seen:  # the counter's units per estimated token, from its largest count
            count, counted = max(seen.values(), key=lambda entry: entry[0])
            scale = count / (estimate(counted) or 1) if count else 1.0

        def tokens(ms: Sequence[Any]) -> int:
            return round(estimate(ms) * scale)

        def total(ms: Sequence[Any]) -> int:
            entry = seen.get(_key(ms))
            return entry[0] if entry is not None else int(counter(list(ms)))

        before, after = total(messages), total(result)
    cut = _match_cut(result, messages)
    cut_ids = {id(orig) for orig, _ in cut}
    kept = {id(r) for r in result}
    named = dict(zip(map(id, messages), positional_ids(messages), strict=True))
    for m in messages:
        if id(m) not in kept and id(m) not in cut_ids:
            budget.truncated(item_id=named[id(m)], strategy=mapped,
                             tokens_before=tokens([m]), tokens_after=0)
    for orig, short in cut:
        budget.truncated(item_id=named[id(orig)], strategy=mapped,
                         tokens_before=tokens([orig]), tokens_after=tokens([short]))
    if by_items:
        budget.actual(items=after)
    else:
        budget.actual(tokens=after, items=len(result))
    if before > max_tokens:
        budget.overflowed(overflow_tokens=None if by_items else before - max_tokens)
    budget.stop()
    collector = ACTIVE_COMPACTION.get()
    if collector is not None:
        collector.trimmed(messages, result)


def wrap_trim(strategy: str) -> Any:
    """A wrapt wrapper for ``_first_max_tokens`` / ``_last_max_tokens``."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        if not STATE.active or _IN_TRIM.get():
            return wrapped(*args, **kwargs)
        messages = args[0] if args else kwargs.get("messages")
        if not isinstance(messages, Sequence) or "token_counter" not in kwargs \
                or "max_tokens" not in kwargs:
            return wrapped(*args, **kwargs)
        messages = list(messages)
        if kwargs["token_counter"] is not len:
            kwargs["token_counter"] = _SeenCounts(kwargs["token_counter"])
        token = _IN_TRIM.set(True)
        try:
            with stage_envelope() as env:
                start = time.time_ns()
                result = wrapped(*args, **kwargs)
                _record(env, strategy, start, messages, result, kwargs)
        finally:
            _IN_TRIM.reset(token)
        return result

    return wrapper
