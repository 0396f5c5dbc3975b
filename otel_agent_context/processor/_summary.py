"""Bundles for people: a short per-envelope summary (``demo``) and a timeline (``timeline``).

Only what a bundle holds by default is shown (ids, kinds, counts, tokens, reasons); content
such as a missing-context question appears only if it was captured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .. import _semconv as S
from .._records import rfc3339_to_ns

__all__ = ["render_table", "summarize", "timeline_rows"]

_STAGES = (
    ("context_surfaces", "surface"), ("context_selections", "selection"),
    ("context_budgets", "budget"), ("context_compactions", "compaction"),
    ("context_assemblies", "assembly"), ("context_injections", "injection"),
)


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in
                     sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _header(bundle: Mapping[str, Any]) -> str:
    env = bundle.get("context_envelope") or {}
    rebuild = bundle.get("rebuild") or {}
    agent = (env.get("metadata") or {}).get(S.GEN_AI_AGENT_NAME, "unknown")
    refs = env.get("telemetry_refs") or [{}]
    status = rebuild.get("status", "?")
    reasons = rebuild.get("partial_reasons") or []
    status_text = f"{status} ({', '.join(reasons)})" if reasons else status
    return (f"envelope {env.get('context_id')}  scope {env.get('scope')}  agent {agent}  "
            f"{status_text}  spans {rebuild.get('received_spans', 0) + 1}  "
            f"trace {refs[0].get('trace_id', '?')}")


def summarize(bundle: Mapping[str, Any]) -> list[str]:
    """A few lines: stages, omissions by reason, overflow and truncation, compaction
    coverage and loss, missing context (blocking first)."""
    lines = [_header(bundle)]
    stages = [name for key, name in _STAGES if bundle.get(key)]
    if stages:
        lines.append("  stages: " + " → ".join(stages))
    for sel in bundle.get("context_selections") or []:
        omitted = sel.get("omitted_item_refs") or []
        reasons = Counter(str(o.get("reason", "unknown")) for o in omitted)
        candidates = sel.get("candidate_count", len(sel.get("candidate_item_refs") or []))
        text = (f"  selection: {candidates} candidates, "
                f"{len(sel.get('selected_item_refs') or [])} selected, {len(omitted)} omitted")
        if reasons:
            text += f" ({_counts(reasons)})"
        lines.append(text)
    for budget in bundle.get("context_budgets") or []:
        text = f"  budget {budget.get('target', '?')}:"
        if budget.get("actual_tokens") is not None and budget.get("max_tokens"):
            text += f" {budget['actual_tokens']}/{budget['max_tokens']} tokens"
        if budget.get("utilization") is not None:
            text += f" ({_pct(budget['utilization'])})"
        if budget.get("overflow"):
            text += (f", OVERFLOW +{budget.get('overflow_tokens', '?')} tokens "
                     f"({budget.get('overflow_strategy', 'no strategy')})")
        truncations = budget.get("truncation_records") or []
        if truncations:
            cut = sum((t.get("tokens_before") or 0) - (t.get("tokens_after") or 0)
                      for t in truncations)
            text += f", {len(truncations)} truncated (-{cut} tokens)"
        lines.append(text)
    for comp in bundle.get("context_compactions") or []:
        text = f"  compaction {comp.get('method', '?')}:"
        if comp.get("coverage") is not None:
            text += f" coverage {_pct(comp['coverage'])}"
        uncovered = [s.get("item_id") for s in comp.get("source_coverage") or []
                     if s.get("covered") is False]
        if uncovered:
            text += f", {len(uncovered)} source(s) not covered: {', '.join(map(str, uncovered))}"
        lines.append(text)
        for note in comp.get("loss_notes") or []:
            lines.append(f"    loss: {note}")
    for inj in bundle.get("context_injections") or []:
        lines.append(f"  injected into {inj.get('target', '?')} at "
                     f"{inj.get('injection_point', '?')}")
    missing = sorted(bundle.get("missing_context") or [],
                     key=lambda m: m.get("severity") != "blocking")
    for gap in missing:
        what = gap.get("question") or gap.get("needed_for") or gap.get("missing_id")
        text = f"  missing [{str(gap.get('severity', '?')).upper()}] {what}"
        if gap.get("blocked_actions"):
            text += f" (blocks {', '.join(gap['blocked_actions'])})"
        text += f": {gap.get('status', 'open')}"
        if gap.get("requested_from"):
            text += f", asked {gap['requested_from']}"
        lines.append(text)
    for note in (bundle.get("rebuild") or {}).get("notes") or []:
        lines.append(f"  note: {note}")
    return lines


def _facts(bundle: Mapping[str, Any]) -> dict[str, str]:
    """subject ref -> key facts of the record it names."""
    facts: dict[str, str] = {}
    for surface in bundle.get("context_surfaces") or []:
        facts[f"surface:{surface['surface_id']}"] = (
            f"{surface.get('item_count', len(surface.get('item_refs') or []))} items"
            + (f", ~{surface['token_estimate']} tokens" if surface.get("token_estimate") else "")
        )
    for sel in bundle.get("context_selections") or []:
        omitted = Counter(str(o.get("reason")) for o in sel.get("omitted_item_refs") or [])
        text = (f"{len(sel.get('selected_item_refs') or [])} selected, "
                f"{sum(omitted.values())} omitted")
        facts[f"selection:{sel['selection_id']}"] = text + (f" ({_counts(omitted)})"
                                                             if omitted else "")
    for budget in bundle.get("context_budgets") or []:
        parts = []
        if budget.get("utilization") is not None:
            parts.append(f"utilization {_pct(budget['utilization'])}")
        if budget.get("overflow"):
            parts.append(f"overflow +{budget.get('overflow_tokens', '?')}")
        if budget.get("truncation_records"):
            parts.append(f"{len(budget['truncation_records'])} truncated")
        facts[f"budget:{budget['budget_id']}"] = ", ".join(parts)
    for asm in bundle.get("context_assemblies") or []:
        facts[f"assembly:{asm['assembly_id']}"] = (
            f"{asm.get('block_count', len(asm.get('ordered_blocks') or []))} blocks"
            + (f", {asm['token_count']} tokens" if asm.get("token_count") else ""))
    for inj in bundle.get("context_injections") or []:
        facts[f"injection:{inj['injection_id']}"] = (
            f"{inj.get('target', '?')} @ {inj.get('injection_point', '?')}")
    for comp in bundle.get("context_compactions") or []:
        parts = [str(comp.get("method", "?"))]
        if comp.get("coverage") is not None:
            parts.append(f"coverage {_pct(comp['coverage'])}")
        if comp.get("loss_notes"):
            parts.append(f"{len(comp['loss_notes'])} loss note(s)")
        facts[f"compaction:{comp['compaction_id']}"] = ", ".join(parts)
    for summary in bundle.get("context_summaries") or []:
        if summary.get("token_estimate"):
            facts[f"summary:{summary['summary_id']}"] = f"~{summary['token_estimate']} tokens"
    for gap in bundle.get("missing_context") or []:
        facts[f"missing:{gap['missing_id']}"] = (
            f"{gap.get('severity', '?')}, {gap.get('needed_for') or ''}".rstrip(", "))
    return facts


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _event_ns(event: Any) -> int | None:
    try:
        return rfc3339_to_ns(event["occurred_at"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def timeline_rows(bundle: Mapping[str, Any], *, fold_items: bool = True
                  ) -> list[tuple[str, str, str, str]]:
    """(offset, event class, subject, facts) rows in time order.

    With ``fold_items`` consecutive item events of one class become one row (``×N``).
    """
    events = [e for e in _as_list(bundle.get("context_events")) if isinstance(e, Mapping)]
    if not events:
        return []
    times = [_event_ns(e) for e in events]
    known = [t for t in times if t is not None]
    start = min(known) if known else 0
    facts = _facts(bundle)
    rows: list[tuple[str, str, str, str]] = []
    folded: list[Any] = []  # [offset, class, first subject, count]

    def flush() -> None:
        if folded:
            offset, cls, subject, count = folded
            rows.append((offset, cls, subject if count == 1 else f"{count} items", ""))
            folded.clear()

    # an event without a readable time (a bundle from elsewhere) comes last, its offset "?"
    for event, ns in sorted(zip(events, times, strict=True),
                            key=lambda p: (p[1] is None, p[1] or 0)):
        offset = "?" if ns is None else f"+{(ns - start) / 1e6:,.1f} ms"
        cls = str(event.get("event_class"))
        subject = str(event.get("subject_ref", ""))
        if fold_items and subject.startswith("item:") and cls.startswith("context.item."):
            if folded and folded[1] == cls:
                folded[3] += 1
                continue
            flush()
            folded.extend([offset, cls, subject, 1])
            continue
        flush()
        rows.append((offset, cls, subject, facts.get(subject, "")))
    flush()
    return rows


def render_table(rows: Iterable[tuple[str, ...]]) -> list[str]:
    rows = list(rows)
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(widths[0]) if i == 0 else cell.ljust(widths[i])
                      for i, cell in enumerate(row)).rstrip() for row in rows]
