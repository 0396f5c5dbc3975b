"""The stage recorders of an envelope: surface, selection, budget, assembly, compaction.

Each is a ``context.<stage>`` span, child of the envelope span, with its item events. Item
events past 100 on one span go to ``context.items`` child spans; the stage span carries
the true counts (contract section 1). A stage records its metrics when it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from . import _semconv as S
from ._attributes import digest_text, fields_to_attributes, to_ns
from ._checks import compile_check
from ._digest import assembly_hash, assembly_line
from ._enums import ContextKind, InjectionPoint, OmissionReason, OverflowStrategy, Visibility
from ._failsafe import _guard
from ._fastattrs import set_attributes
from ._recorder import _as_item, _enum, _put, _Recorder
from ._records import ContextItem

if TYPE_CHECKING:
    from ._envelope import Envelope

__all__ = ["Assembly", "Budget", "Compaction", "Selection", "Surface"]

#: One row of ``Assembly.blocks``: (item_id, kind, tokens, injection_point, digest).
_BlockRow = tuple[str, ContextKind | str | None, int | None, InjectionPoint | str | None,
                  str | None]
_check_row = compile_check(_BlockRow, "Assembly.blocks(rows=[row])")


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

    def _item_event(self, name: str, attrs: dict[str, Any], ts: int | None) -> None:
        """Add an item event (``ts``: parsed by the caller with ``to_ns`` before it changed
        any state, so a bad time fails the call having counted nothing)."""
        if self._on_span < S.MAX_ITEM_EVENTS_PER_SPAN:
            self._on_span += 1
            self._env._emit(self._span, name, attrs, ts)
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
        self._env._emit(self._items_span, name, attrs, ts)

    def _end(self, attrs: dict[str, Any], end_time: int | str | None) -> None:
        if self._items_span is not None:
            self._items_span.end(end_time=to_ns(end_time))
            self._items_span = None
        if not self._derive:
            attrs = {}
        attrs.update(self._overrides)
        # Set last: span limits drop the oldest attributes first, never the grouping key.
        attrs[S.CONTEXT_ID] = self._env.context_id
        set_attributes(self._span, attrs)
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
        ts = to_ns(timestamp)
        it = _as_item(item, kind, token_estimate)
        attrs = self._env._item_attrs(it)
        self._items[it.item_id] = it.token_estimate or 0
        if it.content is not None:
            self._env._linking().surfaced(it.item_id, it.content)
        if it.digest is not None or it.content is not None:
            self._env._known.add(it.item_id)
        self._item_event(S.EVENT_ITEM_ADDED, attrs, ts)

    @_guard
    def update(self, item: ContextItem, *, timestamp: int | str | None = None) -> None:
        """A candidate changed (new content, freshness, ...)."""
        ts = to_ns(timestamp)
        attrs = self._env._item_attrs(item)
        self._items[item.item_id] = item.token_estimate or 0
        if item.content is not None:
            self._env._linking().surfaced(item.item_id, item.content)
        if item.digest is not None or item.content is not None:
            self._env._known.add(item.item_id)
        self._item_event(S.EVENT_ITEM_UPDATED, attrs, ts)

    @_guard
    def remove(self, item_id: str, *, timestamp: int | str | None = None) -> None:
        """A candidate is no longer available."""
        ts = to_ns(timestamp)
        self._items.pop(item_id, None)
        self._item_event(S.EVENT_ITEM_REMOVED, {S.ITEM_ID: item_id}, ts)

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
        ts = to_ns(timestamp)
        it = _as_item(item, kind, token_estimate)
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
        env = self._env
        env._selected_kinds.setdefault(it.item_id, k)
        if it.digest is not None or it.content is not None:
            env._known.add(it.item_id)
        if it.content is not None:
            env._linking().selected(it.item_id, it.content)
        elif env._links is not None:  # its text may be known from a surface
            env._links.selected(it.item_id, None)
        self._item_event(S.EVENT_ITEM_SELECTED, attrs, ts)

    @_guard
    def omitted(self, item: ContextItem | str, *, reason: OmissionReason | str,
                detail: str | None = None, score: float | None = None,
                kind: ContextKind | str | None = None, token_estimate: int | None = None,
                timestamp: int | str | None = None) -> None:
        """A candidate was left out; ``reason`` is one of the spec's omission reasons."""
        ts = to_ns(timestamp)
        it = _as_item(item, kind, token_estimate)
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
        env = self._env
        if it.digest is not None or it.content is not None:
            env._known.add(it.item_id)
        if env._links is not None:
            env._links.omitted(it.item_id, it.item_id in env._selected_kinds)
        self._item_event(S.EVENT_ITEM_OMITTED, attrs, ts)

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
        attrs = fields_to_attributes(
            S.EVENT_WINDOW_SEGMENT, "WindowSegment", False, segment=segment, order=order,
            reserved_tokens=reserved_tokens, used_tokens=used_tokens)
        self._env._emit(self._span, S.EVENT_WINDOW_SEGMENT, attrs, to_ns(timestamp))

    @_guard
    def truncated(self, *, item_id: str | None = None, segment: str | None = None,
                  strategy: OverflowStrategy | str | None = None,
                  tokens_before: int | None = None, tokens_after: int | None = None,
                  timestamp: int | str | None = None) -> None:
        """An item or a segment was cut to fit (name one of ``item_id`` or ``segment``)."""
        ts = to_ns(timestamp)
        strat = _enum(OverflowStrategy, strategy)
        attrs = fields_to_attributes(
            S.EVENT_BUDGET_TRUNCATED, "TruncationRecord", False, item_id=item_id,
            segment=segment, strategy=strat, tokens_before=tokens_before,
            tokens_after=tokens_after)
        key = strat or self._strategy or "unknown"
        self._truncations[key] = self._truncations.get(key, 0) + 1
        if tokens_before is not None and tokens_after is not None:
            self._truncated_tokens += max(0, tokens_before - tokens_after)
        self._item_event(S.EVENT_BUDGET_TRUNCATED, attrs, ts)

    @_guard
    def actual(self, *, tokens: int | None = None, bytes: int | None = None,
               items: int | None = None) -> None:
        """What the context actually used (may be called again when the model reports)."""
        _put(self._actual, S.BUDGET_ACTUAL_TOKENS, tokens)
        _put(self._actual, S.BUDGET_ACTUAL_BYTES, bytes)
        _put(self._actual, S.BUDGET_ACTUAL_ITEMS, items)

    @_guard
    def overflowed(self, *, overflow_tokens: int | None = None,
                   strategy: OverflowStrategy | str | None = None,
                   max_tokens: int | None = None) -> None:
        """Declare an overflow explicitly (e.g. the provider rejected the request).
        ``max_tokens``: the limit the provider stated, when it differs from the one the
        budget started with (it then replaces it)."""
        strat = _enum(OverflowStrategy, strategy)
        if max_tokens is not None and max_tokens > 0:
            self._max_tokens = max_tokens
            self._actual[S.BUDGET_MAX_TOKENS] = max_tokens
        self._actual[S.BUDGET_OVERFLOW] = True
        _put(self._actual, S.BUDGET_OVERFLOW_TOKENS, overflow_tokens)
        if strat is not None:
            self._strategy = strat
            self._actual[S.BUDGET_OVERFLOW_STRATEGY] = strat

    def _finish(self, end_time: int | str | None) -> None:
        attrs = budget_usage(self._actual, self._max_tokens, self._reserved)
        self._end(attrs, end_time)
        record_budget(self._env._owner._instruments, attrs, self._target, self._env._agent,
                      self._strategy, self._truncations, self._truncated_tokens)


