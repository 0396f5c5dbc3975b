"""Records to telemetry: emit a whole :class:`Bundle` through the instrumentation API.

For runtimes that keep their context as records (the seeds' session folders and compiled
contexts) and for the round-trip property: ``emit_bundle`` then ``rebuild`` gives the
same records back (content fields only when content is captured). Record timestamps become
span and event times; what the records say is written as it is, nothing is derived.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span

from . import _semconv as S
from ._api import AgentContext, Envelope
from ._enums import EventClass
from ._noop import _NoOp
from ._records import Bundle, ContextBudget, ContextItem
from ._table import SPANS

__all__ = ["emit_bundle"]


def _val(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def _overrides(record: Any, span: str, *fields: str) -> dict[str, Any]:
    """Span attributes a record states as it is (not derived by the recorder): ``fields``
    of ``record``, through the table's mapping of the record on ``span``."""
    mapping = SPANS[span].records[type(record).__name__]
    attribute = {f.field: f.attribute for f in mapping}
    out = {}
    for key, value in ((attribute[name], getattr(record, name)) for name in fields):
        if value is None or value == []:
            continue
        out[key] = tuple(_val(v) for v in value) if isinstance(value, list) else _val(value)
    return out


def emit_bundle(bundle: Bundle, agent_context: AgentContext, *,
                span: Span | None = None) -> Envelope | None:
    """Emit every record of ``bundle`` as the contract's spans and events.

    ``span``: put the envelope attributes on this span (which the caller ends) instead of
    a new ``context.envelope`` span. Returns the stopped envelope (``None`` when nothing
    records).
    """
    env_rec = bundle.context_envelope
    meta = env_rec.metadata
    env = agent_context.envelope(
        scope=env_rec.scope, context_id=env_rec.context_id, lifecycle=env_rec.lifecycle,
        parent_id=env_rec.parent_id, agent_name=meta.get(S.GEN_AI_AGENT_NAME),
        agent_id=meta.get(S.GEN_AI_AGENT_ID), conversation_id=meta.get(S.GEN_AI_CONVERSATION_ID),
        model=meta.get(S.GEN_AI_REQUEST_MODEL), user_id=meta.get(S.USER_ID),
        actor_refs=env_rec.actor_refs, runtime_refs=env_rec.runtime_refs,
        policy_refs=env_rec.policy_refs, evidence_refs=env_rec.evidence_refs, span=span,
        start_time=env_rec.created_at,
    )
    if isinstance(env, _NoOp):
        return None
    if env_rec.producer is not None:
        env.span.set_attribute(S.CONTEXT_PRODUCER, env_rec.producer)
    items = {it.item_id: it for it in bundle.context_items}

    def item(item_id: str) -> ContextItem | str:
        return items.get(item_id, item_id)

    for surface in bundle.context_surfaces:
        srf = env.surface(surface_id=surface.surface_id, start_time=surface.created_at)
        srf._derive = False
        srf._overrides = _overrides(surface, S.SPAN_SURFACE, "item_count", "token_estimate")
        for item_id in [*surface.item_refs, *surface.removed_item_refs]:
            srf.add(item(item_id), timestamp=surface.created_at)
        for item_id in surface.removed_item_refs:
            srf.remove(item_id, timestamp=surface.completed_at)
        srf.stop(end_time=surface.completed_at)

    for rec in bundle.context_selections:
        sel = env.selection(
            selection_id=rec.selection_id, surface_id=rec.surface_id, intent=rec.intent,
            query=rec.query, policy=rec.selection_policy, rationale=rec.rationale,
            budget_id=rec.budget_ref, actor_ref=rec.actor_ref, model_ref=rec.model_ref,
            start_time=rec.created_at)
        sel._derive = False
        sel._overrides = _overrides(rec, S.SPAN_SELECTION, "candidate_count")
        sel._overrides[S.SELECTION_SELECTED_COUNT] = len(rec.selected_item_refs)
        sel._overrides[S.SELECTION_OMITTED_COUNT] = len(rec.omitted_item_refs)
        selected = set(rec.selected_item_refs)
        omitted = {o.item_id: o for o in rec.omitted_item_refs}
        signals = {r.item_id: r for r in rec.ranking_signals}
        order = list(rec.candidate_item_refs) or [*rec.selected_item_refs, *omitted]
        for item_id in order:
            if item_id in selected:
                sig = signals.get(item_id)
                sel.selected(item(item_id), rank=sig.rank if sig else None,
                             score=sig.score if sig else None,
                             signals=sig.signals if sig else None, timestamp=rec.created_at)
            elif item_id in omitted:
                o = omitted[item_id]
                sel.omitted(item(item_id), reason=o.reason, detail=o.detail, score=o.score,
                            timestamp=rec.created_at)
        sel.stop(end_time=rec.completed_at)

    windows = {w.window_id: w for w in bundle.context_windows}
    for bud in bundle.context_budgets:
        _emit_budget(env, bud, windows)

    for asm_rec in bundle.context_assemblies:
        asm = env.assembly(
            assembly_id=asm_rec.assembly_id, target=asm_rec.target, budget_id=asm_rec.budget_ref,
            wrapping_policy=asm_rec.wrapping_policy, separator_policy=asm_rec.separator_policy,
            redaction_state=asm_rec.redaction_state, visibility=asm_rec.visibility,
            start_time=asm_rec.created_at)
        asm._derive = False
        asm._overrides = _overrides(asm_rec, S.SPAN_ASSEMBLY, "block_count", "token_count",
                                    "hash")
        for block in asm_rec.ordered_blocks:
            asm.block(block.item_id or "", tokens=block.tokens,
                      injection_point=block.injection_point, kind=block.context_kind,
                      digest=block.digest, index=block.index, timestamp=asm_rec.created_at,
                      source_item_refs=block.source_item_refs)
        asm.stop(end_time=asm_rec.created_at)

    for inj in bundle.context_injections:
        env.injection(assembly_id=inj.assembly_id, target=inj.target,
                      injection_point=inj.injection_point, injection_id=inj.injection_id,
                      native_id=inj.native_id, hash=inj.hash, final_ref=inj.final_ref,
                      visibility=inj.visibility, timestamp=inj.created_at)

    summaries = {s.summary_id: s for s in bundle.context_summaries}
    for comp_rec in bundle.context_compactions:
        comp = env.compaction(
            compaction_id=comp_rec.compaction_id, method=comp_rec.method,
            trigger=comp_rec.trigger, scope=comp_rec.scope, validation=comp_rec.validation,
            replacement_policy=comp_rec.replacement_policy, start_time=comp_rec.created_at)
        comp._derive = False
        comp._overrides = _overrides(comp_rec, S.SPAN_COMPACTION, "source_count",
                                     "tokens_before", "tokens_after", "coverage", "loss_notes",
                                     "summary_ref")
        coverage = {c.item_id: c for c in comp_rec.source_coverage}
        for item_id in comp_rec.source_item_refs:
            cov = coverage.get(item_id)
            src = item(item_id)
            comp.source(src, covered=cov.covered if cov else None,
                        token_estimate=cov.token_estimate if cov else None,
                        timestamp=comp_rec.created_at)
        summary = summaries.get(comp_rec.summary_ref or "")
        if summary is not None:
            comp.summary(summary_id=summary.summary_id, content=summary.content,
                         token_estimate=summary.token_estimate,
                         refresh_policy=summary.refresh_policy, digest=summary.digest,
                         timestamp=summary.created_at)
        comp.stop(end_time=comp_rec.completed_at)

    for gap in bundle.missing_context:
        status = gap.status if gap.status not in ("requested", "resolved") else "open"
        env.missing(missing_id=gap.missing_id, question=gap.question, needed_for=gap.needed_for,
                    severity=gap.severity, candidate_sources=gap.candidate_sources,
                    blocked_actions=gap.blocked_actions, requested_from=gap.requested_from,
                    status=status, scope=gap.scope, timestamp=gap.created_at)
        if gap.requested_at is not None:
            env.missing_requested(gap.missing_id, requested_from=gap.requested_from,
                                  timestamp=gap.requested_at)
        if gap.resolved_at is not None:
            env.missing_resolved(gap.missing_id, resolution_refs=gap.resolution_refs,
                                 timestamp=gap.resolved_at)

    for ev in bundle.context_events:
        if ev.event_class == EventClass.REDACTION_APPLIED and ev.subject_ref:
            item_id = ev.subject_ref.split(":", 1)[-1]
            if item_id in env._redacted:
                continue  # the sensitivity policy recorded it already
            md = ev.metadata
            env.redaction(item_id, state=md.get("state", "unknown"), method=md.get("method"),
                          redacted_by=md.get("redacted_by"), policy_ref=md.get("policy_ref"),
                          timestamp=ev.occurred_at)

    env.stop(end_time=env_rec.completed_at)
    return env


