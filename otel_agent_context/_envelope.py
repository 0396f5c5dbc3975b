"""The envelope recorder: one context envelope, the parent of its stages.

The envelope span (``context.envelope``, or a span the caller owns) carries
``context.span_count`` (contract section 1) and the envelope-level events: injection,
missing context, redaction. ``with`` makes the envelope current, for nested model calls
and :func:`current_envelope`.

Every context event of the envelope and its stages leaves through :meth:`Envelope._emit`: a
span event, or, when the AgentContext sends events as logs, a log record on that span
(:mod:`._events_out`), counted on the envelope span in ``context.event_count``.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from . import _events_out
from . import _semconv as S
from ._attributes import fields_to_attributes, item_attributes, to_ns
from ._enums import (
    CompactionMethod,
    InjectionPoint,
    Lifecycle,
    OverflowStrategy,
    RedactionState,
    Severity,
    Visibility,
)
from ._failsafe import RECORDER, _guard
from ._fastattrs import set_attributes
from ._links import BlockText, Links
from ._masking import mask
from ._recorder import _enum, _put, _Recorder
from ._records import ContextItem
from ._sdk_events import add_event
from ._stages import Assembly, Budget, Compaction, Selection, Surface
from ._version import __version__

if TYPE_CHECKING:
    from ._api import AgentContext

__all__ = ["Envelope", "current_envelope"]

_ENVELOPE_KEY = otel_context.create_key("otel_agent_context.envelope")
_PRODUCER = f"otel-agent-context/{__version__}"


#: the lifecycle an envelope reached, by the latest stage it recorded (plain strings)
_DERIVED = tuple((stage, state.value) for stage, state in (
    ("injection", Lifecycle.INJECTED), ("assembly", Lifecycle.ASSEMBLED),
    ("selection", Lifecycle.SELECTED), ("compaction", Lifecycle.COMPACTED),
    ("surface", Lifecycle.AVAILABLE)))
_DRAFT = Lifecycle.DRAFT.value


class Envelope(_Recorder):
    """One context envelope (a turn, task, session, tool call, review or handoff)."""

    def __init__(self, owner: AgentContext, span: Span, owned: bool, context_id: str,
                 lifecycle: str | None, agent: str, scope: str, logger: Any = None) -> None:
        self._owner = owner
        self._span = span
        self._owned = owned
        self.context_id = context_id
        self._lifecycle = lifecycle
        self._agent = agent
        self._scope = scope
        self._span_ctx: Context | None = None  # see _ctx
        self._made_in = otel_context.get_current()  # what _ctx is built on, when first needed
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
        self._logger = logger  # events as log records (OTEP 4430) when set
        self._event_count = 0
        # which selected items reached a block (by id, or by content: see _links)
        self._links: Links | None = None  # made when an item with text is recorded
        self._selected_kinds: dict[str, str] = {}  # selected item id -> its kind
        self._known: set[str] = set()  # ids of items seen with their content or digest
        self._named: set[str] = set()  # ids a block names: its item, its sources
        self._assembled = False
        #: Attributes for the envelope's own span written once, when it stops (see
        #: :meth:`_set`); None: written as they come.
        self._pending: dict[str, Any] | None = None
        #: Whether every value pending was built by our own code (see ``_fastattrs``)
        self._pending_checked = False
        #: The conversation the envelope belongs to (``gen_ai.conversation.id``): the
        #: application's, or the first one a model call inside it names (``_adopt_conversation``)
        self._conversation: str | None = None

    @property
    def _ctx(self) -> Context:
        """The context of the envelope's span, made when first needed (entering the
        envelope, a stage span): an auto-instrumented call's envelope needs neither."""
        ctx = self._span_ctx
        if ctx is None:
            # on the context the envelope was made in, not the one current at first use
            # (another thread's, another request's baggage)
            ctx = self._span_ctx = trace.set_span_in_context(self._span, self._made_in)
        return ctx

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

    def _final_attributes(self) -> dict[str, Any]:
        lifecycle = self._lifecycle or self._derived_lifecycle()
        final: dict[str, Any] = {S.CONTEXT_LIFECYCLE: lifecycle, S.CONTEXT_SCOPE: self._scope,
                                 S.CONTEXT_SPAN_COUNT: self._span_count,
                                 S.CONTEXT_ID: self.context_id}
        if self._logger is not None:
            final[S.CONTEXT_EVENT_COUNT] = self._event_count
        return final

    def _write_final_early(self) -> None:
        """Write now what stopping writes (and writes again then): for an envelope on a
        span another instrumentor ends, which may end it before we stop (the official
        instrumentor outside ours, its stream dropped unread and collected first)."""
        self._set(self._span, self._final_attributes(), now=True)

    def _finish(self, end_time: int | str | None) -> None:
        # Set last: span limits drop the oldest attributes first, never these.
        final = self._final_attributes()
        pending = self._pending
        if pending is not None:
            self._pending = None
            pending.update(final)
            final = pending
        if self._owned or self._span.is_recording():  # not on a span another has ended
            set_attributes(self._span, final)
        inst = self._owner._instruments
        inst.envelopes.add(
            1, {"scope": self._scope, "agent": self._agent, "status": "complete"})
        for kind, count in self._not_injected().items():
            inst.not_injected.add(count, {"agent": self._agent, "kind": kind})
        if self._owned:
            self._span.end(end_time=to_ns(end_time))

    def _not_injected(self) -> dict[str, int]:
        """Selected items no block of the envelope names, by kind: judged when the envelope
        assembled something, for items whose content or digest was given (as the rebuild
        judges those that carry a digest)."""
        counts: dict[str, int] = {}
        if self._assembled:
            named, known = self._named, self._known
            for item_id, kind in tuple(self._selected_kinds.items()):
                if item_id not in named and item_id in known:
                    counts[kind] = counts.get(kind, 0) + 1
        return counts

    # -- block sources (see _links) ------------------------------------------------------

    def _linking(self) -> Links:
        links = self._links
        if links is None:
            links = self._links = Links()
        return links

    def _block_sources(self, blocks: Sequence[BlockText]) -> list[tuple[str, ...]] | None:
        """For each block (item id, digest, text), the ids of the items selected or
        surfaced in this envelope whose text it contains; None when there is none to
        compare (the usual case: nothing more is done)."""
        links = self._links
        return None if links is None else links.sources(blocks)

    def _derived_lifecycle(self) -> str:
        stages = self._stages
        for stage, state in _DERIVED:
            if stage in stages:
                return state
        return _DRAFT

    @property
    def span(self) -> Span:
        """The envelope span (to add links or attributes of your own)."""
        return self._span

    @_guard
    def set_lifecycle(self, lifecycle: Lifecycle | str) -> None:
        """Set the lifecycle state written at ``stop()`` (default: derived from the stages)."""
        self._lifecycle = _enum(Lifecycle, lifecycle)

    # -- stages -----------------------------------------------------------------------

    def _child(self, name: str, attrs: dict[str, Any], start_time: int | str | None,
               parent: Span | None = None) -> Span:
        attrs[S.CONTEXT_ID] = self.context_id
        ctx = self._ctx if parent is None else trace.set_span_in_context(parent)
        # started bare and written after, as the envelope's span is: attributes given to
        # start_span pass through the SDK's per-value check (~5K instructions a value), ours
        # are plain already (_fastattrs). A child of the envelope is sampled by its parent.
        span = self._owner._tracer.start_span(name, ctx, SpanKind.INTERNAL,
                                              start_time=to_ns(start_time))
        set_attributes(span, attrs)
        with self._lock:
            self._span_count += 1
        return span

    @_guard(returns=RECORDER)
    def surface(self, *, surface_id: str | None = None,
                start_time: int | str | None = None) -> Surface:
        """Start recording the candidates available before selection."""
        sid = surface_id or self._owner._ids.new("srf")
        attrs = fields_to_attributes(S.SPAN_SURFACE, "ContextSurface", False, surface_id=sid)
        stage = Surface(self, self._child(S.SPAN_SURFACE, attrs, start_time), sid)
        self._stages.add("surface")
        return stage

    @_guard(returns=RECORDER)
    def selection(
        self, *, selection_id: str | None = None, surface_id: str | None = None,
        intent: str | None = None, query: str | None = None, policy: str | None = None,
        rationale: str | None = None, budget_id: str | None = None,
        actor_ref: str | None = None, model_ref: str | None = None,
        start_time: int | str | None = None,
    ) -> Selection:
        """Start recording a selection: call ``selected()`` and ``omitted()`` per candidate."""
        sid = selection_id or self._owner._ids.new("sel")
        attrs = fields_to_attributes(
            S.SPAN_SELECTION, "ContextSelection", self._owner.capture_content,
            selection_id=sid, surface_id=surface_id, intent=intent, selection_policy=policy,
            budget_ref=budget_id, actor_ref=actor_ref, model_ref=model_ref, query=query,
            rationale=rationale)
        stage = Selection(self, self._child(S.SPAN_SELECTION, attrs, start_time), sid)
        self._stages.add("selection")
        return stage

    @_guard(returns=RECORDER)
    def budget(
        self, *, budget_id: str | None = None, target: Visibility | str | None = Visibility.MODEL,
        max_tokens: int | None = None, reserved_tokens: int | None = None,
        max_bytes: int | None = None, max_items: int | None = None,
        overflow_strategy: OverflowStrategy | str | None = None, window_id: str | None = None,
        start_time: int | str | None = None,
    ) -> Budget:
        """Start recording a token budget and context window for a target."""
        bid = budget_id or self._owner._ids.new("bud")
        attrs = fields_to_attributes(
            S.SPAN_BUDGET, "ContextBudget", False, budget_id=bid,
            target=_enum(Visibility, target), max_tokens=max_tokens,
            reserved_tokens=reserved_tokens, max_bytes=max_bytes, max_items=max_items,
            overflow_strategy=_enum(OverflowStrategy, overflow_strategy), window_ref=window_id)
        stage = Budget(self, self._child(S.SPAN_BUDGET, attrs, start_time), bid, attrs)
        self._stages.add("budget")
        return stage

    @_guard(returns=RECORDER)
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
        attrs = fields_to_attributes(
            S.SPAN_ASSEMBLY, "ContextAssembly", False, assembly_id=aid, target=tgt,
            budget_ref=budget_id, wrapping_policy=wrapping_policy,
            separator_policy=separator_policy,
            redaction_state=_enum(RedactionState, redaction_state),
            visibility=tuple(_enum(Visibility, v) for v in visibility))
        stage = Assembly(self, self._child(S.SPAN_ASSEMBLY, attrs, start_time), aid, tgt)
        self._stages.add("assembly")
        self._assembled = True
        return stage

    @_guard(returns=RECORDER)
    def compaction(
        self, *, compaction_id: str | None = None,
        method: CompactionMethod | str | None = CompactionMethod.ABSTRACTIVE_SUMMARY,
        trigger: str | None = None, scope: str | None = None, validation: str | None = None,
        replacement_policy: str | None = None, start_time: int | str | None = None,
    ) -> Compaction:
        """Start recording the replacement of context with a summary or digest."""
        cid = compaction_id or self._owner._ids.new("cmp")
        m = _enum(CompactionMethod, method)
        attrs = fields_to_attributes(
            S.SPAN_COMPACTION, "ContextCompaction", False, compaction_id=cid, method=m,
            trigger=trigger, scope=scope, validation=validation,
            replacement_policy=replacement_policy)
        stage = Compaction(self, self._child(S.SPAN_COMPACTION, attrs, start_time), cid, m,
                           trigger or "unknown")
        self._stages.add("compaction")
        return stage

    # -- events on the envelope (or another span of it) --------------------------------

    def _set(self, span: Span, attrs: dict[str, Any], now: bool = False,
             checked: bool = False) -> None:
        """Attributes for ``span``. When it is the envelope's own span and the envelope
        defers (an auto-instrumented call's envelope on its inference span), they wait and
        go with the next write ``now`` (the call's records, at its start) or with the
        envelope's own when it stops: two ``set_attributes`` a call instead of four.
        Otherwise they are written at once. ``checked``: every value was built by our own
        code (``_fastattrs.set_attributes``)."""
        pending = self._pending
        if pending is None or span is not self._span:
            set_attributes(span, attrs, checked)
        elif now:
            pending.update(attrs)
            checked = checked and self._pending_checked
            self._pending = {}
            self._pending_checked = True
            set_attributes(span, pending, checked)
        else:
            pending.update(attrs)
            self._pending_checked = self._pending_checked and checked

    def _adopt_conversation(self, conversation_id: Any) -> None:
        """A model call inside the envelope named its conversation (the request's, e.g. the
        Responses API's stored conversation, or util-genai's ambient one): an envelope that
        names none belongs to it, so the store's session view groups its turns. The
        envelope's own id, when it has one, stands."""
        if (self._conversation is None and isinstance(conversation_id, str) and conversation_id
                and not self._ended):
            if not self._owned:  # the caller's span may have been given its own since
                named = span_conversation(self._span)
                if named is not None:
                    self._conversation = named
                    return
            self._conversation = conversation_id
            self._set(self._span, {S.GEN_AI_CONVERSATION_ID: conversation_id})

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

    def _event(self, span: Span | None, name: str, attrs: dict[str, Any],
               timestamp: int | str | None) -> None:
        ts = to_ns(timestamp)  # a bad time fails the call before a span joins
        self._emit(self._target_span(span), name, attrs, ts)

    def _emit(self, span: Span, name: str, attrs: dict[str, Any], timestamp: int | None) -> None:
        """Send one context event on ``span``: a span event, or a log record on it."""
        if self._logger is None:
            add_event(span, name, attrs, timestamp)
            return
        _events_out.emit(self._logger, span, name, attrs, timestamp)
        with self._lock:
            self._event_count += 1

    @_guard(returns="")
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
        self._event(span, S.EVENT_INJECTION_APPLIED, attrs, timestamp)
        self._stages.add("injection")
        self._owner._instruments.injections.add(
            1, {"target": tgt or "unknown", "injection_point": point or "unknown"})
        return iid

    @_guard(returns="")
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
            _put(attrs, S.MISSING_QUESTION, mask(question))
        _put(attrs, S.MISSING_NEEDED_FOR, needed_for)
        _put(attrs, S.MISSING_REQUESTED_FROM, requested_from)
        _put(attrs, S.MISSING_SCOPE, scope)
        if candidate_sources:
            attrs[S.MISSING_CANDIDATE_SOURCES] = tuple(candidate_sources)
        if blocked_actions:
            attrs[S.MISSING_BLOCKED_ACTIONS] = tuple(blocked_actions)
        self._event(span, S.EVENT_MISSING_DETECTED, attrs, timestamp)
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
        self._event(span, S.EVENT_MISSING_REQUESTED, attrs, timestamp)

    @_guard
    def missing_resolved(self, missing_id: str, *, resolution_refs: Sequence[str] = (),
                         span: Span | None = None,
                         timestamp: int | str | None = None) -> None:
        """Record that a missing input arrived; ``resolution_refs`` say where from."""
        attrs: dict[str, Any] = {S.MISSING_ID: missing_id}
        if resolution_refs:
            attrs[S.MISSING_RESOLUTION_REFS] = tuple(resolution_refs)
        self._event(span, S.EVENT_MISSING_RESOLVED, attrs, timestamp)
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
        self._emit(self._span, S.EVENT_REDACTION_APPLIED, attrs, to_ns(timestamp))

    @_guard
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


