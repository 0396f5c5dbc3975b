"""The folded form of a model call (contract v0.2): its budget, window, assembly and
injection as attributes of the one GenAI inference span, with no stage spans and no block
events.

The span-and-event form records the same call as a ``context.budget`` span with a
``context.window.segment`` event per segment, a ``context.assembly`` span with a
``context.assembly.block`` event per message and a ``context.injection.applied`` event: three
spans and a dozen events where the GenAI instrumentors of the field write one span. Here the
blocks and segments are parallel arrays (element i of each describes block i), written in one
``set_attributes`` call; the rebuild makes the same records from either form.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import accumulate, compress
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode

from . import _semconv as S
from ._enums import InjectionPoint, Lifecycle, Scope, Visibility
from ._envelope import Envelope
from ._failsafe import is_strict
from ._fastattrs import set_attributes
from ._masking import has_masker, mask
from ._recorder import _describe, _put
from ._stages import Budget

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ._api import AgentContext

__all__ = ["CallRecord", "FoldedBudget", "Segment", "block_columns", "fold_call",
           "fold_plain"]

#: (name, order or None, reserved tokens or None, used tokens or None)
Segment = tuple[str, "int | None", "int | None", "int | None"]

_MODEL = Visibility.MODEL.value
_HISTORY = InjectionPoint.MESSAGE_HISTORY.value
_INLINE = "inline"


class FoldedBudget(Budget):
    """A :class:`Budget` whose span is the inference span: its attributes go on that span,
    its truncations are events of it, and stopping it ends nothing (the call ends the span)."""

    def segment(self, segment: str, **kwargs: Any) -> None:  # noqa: ARG002 - not folded
        raise TypeError("a folded budget's segments are given to fold_call")

    def _item_event(self, name: str, attrs: dict[str, Any], ts: int | None) -> None:
        self._env._emit(self._span, name, attrs, ts)

    def _end(self, attrs: dict[str, Any], end_time: int | str | None) -> None:
        attrs.update(self._overrides)
        if attrs:
            self._env._set(self._span, attrs)


_NONE_AS: Any = {None: -1}.get


def _ints(values: Sequence[int | None]) -> tuple[int, ...]:
    """The values, None as -1."""
    try:  # in C: ``get(v, v)`` is v but for None
        return tuple(map(_NONE_AS, values, values))
    except TypeError:  # a value that is not hashable
        return tuple([-1 if v is None else v for v in values])


_TEXT = frozenset((str,))

#: A block's row (``block_columns``): item id, kind, tokens, injection point, digest,
#: segment, cache breakpoint, and whether the block is plain (inline, no native id).
Row = tuple[Any, str, int, str, str, str, bool, bool]
_NO_ROWS: list[tuple[Any, ...]] = [()] * 8


def _block_row(block: Any) -> Row:
    row = block._row = (
        block.item_id, block.kind or "", block.tokens, block.point or "", block.digest or "",
        block.segment, block.cache_breakpoint,
        block.content_mode == _INLINE and not block.tool_call_id and not block.response_id)
    return row


def block_columns(blocks: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The fields of the blocks a call's records read (``Row``), as columns: element i of
    each is block i's. Each block's row is kept on it when first read (a block is not
    changed once read; a renamed one is a copy; a remembered message's block is made
    with the row remembered for it, so a history sent again is read once), and the
    columns are one comprehension and a ``zip`` in C instead of a comprehension per field
    and reader (ids, segments, the fold's arrays)."""
    rows = [b._row or _block_row(b) for b in blocks]
    # not strict: every row is ``_block_row``'s tuple of 8 (the check cost ~2K a call)
    return list(zip(*rows, strict=False)) if rows else _NO_ROWS


def _ours(item_ids: Sequence[Any], max_tokens: Any, reserved_tokens: Any,
          overflow_strategy: Any) -> bool:
    """Whether the fold's values that are not built here are of the types written as
    they are: the item ids text, the sizes integers."""
    if not (max_tokens is None or type(max_tokens) is int) or not (
            reserved_tokens is None or type(reserved_tokens) is int) or not (
            overflow_strategy is None or type(overflow_strategy) is str):
        return False
    # exactly str: an SDK older than 1.45 drops a whole array holding a str subclass
    return set(map(type, item_ids)) <= _TEXT


