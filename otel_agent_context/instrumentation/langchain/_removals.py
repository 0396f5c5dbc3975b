"""Messages a graph node removes from the state (``RemoveMessage``) as a budget's truncation.

LangChain 1.x teaches trimming history in a ``@before_model`` middleware (or any LangGraph
node) that returns ``{"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}``, or one
``RemoveMessage(id=...)`` per message to drop; the ``add_messages`` reducer then applies it.
Nothing calls ``trim_messages``, so without this the messages just vanish between two model
calls. The callback handler hands each node's input messages and its returned update here
(both are in the run's callbacks): each removed message is a truncation record named by the
message's id (the same id the model call's blocks and a later compaction use), the budget's
strategy read from which messages went, its actual use what is left (estimated tokens and
the message count). The limit the node applied is the application's own: not recorded.

An update that carries the summary ``SummarizationMiddleware`` writes is its compaction,
recorded from the middleware itself: not a second time here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..._api import Envelope
from ..._enums import OverflowStrategy
from ._items import SUMMARY_SOURCE, message_tokens, positional_ids
from ._state import recording

__all__ = ["input_messages", "record_removals"]

_REMOVE_ALL = "__remove_all__"  # langgraph.graph.message.REMOVE_ALL_MESSAGES


def input_messages(inputs: Any) -> list[Any] | None:
    """The state's messages a node starts with, if its input is a messages state."""
    if isinstance(inputs, Mapping):
        messages = inputs.get("messages")
        if isinstance(messages, list) and messages:
            return messages
    return None


def _is_remove(message: Any) -> bool:
    return type(message).__name__ == "RemoveMessage" and hasattr(message, "id")


def _is_summary(message: Any) -> bool:
    extra = getattr(message, "additional_kwargs", None)
    return isinstance(extra, Mapping) and extra.get("lc_source") == SUMMARY_SOURCE


def _strategy(before: Sequence[Any], removed_at: list[int]) -> OverflowStrategy:
    """Which end went: the newest (``truncate_tail``), the oldest after kept leading
    messages (``truncate_middle``), anything else ``custom`` (the contract has no
    head-only strategy, as for ``trim_messages``)."""
    n = len(before)
    run = removed_at == list(range(removed_at[0], removed_at[-1] + 1))
    if run and removed_at[-1] == n - 1 and removed_at[0] > 0:
        return OverflowStrategy.TRUNCATE_TAIL
    if run and removed_at[0] > 0 and removed_at[-1] < n - 1:
        return OverflowStrategy.TRUNCATE_MIDDLE
    return OverflowStrategy.CUSTOM


def record_removals(env: Envelope | None, before: Sequence[Any], outputs: Any,
                    start: int) -> None:
    """Record the messages ``outputs`` (a node's state update) removes from ``before``."""
    if not recording(env) or not isinstance(outputs, Mapping):
        return
    update = outputs.get("messages")
    if not isinstance(update, list) or not any(_is_remove(m) for m in update):
        return
    if any(_is_summary(m) for m in update):
        return  # SummarizationMiddleware's compaction, recorded where it summarizes
    remove_all = max((i for i, m in enumerate(update)
                      if _is_remove(m) and m.id == _REMOVE_ALL), default=None)
    if remove_all is not None:
        after = update[remove_all + 1:]
        kept_ids = {getattr(m, "id", None) for m in after}
        removed_at = [i for i, m in enumerate(before) if getattr(m, "id", None) not in kept_ids]
    else:
        gone = {m.id for m in update if _is_remove(m)}
        removed_at = [i for i, m in enumerate(before) if getattr(m, "id", None) in gone]
        after = [m for m in before if getattr(m, "id", None) not in gone]
        after += [m for m in update if not _is_remove(m)
                  and getattr(m, "id", None) not in {getattr(b, "id", None) for b in before}]
    if not removed_at:
        return
    strategy = _strategy(before, removed_at)
    budget = env.budget(overflow_strategy=strategy, start_time=start)
    named = positional_ids(before)
    for i in removed_at:
        message = before[i]
        budget.truncated(item_id=named[i], strategy=strategy,
                         tokens_before=message_tokens(message), tokens_after=0)
    budget.actual(tokens=sum(message_tokens(m) for m in after),
                  items=len(after))
    budget.stop(end_time=time.time_ns())
