"""A bundle as table rows: the one place that knows both the bundle's shape and the schema.

Every value is read defensively (a partial envelope lacks whole records), and each row is a
tuple in the column order of :data:`COLUMNS`, so the writers stay dialect-only.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from .. import _semconv as S
from .._records import rfc3339_to_ns

__all__ = ["COLUMNS", "SECTIONS", "TIMESTAMP_COLUMNS", "Rows", "bundle_rows"]

#: Table → columns, in row order. The key (trace_id, context_id) comes first everywhere.
COLUMNS: dict[str, tuple[str, ...]] = {
    "envelopes": (
        "trace_id", "context_id", "span_id", "conversation_id", "agent_name", "scope",
        "lifecycle", "status", "partial_reasons", "parent_context_id", "model",
        "created_at", "created_ns", "completed_at", "window_max_tokens", "window_used_tokens",
        "utilization", "overflow", "overflow_tokens", "candidate_count", "selected_count",
        "omitted_count", "truncated_count", "compacted_count", "missing_count",
        "blocking_missing_count", "window_items", "tokens_by_kind", "tokens_by_point",
        "omitted_items", "truncated_items", "not_injected_items", "bundle",
    ),
    "items": (
        "trace_id", "context_id", "item_id", "context_kind", "state", "omit_reason",
        "omit_detail", "score", "rank", "tokens", "truncated", "tokens_after_truncation",
        "compacted", "compaction_id", "injected", "injection_point", "block_index", "digest",
        "source_uri",
    ),
    "blocks": (
        "trace_id", "context_id", "assembly_id", "block_index", "item_id", "context_kind",
        "tokens", "injection_point",
    ),
    "budgets": (
        "trace_id", "context_id", "budget_id", "target", "max_tokens", "reserved_tokens",
        "actual_tokens", "utilization", "overflow", "overflow_tokens", "overflow_strategy",
        "truncation_count",
    ),
    "window_segments": (
        "trace_id", "context_id", "budget_id", "segment_order", "segment", "reserved_tokens",
        "used_tokens",
    ),
    "compactions": (
        "trace_id", "context_id", "compaction_id", "method", "trigger_reason", "scope",
        "coverage", "source_count", "tokens_before", "tokens_after", "source_items",
        "uncovered_sources", "loss_notes", "summary_id",
    ),
    "missing_context": (
        "trace_id", "context_id", "missing_id", "needed_for", "severity", "status",
        "requested_from", "blocked_actions",
    ),
}
#: Columns holding an RFC 3339 time (timestamptz in PostgreSQL, text in SQLite).
TIMESTAMP_COLUMNS = frozenset({"created_at", "completed_at"})
#: Columns holding a JSON document (jsonb in PostgreSQL, text in SQLite).
JSON_COLUMNS = frozenset({"bundle", "partial_reasons", "uncovered_sources", "loss_notes",
                          "blocked_actions", "window_items", "tokens_by_kind",
                          "tokens_by_point", "source_items", "omitted_items",
                          "truncated_items", "not_injected_items"})

Rows = dict[str, list[tuple[Any, ...]]]

#: The bundle's top-level members :func:`bundle_rows` reads; it builds the same rows from a
#: bundle with only these (the store's child decodes no more, benchmarks/store.md), except
#: the envelope row's ``bundle``, which the writers then take from the bundle's full line.
SECTIONS = frozenset({"context_envelope", "rebuild", "context_items", "context_selections",
                      "context_budgets", "context_compactions", "context_assemblies",
                      "missing_context"})


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    # type() first: isinstance against the Mapping ABC is several times slower for a dict
    return [v for v in value if type(v) is dict or isinstance(v, Mapping)] if type(
        value) is list else []


def _num(value: Any) -> float | None:
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return None
    return None


#: The widest integer either database stores (BIGINT), and INTEGER in PostgreSQL.
_INT64 = 2**63 - 1
_INT32 = 2**31 - 1


def _int(value: Any, limit: int = _INT64) -> int | None:
    """An int the column can hold, or None (an off-range value must not fail the batch)."""
    kind = type(value)
    if kind is float and math.isfinite(value):
        value = int(value)
    elif kind is not int:
        return None
    return value if -limit - 1 <= value <= limit else None  # type: ignore[no-any-return]


def _sum(value: int) -> int | None:
    """A total of 64-bit values (block tokens, overflow tokens) that may not fit in 64 bits."""
    return value if -_INT64 - 1 <= value <= _INT64 else None


def _str(value: Any) -> str | None:
    return value if type(value) is str and value else None


#: whole seconds ("YYYY-MM-DDTHH:MM:SS") -> their nanoseconds (None: not a time), bounded
_SECONDS: dict[str, int | None] = {}


def _ns(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    # The rebuild's own form, "YYYY-MM-DDTHH:MM:SS[.fraction]Z": the whole seconds parsed
    # once (rfc3339_to_ns costs about 30K instructions, a seventh of a small bundle's rows),
    # the fraction added; any other form is parsed in full below.
    if value[-1:] == "Z" and len(value) >= 20 and value[19] in ".Z":
        fraction = value[20:-1]
        if len(value) == 20 or (len(fraction) <= 9 and fraction.isascii() and fraction.isdigit()):
            head = value[:19]
            try:
                whole = _SECONDS[head]
            except KeyError:
                try:
                    whole = rfc3339_to_ns(head + "Z")
                except (ValueError, OverflowError):
                    whole = None
                if len(_SECONDS) >= 4096:
                    _SECONDS.clear()
                _SECONDS[head] = whole
            if whole is None:
                return None
            # OTLP times are unsigned 64-bit: a span may start after 2262, beyond BIGINT
            return _int(whole + int(fraction.ljust(9, "0")) if fraction else whole)
    try:
        return _int(rfc3339_to_ns(value))
    except (ValueError, OverflowError):
        return None


#: An item row's values after its key, in ``COLUMNS["items"][2:]`` order, by position.
_KIND, _STATE, _REASON, _DETAIL, _SCORE, _RANK, _TOKENS, _TRUNCATED, _AFTER, _COMPACTED, \
    _COMPACTION, _INJECTED, _POINT, _BLOCK = range(1, 15)
_MIN64 = -_INT64 - 1
_item_id = operator.itemgetter(0)
_state = operator.itemgetter(_STATE)


def _blank(ident: str) -> list[Any]:
    """The row of an item no ``context_items`` record describes."""
    return [ident, None, "surfaced", None, None, None, None, None, False, None, False, None,
            False, None, None, None, None]


def bundle_rows(bundle: Mapping[str, Any]) -> Rows:
    """The rows of every table for one bundle (a key with no envelope id gets empty rows).

    Written for speed: the store's child process runs it for every envelope
    (benchmarks/store.md), so items are plain lists indexed by position, the hot loops
    inline the checks of the helpers above, and sections a bundle lacks cost nothing. It
    must build exactly the rows the straightforward version did
    (tests/store/rows_reference.py, tests/store/test_rows_equivalence.py)."""
    env = bundle.get("context_envelope") or {}
    meta = env.get("metadata")
    if not (type(meta) is dict or isinstance(meta, Mapping)):
        meta = {}
    ref: Mapping[str, Any] = {}
    telemetry_refs = env.get("telemetry_refs")
    if type(telemetry_refs) is list:
        for candidate in telemetry_refs:
            if type(candidate) is dict or isinstance(candidate, Mapping):
                ref = candidate
                break
    trace_id = str(ref.get("trace_id", ""))
    context_id = str(env.get("context_id", ""))
    key = (trace_id, context_id)
    rebuild = bundle.get("rebuild")
    if not (type(rebuild) is dict or isinstance(rebuild, Mapping)):
        rebuild = {}

    # Items are the bulk of a bundle (hundreds of references per selection): one list per
    # item, the checks of _int / _num / _str inlined where they run per reference.
    items: dict[str, list[Any]] = {}
    for record in _list(bundle.get("context_items")):
        if not isinstance(record, dict):
            continue
        ident = record.get("item_id")
        if ident is None:
            continue
        if type(ident) is not str:
            ident = str(ident)
        kind, tokens, digest = (record.get("context_kind"), record.get("token_estimate"),
                                record.get("digest"))
        uri = None
        source_refs = record.get("source_refs")
        if type(source_refs) is list:
            for source in source_refs:
                if isinstance(source, dict):
                    candidate = source.get("uri")
                    if type(candidate) is str and candidate:
                        uri = candidate
                        break
        items[ident] = [
            ident, kind if type(kind) is str and kind else None, "surfaced", None, None, None,
            None, tokens if type(tokens) is int and _MIN64 <= tokens <= _INT64 else _int(tokens),
            False, None, False, None, False, None, None,
            digest if type(digest) is str and digest else None, uri]
    get = items.get

    def item(item_id: Any) -> list[Any]:
        ident = item_id if type(item_id) is str else str(item_id)
        row = get(ident)
        if row is None:
            row = items[ident] = _blank(ident)
        return row

    selections = _dicts(bundle.get("context_selections"))
    candidates = 0
    not_injected: list[str] = []
    for selection in selections:
        refs = selection.get("candidate_item_refs")
        if isinstance(refs, list):
            for ident in refs:
                if type(ident) is str:
                    row = get(ident) or item(ident)
                    if row[_STATE] == "surfaced":
                        row[_STATE] = "candidate"
        refs = selection.get("selected_item_refs")
        if isinstance(refs, list):
            for ident in refs:
                if type(ident) is str:
                    (get(ident) or item(ident))[_STATE] = "selected"
        refs = selection.get("omitted_item_refs")
        if isinstance(refs, list):
            for omitted in refs:
                if not isinstance(omitted, dict):
                    continue
                ident = omitted.get("item_id")
                if ident is None:
                    continue
                row = (get(ident) if type(ident) is str else None) or item(ident)
                reason, detail, score = (omitted.get("reason"), omitted.get("detail"),
                                         omitted.get("score"))
                row[_STATE] = "omitted"
                row[_REASON] = reason if type(reason) is str and reason else None
                row[_DETAIL] = detail if type(detail) is str and detail else None
                row[_SCORE] = (score if type(score) is float and math.isfinite(score)
                               else _num(score))
        signals = selection.get("ranking_signals")
        if type(signals) is list:
            for signal in signals:
                if not (type(signal) is dict or isinstance(signal, Mapping)):
                    continue
                ident = signal.get("item_id")
                if ident is None:
                    continue
                row = (get(ident) if type(ident) is str else None) or item(ident)
                rank = signal.get("rank")
                row[_RANK] = (rank if type(rank) is int and -_INT32 - 1 <= rank <= _INT32
                              else _int(rank, _INT32))
                if row[_SCORE] is None:
                    row[_SCORE] = _num(signal.get("score"))
        count = _int(selection.get("candidate_count"), _INT32)
        if count:
            candidates += count
        refs = selection.get("not_injected_item_refs")
        if isinstance(refs, list):
            not_injected.extend(i for i in refs if type(i) is str)

    budgets: list[tuple[Any, ...]] = []
    segments: list[tuple[Any, ...]] = []
    truncated_total = 0
    any_truncated = False
    for budget in _dicts(bundle.get("context_budgets")):
        value = budget.get
        budget_id = str(value("budget_id", ""))
        truncations = _dicts(value("truncation_records"))
        truncated_total += len(truncations)
        for truncation in truncations:
            if truncation.get("item_id") is not None:
                row = item(truncation["item_id"])
                row[_TRUNCATED] = any_truncated = True
                row[_AFTER] = _int(truncation.get("tokens_after"))
                if row[_TOKENS] is None:
                    row[_TOKENS] = _int(truncation.get("tokens_before"))
        # the checks of _int / _num / _str inlined for the values these always are
        target, strategy = value("target"), value("overflow_strategy")
        max_tokens, reserved, actual, over, utilization = (
            value("max_tokens"), value("reserved_tokens"), value("actual_tokens"),
            value("overflow_tokens"), value("utilization"))
        budgets.append((
            trace_id, context_id, budget_id, target if type(target) is str and target else None,
            max_tokens if type(max_tokens) is int and _MIN64 <= max_tokens <= _INT64
            else _int(max_tokens),
            reserved if type(reserved) is int and _MIN64 <= reserved <= _INT64
            else _int(reserved),
            actual if type(actual) is int and _MIN64 <= actual <= _INT64 else _int(actual),
            utilization if type(utilization) is float and math.isfinite(utilization)
            else _num(utilization),
            value("overflow") is True,
            over if type(over) is int and _MIN64 <= over <= _INT64 else _int(over),
            strategy if type(strategy) is str and strategy else None, len(truncations)))
        window_segments = value("window_segments")
        if window_segments:
            for order, segment in enumerate(_dicts(window_segments)):
                segments.append((trace_id, context_id, budget_id, order,
                                 _str(segment.get("segment")),
                                 _int(segment.get("reserved_tokens")),
                                 _int(segment.get("used_tokens"))))

    compactions: list[tuple[Any, ...]] = []
    compacted_ids: set[str] = set()
    for compaction in _dicts(bundle.get("context_compactions")):
        compaction_id = str(compaction.get("compaction_id", ""))
        uncovered = [str(c.get("item_id")) for c in _dicts(compaction.get("source_coverage"))
                     if c.get("covered") is False and c.get("item_id") is not None]
        compaction_sources = []
        for ident in _list(compaction.get("source_item_refs")):
            if isinstance(ident, str):
                row = item(ident)
                row[_COMPACTED] = True
                row[_COMPACTION] = compaction_id
                compacted_ids.add(ident)
                compaction_sources.append(ident)
        compactions.append((*key, compaction_id, _str(compaction.get("method")),
                            _str(compaction.get("trigger")), _str(compaction.get("scope")),
                            _num(compaction.get("coverage")),
                            _int(compaction.get("source_count"), _INT32),
                            _int(compaction.get("tokens_before")),
                            _int(compaction.get("tokens_after")), compaction_sources, uncovered,
                            [n for n in _list(compaction.get("loss_notes")) if isinstance(n, str)],
                            _str(compaction.get("summary_ref"))))

    blocks: list[tuple[Any, ...]] = []
    used_tokens = 0
    # what a session page reads per turn, kept beside the rows (one row read per turn, not
    # one per block): the window's items in order, and its tokens by kind and by point
    window: dict[str, None] = {}
    by_kind: dict[str, int] = {}
    by_point: dict[str, int] = {}
    for assembly in _dicts(bundle.get("context_assemblies")):
        assembly_id = str(assembly.get("assembly_id", ""))
        for position, block in enumerate(_dicts(assembly.get("ordered_blocks"))):
            value = block.get
            index = value("index")
            index = index if type(index) is int and -_INT32 - 1 <= index <= _INT32 else _int(
                index, _INT32)
            index = position if index is None else index
            tokens = value("tokens")
            tokens = tokens if type(tokens) is int and _MIN64 <= tokens <= _INT64 else _int(
                tokens)
            used_tokens += tokens or 0
            block_item = value("item_id")
            kind = value("context_kind")
            kind = kind if type(kind) is str and kind else None
            point = value("injection_point")
            point = point if type(point) is str and point else None
            if block_item is not None:
                block_item = block_item if type(block_item) is str else str(block_item)
            blocks.append((trace_id, context_id, assembly_id, index, block_item, kind, tokens,
                           point))
            by_kind[kind or "unknown"] = by_kind.get(kind or "unknown", 0) + (tokens or 0)
            by_point[point or "unknown"] = by_point.get(point or "unknown", 0) + (tokens or 0)
            if block_item is not None:
                window[block_item] = None
                row = get(block_item) or item(block_item)
                if not row[_INJECTED]:
                    row[_INJECTED] = True
                    row[_POINT] = point
                    row[_BLOCK] = index
                    row[_KIND] = row[_KIND] or kind

    missing: list[tuple[Any, ...]] = []
    blocking = 0
    for gap in _dicts(bundle.get("missing_context")):
        severity = _str(gap.get("severity"))
        blocking += severity == "blocking" and gap.get("status") not in ("resolved", "dismissed")
        missing.append((*key, str(gap.get("missing_id", "")), _str(gap.get("needed_for")),
                        severity, _str(gap.get("status")), _str(gap.get("requested_from")),
                        [a for a in _list(gap.get("blocked_actions")) if isinstance(a, str)]))

    first_budget = budgets[0] if budgets else None
    window_max = first_budget[4] if first_budget else None
    window_used = first_budget[6] if first_budget and first_budget[6] is not None else (
        _sum(used_tokens) if blocks else None)
    if by_kind:  # kept as JSON, whose readers take 64-bit ints
        by_kind = {k: max(min(n, _INT64), _MIN64) for k, n in by_kind.items()}
        by_point = {k: max(min(n, _INT64), _MIN64) for k, n in by_point.items()}
    utilization = first_budget[7] if first_budget else None
    if utilization is None and window_max and window_used is not None:
        utilization = window_used / window_max
    rows = items.values()
    states = list(map(_state, rows))
    omitted_count = states.count("omitted")
    by_item = sorted(rows, key=_item_id) if omitted_count or any_truncated else ()
    created = _str(env.get("created_at"))
    overflow_tokens = 0
    for budget_row in budgets:
        overflow_tokens += budget_row[9] or 0
    envelope_row = (
        trace_id, context_id, _str(ref.get("span_id")), _str(meta.get(S.GEN_AI_CONVERSATION_ID)),
        _str(meta.get(S.GEN_AI_AGENT_NAME)), _str(env.get("scope")), _str(env.get("lifecycle")),
        _str(rebuild.get("status")),
        [r for r in _list(rebuild.get("partial_reasons")) if isinstance(r, str)],
        _str(meta.get(S.CONTEXT_PARENT_ID)), _str(meta.get(S.GEN_AI_REQUEST_MODEL)),
        created, _ns(created), _str(env.get("completed_at")), window_max, window_used,
        utilization, any(b[8] for b in budgets), _sum(overflow_tokens) or None,
        _int(candidates, _INT32) if selections else None,
        states.count("selected"),
        omitted_count, truncated_total, len(compacted_ids), len(missing), blocking,
        list(window), by_kind, by_point,
        [{"item_id": r[0], "context_kind": r[_KIND], "reason": r[_REASON],
          "detail": r[_DETAIL], "score": r[_SCORE], "tokens": r[_TOKENS]}
         for r in by_item if r[_STATE] == "omitted"] if omitted_count else [],
        [{"item_id": r[0], "context_kind": r[_KIND], "tokens_before": r[_TOKENS],
          "tokens_after": r[_AFTER]}
         for r in by_item if r[_TRUNCATED]] if any_truncated else [],
        not_injected,
        bundle,
    )
    return {
        "envelopes": [envelope_row],
        "items": [(trace_id, context_id, *row) for row in rows],
        "blocks": blocks,
        "budgets": budgets,
        "window_segments": segments,
        "compactions": compactions,
        "missing_context": missing,
    }