def fold_call(env: Envelope, span: Span, *, max_tokens: int | None,
              reserved_tokens: int | None, overflow_strategy: str | None,
              segments: Sequence[Segment], blocks: Sequence[Any],
              sources: Sequence[Sequence[str]] | None, capture: bool,
              columns: list[tuple[Any, ...]] | None = None) -> FoldedBudget:
    """Record one model call on ``span``: budget, window segments, assembly of ``blocks``
    (the instrumentors' ``Block``: item_id, kind, tokens, point, digest, content,
    content_mode, content_ref, tool_call_id, response_id) and its injection. ``sources``:
    per block, the ids of the envelope's items its text carries (None: none). ``columns``:
    ``block_columns(blocks)`` when the caller has them. Returns the budget, to record what
    the response says and to stop with the call."""
    owner = env._owner
    attrs: dict[str, Any] = {}
    budget_id, checked = _fill(attrs, owner._ids, max_tokens, reserved_tokens,
                               overflow_strategy, segments, blocks, sources, capture,
                               columns, env._named)
    budget = FoldedBudget(env, span, budget_id, attrs)
    if span is not env._span:  # an inference span inside the application's envelope joins it
        env._target_span(span)
        attrs[S.CONTEXT_ID] = env.context_id
    env._set(span, attrs, now=True, checked=checked)  # on the span from the call's start
    env._stages.update(_STAGES)
    env._assembled = True
    owner._instruments.injections.add(1, _INJECTED)
    return budget


_STAGES = ("budget", "assembly", "injection")
_INJECTED = {"target": _MODEL, "injection_point": _HISTORY}
#: the window segments of a plain request (``CallRecord.begin_plain``; the instrumentors'
#: ``SEG_*``)
_SEG_SYSTEM = InjectionPoint.SYSTEM_PROMPT.value
_SEG_HISTORY = _HISTORY
_SEG_TOOLS = "tool_definitions"
_SEG_OUTPUT = "output"


def fold_plain(env: Envelope, span: Span, *, max_tokens: int | None,
               reserved_tokens: int | None, overflow_strategy: str | None,
               columns: list[tuple[Any, ...]], first: int, tool_tokens: int = 0,
               tool_call_ids: tuple[str, ...] | None = None) -> FoldedBudget:
    """:func:`fold_call` for a plain request (``Call._read_plain``) in an envelope with no
    block sources to find (nothing selected or surfaced in it with text): the call's
    records from its blocks' ``columns`` as :meth:`CallRecord.begin_plain` writes them, the
    same attributes in the same order as ``fold_call``."""
    owner = env._owner
    attrs: dict[str, Any] = {}
    budget_id, item_ids, checked = _fill_plain(
        attrs, owner._ids.new, max_tokens, reserved_tokens, overflow_strategy, columns, first,
        tool_tokens, tool_call_ids)
    env._named.update(item_ids)
    budget = FoldedBudget(env, span, budget_id, attrs)
    if span is not env._span:  # an inference span inside the application's envelope joins it
        env._target_span(span)
        attrs[S.CONTEXT_ID] = env.context_id
    env._set(span, attrs, now=True, checked=checked)
    env._stages.update(_STAGES)
    env._assembled = True
    owner._instruments.injections.add(1, _INJECTED)
    return budget


