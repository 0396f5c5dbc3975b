"""The instrumentation API: stage recorders that emit the contract's spans and events.

One lifecycle everywhere: every recorder is started when it is created, ends with
``stop()`` or ``fail(exc)``, and ``with`` is a thin wrapper that calls one of them. Item
events past 100 on one span go to ``context.items`` child spans; stage spans carry the
true counts; the envelope span carries ``context.span_count`` (contract section 1).

When nothing records (no SDK configured, or the envelope span is sampled out) every call
returns a shared no-op recorder: about one function call, no allocation.

Telemetry never breaks the host agent: internal errors are logged (raised only under
``OTEL_AGENT_CONTEXT_STRICT=true``), and the application's exceptions pass through ``with``
blocks unchanged.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import _env
from . import _semconv as S
from ._attributes import digest_text, item_attributes, ordered_hash, to_ns
from ._enums import (
    CompactionMethod,
    ContextKind,
    InjectionPoint,
    Lifecycle,
    OmissionReason,
    OverflowStrategy,
    RedactionState,
    Scope,
    Severity,
    Visibility,
)
from ._records import ContextItem
from ._version import __version__

__all__ = [
    "AgentContext",
    "Assembly",
    "Budget",
    "Compaction",
    "Envelope",
    "Selection",
    "Surface",
]

_log = logging.getLogger("otel_agent_context")
_ENVELOPE_KEY = otel_context.create_key("otel_agent_context.envelope")
_PRODUCER = f"otel-agent-context/{__version__}"
_F = TypeVar("_F", bound=Callable[..., Any])
#: Histogram buckets for ratios: fine near 1.0, where budgets and coverage matter.
_RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0, 1.1, 1.25, 1.5, 2.0)
_strict = os.environ.get(_env.OTEL_AGENT_CONTEXT_STRICT, "").lower() in ("1", "true", "yes")


def set_strict(value: bool) -> None:
    """Raise internal errors instead of logging them (used by ``otel_agent_context.testing``)."""
    global _strict
    _strict = value


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
    if isinstance(item, ContextItem):
        return item
    return ContextItem(item_id=item, context_kind=kind, token_estimate=token_estimate)


class _Ids:
    """Random ids; ``otel_agent_context.testing`` swaps in a deterministic sequence."""

    def __init__(self) -> None:
        self._rand = random.Random()

    def new(self, prefix: str) -> str:
        return f"{prefix}_{self._rand.getrandbits(64):016x}"


class _Instruments:
    """The contract section 3 instruments, made once per AgentContext."""

    def __init__(self, meter: metrics.Meter) -> None:
        c = meter.create_counter

        def h(name: str, unit: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(name, unit, description,
                                          explicit_bucket_boundaries_advisory=_RATIO_BUCKETS)

        self.envelopes = c(S.METRIC_ENVELOPES, "{envelope}", "Context envelopes completed")
        self.utilization = h(S.METRIC_BUDGET_UTILIZATION, "1", "Budget utilization (actual/max)")
        self.overflows = c(S.METRIC_BUDGET_OVERFLOWS, "{overflow}", "Budgets that overflowed")
        self.truncations = c(S.METRIC_TRUNCATIONS, "{truncation}", "Truncations to fit a budget")
        self.truncated_tokens = c(S.METRIC_TRUNCATED_TOKENS, "{token}", "Tokens cut by truncation")
        self.selected = c(S.METRIC_ITEMS_SELECTED, "{item}", "Items selected")
        self.omitted = c(S.METRIC_ITEMS_OMITTED, "{item}", "Candidate items omitted")
        self.omitted_tokens = c(S.METRIC_OMITTED_TOKENS, "{token}", "Tokens of omitted items")
        self.injections = c(S.METRIC_INJECTIONS, "{injection}", "Context injections")
        self.compactions = c(S.METRIC_COMPACTIONS, "{compaction}", "Compactions")
        self.coverage = h(S.METRIC_COMPACTION_COVERAGE, "1", "Compaction source coverage")
        self.uncovered = c(S.METRIC_COMPACTION_UNCOVERED_SOURCES, "{source}",
                           "Compaction sources the summary does not account for")
        self.loss_notes = c(S.METRIC_COMPACTION_LOSS_NOTES, "{note}", "Compaction loss notes")
        self.missing_detected = c(S.METRIC_MISSING_DETECTED, "{gap}", "Missing context detected")
        self.missing_resolved = c(S.METRIC_MISSING_RESOLVED, "{gap}", "Missing context resolved")


# ---------------------------------------------------------------------------------------
# AgentContext


class AgentContext:
    """Entry point: makes envelopes. Configuration is decided here, once.

    ``capture_content``: record content attributes; default from the GenAI switch
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. ``blocked_sensitivities``: item
    sensitivities never captured (default ``OTEL_AGENT_CONTEXT_BLOCKED_SENSITIVITIES`` or
    ``secret,restricted``). Providers default to the global ones.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
        blocked_sensitivities: Iterable[str] | None = None,
        producer: str = _PRODUCER,
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
        ``stop()`` / ``fail(exc)`` yourself.
        """
        try:
            owned = span is None
            if owned:
                span = self._tracer.start_span(S.SPAN_ENVELOPE, kind=SpanKind.INTERNAL,
                                               links=links or None,
                                               start_time=to_ns(start_time))
            assert span is not None
            if not span.is_recording():
                return _NOOP_ENVELOPE
            attrs: dict[str, Any] = {
                S.CONTEXT_ID: context_id or self._ids.new("ctx"),
                S.CONTEXT_SCOPE: _enum(Scope, scope),
                S.CONTEXT_SCHEMA_VERSION: S.SCHEMA_VERSION,
                S.CONTEXT_PRODUCER: self.producer,
            }
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
            span.set_attributes(attrs)
            return Envelope(self, span, owned, attrs[S.CONTEXT_ID],
                            _enum(Lifecycle, lifecycle), agent_name or "unknown",
                            attrs[S.CONTEXT_SCOPE])
        except Exception:
            if _strict:
                raise
            _log.warning("otel_agent_context: envelope() failed; no context telemetry for it",
                         exc_info=True)
            return _NOOP_ENVELOPE


#: The envelope of a framework run whose start and end callbacks may run in different
#: contexts (LangChain's async callbacks): set without touching the OpenTelemetry context,
#: so a reset that cannot happen leaves nothing but an ended envelope, which is ignored.
_RUN_ENVELOPE: contextvars.ContextVar[Envelope | None] = contextvars.ContextVar(
    "otel_agent_context.run_envelope", default=None)


def _run_envelope_parent() -> Context | None:
    """The context to parent a span to when the current envelope is a framework run's (set
    through ``_RUN_ENVELOPE``, so its span is not the current one): its span. None when the
    current context already parents spans where they belong."""
    if isinstance(otel_context.get_value(_ENVELOPE_KEY), Envelope):
        return None
    env = _RUN_ENVELOPE.get()
    if env is None or env._ended:
        return None
    return trace.set_span_in_context(env._span)


def current_envelope() -> Envelope | None:
    """The envelope made current by ``with ctx.envelope(...)`` (or by an instrumented
    framework run), if any."""
    env = otel_context.get_value(_ENVELOPE_KEY)
    if isinstance(env, Envelope) and not env._ended:
        return env
    env = _RUN_ENVELOPE.get()
    return env if env is not None and not env._ended else None


# ---------------------------------------------------------------------------------------
# recorders


class _Recorder:
    """start/stop/fail lifecycle shared by the envelope and the stages."""

    _span: Span
    _ended: bool

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.stop()
        else:
            self.fail(exc)
        # returning None lets the application's exception pass through unchanged

    def _finish(self, end_time: int | str | None) -> None:
        raise NotImplementedError

    @_guard
    def stop(self, *, end_time: int | str | None = None) -> None:
        """Record the stage's final attributes and end its span (idempotent)."""
        if self._ended:
            return
        self._ended = True
        self._finish(end_time)

    @_guard
    def fail(self, exc: BaseException, *, end_time: int | str | None = None) -> None:
        """Mark the span as failed with ``error.type`` and end it (idempotent)."""
        if self._ended:
            return
        self._span.set_status(Status(StatusCode.ERROR, str(exc) or type(exc).__name__))
        self._span.set_attribute(S.ERROR_TYPE, type(exc).__qualname__)
        self._ended = True
        self._finish(end_time)


