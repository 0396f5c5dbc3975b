"""The instrumentation API: ``AgentContext``, the entry point that makes envelopes.

The recorders live in their own modules: the envelope (:mod:`._envelope`), the stages
(:mod:`._stages`), the metric instruments (:mod:`._instruments`), the shared no-op
(:mod:`._noop`); the error policy in :mod:`._failsafe`. This module re-exports them, so
``from otel_agent_context._api import Envelope`` keeps working.

When nothing records (no SDK configured, or the envelope span is sampled out) every call
returns a shared no-op recorder: about one function call, no allocation.

Context events are span events, or, with ``events_as="logs"``, log records on their spans
(:mod:`._events_out`; every event leaves through ``Envelope._emit``).

Telemetry never breaks the host agent: internal errors are logged (raised only under
``OTEL_AGENT_CONTEXT_STRICT=true``), and the application's exceptions pass through ``with``
blocks unchanged.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind

from . import _env, _events_out, _failsafe
from . import _semconv as S
from ._attributes import to_ns
from ._enums import Lifecycle, Scope
from ._envelope import _PRODUCER, Envelope, current_envelope, span_conversation
from ._envelope import _RUN_ENVELOPE as _RUN_ENVELOPE
from ._envelope import _run_envelope_parent as _run_envelope_parent
from ._failsafe import RECORDER, _guard
from ._failsafe import set_strict as set_strict
from ._fastattrs import set_attributes
from ._instruments import _Instruments
from ._noop import NOOP
from ._noop import _NoOp as _NoOp
from ._recorder import _enum, _put
from ._stages import Assembly, Budget, Compaction, Selection, Surface
from ._version import __version__

_NOOP_ENVELOPE = NOOP  # its name before the split (tests import it)
#: a plain string: an enum member's ``.value`` is a Python-level property read, every call
_TURN = Scope.TURN.value

__all__ = [
    "AgentContext",
    "Assembly",
    "Budget",
    "Compaction",
    "Envelope",
    "Selection",
    "Surface",
    "current_envelope",
]


class _Ids:
    """Random ids; ``otel_agent_context.testing`` swaps in a deterministic sequence."""

    def __init__(self) -> None:
        self._rand = random.Random()

    def new(self, prefix: str) -> str:
        # %-format: ~0.8K instructions less an id than the f-string (four ids a call)
        return "%s_%016x" % (prefix, self._rand.getrandbits(64))  # noqa: UP031


class AgentContext:
    """Entry point: makes envelopes. Configuration is decided here, once.

    ``capture_content``: record content attributes; default from the GenAI switch
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``blocked_sensitivities``: item
    sensitivities never captured (default ``OTEL_AGENT_CONTEXT_BLOCKED_SENSITIVITIES`` or
    ``secret,restricted``). Providers default to the global ones.

    ``events_as``: ``"span_events"`` (default) or ``"logs"``, each context event as a log
    record on its span through ``logger_provider``'s logger (OpenTelemetry's log-based events,
    OTEP 4430); default from ``OTEL_AGENT_CONTEXT_EVENTS``. Without an SDK LoggerProvider
    the events stay span events.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
        blocked_sensitivities: Iterable[str] | None = None,
        producer: str = _PRODUCER,
        logger_provider: Any = None,
        events_as: str | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            "otel_agent_context", __version__, tracer_provider, schema_url=S.SCHEMA_URL
        )
        meter = metrics.get_meter("otel_agent_context", __version__, meter_provider,
                                  schema_url=S.SCHEMA_URL)
        self._instruments = _Instruments(meter)
        if capture_content is None:
            capture_content = _env.capture_content_from_env(
                os.environ.get(_env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT))
        self.capture_content: bool = capture_content
        if blocked_sensitivities is None:
            raw = os.environ.get(_env.OTEL_AGENT_CONTEXT_BLOCKED_SENSITIVITIES)
            blocked_sensitivities = (
                [s.strip() for s in raw.split(",") if s.strip()] if raw is not None
                else _env.DEFAULT_BLOCKED_SENSITIVITIES)
        # lower-case: "Secret" from a document's metadata is as secret as "secret"
        self.blocked_sensitivities: frozenset[str] = frozenset(
            s.lower() for s in blocked_sensitivities)
        self.producer = producer
        self._ids = _Ids()
        self._events = _events_out.EventOutput(_events_out.events_as_from(events_as),
                                               logger_provider)
        self.events_as: str = self._events.events_as

    @_guard(returns=RECORDER)
    def envelope(
        self,
        *,
        scope: Scope | str = Scope.TURN,
        context_id: str | None = None,
        lifecycle: Lifecycle | str | None = None,
        parent_id: str | None = None,
        agent_name: str | None = None,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        model: str | None = None,
        user_id: str | None = None,
        actor_refs: Sequence[str] = (),
        runtime_refs: Sequence[str] = (),
        policy_refs: Sequence[str] = (),
        evidence_refs: Sequence[str] = (),
        span: Span | None = None,
        links: Sequence[trace.Link] = (),
        start_time: int | str | None = None,
    ) -> Envelope:
        """Start an envelope: a ``context.envelope`` span (child of the current span), or,
        with ``span=``, the envelope attributes on a span the caller owns (e.g. an
        ``invoke_agent`` or ``chat`` span), which the caller ends after ``stop()``.

        Use it as ``with ctx.envelope(...) as env:`` (the envelope is current inside the
        block, so nested model calls and :func:`current_envelope` see it), or call
        ``stop()`` / ``fail(exc)`` yourself. An envelope that names no ``conversation_id``
        (nor its caller's span one) opened inside another is part of the outer one's.
        """
        owned = span is None
        if span is None:
            span = self._tracer.start_span(S.SPAN_ENVELOPE, kind=SpanKind.INTERNAL,
                                           links=links or None, start_time=to_ns(start_time))
        if not span.is_recording():
            return NOOP
        # the guard checked the arguments (enum values included): nothing fails from here
        scope_value: str = _enum(Scope, scope)  # type: ignore[assignment]
        attrs: dict[str, Any] = {
            S.CONTEXT_ID: context_id or self._ids.new("ctx"),
            S.CONTEXT_SCOPE: scope_value,
            S.CONTEXT_SCHEMA_VERSION: S.SCHEMA_VERSION,
            S.CONTEXT_PRODUCER: self.producer,
        }
        if not conversation_id and (owned or span_conversation(span) is None):
            # opened inside another envelope (a sub-agent's turn, a handoff, a task): part
            # of the outer one's conversation, as the store's session view groups turns
            outer = current_envelope()
            if outer is not None:  # the outer's span first: a caller's may have its own since
                conversation_id = span_conversation(outer.span) or outer._conversation
        _put(attrs, S.CONTEXT_PARENT_ID, parent_id)
        _put(attrs, S.GEN_AI_AGENT_NAME, agent_name)
        _put(attrs, S.GEN_AI_AGENT_ID, agent_id)
        _put(attrs, S.GEN_AI_CONVERSATION_ID, conversation_id)
        _put(attrs, S.GEN_AI_REQUEST_MODEL, model)
        _put(attrs, S.USER_ID, user_id)
        for key, refs in ((S.CONTEXT_ACTOR_REFS, actor_refs),
                          (S.CONTEXT_RUNTIME_REFS, runtime_refs),
                          (S.CONTEXT_POLICY_REFS, policy_refs),
                          (S.CONTEXT_EVIDENCE_REFS, evidence_refs)):
            if refs:
                attrs[key] = tuple(refs)
        set_attributes(span, attrs)
        env = Envelope(self, span, owned, attrs[S.CONTEXT_ID], _enum(Lifecycle, lifecycle),
                       agent_name or "unknown", scope_value, self._events.logger())
        # none: a call's, or the caller's span's when a call comes (_adopt_conversation)
        env._conversation = conversation_id or None
        return env

    def _call_envelope(self, span: Span) -> Envelope:
        """The envelope of one auto-instrumented model call, on its recording inference
        span (which carries the model already): a turn, its attributes written with the
        call's records at its start and with its budget's when it stops (see
        ``Envelope._set``)."""
        context_id = self._ids.new("ctx")
        env = Envelope(self, span, False, context_id, None, "unknown", _TURN,
                       self._events.logger())
        env._pending = {S.CONTEXT_ID: context_id, S.CONTEXT_SCOPE: _TURN,
                        S.CONTEXT_SCHEMA_VERSION: S.SCHEMA_VERSION,
                        S.CONTEXT_PRODUCER: self.producer}
        # ours, but the producer: the application's (a string, unless misused)
        env._pending_checked = isinstance(self.producer, str)
        return env


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        # ``_api._strict`` was read by other modules before the split: the flag lives in
        # ``_failsafe`` now (use ``_failsafe.is_strict()``).
        if name == "_strict":
            return _failsafe.is_strict()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
