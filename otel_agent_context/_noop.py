"""The no-op recorder: what every call returns when nothing records.

With no SDK configured, or the envelope span sampled out, ``AgentContext.envelope`` returns
one shared object that answers every recorder call and does nothing: about one function
call, no allocation.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

__all__: list[str] = []


class _NoOp:
    """Accepts every recorder call and does nothing; shared, never allocated per call."""

    context_id = ""
    surface_id = selection_id = budget_id = assembly_id = compaction_id = ""
    target = None
    hash = None
    candidate_count = None
    span = trace.INVALID_SPAN

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def _self(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def _none(self, *args: Any, **kwargs: Any) -> None:
        return None

    def _empty(self, *args: Any, **kwargs: Any) -> str:
        return ""

    surface = selection = budget = assembly = compaction = _self
    stop = fail = add = update = remove = selected = omitted = segment = truncated = _none
    actual = overflowed = block = blocks = loss_note = set = set_lifecycle = mark_compacted = _none
    source = _none
    missing_requested = missing_resolved = redaction = _none
    injection = missing = summary = inject = _empty


NOOP: Any = _NoOp()