class Envelope(_Recorder):
    """One context envelope (a turn, task, session, tool call, review or handoff)."""

    def __init__(self, owner: AgentContext, span: Span, owned: bool, context_id: str,
                 lifecycle: str | None, agent: str, scope: str) -> None:
        self._owner = owner
        self._span = span
        self._owned = owned
        self.context_id = context_id
        self._lifecycle = lifecycle
        self._agent = agent
        self._scope = scope
        self._ctx = trace.set_span_in_context(span)
        self._span_count = 0
        self._ended = False
        self._token: object | None = None
        self._stages: set[str] = set()
        self._redacted: set[str] = set()
        self._joined: set[int] = set()  # spans of others that joined (e.g. inference spans)
        self._capture = owner.capture_content  # read per item event: keep it one lookup away
        self._blocked = owner.blocked_sensitivities
        self._missing_severity: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Envelope:
        ctx = otel_context.set_value(_ENVELOPE_KEY, self, self._ctx)
        self._token = otel_context.attach(ctx)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        super().__exit__(exc_type, exc, tb)

    def _finish(self, end_time: int | str | None) -> None:
        lifecycle = self._lifecycle or self._derived_lifecycle()
        # Set last: span limits drop the oldest attributes first, never these.
        self._span.set_attributes({S.CONTEXT_LIFECYCLE: lifecycle, S.CONTEXT_SCOPE: self._scope,
                                   S.CONTEXT_SPAN_COUNT: self._span_count,
                                   S.CONTEXT_ID: self.context_id})
        self._owner._instruments.envelopes.add(
            1, {"scope": self._scope, "agent": self._agent, "status": "complete"})
        if self._owned:
            self._span.end(end_time=to_ns(end_time))

    def _derived_lifecycle(self) -> str:
        for stage, state in (("injection", Lifecycle.INJECTED), ("assembly", Lifecycle.ASSEMBLED),
                             ("selection", Lifecycle.SELECTED),
                             ("compaction", Lifecycle.COMPACTED),
                             ("surface", Lifecycle.AVAILABLE)):
            if stage in self._stages:
                return state.value
        return Lifecycle.DRAFT.value

    @property
    def span(self) -> Span:
        """The envelope span (to add links or attributes of your own)."""
        return self._span

    def set_lifecycle(self, lifecycle: Lifecycle | str) -> None:
        """Set the lifecycle state written at ``stop()`` (default: derived from the stages)."""
        self._lifecycle = _enum(Lifecycle, lifecycle)

    # -- stages -----------------------------------------------------------------------

    def _child(self, name: str, attrs: dict[str, Any], start_time: int | str | None,
               parent: Span | None = None) -> Span:
        attrs[S.CONTEXT_ID] = self.context_id
        ctx = self._ctx if parent is None else trace.set_span_in_context(parent)
        with self._lock:
            self._span_count += 1
        return self._owner._tracer.start_span(name, ctx, SpanKind.INTERNAL, attrs,
                                              start_time=to_ns(start_time))

    @_guard
    def surface(self, *, surface_id: str | None = None,
                start_time: int | str | None = None) -> Surface:
        """Start recording the candidates available before selection."""
        sid = surface_id or self._owner._ids.new("srf")
        self._stages.add("surface")
        return Surface(self, self._child(S.SPAN_SURFACE, {S.SURFACE_ID: sid}, start_time), sid)

    @_guard
    def selection(
        self, *, selection_id: str | None = None, surface_id: str | None = None,
        intent: str | None = None, query: str | None = None, policy: str | None = None,
        rationale: str | None = None, budget_id: str | None = None,
        actor_ref: str | None = None, model_ref: str | None = None,
        start_time: int | str | None = None,
    ) -> Selection:
        """Start recording a selection: call ``selected()`` and ``omitted()`` per candidate."""
        sid = selection_id or self._owner._ids.new("sel")
        attrs: dict[str, Any] = {S.SELECTION_ID: sid}
        _put(attrs, S.SURFACE_ID, surface_id)
        _put(attrs, S.SELECTION_INTENT, intent)
        _put(attrs, S.SELECTION_POLICY, policy)
        _put(attrs, S.BUDGET_ID, budget_id)
        _put(attrs, S.SELECTION_ACTOR_REF, actor_ref)
        _put(attrs, S.SELECTION_MODEL_REF, model_ref)
        if self._owner.capture_content:
            _put(attrs, S.SELECTION_QUERY, query)
            _put(attrs, S.SELECTION_RATIONALE, rationale)
        self._stages.add("selection")
        return Selection(self, self._child(S.SPAN_SELECTION, attrs, start_time), sid)

    @_guard
    def budget(
        self, *, budget_id: str | None = None, target: Visibility | str | None = Visibility.MODEL,
        max_tokens: int | None = None, reserved_tokens: int | None = None,
        max_bytes: int | None = None, max_items: int | None = None,
        overflow_strategy: OverflowStrategy | str | None = None, window_id: str | None = None,
        start_time: int | str | None = None,
    ) -> Budget:
        """Start recording a token budget and context window for a target."""
        bid = budget_id or self._owner._ids.new("bud")
        attrs: dict[str, Any] = {S.BUDGET_ID: bid}
        _put(attrs, S.BUDGET_TARGET, _enum(Visibility, target))
        _put(attrs, S.BUDGET_MAX_TOKENS, max_tokens)
        _put(attrs, S.BUDGET_RESERVED_TOKENS, reserved_tokens)
        _put(attrs, S.BUDGET_MAX_BYTES, max_bytes)
        _put(attrs, S.BUDGET_MAX_ITEMS, max_items)
        _put(attrs, S.BUDGET_OVERFLOW_STRATEGY, _enum(OverflowStrategy, overflow_strategy))
        _put(attrs, S.WINDOW_ID, window_id)
        self._stages.add("budget")
        return Budget(self, self._child(S.SPAN_BUDGET, attrs, start_time), bid, attrs)

    @_guard
    def assembly(
        self, *, assembly_id: str | None = None,
        target: Visibility | str | None = Visibility.MODEL, budget_id: str | None = None,
        wrapping_policy: str | None = None,
        separator_policy: str | None = None,
        redaction_state: RedactionState | str | None = None,
        visibility: Sequence[Visibility | str] = (), start_time: int | str | None = None,
    ) -> Assembly:
        """Start recording the ordered blocks prepared for a target."""
        aid = assembly_id or self._owner._ids.new("asm")
        tgt = _enum(Visibility, target)
        attrs: dict[str, Any] = {S.ASSEMBLY_ID: aid}
        _put(attrs, S.ASSEMBLY_TARGET, tgt)
        _put(attrs, S.BUDGET_ID, budget_id)
        _put(attrs, S.ASSEMBLY_WRAPPING_POLICY, wrapping_policy)
        _put(attrs, S.ASSEMBLY_SEPARATOR_POLICY, separator_policy)
        _put(attrs, S.ASSEMBLY_REDACTION_STATE, _enum(RedactionState, redaction_state))
        if visibility:
            attrs[S.ASSEMBLY_VISIBILITY] = tuple(_enum(Visibility, v) for v in visibility)
        self._stages.add("assembly")
        return Assembly(self, self._child(S.SPAN_ASSEMBLY, attrs, start_time), aid, tgt)

    @_guard
    def compaction(
        self, *, compaction_id: str | None = None,
        method: CompactionMethod | str | None = CompactionMethod.ABSTRACTIVE_SUMMARY,
        trigger: str | None = None, scope: str | None = None, validation: str | None = None,
        replacement_policy: str | None = None, start_time: int | str | None = None,
    ) -> Compaction:
        """Start recording the replacement of context with a summary or digest."""
        cid = compaction_id or self._owner._ids.new("cmp")
        m = _enum(CompactionMethod, method)
        attrs: dict[str, Any] = {S.COMPACTION_ID: cid}
        _put(attrs, S.COMPACTION_METHOD, m)
        _put(attrs, S.COMPACTION_TRIGGER, trigger)
        _put(attrs, S.COMPACTION_SCOPE, scope)
        _put(attrs, S.COMPACTION_VALIDATION, validation)
        _put(attrs, S.COMPACTION_REPLACEMENT_POLICY, replacement_policy)
        self._stages.add("compaction")
        return Compaction(self, self._child(S.SPAN_COMPACTION, attrs, start_time), cid, m,
                          trigger or "unknown")

    # -- events on the envelope (or another span of it) --------------------------------

    def _target_span(self, span: Span | None) -> Span:
        if span is None or span is self._span:
            return self._span
        # A span outside the envelope's own (e.g. the GenAI inference span) joins it.
        if span.is_recording():
            span_id = span.get_span_context().span_id
            if span_id not in self._joined:
                span.set_attribute(S.CONTEXT_ID, self.context_id)
                with self._lock:
                    self._joined.add(span_id)
                    self._span_count += 1
        return span

    @_guard
    def injection(
        self, *, assembly_id: str | None = None,
        target: Visibility | str | None = Visibility.MODEL,
        injection_point: InjectionPoint | str | None = InjectionPoint.MESSAGE_HISTORY,
        injection_id: str | None = None, native_id: str | None = None, hash: str | None = None,
        final_ref: str | None = None, visibility: Sequence[Visibility | str] = (),
        span: Span | None = None, timestamp: int | str | None = None,
    ) -> str:
        """Record where assembled context became visible. ``span``: the span that saw it,
        normally the GenAI inference span (``chat {model}``); it joins the envelope.
        Returns the injection id."""
        iid = injection_id or self._owner._ids.new("inj")
        tgt = _enum(Visibility, target)
        point = _enum(InjectionPoint, injection_point)
        attrs: dict[str, Any] = {S.INJECTION_ID: iid}
        _put(attrs, S.INJECTION_TARGET, tgt)
        _put(attrs, S.INJECTION_POINT, point)
        _put(attrs, S.ASSEMBLY_ID, assembly_id)
        _put(attrs, S.INJECTION_NATIVE_ID, native_id)
        _put(attrs, S.INJECTION_HASH, hash)
        _put(attrs, S.INJECTION_FINAL_REF, final_ref)
        if visibility:
            attrs[S.INJECTION_VISIBILITY] = tuple(_enum(Visibility, v) for v in visibility)
        self._target_span(span).add_event(S.EVENT_INJECTION_APPLIED, attrs, to_ns(timestamp))
        self._stages.add("injection")
        self._owner._instruments.injections.add(
            1, {"target": tgt or "unknown", "injection_point": point or "unknown"})
        return iid

    @_guard
    def missing(
        self, *, missing_id: str | None = None, question: str | None = None,
        needed_for: str | None = None, severity: Severity | str | None = Severity.MEDIUM,
        candidate_sources: Sequence[str] = (), blocked_actions: Sequence[str] = (),
        requested_from: str | None = None, status: str | None = "open",
        scope: str | None = None,
        span: Span | None = None, timestamp: int | str | None = None,
    ) -> str:
        """Record a known gap in the context (``context.missing.detected``); returns its id."""
        mid = missing_id or self._owner._ids.new("mis")
        sev = _enum(Severity, severity)
        attrs: dict[str, Any] = {S.MISSING_ID: mid}
        _put(attrs, S.MISSING_SEVERITY, sev)
        _put(attrs, S.MISSING_STATUS, status)
        if self._owner.capture_content:
            _put(attrs, S.MISSING_QUESTION, question)
        _put(attrs, S.MISSING_NEEDED_FOR, needed_for)
        _put(attrs, S.MISSING_REQUESTED_FROM, requested_from)
        _put(attrs, S.MISSING_SCOPE, scope)
        if candidate_sources:
            attrs[S.MISSING_CANDIDATE_SOURCES] = tuple(candidate_sources)
        if blocked_actions:
            attrs[S.MISSING_BLOCKED_ACTIONS] = tuple(blocked_actions)
        self._target_span(span).add_event(S.EVENT_MISSING_DETECTED, attrs, to_ns(timestamp))
        self._missing_severity[mid] = sev or "unknown"
        self._owner._instruments.missing_detected.add(1, {"agent": self._agent,
                                                          "severity": sev or "unknown"})
        return mid

    @_guard
    def missing_requested(self, missing_id: str, *, requested_from: str | None = None,
                          span: Span | None = None,
                          timestamp: int | str | None = None) -> None:
        """Record that a missing input was asked for (user, tool, retrieval, peer)."""
        attrs: dict[str, Any] = {S.MISSING_ID: missing_id}
        _put(attrs, S.MISSING_REQUESTED_FROM, requested_from)
        self._target_span(span).add_event(S.EVENT_MISSING_REQUESTED, attrs, to_ns(timestamp))

    @_guard
    def missing_resolved(self, missing_id: str, *, resolution_refs: Sequence[str] = (),
                         span: Span | None = None,
                         timestamp: int | str | None = None) -> None:
        """Record that a missing input arrived; ``resolution_refs`` say where from."""
        attrs: dict[str, Any] = {S.MISSING_ID: missing_id}
        if resolution_refs:
            attrs[S.MISSING_RESOLUTION_REFS] = tuple(resolution_refs)
        self._target_span(span).add_event(S.EVENT_MISSING_RESOLVED, attrs, to_ns(timestamp))
        sev = self._missing_severity.get(missing_id, "unknown")
        self._owner._instruments.missing_resolved.add(1, {"agent": self._agent,
                                                          "severity": sev})

    @_guard
    def redaction(self, item_id: str, *,
                  state: RedactionState | str = RedactionState.MASKED,
                  method: str | None = None, redacted_by: str | None = None,
                  policy_ref: str | None = None, timestamp: int | str | None = None) -> None:
        """Record that an item's content was redacted before it became visible."""
        attrs: dict[str, Any] = {S.ITEM_ID: item_id,
                                 S.REDACTION_STATE: _enum(RedactionState, state)}
        _put(attrs, S.REDACTION_METHOD, method)
        _put(attrs, S.REDACTION_REDACTED_BY, redacted_by)
        _put(attrs, S.POLICY_REF, policy_ref)
        self._span.add_event(S.EVENT_REDACTION_APPLIED, attrs, to_ns(timestamp))

    def mark_compacted(self, span: Span) -> None:
        """Say that a compacted summary was sent on an inference span
        (``gen_ai.conversation.compacted = true``; never set to false)."""
        if span.is_recording():
            span.set_attribute(S.GEN_AI_CONVERSATION_COMPACTED, True)

    # -- internal: items and the sensitivity policy -----------------------------------

    def _item_attrs(self, item: ContextItem) -> dict[str, Any]:
        attrs, withheld = item_attributes(item, self._capture, self._blocked)
        if withheld and item.item_id not in self._redacted:
            self._redacted.add(item.item_id)
            self.redaction(item.item_id, state=RedactionState.POLICY_BLOCKED,
                           method="content_capture_policy", redacted_by=_PRODUCER,
                           policy_ref=f"sensitivity:{item.sensitivity}")
        return attrs


