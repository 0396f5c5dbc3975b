"""What every recorder shares: the start/stop/fail lifecycle, and the value helpers.

One lifecycle everywhere: every recorder is started when it is created, ends with
``stop()`` or ``fail(exc)``, and ``with`` is a thin wrapper that calls one of them. The
application's exceptions pass through ``with`` blocks unchanged.
"""

from __future__ import annotations

from typing import Any, TypeVar

from opentelemetry.trace import Span, Status, StatusCode

from . import _semconv as S
from ._attributes import to_ns
from ._enums import ContextKind
from ._failsafe import _guard
from ._records import ContextItem

__all__: list[str] = []

_R = TypeVar("_R", bound="_Recorder")
_ENUM_TABLES: dict[type, dict[Any, str]] = {}


def _enum(cls: type, value: Any) -> str | None:
    """The plain string of an enum value (member or string), validated; None stays None.

    A dict lookup instead of ``cls(value)``: enum construction costs more than the event."""
    if value is None:
        return None
    table = _ENUM_TABLES.get(cls)
    if table is None:
        table = _ENUM_TABLES[cls] = {}
        for member in cls:  # type: ignore[attr-defined]
            table[member] = table[member.value] = member.value
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        attrs[key] = value


def _as_item(item: ContextItem | str, kind: Any, token_estimate: int | None) -> ContextItem:
    """The item of a call that takes a :class:`ContextItem` or an id with its ``kind``."""
    if isinstance(item, ContextItem):
        if kind is not None:
            _enum(ContextKind, kind)  # the record's kind wins, but a bad one is still misuse
        return item
    return ContextItem(item_id=item, context_kind=kind, token_estimate=token_estimate)


class _Recorder:
    """start/stop/fail lifecycle shared by the envelope and the stages."""

    _span: Span
    _ended: bool

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.stop()
        else:
            self.fail(exc)
        # returning None lets the application's exception pass through unchanged

    def _finish(self, end_time: int | str | None) -> None:
        raise NotImplementedError

    @_guard(returns=False)
    def is_recording(self) -> bool:
        """Whether this recorder's span records (False on the shared no-op recorder, and
        once an owned span has ended)."""
        return self._span.is_recording()

    @_guard
    def stop(self, *, end_time: int | str | None = None) -> None:
        """Record the stage's final attributes and end its span (idempotent)."""
        if self._ended:
            return
        end = to_ns(end_time)  # a bad time fails the call before anything changes
        self._ended = True
        self._finish(end)

    @_guard
    def fail(self, exc: BaseException, *, end_time: int | str | None = None) -> None:
        """Mark the span as failed with ``error.type`` and end it (idempotent)."""
        if self._ended:
            return
        end = to_ns(end_time)
        if self._span.is_recording():  # not on a span another instrumentor has ended
            self._span.set_status(Status(StatusCode.ERROR, _describe(exc)))
            self._span.set_attribute(S.ERROR_TYPE, type(exc).__qualname__)
        self._ended = True
        self._finish(end)


def _describe(exc: BaseException) -> str:
    """An error's text for a span status; its type's name when it has none (or its
    ``__str__`` raises: recording the failure must not fail)."""
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__
