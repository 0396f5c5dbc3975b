"""What the LlamaIndex hooks share: the switch, and the turn being recorded."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from .._lazy_patch import Switch, internal_failure

if TYPE_CHECKING:
    from ._turn import Turn

__all__ = ["STATE", "TURN", "failed"]

STATE = Switch()

#: The query or chat turn whose span is open in this context.
TURN: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "otel_agent_context.llama_index.turn", default=None)


def failed(what: str) -> None:
    internal_failure("LlamaIndex", what)