class _Stage(_Recorder):
    """A stage span of an envelope with its item events (100 a span, then ``context.items``)."""

    def __init__(self, envelope: Envelope, span: Span) -> None:
        self._env = envelope
        self._span = span
        self._ended = False
        self._on_span = 0
        self._items_span: Span | None = None
        self._items_on_part = 0
        self._part = 0
        # replaying records (emit_bundle) writes their values as they are, derives nothing
        self._derive = True
        self._overrides: dict[str, Any] = {}

    def _item_event(self, name: str, attrs: dict[str, Any], timestamp: int | str | None) -> None:
        ts = timestamp if timestamp is None or isinstance(timestamp, int) else to_ns(timestamp)
        if self._on_span < S.MAX_ITEM_EVENTS_PER_SPAN:
            self._on_span += 1
            self._span.add_event(name, attrs, ts)
            return
        if self._items_span is None or self._items_on_part >= S.MAX_ITEM_EVENTS_PER_SPAN:
            if self._items_span is not None:
                self._items_span.end()
            self._part += 1
            self._items_on_part = 0
            self._items_span = self._env._child(
                S.SPAN_ITEMS,
                {S.ITEMS_STAGE: self._span.name if hasattr(self._span, "name") else "",
                 S.ITEMS_PART: self._part},
                ts, parent=self._span)  # from its first event's time: never after its end
        self._items_on_part += 1
        self._items_span.add_event(name, attrs, ts)

    def _end(self, attrs: dict[str, Any], end_time: int | str | None) -> None:
        if self._items_span is not None:
            self._items_span.end(end_time=to_ns(end_time))
            self._items_span = None
        if not self._derive:
            attrs = {}
        attrs.update(self._overrides)
        # Set last: span limits drop the oldest attributes first, never the grouping key.
        attrs[S.CONTEXT_ID] = self._env.context_id
        self._span.set_attributes(attrs)
        self._span.end(end_time=to_ns(end_time))


