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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from . import _semconv as S
from ._digest import assembly_digest
from ._enums import InjectionPoint, Visibility
from ._masking import has_masker, mask
from ._stages import Budget

if TYPE_CHECKING:
    from ._envelope import Envelope

__all__ = ["FoldedBudget", "Segment", "block_columns", "fold_call"]

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


def _ints(values: Sequence[int | None]) -> tuple[int, ...]:
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
    changed once read; a renamed one is a copy), so a remembered block (a history sent
    again) is read once, and the columns are one comprehension and a ``zip`` in C instead
    of a comprehension per field and reader (ids, segments, the fold's arrays)."""
    rows = [b._row or _block_row(b) for b in blocks]
    return list(zip(*rows, strict=True)) if rows else _NO_ROWS


def _ours(item_ids: list[Any], max_tokens: Any, reserved_tokens: Any,
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
    ids = owner._ids
    budget_id = ids.new("bud")
    # the table's ContextBudget fields on the budget span, written out (the generic
    # fields_to_attributes cost a tenth of the fold; tests/test_folded_budget.py compares)
    attrs: dict[str, Any] = {S.BUDGET_ID: budget_id, S.BUDGET_TARGET: _MODEL}
    if max_tokens is not None:
        attrs[S.BUDGET_MAX_TOKENS] = max_tokens
    if reserved_tokens is not None:
        attrs[S.BUDGET_RESERVED_TOKENS] = reserved_tokens
    if overflow_strategy is not None:
        attrs[S.BUDGET_OVERFLOW_STRATEGY] = overflow_strategy
    budget = FoldedBudget(env, span, budget_id, attrs)
    if segments:  # arrays as tuples: what the span stores (see _fastattrs)
        names, orders, reserved, used = zip(*segments, strict=True)
        attrs[S.WINDOW_SEGMENT_NAMES] = names
        attrs[S.WINDOW_SEGMENT_ORDERS] = _ints(orders)
        attrs[S.WINDOW_SEGMENT_RESERVED_TOKENS] = _ints(reserved)
        attrs[S.WINDOW_SEGMENT_USED_TOKENS] = _ints(used)

    ids_col, kinds, tokens, points, digests_col, _, _, plains = (
        block_columns(blocks) if columns is None else columns)
    item_ids = list(ids_col)  # lists: what the assembly hash's memo compares
    digests = list(digests_col)
    total = sum(tokens)
    named = env._named
    named.update(item_ids)
    counts: list[int] = []
    refs: list[str] = []
    if sources:
        for item_id, found in zip(item_ids, sources, strict=False):
            mine = [r for r in dict.fromkeys(found) if r != item_id] if found else []
            named.update(mine)
            refs.extend(mine)
            counts.append(len(mine))
    plain = all(plains)
    assembly_hash = assembly_digest(item_ids, digests)
    assembly_id = ids.new("asm")
    attrs[S.ASSEMBLY_ID] = assembly_id
    attrs[S.ASSEMBLY_TARGET] = _MODEL
    attrs[S.ASSEMBLY_BLOCK_COUNT] = len(item_ids)
    attrs[S.ASSEMBLY_TOKEN_COUNT] = total
    attrs[S.ASSEMBLY_HASH] = assembly_hash
    attrs[S.ASSEMBLY_BLOCK_ITEM_IDS] = ids_col
    attrs[S.ASSEMBLY_BLOCK_KINDS] = kinds
    attrs[S.ASSEMBLY_BLOCK_TOKENS] = tokens
    attrs[S.ASSEMBLY_BLOCK_INJECTION_POINTS] = points
    attrs[S.ASSEMBLY_BLOCK_DIGESTS] = digests_col
    # Every value here is built by our own code (ids, digests, kinds, injection points and
    # token counts of the instrumentors' blocks, our window sizes) but the item ids, which
    # may be an application's or an API's: text, or the SDK checks the whole write.
    checked = _ours(item_ids, max_tokens, reserved_tokens, overflow_strategy)
    if refs:
        counts.extend([0] * (len(item_ids) - len(counts)))
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
    injection_id = ids.new("inj")
    attrs[S.INJECTION_ID] = injection_id
    attrs[S.INJECTION_TARGET] = _MODEL
    attrs[S.INJECTION_POINT] = _HISTORY
    attrs[S.INJECTION_HASH] = assembly_hash

    if span is not env._span:  # an inference span inside the application's envelope joins it
        env._target_span(span)
        attrs[S.CONTEXT_ID] = env.context_id
    env._set(span, attrs, now=True, checked=checked)  # on the span from the call's start
    env._stages.update(("budget", "assembly", "injection"))
    env._assembled = True
    owner._instruments.injections.add(1, {"target": _MODEL, "injection_point": _HISTORY})
    return budget