def _emit_budget(env: Envelope, rec: ContextBudget, windows: dict[str, Any]) -> None:
    bud = env.budget(budget_id=rec.budget_id, target=rec.target, max_tokens=rec.max_tokens,
                     reserved_tokens=rec.reserved_tokens, max_bytes=rec.max_bytes,
                     max_items=rec.max_items, overflow_strategy=rec.overflow_strategy,
                     window_id=rec.window_ref, start_time=rec.created_at)
    bud._derive = False
    bud._overrides = _overrides(rec, S.SPAN_BUDGET, "actual_tokens", "actual_bytes",
                                "actual_items", "overflow", "overflow_tokens", "utilization")
    segments = rec.window_segments
    if not segments and rec.window_ref in windows:
        segments = windows[rec.window_ref].segments
    for seg in segments:
        bud.segment(seg.segment, order=seg.order, reserved_tokens=seg.reserved_tokens,
                    used_tokens=seg.used_tokens, timestamp=rec.created_at)
    for tr in rec.truncation_records:
        bud.truncated(item_id=tr.item_id, segment=tr.segment, strategy=tr.strategy,
                      tokens_before=tr.tokens_before, tokens_after=tr.tokens_after,
                      timestamp=rec.created_at)
    bud.stop(end_time=rec.completed_at)
