"""The no-op recorder: what every call returns when nothing records, or when a call fails.

With no SDK configured, or the envelope span sampled out, ``AgentContext.envelope`` returns
one shared object, :data:`NOOP`; a method that fails inside the library returns it too (see
``_failsafe``), so ``with env.budget(target="nonsense") as b: b.actual(tokens=3)`` runs on.

Like OpenTelemetry's ``NonRecordingSpan`` it is a real subtype: it subclasses the envelope
and every stage recorder, so it type-checks wherever one of them is expected, and
``is_recording()`` is False. Every public method is overridden here by a function that
accepts any arguments and does nothing: about one function call, no allocation, no
argument checks. It never changes: attribute writes are ignored.
"""

from __future__ import annotations

from typing import Any, Final

from opentelemetry import trace

from ._envelope import Envelope
from ._stages import Assembly, Budget, Compaction, Selection, Surface

__all__ = ["NOOP"]


class _NoOp(Envelope, Surface, Selection, Budget, Assembly, Compaction):
    """Accepts every recorder call and does nothing; shared, never allocated per call."""

    context_id = ""
    surface_id = selection_id = budget_id = assembly_id = compaction_id = ""
    target = None
    hash = None
    candidate_count = None
    _span = trace.INVALID_SPAN  # what ``span`` returns
    _ended = True  # never the current envelope
    _links = None  # nothing to compare blocks with

    def __init__(self) -> None:  # no span, no state: nothing of the recorders' own
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        pass  # shared: a caller's write (``sel.candidate_count = 3``) must not stick

    def __enter__(self) -> _NoOp:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None  # the application's exception passes through unchanged

    def _self(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def _none(self, *args: Any, **kwargs: Any) -> None:
        return None

    def _empty(self, *args: Any, **kwargs: Any) -> str:
        return ""

    def _false(self, *args: Any, **kwargs: Any) -> bool:
        return False

    # Envelope
    surface = selection = budget = assembly = compaction = _self
    injection = missing = _empty
    missing_requested = missing_resolved = redaction = set_lifecycle = mark_compacted = _none
    # every recorder
    stop = fail = _none
    is_recording = _false
    # Surface, Selection, Budget
    add = update = remove = selected = omitted = segment = truncated = actual = _none
    overflowed = _none
    # Assembly, Compaction
    block = blocks = loss_note = set = source = _none
    # internal, called by the instrumentors
    _block_sources = _none
    inject = summary = _empty


#: The shared no-op recorder.
NOOP: Final[_NoOp] = _NoOp()