class Surface(_Stage):
    """Candidates available before selection (``context.surface``)."""

    def __init__(self, envelope: Envelope, span: Span, surface_id: str) -> None:
        super().__init__(envelope, span)
        self.surface_id = surface_id
        self._items: dict[str, int] = {}

    @_guard
    def add(self, item: ContextItem | str, *, kind: ContextKind | str | None = None,
            token_estimate: int | None = None, timestamp: int | str | None = None) -> None:
        """A candidate became available."""
        it = _as_item(item, kind, token_estimate)
        self._items[it.item_id] = it.token_estimate or 0
        self._item_event(S.EVENT_ITEM_ADDED, self._env._item_attrs(it), timestamp)

    @_guard
    def update(self, item: ContextItem, *, timestamp: int | str | None = None) -> None:
        """A candidate changed (new content, freshness, ...)."""
        self._items[item.item_id] = item.token_estimate or 0
        self._item_event(S.EVENT_ITEM_UPDATED, self._env._item_attrs(item), timestamp)

    @_guard
    def remove(self, item_id: str, *, timestamp: int | str | None = None) -> None:
        """A candidate is no longer available."""
        self._items.pop(item_id, None)
        self._item_event(S.EVENT_ITEM_REMOVED, {S.ITEM_ID: item_id}, timestamp)

    def _finish(self, end_time: int | str | None) -> None:
        self._end({S.SURFACE_ITEM_COUNT: len(self._items),
                   S.SURFACE_TOKEN_ESTIMATE: sum(self._items.values())}, end_time)