def _fill_plain(attrs: dict[str, Any], new: Any, max_tokens: int | None,
                reserved_tokens: int | None, overflow_strategy: str | None,
                columns: list[tuple[Any, ...]], first: int, tool_tokens: int,
                tool_call_ids: tuple[str, ...] | None) -> tuple[str, set[Any], bool]:
    """:func:`_fill` for a plain request: every block plain (or inline and naming the tool
    call in ``tool_call_ids``, "" for none), its item id our own text and distinct, the
    first ``first`` blocks the system prompt and the rest the history, ``tool_tokens`` the
    tool definitions' estimate (a segment of its own between the two). The same attributes
    in the same order as ``_fill`` and ``_segments`` with no pass of their own: one
    function, as a call through the client runs it cold (the client's own work between two
    calls evicts ours; benchmarks/instrumentation.md, run AG). Returns the budget's id,
    the item ids and whether every value was built by our own code."""
    ids_col, kinds, tokens, points, digests, _, breakpoints, _ = columns
    budget_id = new("bud")
    _put_budget(attrs, budget_id, max_tokens, reserved_tokens, overflow_strategy)
    # the window's segments as ``_segments`` lays them out (system, tools, history, the
    # output reserve, the prefix up to each cache breakpoint), None as -1 (``_ints``)
    n = len(tokens)
    names: list[str] = []
    used: list[int] = []
    if first:
        names.append(_SEG_SYSTEM)
        used.append(sum(tokens[:first]))
    if tool_tokens:
        names.append(_SEG_TOOLS)
        used.append(tool_tokens)
    if n > first:
        names.append(_SEG_HISTORY)
        used.append(sum(tokens[first:]))
    orders = list(range(len(names)))
    reserved = [-1] * len(names)
    if reserved_tokens is not None:
        names.append(_SEG_OUTPUT)
        orders.append(len(orders))
        reserved.append(reserved_tokens)
        used.append(-1)
    if any(breakpoints):
        for i, prefix in enumerate(compress(accumulate(tokens), breakpoints), 1):
            names.append(f"cache_prefix_{i}")
            orders.append(-1)
            reserved.append(-1)
            used.append(prefix)
    attrs[S.WINDOW_SEGMENT_NAMES] = tuple(names)
    attrs[S.WINDOW_SEGMENT_ORDERS] = tuple(orders)
    attrs[S.WINDOW_SEGMENT_RESERVED_TOKENS] = tuple(reserved)
    attrs[S.WINDOW_SEGMENT_USED_TOKENS] = tuple(used)
    _put_assembly(attrs, new("asm"), sum(tokens), ids_col, kinds, tokens,
                  points, digests)
    if tool_call_ids is not None:  # exactly str, the readers' check
        attrs[S.ASSEMBLY_BLOCK_TOOL_CALL_IDS] = tool_call_ids
    attrs[S.INJECTION_ID] = new("inj")
    attrs[S.INJECTION_TARGET] = _MODEL
    attrs[S.INJECTION_POINT] = _HISTORY
    # the item ids are exactly str (the caller's check); the rest as ``_ours`` checks it
    checked = (max_tokens is None or type(max_tokens) is int) and (
        reserved_tokens is None or type(reserved_tokens) is int) and (
        overflow_strategy is None or type(overflow_strategy) is str)
    return budget_id, set(ids_col), checked


