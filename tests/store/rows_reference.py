"""The store's rows as ``_store._rows.bundle_rows`` built them before it was rewritten for
speed (benchmarks/store.md, 2026-11-26): kept unchanged as the reference the rewrite must
equal, row for row and value for value (tests/store/test_rows_equivalence.py)."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from otel_agent_context import _semconv as S
from otel_agent_context._records import rfc3339_to_ns
from otel_agent_context._store._rows import (
    _INT32,
    COLUMNS,
    Rows,
    _dicts,
    _int,
    _list,
    _num,
    _str,
    _sum,
)

_INT64 = 2**63 - 1


def _ns(value: Any) -> int | None:
    """The full parse, as before the cache of whole seconds."""
    try:
        return _int(rfc3339_to_ns(value)) if isinstance(value, str) else None
    except (ValueError, OverflowError):
        return None


def _new_item(ident: str, record: Mapping[str, Any]) -> dict[str, Any]:
    kind, tokens, digest = (record.get("context_kind"), record.get("token_estimate"),
                            record.get("digest"))
    uri = None
    refs = record.get("source_refs")
    if type(refs) is list:
        for ref in refs:
            if isinstance(ref, dict):
                candidate = ref.get("uri")
                if type(candidate) is str and candidate:
                    uri = candidate
                    break
    return {"item_id": ident, "context_kind": kind if type(kind) is str and kind else None,
            "state": "surfaced", "omit_reason": None, "omit_detail": None, "score": None,
            "rank": None, "tokens": _int(tokens),
            "truncated": False, "tokens_after_truncation": None, "compacted": False,
            "compaction_id": None, "injected": False, "injection_point": None,
            "block_index": None, "digest": digest if type(digest) is str and digest else None,
            "source_uri": uri}


def reference_rows(bundle: Mapping[str, Any]) -> Rows:
    """The rows of every table for one bundle (a key with no envelope id gets empty rows)."""
    env = bundle.get("context_envelope") or {}
    meta: Mapping[str, Any] = env["metadata"] if isinstance(env.get("metadata"), Mapping) else {}
    refs = list(_dicts(env.get("telemetry_refs"))) or [{}]
    trace_id = str(refs[0].get("trace_id", ""))
    context_id = str(env.get("context_id", ""))
    key = (trace_id, context_id)
    rebuild: Mapping[str, Any] = (bundle["rebuild"] if isinstance(bundle.get("rebuild"), Mapping)
                                  else {})

    # Items are the bulk of a bundle (hundreds per selection): plain loops and type checks
    # here, not the helpers above (benchmarks/store_bench.py).
    items: dict[str, dict[str, Any]] = {}
    records: dict[str, Mapping[str, Any]] = {}
    for record in _list(bundle.get("context_items")):
        if isinstance(record, dict) and record.get("item_id") is not None:
            ident = record["item_id"]
            ident = ident if type(ident) is str else str(ident)
            records[ident] = record
            items[ident] = _new_item(ident, record)

    def item(item_id: Any) -> dict[str, Any]:
        ident = item_id if type(item_id) is str else str(item_id)
        row = items.get(ident)
        if row is None:
            row = items[ident] = _new_item(ident, records.get(ident, {}))
        return row

    get = items.get
    for selection in _dicts(bundle.get("context_selections")):
        for ident in _list(selection.get("candidate_item_refs")):
            if type(ident) is str:
                row = get(ident) or item(ident)
                if row["state"] == "surfaced":
                    row["state"] = "candidate"
        for ident in _list(selection.get("selected_item_refs")):
            if type(ident) is str:
                (get(ident) or item(ident))["state"] = "selected"
        for omitted in _list(selection.get("omitted_item_refs")):
            if not isinstance(omitted, dict) or omitted.get("item_id") is None:
                continue
            ident = omitted["item_id"]
            row = (get(ident) if type(ident) is str else None) or item(ident)
            reason, detail = omitted.get("reason"), omitted.get("detail")
            row["state"] = "omitted"
            row["omit_reason"] = reason if type(reason) is str and reason else None
            row["omit_detail"] = detail if type(detail) is str and detail else None
            row["score"] = _num(omitted.get("score"))
        for signal in _dicts(selection.get("ranking_signals")):
            if signal.get("item_id") is not None:
                row = item(signal["item_id"])
                row["rank"] = _int(signal.get("rank"), _INT32)
                if row["score"] is None:
                    row["score"] = _num(signal.get("score"))

    budgets: list[tuple[Any, ...]] = []
    segments: list[tuple[Any, ...]] = []
    truncated_total = 0
    for budget in _dicts(bundle.get("context_budgets")):
        budget_id = str(budget.get("budget_id", ""))
        truncations = list(_dicts(budget.get("truncation_records")))
        truncated_total += len(truncations)
        for truncation in truncations:
            if truncation.get("item_id") is not None:
                row = item(truncation["item_id"])
                row["truncated"] = True
                row["tokens_after_truncation"] = _int(truncation.get("tokens_after"))
                if row.get("tokens") is None:
                    row["tokens"] = _int(truncation.get("tokens_before"))
        budgets.append((*key, budget_id, _str(budget.get("target")),
                        _int(budget.get("max_tokens")), _int(budget.get("reserved_tokens")),
                        _int(budget.get("actual_tokens")), _num(budget.get("utilization")),
                        budget.get("overflow") is True, _int(budget.get("overflow_tokens")),
                        _str(budget.get("overflow_strategy")), len(truncations)))
        for order, segment in enumerate(_dicts(budget.get("window_segments"))):
            segments.append((*key, budget_id, order,
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
                row["compacted"] = True
                row["compaction_id"] = compaction_id
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
            index = _int(block.get("index"), _INT32)
            index = position if index is None else index
            tokens = _int(block.get("tokens"))
            used_tokens += tokens or 0
            block_item = block.get("item_id")
            kind = _str(block.get("context_kind"))
            point = _str(block.get("injection_point"))
            blocks.append((*key, assembly_id, index,
                           None if block_item is None else str(block_item), kind, tokens, point))
            by_kind[kind or "unknown"] = by_kind.get(kind or "unknown", 0) + (tokens or 0)
            by_point[point or "unknown"] = by_point.get(point or "unknown", 0) + (tokens or 0)
            if block_item is not None:
                window[str(block_item)] = None
                row = item(block_item)
                if not row["injected"]:
                    row.update(injected=True, injection_point=point, block_index=index)
                    row["context_kind"] = row["context_kind"] or kind

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
    # kept as JSON, whose readers take 64-bit ints
    by_kind = {k: max(min(n, _INT64), -_INT64 - 1) for k, n in by_kind.items()}
    by_point = {k: max(min(n, _INT64), -_INT64 - 1) for k, n in by_point.items()}
    utilization = first_budget[7] if first_budget else None
    if utilization is None and window_max and window_used is not None:
        utilization = window_used / window_max
    selections = list(_dicts(bundle.get("context_selections")))
    states = [row["state"] for row in items.values()]
    created = _str(env.get("created_at"))
    by_item = sorted(items.values(), key=lambda r: r["item_id"])
    envelope_row = (
        *key, _str(refs[0].get("span_id")), _str(meta.get(S.GEN_AI_CONVERSATION_ID)),
        _str(meta.get(S.GEN_AI_AGENT_NAME)), _str(env.get("scope")), _str(env.get("lifecycle")),
        _str(rebuild.get("status")),
        [r for r in _list(rebuild.get("partial_reasons")) if isinstance(r, str)],
        _str(meta.get(S.CONTEXT_PARENT_ID)), _str(meta.get(S.GEN_AI_REQUEST_MODEL)),
        created, _ns(created), _str(env.get("completed_at")), window_max, window_used,
        utilization, any(b[8] for b in budgets), _sum(sum(b[9] or 0 for b in budgets)) or None,
        _int(sum(_int(s.get("candidate_count"), _INT32) or 0 for s in selections), _INT32)
        if selections else None,
        states.count("selected"),
        states.count("omitted"), truncated_total, len(compacted_ids), len(missing), blocking,
        list(window), by_kind, by_point,
        [{"item_id": r["item_id"], "context_kind": r["context_kind"],
          "reason": r.get("omit_reason"), "detail": r.get("omit_detail"),
          "score": r.get("score"), "tokens": r["tokens"]}
         for r in by_item if r["state"] == "omitted"],
        [{"item_id": r["item_id"], "context_kind": r["context_kind"],
          "tokens_before": r["tokens"], "tokens_after": r.get("tokens_after_truncation")}
         for r in by_item if r["truncated"]],
        [i for s in selections for i in _list(s.get("not_injected_item_refs"))
         if type(i) is str],
        bundle,
    )
    item_values = operator.itemgetter(*COLUMNS["items"][2:])
    return {
        "envelopes": [envelope_row],
        "items": [key + item_values(row) for row in items.values()],
        "blocks": blocks,
        "budgets": budgets,
        "window_segments": segments,
        "compactions": compactions,
        "missing_context": missing,
    }