class Selection(_Stage):
    """What was chosen from the candidates and what was left out, and why."""

    def __init__(self, envelope: Envelope, span: Span, selection_id: str) -> None:
        super().__init__(envelope, span)
        self.selection_id = selection_id
        self._selected = 0
        self._omitted = 0
        self._selected_by_kind: dict[str, int] = {}
        self._omitted_by: dict[tuple[str, str], int] = {}
        self._omitted_tokens: dict[str, int] = {}
        self.candidate_count: int | None = None

    @_guard
    def selected(self, item: ContextItem | str, *, rank: int | None = None,
                 score: float | None = None, signals: Mapping[str, float] | None = None,
                 kind: ContextKind | str | None = None, token_estimate: int | None = None,
                 timestamp: int | str | None = None) -> None:
        """A candidate was selected, with its rank, score and scorer signals."""
        it = item if isinstance(item, ContextItem) else _as_item(item, kind, token_estimate)
        attrs = self._env._item_attrs(it)
        if rank is not None:
            attrs[S.SELECTION_RANK] = rank
        if score is not None:
            attrs[S.SELECTION_SCORE] = float(score)
        if signals:
            for name, value in signals.items():
                attrs[S.SELECTION_SIGNAL_PREFIX + name] = float(value)
        self._selected += 1
        k = it.context_kind._value_ if it.context_kind is not None else "unknown"
        self._selected_by_kind[k] = self._selected_by_kind.get(k, 0) + 1
        self._item_event(S.EVENT_ITEM_SELECTED, attrs, timestamp)

    @_guard
    def omitted(self, item: ContextItem | str, *, reason: OmissionReason | str,
                detail: str | None = None, score: float | None = None,
                kind: ContextKind | str | None = None, token_estimate: int | None = None,
                timestamp: int | str | None = None) -> None:
        """A candidate was left out; ``reason`` is one of the spec's omission reasons."""
        it = item if isinstance(item, ContextItem) else _as_item(item, kind, token_estimate)
        r = _enum(OmissionReason, reason) or OmissionReason.CUSTOM.value
        attrs = self._env._item_attrs(it)
        attrs[S.OMISSION_REASON] = r
        if detail is not None:
            attrs[S.OMISSION_DETAIL] = detail
        if score is not None:
            attrs[S.SELECTION_SCORE] = float(score)
        self._omitted += 1
        k = it.context_kind._value_ if it.context_kind is not None else "unknown"
        self._omitted_by[(k, r)] = self._omitted_by.get((k, r), 0) + 1
        self._omitted_tokens[r] = self._omitted_tokens.get(r, 0) + (it.token_estimate or 0)
        self._item_event(S.EVENT_ITEM_OMITTED, attrs, timestamp)

    def _finish(self, end_time: int | str | None) -> None:
        candidates = self.candidate_count
        if candidates is None:
            candidates = self._selected + self._omitted
        self._end({S.SELECTION_CANDIDATE_COUNT: candidates,
                   S.SELECTION_SELECTED_COUNT: self._selected,
                   S.SELECTION_OMITTED_COUNT: self._omitted}, end_time)
        inst, agent = self._env._owner._instruments, self._env._agent
        for k, n in self._selected_by_kind.items():
            inst.selected.add(n, {"agent": agent, "kind": k})
        for (k, r), n in self._omitted_by.items():
            inst.omitted.add(n, {"agent": agent, "kind": k, "reason": r})
        for r, n in self._omitted_tokens.items():
            inst.omitted_tokens.add(n, {"agent": agent, "reason": r})