def _fill(attrs: dict[str, Any], ids: Any, max_tokens: int | None,
          reserved_tokens: int | None, overflow_strategy: str | None,
          segments: Sequence[Segment], blocks: Sequence[Any],
          sources: Sequence[Sequence[str]] | None, capture: bool,
          columns: list[tuple[Any, ...]] | None, named: set[str]) -> tuple[str, bool]:
    """Add a call's budget, window, assembly and injection attributes to ``attrs``, in the
    contract's order, and the ids its blocks name to ``named``. Returns the budget's id and
    whether every value was built by our own code (``_fastattrs``)."""
    budget_id = ids.new("bud")
    _put_budget(attrs, budget_id, max_tokens, reserved_tokens, overflow_strategy)
    if segments:  # arrays as tuples: what the span stores (see _fastattrs)
        names, orders, reserved, used = zip(*segments, strict=True)
        attrs[S.WINDOW_SEGMENT_NAMES] = names
        attrs[S.WINDOW_SEGMENT_ORDERS] = _ints(orders)
        attrs[S.WINDOW_SEGMENT_RESERVED_TOKENS] = _ints(reserved)
        attrs[S.WINDOW_SEGMENT_USED_TOKENS] = _ints(used)

    ids_col, kinds, tokens, points, digests_col, _, _, plains = (
        block_columns(blocks) if columns is None else columns)
    total = sum(tokens)
    named.update(ids_col)
    counts: list[int] = []
    refs: list[str] = []
    if sources:
        for item_id, found in zip(ids_col, sources, strict=False):
            mine = [r for r in dict.fromkeys(found) if r != item_id] if found else []
            named.update(mine)
            refs.extend(mine)
            counts.append(len(mine))
    plain = all(plains)
    _put_assembly(attrs, ids.new("asm"), total, ids_col, kinds, tokens, points,
                  digests_col)
    # Every value here is built by our own code (ids, digests, kinds, injection points and
    # token counts of the instrumentors' blocks, our window sizes) but the item ids, which
    # may be an application's or an API's: text, or the SDK checks the whole write.
    checked = _ours(ids_col, max_tokens, reserved_tokens, overflow_strategy)
    if refs:
        counts.extend([0] * (len(ids_col) - len(counts)))
        attrs[S.ASSEMBLY_BLOCK_SOURCE_COUNTS] = counts
        attrs[S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS] = refs
        checked = False
    if not plain:  # what some items carry beyond their block: only when one does
        checked = False
        modes = [b.content_mode if b.content_mode != _INLINE else "" for b in blocks]
        if any(modes):
            attrs[S.ASSEMBLY_BLOCK_CONTENT_MODES] = modes
        for key, values in ((S.ASSEMBLY_BLOCK_CONTENT_REFS, [b.content_ref for b in blocks]),
                            (S.ASSEMBLY_BLOCK_TOOL_CALL_IDS,
                             [b.tool_call_id for b in blocks]),
                            (S.ASSEMBLY_BLOCK_RESPONSE_IDS, [b.response_id for b in blocks])):
            if any(values):
                attrs[key] = [v or "" for v in values]
    if capture:
        checked = False
        masking = has_masker()
        attrs[S.ASSEMBLY_BLOCK_CONTENTS] = [
            ((mask(b.content) or "") if masking else b.content) if b.content else ""
            for b in blocks]
    attrs[S.INJECTION_ID] = ids.new("inj")
    attrs[S.INJECTION_TARGET] = _MODEL
    attrs[S.INJECTION_POINT] = _HISTORY
    return budget_id, checked


def _put_budget(attrs: dict[str, Any], budget_id: str, max_tokens: int | None,
                reserved_tokens: int | None, overflow_strategy: str | None) -> None:
    """The table's ContextBudget fields, written out (the generic fields_to_attributes cost
    a tenth of the fold; tests/test_folded_budget.py compares)."""
    attrs[S.BUDGET_ID] = budget_id
    attrs[S.BUDGET_TARGET] = _MODEL
    if max_tokens is not None:
        attrs[S.BUDGET_MAX_TOKENS] = max_tokens
    if reserved_tokens is not None:
        attrs[S.BUDGET_RESERVED_TOKENS] = reserved_tokens
    if overflow_strategy is not None:
        attrs[S.BUDGET_OVERFLOW_STRATEGY] = overflow_strategy


def _put_assembly(attrs: dict[str, Any], assembly_id: str, total: int,
                  ids: Sequence[Any], kinds: Sequence[Any], tokens: Sequence[Any],
                  points: Sequence[Any], digests: Sequence[Any]) -> None:
    """The assembly's attributes, in the contract's order (the columns as they are: tuples,
    what the span stores)."""
    attrs[S.ASSEMBLY_ID] = assembly_id
    attrs[S.ASSEMBLY_TARGET] = _MODEL
    attrs[S.ASSEMBLY_BLOCK_COUNT] = len(ids)
    attrs[S.ASSEMBLY_TOKEN_COUNT] = total
    attrs[S.ASSEMBLY_BLOCK_ITEM_IDS] = ids
    attrs[S.ASSEMBLY_BLOCK_KINDS] = kinds
    attrs[S.ASSEMBLY_BLOCK_TOKENS] = tokens
    attrs[S.ASSEMBLY_BLOCK_INJECTION_POINTS] = points
    attrs[S.ASSEMBLY_BLOCK_DIGESTS] = digests


