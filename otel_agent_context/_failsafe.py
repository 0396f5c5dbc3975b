"""Telemetry never breaks the host: the library's own errors are logged, not raised.

``_guard`` wraps every public method of the API: when the method fails it logs a warning
instead of raising into the agent, and returns what the caller can go on using: the shared
no-op recorder for a method that returns a recorder (``returns=RECORDER``), an empty id for
one that returns an id (``returns=""``), else ``None``. Strict mode
(``OTEL_AGENT_CONTEXT_STRICT=true``, or :func:`set_strict` as ``otel_agent_context.testing``
does) raises instead, so the test suite sees every error.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar, overload

from . import _env

__all__ = ["RECORDER", "is_strict", "set_strict"]

_log = logging.getLogger("otel_agent_context")
_F = TypeVar("_F", bound=Callable[..., Any])
_strict = os.environ.get(_env.OTEL_AGENT_CONTEXT_STRICT, "").lower() in ("1", "true", "yes")


def set_strict(value: bool) -> None:
    """Raise internal errors instead of logging them (used by ``otel_agent_context.testing``)."""
    global _strict
    _strict = value


def is_strict() -> bool:
    """Whether internal errors are raised (strict mode) rather than logged."""
    return _strict


class _Fallback(enum.Enum):
    RECORDER = "the shared no-op recorder"


#: ``_guard(returns=RECORDER)``: a failed call returns the shared no-op recorder. Looked up
#: when a call fails, not when the method is decorated: the no-op subclasses the recorders,
#: so it is made after them.
RECORDER = _Fallback.RECORDER


@overload
def _guard(fn: _F, /) -> _F: ...


@overload
def _guard(*, returns: Any = None) -> Callable[[_F], _F]: ...


def _guard(fn: Callable[..., Any] | None = None, /, *, returns: Any = None) -> Any:
    """Log the library's own errors instead of raising them into the agent; a failed call
    returns ``returns`` (``RECORDER``: the shared no-op)."""
    if fn is None:
        return functools.partial(_guard, returns=returns)
    name = fn.__qualname__
    method = fn

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception:
            if _strict:
                raise
            _log.warning("otel_agent_context: %s failed; telemetry for this call is lost",
                         name, exc_info=True)
            if returns is RECORDER:
                from ._noop import NOOP

                return NOOP
            return returns

    return wrapper