#: The envelope of a framework run whose start and end callbacks may run in different
#: contexts (LangChain's async callbacks): set without touching the OpenTelemetry context,
#: so a reset that cannot happen leaves nothing but an ended envelope, which is ignored.
_RUN_ENVELOPE: contextvars.ContextVar[Envelope | None] = contextvars.ContextVar(
    "otel_agent_context.run_envelope", default=None)


def _run_envelope_parent(current: Context | None = None) -> Context | None:
    """The context to parent a span to when the current envelope is a framework run's (set
    through ``_RUN_ENVELOPE``, so its span is not the current one): its span. None when the
    current context already parents spans where they belong. ``current``: the current
    context, when the caller has read it."""
    if isinstance(otel_context.get_value(_ENVELOPE_KEY, current), Envelope):
        return None
    env = _RUN_ENVELOPE.get()
    if env is None or env._ended:
        return None
    return trace.set_span_in_context(env._span, current)


def _parent_and_envelope(current: Context) -> tuple[Context | None, Envelope | None]:
    """:func:`_run_envelope_parent` and :func:`_envelope_in` of the current context in one
    pass (each reads the envelope key and the run envelope)."""
    env = current.get(_ENVELOPE_KEY)
    if isinstance(env, Envelope):
        if not env._ended:
            return None, env
        run = _RUN_ENVELOPE.get()
        return None, (run if run is not None and not run._ended else None)
    run = _RUN_ENVELOPE.get()
    if run is None or run._ended:
        return None, None
    return trace.set_span_in_context(run._span, current), run


def span_conversation(span: Any) -> str | None:
    """The ``gen_ai.conversation.id`` a span (the caller's: an SDK span, or another's that
    may not say) already carries, if it can tell."""
    try:
        attributes = getattr(span, "attributes", None)
        named = (attributes.get(S.GEN_AI_CONVERSATION_ID)
                 if isinstance(attributes, Mapping) else None)
    except Exception:  # a span of another implementation whose attributes fail to read
        return None
    return named if isinstance(named, str) and named else None


def current_envelope() -> Envelope | None:
    """The envelope made current by ``with ctx.envelope(...)`` (or by an instrumented
    framework run), if any."""
    return _envelope_in(otel_context.get_current())


def _envelope_in(current: Context) -> Envelope | None:
    """:func:`current_envelope` for a caller that has read the current context."""
    env = current.get(_ENVELOPE_KEY)
    if isinstance(env, Envelope) and not env._ended:
        return env
    env = _RUN_ENVELOPE.get()
    return env if env is not None and not env._ended else None