_TURN = Scope.TURN.value
_INJECTED_STATE = Lifecycle.INJECTED.value
_DRAFT = Lifecycle.DRAFT.value
_ENVELOPES = {"scope": _TURN, "agent": "unknown", "status": "complete"}
#: the utilization point's attributes (the SDK copies a measurement's attributes)
_UTILIZED = {"target": _MODEL, "agent": "unknown"}
_ACTUAL = S.BUDGET_ACTUAL_TOKENS
_UTILIZATION = S.BUDGET_UTILIZATION
_OVERFLOW = S.BUDGET_OVERFLOW
_OVERFLOW_TOKENS = S.BUDGET_OVERFLOW_TOKENS


class CallRecord:
    """An auto-instrumented call's records outside any application envelope, without the
    :class:`Envelope` and :class:`FoldedBudget` objects ``fold_call`` works through: the
    same ids, attributes (in the same two writes, in the same order) and metric points as
    that envelope and budget, for about half what building and stopping them costs. The
    call's envelope is never current (no code of the application sees it): the objects are
    made (:meth:`full`) only when the call records more than its usage (a compaction, a
    truncation, an overflow)."""

    __slots__ = ("_owner", "span", "context_id", "_budget_id", "_logger", "_made_in",
                 "_max_tokens", "_reserved", "_strategy", "_item_ids", "actual", "_begun",
                 "_checked")

    def __init__(self, owner: AgentContext, span: Span) -> None:
        """The call's envelope (``AgentContext._call_envelope``)."""
        self._owner = owner
        self.span = span
        self.context_id = owner._ids.new("ctx")
        self._logger = owner._events.logger()
        self._made_in = otel_context.get_current()
        self._begun = False
        #: what the budget's ``actual`` was told (``Budget._actual``)
        self.actual: dict[str, Any] = {}

    def begin(self, max_tokens: int | None, reserved_tokens: int | None,
              overflow_strategy: str | None, segments: Sequence[Segment],
              blocks: Sequence[Any], capture: bool,
              columns: list[tuple[Any, ...]] | None) -> None:
        """The call's records (``fold_call``), written on its span."""
        owner = self._owner
        self._max_tokens = max_tokens
        self._reserved = reserved_tokens
        self._strategy = overflow_strategy
        attrs = self._opening()
        named: set[str] = set()
        self._budget_id, checked = _fill(attrs, owner._ids, max_tokens, reserved_tokens,
                                         overflow_strategy, segments, blocks, None, capture,
                                         columns, named)
        self._item_ids = named
        self._checked = checked = checked and isinstance(owner.producer, str)
        set_attributes(self.span, attrs, checked)
        self._begun = True
        owner._instruments.injections.add(1, _INJECTED)

    def begin_plain(self, max_tokens: int | None, reserved_tokens: int | None,
                    overflow_strategy: str | None, columns: list[tuple[Any, ...]],
                    first: int, tool_tokens: int = 0,
                    tool_call_ids: tuple[str, ...] | None = None) -> None:
        """:meth:`begin` for a plain request (``Call._read_plain``; :func:`fold_plain`
        writes the same in an envelope): the same attributes in the same order as
        ``begin``."""
        owner = self._owner
        self._max_tokens = max_tokens
        self._reserved = reserved_tokens
        self._strategy = overflow_strategy
        attrs = self._opening()
        self._budget_id, self._item_ids, checked = _fill_plain(
            attrs, owner._ids.new, max_tokens, reserved_tokens, overflow_strategy, columns,
            first, tool_tokens, tool_call_ids)
        self._checked = checked = checked and isinstance(owner.producer, str)
        set_attributes(self.span, attrs, checked)
        self._begun = True
        owner._instruments.injections.add(1, _INJECTED)

    def _opening(self) -> dict[str, Any]:
        """The envelope's attributes, written with the call's records."""
        return {S.CONTEXT_ID: self.context_id, S.CONTEXT_SCOPE: _TURN,
                S.CONTEXT_SCHEMA_VERSION: S.SCHEMA_VERSION,
                S.CONTEXT_PRODUCER: self._owner.producer}

    def _final(self, final: dict[str, Any]) -> dict[str, Any]:
        """``Envelope._final_attributes`` of the call's envelope, added to ``final``."""
        final[S.CONTEXT_LIFECYCLE] = _INJECTED_STATE if self._begun else _DRAFT
        final[S.CONTEXT_SCOPE] = _TURN
        final[S.CONTEXT_SPAN_COUNT] = 0
        final[S.CONTEXT_ID] = self.context_id
        if self._logger is not None:
            final[S.CONTEXT_EVENT_COUNT] = 0
        return final

    def write_final_early(self) -> None:
        """``Envelope._write_final_early``."""
        set_attributes(self.span, self._final({}), True)

    def stop(self, exc: BaseException | None, response: dict[str, Any] | None = None
             ) -> None:
        """The budget's and the envelope's stop (or fail, with ``exc``): ``budget_usage``,
        ``record_budget`` and ``_final`` written out for the call's one budget (no
        truncations here: a call recording one goes through :meth:`full`). ``response``:
        the response's own attributes, each a ``str``, ``int``, ``float`` or ``bool``,
        written first in the same write (what writing them just before leaves)."""
        span = self.span
        inst = self._owner._instruments
        if self._begun:
            attrs = self.actual
            actual = attrs.get(_ACTUAL)
            max_tokens = self._max_tokens
            if actual is not None and max_tokens:
                attrs.setdefault(_UTILIZATION, actual / max_tokens)
                over = actual + (self._reserved or 0) - max_tokens
                if _OVERFLOW not in attrs:
                    attrs[_OVERFLOW] = over > 0
                if over > 0:
                    attrs.setdefault(_OVERFLOW_TOKENS, over)
            try:  # as the budget's own stop: its failure loses its points, not the span's
                if _UTILIZATION in attrs:
                    inst.utilization.record(attrs[_UTILIZATION], _UTILIZED)
                if attrs.get(_OVERFLOW):
                    inst.overflows.add(1, {"target": _MODEL, "agent": "unknown",
                                           "overflow_strategy": self._strategy or "unknown"})
            except Exception:
                if is_strict():
                    raise
                _log.warning("otel_agent_context: the call's budget metrics failed",
                             exc_info=True)
        else:  # the records failed: the envelope's attributes were not written
            attrs = self._opening()
        recording = span.is_recording()
        if exc is not None and recording:
            span.set_status(Status(StatusCode.ERROR, _describe(exc)))
            span.set_attribute(S.ERROR_TYPE, type(exc).__qualname__)
        self._final(attrs)  # in place: the same keys in the same order as an update
        if response:
            attrs = {**response, **attrs}
        if recording:
            # begun with values of ours (checked): the usage is made of them and of the
            # int the response reported (``actual``), the rest our ids and constants
            set_attributes(span, attrs, self._begun and self._checked)
        inst.envelopes.add(1, _ENVELOPES)

    def full(self) -> tuple[Envelope, FoldedBudget]:
        """The envelope and budget ``fold_call`` would have left, in the same state."""
        span = self.span
        env = Envelope(self._owner, span, False, self.context_id, None, "unknown", _TURN,
                       self._logger)
        env._made_in = self._made_in
        env._pending = {}  # the call's records written: the rest waits for the stop
        env._pending_checked = True
        env._named = self._item_ids
        env._stages.update(_STAGES)
        env._assembled = True
        attrs: dict[str, Any] = {S.BUDGET_TARGET: _MODEL}
        _put(attrs, S.BUDGET_MAX_TOKENS, self._max_tokens)
        _put(attrs, S.BUDGET_RESERVED_TOKENS, self._reserved)
        _put(attrs, S.BUDGET_OVERFLOW_STRATEGY, self._strategy)
        budget = FoldedBudget(env, span, self._budget_id, attrs)
        budget._actual = self.actual
        return env, budget
