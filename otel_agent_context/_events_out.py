"""Where the API's context events go: span events (default) or log-based events.

OpenTelemetry is deprecating the Span Event API in favour of events carried by the Logs
API (OTEP 4430): a log record with ``event_name``, emitted in the context of the span the
event belongs to, so it carries that span's trace id and span id. ``AgentContext(events_as=
"logs")`` (or ``OTEL_AGENT_CONTEXT_EVENTS=logs``) sends every context event that way; the
envelope span then counts them in ``context.event_count`` so the processor knows when all
have arrived. Span events stay the default: Jaeger shows them, and the contract's design is
built on them.

An envelope decides once, when it starts: log records only when the logger provider
records them (an SDK ``LoggerProvider`` with a processor); with none configured the events
stay span events, so nothing is lost, and a warning says so once.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from opentelemetry import _logs, trace
from opentelemetry.trace import Span

from . import _env
from . import _semconv as S
from ._version import __version__

__all__ = ["LOGS", "SPAN_EVENTS", "EventOutput", "events_as_from"]

_log = logging.getLogger("otel_agent_context")

SPAN_EVENTS = "span_events"
LOGS = "logs"
_MODES = (SPAN_EVENTS, LOGS)


def events_as_from(value: str | None) -> str:
    """The mode asked for (the argument, else ``OTEL_AGENT_CONTEXT_EVENTS``); an unknown
    value is logged and means span events (telemetry settings never stop the application)."""
    source = "events_as"
    if value is None:
        value = os.environ.get(_env.OTEL_AGENT_CONTEXT_EVENTS)
        source = _env.OTEL_AGENT_CONTEXT_EVENTS
        if value is None:
            return SPAN_EVENTS
    mode = str(value).strip().lower()
    if mode in _MODES:
        return mode
    _env.warn_once(source, str(value), f"is not one of {', '.join(_MODES)}; context events "
                   "stay span events")
    return SPAN_EVENTS


class EventOutput:
    """An AgentContext's choice: its logger when events go as log records, else None."""

    def __init__(self, events_as: str, logger_provider: Any = None) -> None:
        self.events_as = events_as
        self._logger: Any = None
        self._warned = False
        if events_as == LOGS:
            self._logger = _logs.get_logger("otel_agent_context", __version__, logger_provider,
                                            schema_url=S.SCHEMA_URL)

    def logger(self) -> Any:
        """The logger an envelope starting now emits with, or None for span events."""
        logger = self._logger
        if logger is None:
            return None
        try:
            if logger.enabled():
                return logger
        except Exception:  # noqa: BLE001 - a broken provider: fall back, say so below
            _log.debug("otel_agent_context: logger.enabled() failed", exc_info=True)
        if not self._warned:
            self._warned = True
            _log.warning("otel_agent_context: events_as='logs' but no LoggerProvider records "
                         "log records; context events are sent as span events instead")
        return None


def emit(logger: Any, span: Span, name: str, attributes: dict[str, Any],
         timestamp: int | None) -> None:
    """One context event as a log record on ``span`` (its trace id and span id), dated now
    when no time is given (what a span event would get)."""
    logger.emit(event_name=name, attributes=attributes,
                timestamp=timestamp if timestamp is not None else time.time_ns(),
                context=trace.set_span_in_context(span))