def budget_usage(attrs: dict[str, Any], max_tokens: int | None,
                 reserved: int | None) -> dict[str, Any]:
    """A budget's closing attributes (``attrs``: what was reported, completed in place):
    the utilization and overflow derived from the actual tokens."""
    actual = attrs.get(S.BUDGET_ACTUAL_TOKENS)
    if actual is not None and max_tokens:
        attrs.setdefault(S.BUDGET_UTILIZATION, actual / max_tokens)
        over = actual + (reserved or 0) - max_tokens
        if S.BUDGET_OVERFLOW not in attrs:
            attrs[S.BUDGET_OVERFLOW] = over > 0
        if over > 0:
            attrs.setdefault(S.BUDGET_OVERFLOW_TOKENS, over)
    return attrs


def record_budget(inst: Any, attrs: dict[str, Any], target: str, agent: str,
                  strategy: str | None, truncations: dict[str, int],
                  truncated_tokens: int) -> None:
    """A stopped budget's metric points (``attrs``: its closing attributes)."""
    if S.BUDGET_UTILIZATION in attrs:
        inst.utilization.record(attrs[S.BUDGET_UTILIZATION],
                                {"target": target, "agent": agent})
    if attrs.get(S.BUDGET_OVERFLOW):
        inst.overflows.add(1, {"target": target, "agent": agent,
                               "overflow_strategy": strategy or "unknown"})
    for strat, n in truncations.items():
        inst.truncations.add(n, {"target": target, "agent": agent, "strategy": strat})
    if truncated_tokens:
        inst.truncated_tokens.add(truncated_tokens, {"target": target, "agent": agent})


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
              describe: bool = False, source_item_refs: Sequence[str] = (),
              text: str | None = None) -> None:
        """The next block in the order the target sees it.

        ``describe=True`` (with a :class:`ContextItem`) also writes the item's own attributes
        on the block event (content mode, token estimate, digest, source; content only under
        content capture), for callers whose blocks are the only place the item is recorded.

        ``source_item_refs``: ids of items the block carries (a retrieved document pasted
        into a user message). Those found by content are added: ``text`` (default: the
        item's content) is compared, in process only, with the text of the items selected
        or surfaced in this envelope, and each one it contains is a source. The text is
        never exported for it; the block event carries the ids alone (and, without a
        ``digest``, the digest of ``text``).
        """
        ts = to_ns(timestamp)
        point = _enum(InjectionPoint, injection_point)
        k = _enum(ContextKind, kind)
        described: dict[str, Any] = {}
        if isinstance(item, ContextItem):
            if describe:
                described = self._env._item_attrs(item)
            item_id = item.item_id
            if item.context_kind is not None:
                k = item.context_kind.value
            tokens = tokens if tokens is not None else item.token_estimate
            if digest is None:
                digest = item.digest or (digest_text(item.content)
                                         if item.content is not None else None)
            if text is None:
                text = item.content
        else:
            item_id = item
        if digest is None and text:
            digest = digest_text(text)
        refs = self._block_refs(item_id, digest, text, source_item_refs)
        idx = self._index if index is None else index
        self._index = idx + 1
        attrs: dict[str, Any] = described
        attrs[S.BLOCK_INDEX] = idx
        attrs[S.ITEM_ID] = item_id
        _put(attrs, S.ITEM_KIND, k)
        _put(attrs, S.BLOCK_TOKENS, tokens)
        _put(attrs, S.INJECTION_POINT, point)
        _put(attrs, S.BLOCK_DIGEST, digest)
        if refs:
            attrs[S.BLOCK_SOURCE_ITEM_REFS] = refs
        self._tokens += tokens or 0
        self._hash_parts.append(assembly_line(idx, item_id, digest))
        self._item_event(S.EVENT_ASSEMBLY_BLOCK, attrs, ts)

    def _block_refs(self, item_id: str, digest: str | None, text: str | None,
                    given: Sequence[str]) -> tuple[str, ...]:
        """The block's sources: ``given``, then those found by content; the envelope
        learns that the block names them and its item."""
        env = self._env
        found = env._block_sources(((item_id, digest, text),)) if text else None
        refs: tuple[str, ...] = tuple(dict.fromkeys(
            r for r in (*given, *(found[0] if found else ())) if r != item_id))
        named = env._named
        named.add(item_id)
        named.update(refs)
        return refs

    @_guard
    def blocks(self, rows: Iterable[_BlockRow]) -> None:
        """Several blocks in order, in one call: ``(item_id, kind, tokens, injection_point,
        digest)`` per block. Records exactly what ``block(item_id, kind=, tokens=,
        injection_point=, digest=)`` would for each row, for callers with many blocks (an
        LLM client's messages) that already hold the values; rows are checked and written
        one at a time, so a bad row loses the rows after it, not the ones before."""
        idx = self._index
        total = self._tokens
        parts = self._hash_parts
        named = self._env._named
        for row in rows:
            _check_row(row)
            item_id, kind, tokens, injection_point, digest = row
            named.add(item_id)
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
            parts.append(assembly_line(idx, item_id, digest))
            idx += 1
            self._index = idx
            self._tokens = total
            self._item_event(S.EVENT_ASSEMBLY_BLOCK, attrs, None)

    @_guard(returns="")
    def inject(self, *, injection_point: InjectionPoint | str = InjectionPoint.MESSAGE_HISTORY,
               span: Span | None = None, **kwargs: Any) -> str:
        """Record the injection of this assembly (on ``span``, else on the assembly span);
        returns the injection id."""
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
            self.hash = assembly_hash(self._hash_parts)
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
        ts = to_ns(timestamp)
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
        self._item_event(S.EVENT_COMPACTION_SOURCE, attrs, ts)

    @_guard(returns="")
    def summary(self, *, summary_id: str | None = None, content: str | None = None,
                token_estimate: int | None = None, refresh_policy: str | None = None,
                digest: str | None = None, timestamp: int | str | None = None) -> str:
        """The summary that replaces the sources; returns its id."""
        ts = to_ns(timestamp)
        sid = summary_id or self._env._owner._ids.new("sum")
        if digest is None and content is not None:
            digest = digest_text(content)
        attrs = fields_to_attributes(
            S.EVENT_SUMMARY_CREATED, "ContextSummary", self._env._owner.capture_content,
            summary_id=sid, token_estimate=token_estimate, refresh_policy=refresh_policy,
            digest=digest, content=content)
        self._summary_id = sid
        self._summary_tokens = token_estimate
        self._env._emit(self._span, S.EVENT_SUMMARY_CREATED, attrs, ts)
        return sid

    @_guard
    def loss_note(self, note: str) -> None:
        """Something the summary lost (a decision, a number, an open question...)."""
        self._loss_notes.append(note)

    @_guard
    def set(self, *, coverage: float | None = None, tokens_before: int | None = None,
            tokens_after: int | None = None, source_count: int | None = None) -> None:
        """Override what ``stop()`` would derive from the recorded sources and summary."""
        if coverage is not None and not 0.0 <= coverage <= 1.0:
            raise ValueError(f"coverage is a share of the sources, 0 to 1: {coverage!r}")
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