class Budget(_Stage):
    """A token budget and the window layout for one target (``context.budget``)."""

    def __init__(self, envelope: Envelope, span: Span, budget_id: str,
                 attrs: dict[str, Any]) -> None:
        super().__init__(envelope, span)
        self.budget_id = budget_id
        self._target = attrs.get(S.BUDGET_TARGET) or "unknown"
        self._max_tokens = attrs.get(S.BUDGET_MAX_TOKENS)
        self._reserved = attrs.get(S.BUDGET_RESERVED_TOKENS)
        self._strategy = attrs.get(S.BUDGET_OVERFLOW_STRATEGY)
        self._actual: dict[str, Any] = {}
        self._truncations: dict[str, int] = {}
        self._truncated_tokens = 0

    @_guard
    def segment(self, segment: str, *, order: int | None = None,
                reserved_tokens: int | None = None, used_tokens: int | None = None,
                timestamp: int | str | None = None) -> None:
        """A reserved segment of the window (system, tools, history, retrieval, output...)."""
        attrs: dict[str, Any] = {S.WINDOW_SEGMENT: segment}
        _put(attrs, S.WINDOW_ORDER, order)
        _put(attrs, S.WINDOW_RESERVED_TOKENS, reserved_tokens)
        _put(attrs, S.WINDOW_USED_TOKENS, used_tokens)
        self._span.add_event(S.EVENT_WINDOW_SEGMENT, attrs, to_ns(timestamp))

    @_guard
    def truncated(self, *, item_id: str | None = None, segment: str | None = None,
                  strategy: OverflowStrategy | str | None = None,
                  tokens_before: int | None = None, tokens_after: int | None = None,
                  timestamp: int | str | None = None) -> None:
        """An item or a segment was cut to fit (name one of ``item_id`` or ``segment``)."""
        strat = _enum(OverflowStrategy, strategy)
        attrs: dict[str, Any] = {}
        _put(attrs, S.ITEM_ID, item_id)
        _put(attrs, S.WINDOW_SEGMENT, segment)
        _put(attrs, S.TRUNCATION_STRATEGY, strat)
        _put(attrs, S.TRUNCATION_TOKENS_BEFORE, tokens_before)
        _put(attrs, S.TRUNCATION_TOKENS_AFTER, tokens_after)
        key = strat or self._strategy or "unknown"
        self._truncations[key] = self._truncations.get(key, 0) + 1
        if tokens_before is not None and tokens_after is not None:
            self._truncated_tokens += max(0, tokens_before - tokens_after)
        self._item_event(S.EVENT_BUDGET_TRUNCATED, attrs, timestamp)

    @_guard
    def actual(self, *, tokens: int | None = None, bytes: int | None = None,
               items: int | None = None) -> None:
        """What the context actually used (may be called again when the model reports)."""
        _put(self._actual, S.BUDGET_ACTUAL_TOKENS, tokens)
        _put(self._actual, S.BUDGET_ACTUAL_BYTES, bytes)
        _put(self._actual, S.BUDGET_ACTUAL_ITEMS, items)

    @_guard
    def overflowed(self, *, overflow_tokens: int | None = None,
                   strategy: OverflowStrategy | str | None = None) -> None:
        """Declare an overflow explicitly (e.g. the provider rejected the request)."""
        self._actual[S.BUDGET_OVERFLOW] = True
        _put(self._actual, S.BUDGET_OVERFLOW_TOKENS, overflow_tokens)
        if strategy is not None:
            self._strategy = _enum(OverflowStrategy, strategy)
            self._actual[S.BUDGET_OVERFLOW_STRATEGY] = self._strategy

    def _finish(self, end_time: int | str | None) -> None:
        attrs = self._actual
        actual = attrs.get(S.BUDGET_ACTUAL_TOKENS)
        if actual is not None and self._max_tokens:
            attrs.setdefault(S.BUDGET_UTILIZATION, actual / self._max_tokens)
            over = actual + (self._reserved or 0) - self._max_tokens
            if S.BUDGET_OVERFLOW not in attrs:
                attrs[S.BUDGET_OVERFLOW] = over > 0
            if over > 0:
                attrs.setdefault(S.BUDGET_OVERFLOW_TOKENS, over)
        self._end(attrs, end_time)
        inst, agent, target = self._env._owner._instruments, self._env._agent, self._target
        if S.BUDGET_UTILIZATION in attrs:
            inst.utilization.record(attrs[S.BUDGET_UTILIZATION],
                                    {"target": target, "agent": agent})
        if attrs.get(S.BUDGET_OVERFLOW):
            inst.overflows.add(1, {"target": target, "agent": agent,
                                   "overflow_strategy": self._strategy or "unknown"})
        for strat, n in self._truncations.items():
            inst.truncations.add(n, {"target": target, "agent": agent, "strategy": strat})
        if self._truncated_tokens:
            inst.truncated_tokens.add(self._truncated_tokens, {"target": target, "agent": agent})


