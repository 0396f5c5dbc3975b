"""``ChatMemoryBuffer.get`` as a token budget with truncation records.

The buffer keeps the newest messages whose tokens (its own ``tokenizer_fn``, plus
``initial_token_count``) fit ``token_limit`` and leaves the oldest out; the chat engine puts
what is left after its system prompt and context, before the new message: a cut in the middle
of the prompt (``truncate_middle``). The history the buffer read is taken from its own
``get_all`` call (watched for the duration of ``get``), never read a second time from the
chat store; the token counts are the buffer's tokenizer's, so the budget is in its units:
the counts the buffer made while it chose (of the whole history, of what it kept) are taken
as it made them (``wrap_count``), only each message left out is counted on its own.

LlamaIndex messages carry no id of their own (the chat store's row ids stay inside it), so a
message is named by a keyed digest of its role and text (``message_id``), and, here, by its
place among the messages of the conversation (``get_all``) with the same role and text: the
second is ``<id>#2`` (``positional_ids``), so that a kept message never takes the id of an
identical one cut before it. The messages a memory hands to the engine, and the new user
message, are given those names for the model call that follows (``name_messages``): the
prompt's blocks, the truncation records of later turns and the compaction sources name a
message alike.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Sequence
from typing import Any

from ..._api import current_envelope
from ..._enums import OverflowStrategy, Scope
from .._common import KNOWN_MESSAGES
from ._items import message_id, message_role, message_text, positional_ids, text_message_id
from ._state import STATE, TURN, failed

__all__ = ["name_messages", "wrap_count", "wrap_get", "wrap_get_all"]

_STRATEGY = OverflowStrategy.TRUNCATE_MIDDLE
class _Watch:
    """What a watched ``get`` of ``memory`` read: its history (``get_all``), and the token
    counts the buffer made of it (number of messages, the first of them, the count)."""

    __slots__ = ("counts", "history", "memory")

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        self.history: list[Any] | None = None
        self.counts: list[tuple[int, Any, int]] = []

    def counted(self, messages: list[Any]) -> int | None:
        """The buffer's own count of ``messages`` (a tail of the history: the history itself
        is its first count, what it returns its last), or None."""
        if not messages or not self.counts:
            return None
        found = self.counts[0] if messages is self.history else self.counts[-1]
        size, first, count = found
        return count if size == len(messages) and first is messages[0] else None


#: Set while a watched ``get`` runs: what it read goes here.
_READ: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar(
    "otel_agent_context.llama_index.memory_read", default=None)


def wrap_get_all(wrapped: Any, instance: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    read = _READ.get()
    if read is not None and read.history is None and isinstance(result, list):
        read.history = result
    return result


def wrap_count(wrapped: Any, instance: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
    """``ChatMemoryBuffer._token_count_for_messages``: inside a watched ``get``, the counts
    the buffer makes (of its whole history first, of what it keeps last) are the budget's,
    not counted again (the tokenizer is the application's, and may be costly)."""
    count = wrapped(*args, **kwargs)
    read = _READ.get()
    if read is not None and read.memory is instance and isinstance(count, int):
        messages = args[0] if args else kwargs.get("messages")
        if isinstance(messages, list) and messages:
            read.counts.append((len(messages), messages[0], count))
    return count


def _count(memory: Any, messages: Sequence[Any]) -> int | None:
    try:
        count = memory._token_count_for_messages(list(messages))
    except Exception:  # noqa: BLE001 - a buffer without it: no counts
        return None
    return count if isinstance(count, int) else None


def _record(memory: Any, read: _Watch, history: list[Any], result: list[Any], initial: int,
            start: int, ids: dict[int, str]) -> None:
    limit = getattr(memory, "token_limit", None)
    if not isinstance(limit, int):
        return
    kept = {id(m) for m in result}
    dropped = [m for m in history if id(m) not in kept]
    env = current_envelope()
    implicit = None
    if env is None:
        implicit = env = STATE.ctx.envelope(scope=Scope.TURN)
    try:
        budget = env.budget(max_tokens=limit, overflow_strategy=_STRATEGY, start_time=start)
        for message in dropped:
            budget.truncated(item_id=ids.get(id(message)) or message_id(message),
                             strategy=_STRATEGY,
                             tokens_before=_count(memory, [message]), tokens_after=0)
        after = read.counted(result)
        if after is None:
            after = _count(memory, result)
        if after is not None:
            budget.actual(tokens=after + initial, items=len(result))
        if dropped:
            before = read.counted(history)
            if before is None:
                before = _count(memory, history)
            over = before + initial - limit if before is not None else None
            budget.overflowed(overflow_tokens=over if over and over > 0 else None)
        budget.stop()
    finally:
        if implicit is not None:
            implicit.stop()


class _ReadOutsideRun(dict[tuple[str, str], list[str]]):
    """Message names set by a memory read outside any run, for the next model call."""


def _named(message: Any) -> tuple[str, str]:
    if isinstance(message, str):
        return ("user", message)
    return (message_role(message), message_text(message))


def name_messages(messages: Sequence[Any], new_input: Any = None,
                  ids: dict[int, str] | None = None, input_id: str | None = None,
                  keys: dict[int, tuple[str, str]] | None = None,
                  input_key: tuple[str, str] | None = None) -> None:
    """The next model calls' blocks carrying these messages (and the new user message
    ``new_input``, a string or a message) take their ids (``ids`` by ``id()`` and
    ``input_id``, else ``message_id``): added to the turn's names (shared by the tasks of its
    run), else set in this context. ``keys`` / ``input_key``: the (role, text) of messages
    already read (by ``id()``) and of ``new_input``."""
    named = [(*((keys.get(id(m)) if keys else None) or _named(m)),
              ids.get(id(m)) if ids else None) for m in messages]
    if new_input is not None:
        named.append((*(input_key or _named(new_input)), input_id))
    named = [(role, text, i) for role, text, i in named if role and text]
    if not named:
        return
    known = KNOWN_MESSAGES.get()
    turn = TURN.get()
    if turn is None and type(known) is _ReadOutsideRun:
        # the names of an earlier read outside any run: this read replaces them (nothing
        # resets them there, so adding to them would grow with every read of the memory)
        known = None
    if turn is None or known is not turn.known:
        known = (dict if turn is not None else _ReadOutsideRun)(
            (key, list(names)) for key, names in (known or {}).items())
        token = KNOWN_MESSAGES.set(known)
        if turn is not None:
            turn.known_tokens.append(token)
    for role, text, item_id in named:
        known.setdefault((role, text), []).append(item_id or text_message_id(role, text))


def wrap_get(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    if STATE.ctx is None or _READ.get() is not None:
        return wrapped(*args, **kwargs)
    read = _Watch(instance)
    start = time.time_ns()
    token = _READ.set(read)
    try:
        result = wrapped(*args, **kwargs)
    finally:
        _READ.reset(token)
    if not isinstance(result, list) or STATE.ctx is None:
        return result
    new_input = kwargs.get("input", args[0] if args else None)
    try:
        # by their place in the whole conversation (what the memory read), else in the result
        input_key = _named(new_input) if new_input is not None else None
        keys: dict[int, tuple[str, str]] = {}
        history = read.history
        ids, input_id = positional_ids(
            history if history is not None else result,
            [*history, *result] if history is not None else result, input_key, keys)
        name_messages(result, new_input, ids, input_id, keys, input_key)
    except Exception:
        ids = {}
        failed("chat memory ids")
    if read.history is not None:
        try:
            initial = kwargs.get("initial_token_count", 0)
            _record(instance, read, read.history, result,
                    initial if isinstance(initial, int) else 0, start, ids)
        except Exception:
            failed("chat memory")
    return result
