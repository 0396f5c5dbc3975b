"""Telemetry never breaks the host: the library's own errors are logged, not raised.

``_guard`` wraps every public method of the API: when the method fails it logs a warning
instead of raising into the agent. Strict mode (``OTEL_AGENT_CONTEXT_STRICT=true``, or
:func:`set_strict` as ``otel_agent_context.testing`` does) raises instead, so the test suite
sees every error.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from . import _env

__all__ = ["is_strict", "set_strict"]

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


def _guard(fn: _F) -> _F:
    """Log the library's own errors instead of raising them into the agent."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            if _strict:
                raise
            _log.warning("otel_agent_context: %s failed; telemetry for this call is lost",
                         fn.__qualname__, exc_info=True)
            return None

    return wrapper  # type: ignore[return-value]