class Assembly(_Stage):
    """The ordered blocks a target sees (``context.assembly``)."""

    def __init__(self, envelope: Envelope, span: Span, assembly_id: str,
                 target: str | None) -> None:
        super().__init__(envelope, span)
        self.assembly_id = assembly_id
        self.target = target
        self._index = 0
        self._tokens = 0
        self._hash_parts: list[str] = []
        self.hash: str | None = None

    @_guard
    def block(self, item: ContextItem | str, *, tokens: int | None = None,
              injection_point: InjectionPoint | str | None = None,
              kind: ContextKind | str | None = None, digest: str | None = None,
              index: int | None = None, timestamp: int | str | None = None,
              describe: bool = False) -> None:
        """The next block in the order the target sees it.

        ``describe=True`` (with a :class:`ContextItem`) also writes the item's own attributes
        on the block event (content mode, token estimate, digest, source; content only under
        content capture), for callers whose blocks are the only place the item is recorded.
        """
        described: dict[str, Any] = {}
        if isinstance(item, ContextItem):
            if describe:
                described = self._env._item_attrs(item)
            item_id = item.item_id
            k = item.context_kind.value if item.context_kind is not None else _enum(
                ContextKind, kind)
            tokens = tokens if tokens is not None else item.token_estimate
            if digest is None:
                digest = item.digest or (digest_text(item.content)
                                         if item.content is not None else None)
        else:
            item_id, k = item, _enum(ContextKind, kind)
        idx = self._index if index is None else index
        self._index = idx + 1
        attrs: dict[str, Any] = described
        attrs[S.BLOCK_INDEX] = idx
        attrs[S.ITEM_ID] = item_id
        _put(attrs, S.ITEM_KIND, k)
        _put(attrs, S.BLOCK_TOKENS, tokens)
        _put(attrs, S.INJECTION_POINT, _enum(InjectionPoint, injection_point))
        _put(attrs, S.BLOCK_DIGEST, digest)
        self._tokens += tokens or 0
        self._hash_parts.append(f"{idx}:{item_id}:{digest or ''}")
        self._item_event(S.EVENT_ASSEMBLY_BLOCK, attrs, timestamp)

    @_guard
    def blocks(self, rows: Iterable[tuple[str, ContextKind | str | None, int | None,
                                          InjectionPoint | str | None, str | None]]) -> None:
        """Several blocks in order, in one call: ``(item_id, kind, tokens, injection_point,
        digest)`` per block. Records exactly what ``block(item_id, kind=, tokens=,
        injection_point=, digest=)`` would for each row, for callers with many blocks (an
        LLM client's messages) that already hold the values; rows are checked and written
        one at a time, so a bad row loses the rows after it, not the ones before."""
        idx = self._index
        total = self._tokens
        parts = self._hash_parts
        for item_id, kind, tokens, injection_point, digest in rows:
            attrs: dict[str, Any] = {S.BLOCK_INDEX: idx, S.ITEM_ID: item_id}
            if kind is not None:
                attrs[S.ITEM_KIND] = _enum(ContextKind, kind)
            if tokens is not None:
                attrs[S.BLOCK_TOKENS] = tokens
                total += tokens
            if injection_point is not None:
                attrs[S.INJECTION_POINT] = _enum(InjectionPoint, injection_point)
            if digest is not None:
                attrs[S.BLOCK_DIGEST] = digest
            parts.append(f"{idx}:{item_id}:{digest or ''}")
            idx += 1
            self._index = idx
            self._tokens = total
            self._item_event(S.EVENT_ASSEMBLY_BLOCK, attrs, None)

    @_guard
    def inject(self, *, injection_point: InjectionPoint | str = InjectionPoint.MESSAGE_HISTORY,
               span: Span | None = None, **kwargs: Any) -> str | None:
        """Record the injection of this assembly (on ``span``, else on the assembly span)."""
        if span is None:
            span = self._span if not self._ended else self._env.span
        target_span = span
        return self._env.injection(assembly_id=self.assembly_id,
                                   target=self.target or Visibility.MODEL,
                                   injection_point=injection_point, span=target_span,
                                   hash=kwargs.pop("hash", None) or self._current_hash(),
                                   **kwargs)

    def _current_hash(self) -> str:
        if self.hash is None:
            self.hash = ordered_hash(self._hash_parts)
        return self.hash

    def _finish(self, end_time: int | str | None) -> None:
        self._end({S.ASSEMBLY_BLOCK_COUNT: self._index, S.ASSEMBLY_TOKEN_COUNT: self._tokens,
                   S.ASSEMBLY_HASH: self._current_hash()}, end_time)


class Compaction(_Stage):
    """Replacement of context with a summary: sources, coverage, loss (``context.compaction``)."""

    def __init__(self, envelope: Envelope, span: Span, compaction_id: str, method: str | None,
                 trigger: str) -> None:
        super().__init__(envelope, span)
        self.compaction_id = compaction_id
        self._method = method or "unknown"
        self._trigger = trigger
        self._sources = 0
        self._tokens = 0
        self._covered_tokens = 0
        self._uncovered = 0
        self._loss_notes: list[str] = []
        self._summary_id: str | None = None
        self._summary_tokens: int | None = None
        self._final: dict[str, Any] = {}

    @_guard
    def source(self, item: ContextItem | str, *, covered: bool | None = True,
               token_estimate: int | None = None, kind: ContextKind | str | None = None,
               timestamp: int | str | None = None) -> None:
        """A source the compaction replaced; ``covered``: the summary accounts for it."""
        it = _as_item(item, kind, token_estimate)
        tokens = token_estimate if token_estimate is not None else it.token_estimate
        attrs: dict[str, Any] = {S.ITEM_ID: it.item_id}
        _put(attrs, S.COMPACTION_COVERED, None if covered is None else bool(covered))
        _put(attrs, S.ITEM_TOKEN_ESTIMATE, tokens)
        if it.context_kind is not None:
            attrs[S.ITEM_KIND] = it.context_kind.value
        self._sources += 1
        self._tokens += tokens or 0
        if covered:
            self._covered_tokens += tokens or 0
        else:
            self._uncovered += 1
        self._item_event(S.EVENT_COMPACTION_SOURCE, attrs, timestamp)

    @_guard
    def summary(self, *, summary_id: str | None = None, content: str | None = None,
                token_estimate: int | None = None, refresh_policy: str | None = None,
                digest: str | None = None, timestamp: int | str | None = None) -> str:
        """The summary that replaces the sources; returns its id."""
        sid = summary_id or self._env._owner._ids.new("sum")
        attrs: dict[str, Any] = {S.SUMMARY_ID: sid}
        _put(attrs, S.SUMMARY_TOKEN_ESTIMATE, token_estimate)
        _put(attrs, S.SUMMARY_REFRESH_POLICY, refresh_policy)
        if digest is None and content is not None:
            digest = digest_text(content)
        _put(attrs, S.SUMMARY_DIGEST, digest)
        if self._env._owner.capture_content:
            _put(attrs, S.SUMMARY_CONTENT, content)
        self._summary_id = sid
        self._summary_tokens = token_estimate
        self._span.add_event(S.EVENT_SUMMARY_CREATED, attrs, to_ns(timestamp))
        return sid

    @_guard
    def loss_note(self, note: str) -> None:
        """Something the summary lost (a decision, a number, an open question...)."""
        self._loss_notes.append(note)

    @_guard
    def set(self, *, coverage: float | None = None, tokens_before: int | None = None,
            tokens_after: int | None = None, source_count: int | None = None) -> None:
        """Override what ``stop()`` would derive from the recorded sources and summary."""
        _put(self._final, S.COMPACTION_COVERAGE, None if coverage is None else float(coverage))
        _put(self._final, S.COMPACTION_TOKENS_BEFORE, tokens_before)
        _put(self._final, S.COMPACTION_TOKENS_AFTER, tokens_after)
        _put(self._final, S.COMPACTION_SOURCE_COUNT, source_count)

    def _finish(self, end_time: int | str | None) -> None:
        attrs = self._final
        attrs.setdefault(S.COMPACTION_SOURCE_COUNT, self._sources)
        if self._sources:
            attrs.setdefault(S.COMPACTION_TOKENS_BEFORE, self._tokens)
            if self._tokens:
                attrs.setdefault(S.COMPACTION_COVERAGE, self._covered_tokens / self._tokens)
        if self._summary_tokens is not None:
            attrs.setdefault(S.COMPACTION_TOKENS_AFTER, self._summary_tokens)
        if self._summary_id is not None:
            attrs[S.SUMMARY_ID] = self._summary_id
        if self._loss_notes:
            attrs[S.COMPACTION_LOSS_NOTES] = tuple(self._loss_notes)
        self._end(attrs, end_time)
        inst = self._env._owner._instruments
        labels = {"agent": self._env._agent, "method": self._method}
        inst.compactions.add(1, {**labels, "trigger": self._trigger})
        if S.COMPACTION_COVERAGE in attrs:
            inst.coverage.record(attrs[S.COMPACTION_COVERAGE], labels)
        if self._uncovered:
            inst.uncovered.add(self._uncovered, labels)
        if self._loss_notes:
            inst.loss_notes.add(len(self._loss_notes), labels)


# ---------------------------------------------------------------------------------------
# no-op recorders: what every call returns when nothing records


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


_NOOP_ENVELOPE: Any = _NoOp()
