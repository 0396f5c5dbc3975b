"""The central property: record -> spans -> rebuild gives back the same records.

Bundles are generated with every record kind, selections up to 1,200 candidates, and content
capture on and off. The expected side is computed here from the generated records by the
contract's rules (content only when captured, derived envelope refs, windows from budgets),
never by the code under test.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agent_context import (
    AssemblyBlock,
    Bundle,
    CompactionMethod,
    CompactionSource,
    ContentMode,
    ContextAssembly,
    ContextBudget,
    ContextCompaction,
    ContextEnvelope,
    ContextEvent,
    ContextInjection,
    ContextItem,
    ContextKind,
    ContextSelection,
    ContextSourceRef,
    ContextSummary,
    ContextSurface,
    ContextWindow,
    InjectionPoint,
    Lifecycle,
    MissingContext,
    OmissionReason,
    OmittedRef,
    OverflowStrategy,
    RankingSignal,
    RedactionState,
    Scope,
    Severity,
    TruncationRecord,
    Visibility,
    WindowSegment,
    bundle_json_schema,
    emit_bundle,
)
from otel_agent_context._records import ns_to_rfc3339
from otel_agent_context.testing import CapturedTelemetry

BASE_NS = 1_790_000_000_123_456_789
BLOCKED = "secret"
SCHEMA = bundle_json_schema()

ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
text = st.text(min_size=1, max_size=40)
maybe = lambda s: st.none() | s  # noqa: E731
small_int = st.integers(min_value=0, max_value=200_000)
ratio = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


def _digest(s: str) -> str:
    return "sha256:" + hashlib.sha256(s.encode()).hexdigest()


class _Clock:
    """Strictly increasing record times, so spans sort in generation order."""

    def __init__(self) -> None:
        self.ns = BASE_NS

    def next(self) -> str:
        self.ns += 1_000_003
        return ns_to_rfc3339(self.ns)


@st.composite
def source_refs(draw: Any) -> list[ContextSourceRef]:
    if not draw(st.booleans()):
        return []
    mappings = draw(st.dictionaries(
        st.sampled_from(["mcp.resource_uri", "model_api.tool_call_id", "a2a.task_id",
                         "contextos.pack_ref", "mcp.mcp_session_id"]), ident, max_size=3))
    return [ContextSourceRef(
        source_id=draw(maybe(ident)), uri="file:///repo/a.py",
        source_kind=draw(maybe(st.sampled_from(["file", "web", "kb"]))),
        selector=draw(maybe(st.sampled_from(["line_range:12-18", "json_pointer:/a/0"]))),
        digest=draw(maybe(st.just(_digest("src")))), authority=draw(maybe(ident)),
        provenance_refs=draw(st.lists(ident, max_size=2)), external_mappings=mappings,
        license=draw(maybe(st.just("CC-BY-4.0"))),
        retrieved_at=draw(maybe(st.just("2026-05-04T09:31:42.5+02:00"))),
    )]


@st.composite
def items(draw: Any, n: int) -> list[ContextItem]:
    out = []
    for i in range(n):
        content = draw(maybe(text)) if i < 40 else None  # content on the first few only
        out.append(ContextItem(
            item_id=f"it{i}",
            context_kind=draw(maybe(st.sampled_from(list(ContextKind)))),
            title=draw(maybe(text)) if i < 40 else None,
            content_mode=draw(maybe(st.sampled_from(list(ContentMode)))),
            content=content,
            content_ref=draw(maybe(st.just(f"blob://{i}"))),
            mime_type=draw(maybe(st.sampled_from(["text/plain", "application/json"]))),
            language=draw(maybe(st.sampled_from(["en", "python"]))),
            source_refs=draw(source_refs()) if i < 40 else [],
            token_estimate=draw(maybe(small_int)),
            byte_size=draw(maybe(small_int)),
            freshness=draw(maybe(st.sampled_from(["current", "stale"]))),
            trust_level=draw(maybe(st.sampled_from(["verified", "untrusted"]))),
            sensitivity=draw(maybe(st.sampled_from(["public", "internal", BLOCKED]))),
            redaction_state=draw(maybe(st.sampled_from(list(RedactionState)))),
            visibility=draw(st.lists(st.sampled_from(list(Visibility)), max_size=3,
                                     unique=True)),
            priority=draw(maybe(st.integers(-5, 5))),
            digest=_digest(content) if content is not None else None,
            created_at=draw(maybe(st.just("2026-11-01T00:00:00Z"))),
        ))
    return out


@st.composite
def bundles(draw: Any) -> Bundle:
    clock = _Clock()
    created = clock.next()
    n_items = draw(st.sampled_from([3, 25, 1_200]))
    its = draw(items(n_items))
    ids = [i.item_id for i in its]
    by_id = {i.item_id: i for i in its}

    surfaces = []
    for s in range(draw(st.integers(1, 2))):
        refs = ids if s == 0 else draw(st.lists(st.sampled_from(ids), max_size=10, unique=True))
        removed = [] if s == 0 else refs[: draw(st.integers(0, len(refs)))]
        surfaces.append(ContextSurface(
            surface_id=f"srf{s}", item_refs=[r for r in refs if r not in removed],
            removed_item_refs=removed, item_count=draw(maybe(small_int)),
            token_estimate=draw(maybe(small_int)), created_at=clock.next(),
            completed_at=clock.next()))

    selections = []
    for s in range(draw(st.integers(0, 2))):
        candidates = ids if s == 0 else draw(st.lists(st.sampled_from(ids), min_size=1,
                                                      max_size=30, unique=True))
        picked = [c for c in candidates if draw(st.booleans())] if len(candidates) < 100 \
            else candidates[::7]
        picked_set = set(picked)
        omitted = [OmittedRef(item_id=c, reason=OmissionReason.BUDGET if i % 3 else
                              draw(st.sampled_from(list(OmissionReason))),
                              detail=draw(maybe(text)) if i < 5 else None,
                              score=float(i % 10) / 10 if i % 2 else None)
                   for i, c in enumerate(candidates) if c not in picked_set]
        signals = [RankingSignal(item_id=c, rank=r + 1, score=draw(maybe(ratio)),
                                 signals={"bm25": 1.5, "recency": float(r)} if r % 2 else {})
                   for r, c in enumerate(picked) if r % 3]
        selections.append(ContextSelection(
            selection_id=f"sel{s}", surface_id=draw(maybe(st.just("srf0"))),
            query=draw(maybe(text)), intent=draw(maybe(ident)),
            candidate_item_refs=list(candidates), selected_item_refs=picked,
            omitted_item_refs=omitted, ranking_signals=signals,
            selection_policy=draw(maybe(ident)), budget_ref=draw(maybe(st.just("bud0"))),
            rationale=draw(maybe(text)), actor_ref=draw(maybe(st.just("agent:planner"))),
            model_ref=draw(maybe(st.just("model:gpt-4o"))), candidate_count=len(candidates),
            created_at=clock.next(), completed_at=clock.next()))

    budgets, windows = [], []
    for b in range(draw(st.integers(0, 2))):
        segs = [WindowSegment(segment=name, order=o, reserved_tokens=draw(maybe(small_int)),
                              used_tokens=draw(maybe(small_int)))
                for o, name in enumerate(draw(st.lists(st.sampled_from(
                    ["system", "history", "retrieval", "output"]), max_size=4, unique=True)))]
        truncs = [TruncationRecord(item_id=draw(st.sampled_from(ids)) if t % 2 else None,
                                   segment=None if t % 2 else "history",
                                   strategy=draw(maybe(st.sampled_from(list(OverflowStrategy)))),
                                   tokens_before=400 + t, tokens_after=draw(maybe(small_int)))
                  for t in range(draw(st.integers(0, 4)))]
        window_ref = draw(maybe(st.just(f"win{b}")))
        bud = ContextBudget(
            budget_id=f"bud{b}", target=draw(maybe(st.sampled_from(list(Visibility)))),
            max_tokens=draw(maybe(small_int)), reserved_tokens=draw(maybe(small_int)),
            max_bytes=draw(maybe(small_int)), max_items=draw(maybe(small_int)),
            actual_tokens=draw(maybe(small_int)), actual_bytes=draw(maybe(small_int)),
            actual_items=draw(maybe(small_int)),
            overflow_strategy=draw(maybe(st.sampled_from(list(OverflowStrategy)))),
            overflow=draw(maybe(st.booleans())), overflow_tokens=draw(maybe(small_int)),
            utilization=draw(maybe(ratio)), window_ref=window_ref, truncation_records=truncs,
            window_segments=segs, created_at=clock.next(), completed_at=clock.next())
        budgets.append(bud)
        if window_ref is not None:
            windows.append(ContextWindow(window_id=window_ref, budget_ref=bud.budget_id,
                                         target=bud.target, max_tokens=bud.max_tokens,
                                         segments=segs, created_at=bud.created_at))

    assemblies = []
    for a in range(draw(st.integers(0, 2))):
        block_ids = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=12))
        blocks = [AssemblyBlock(index=i, item_id=b, context_kind=by_id[b].context_kind,
                                tokens=draw(maybe(small_int)),
                                injection_point=draw(maybe(st.sampled_from(list(InjectionPoint)))),
                                digest=draw(maybe(st.just(_digest(b)))),
                                source_item_refs=draw(st.lists(
                                    st.sampled_from([x for x in ids if x != b] or [b]),
                                    max_size=2, unique=True).filter(lambda s, b=b: b not in s)))
                  for i, b in enumerate(block_ids)]
        # the block's item, then the items it carries, in block order
        sources = [x for blk in blocks for x in (blk.item_id, *blk.source_item_refs)]
        assemblies.append(ContextAssembly(
            assembly_id=f"asm{a}", target=draw(maybe(st.sampled_from(list(Visibility)))),
            ordered_blocks=blocks, wrapping_policy=draw(maybe(ident)),
            separator_policy=draw(maybe(ident)),
            visibility=draw(st.lists(st.sampled_from(list(Visibility)), max_size=2, unique=True)),
            budget_ref=draw(maybe(st.just("bud0"))),
            source_item_refs=list(dict.fromkeys(sources)),
            redaction_state=draw(maybe(st.sampled_from(list(RedactionState)))),
            block_count=len(blocks), token_count=draw(maybe(small_int)),
            hash=draw(maybe(st.just(_digest("asm")))), created_at=clock.next()))

    compactions, summaries = [], []
    for c in range(draw(st.integers(0, 2))):
        src = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=20, unique=True))
        cov = [CompactionSource(item_id=s, token_estimate=by_id[s].token_estimate,
                                covered=draw(st.booleans())) for s in src]
        summary_id = draw(maybe(st.just(f"sum{c}")))
        comp = ContextCompaction(
            compaction_id=f"cmp{c}", scope=draw(maybe(st.just("session_history"))),
            source_item_refs=src, source_coverage=cov, summary_ref=summary_id,
            method=draw(maybe(st.sampled_from(list(CompactionMethod)))),
            trigger=draw(maybe(ident)), coverage=draw(maybe(st.floats(0, 1))),
            loss_notes=draw(st.lists(text, max_size=2)), validation=draw(maybe(ident)),
            replacement_policy=draw(maybe(ident)), source_count=len(src),
            tokens_before=draw(maybe(small_int)), tokens_after=draw(maybe(small_int)),
            created_at=clock.next())
        summary_at = clock.next()
        comp.completed_at = clock.next()
        compactions.append(comp)
        if summary_id is not None:
            content = draw(maybe(text))
            summaries.append(ContextSummary(
                summary_id=summary_id, compaction_ref=comp.compaction_id, content=content,
                token_estimate=draw(maybe(small_int)),
                digest=_digest(content) if content is not None else None,
                refresh_policy=draw(maybe(ident)), coverage=comp.coverage,
                loss_notes=list(comp.loss_notes), validation=comp.validation,
                source_item_refs=src, created_at=summary_at))

    injections = [ContextInjection(
        injection_id=f"inj{i}", assembly_id=draw(maybe(st.just("asm0"))),
        target=draw(maybe(st.sampled_from(list(Visibility)))),
        injection_point=draw(maybe(st.sampled_from(list(InjectionPoint)))),
        native_id=draw(maybe(ident)), visibility=draw(st.lists(
            st.sampled_from(list(Visibility)), max_size=2, unique=True)),
        final_ref=draw(maybe(ident)), hash=draw(maybe(st.just(_digest("inj")))),
        created_at=clock.next()) for i in range(draw(st.integers(0, 2)))]

    missing = []
    for m in range(draw(st.integers(0, 3))):
        state = draw(st.sampled_from(["open", "requested", "resolved"]))
        detected = clock.next()
        requested = clock.next() if state in ("requested", "resolved") else None
        resolved = clock.next() if state == "resolved" else None
        missing.append(MissingContext(
            missing_id=f"gap{m}", scope=draw(maybe(st.just("turn"))), question=draw(maybe(text)),
            needed_for=draw(maybe(ident)), severity=draw(st.sampled_from(list(Severity))),
            candidate_sources=draw(st.lists(ident, max_size=2)),
            blocked_actions=draw(st.lists(ident, max_size=2)),
            requested_from=draw(maybe(st.just("user"))) if requested else None, status=state,
            resolution_refs=draw(st.lists(ident, max_size=2)) if resolved else [],
            created_at=detected, requested_at=requested, resolved_at=resolved))

    envelope = ContextEnvelope(
        context_id=draw(ident), scope=draw(st.sampled_from(list(Scope))),
        lifecycle=draw(st.sampled_from(list(Lifecycle))), created_at=created,
        completed_at=clock.next(), producer="generator/1.0",
        parent_id=draw(maybe(st.just("ctx-session"))),
        actor_refs=draw(st.lists(st.just("agent:support"), max_size=1)),
        runtime_refs=draw(st.lists(st.just("session:sess_42f1"), max_size=1)),
        policy_refs=draw(st.lists(st.just("policy:P1"), max_size=1)),
        evidence_refs=draw(st.lists(st.just("evidence:E1"), max_size=1)),
        metadata=draw(st.dictionaries(st.sampled_from(
            ["gen_ai.agent.name", "gen_ai.conversation.id", "user.id"]), ident, max_size=3)))
    return Bundle(context_envelope=envelope, context_surfaces=surfaces, context_items=its,
                  context_selections=selections, context_budgets=budgets,
                  context_windows=windows, context_assemblies=assemblies,
                  context_injections=injections, context_compactions=compactions,
                  context_summaries=summaries, missing_context=missing)


def _expected(bundle: Bundle, capture: bool) -> Bundle:
    """What the rebuild must return: the records, minus content when not captured, plus
    the envelope refs the contract derives from the stages."""
    exp = msgspec.convert(msgspec.to_builtins(bundle), Bundle)
    for item in exp.context_items:
        if not capture or item.sensitivity == BLOCKED:
            item.title = item.content = None
    if not capture:
        for sel in exp.context_selections:
            sel.query = sel.rationale = None
        for summary in exp.context_summaries:
            summary.content = None
        for gap in exp.missing_context:
            gap.question = None
    env = exp.context_envelope
    env.surface_refs = [s.surface_id for s in exp.context_surfaces]
    refs: dict[str, None] = {}
    for sel in exp.context_selections:
        refs.update(dict.fromkeys(sel.selected_item_refs))
    for asm in exp.context_assemblies:
        refs.update(dict.fromkeys(asm.source_item_refs))
    env.item_refs = list(refs)
    env.selection_refs = [s.selection_id for s in exp.context_selections]
    env.budget_ref = exp.context_budgets[0].budget_id if exp.context_budgets else None
    env.assembly_refs = [a.assembly_id for a in exp.context_assemblies]
    env.injection_refs = [i.injection_id for i in exp.context_injections]
    env.compaction_refs = [c.compaction_id for c in exp.context_compactions]
    env.missing_context_refs = [m.missing_id for m in exp.missing_context]
    if exp.context_assemblies:  # selected, known by content, no block names them
        named = {i for asm in exp.context_assemblies for i in asm.source_item_refs}
        known = {i.item_id for i in bundle.context_items
                 if i.digest is not None or i.content is not None}
        for sel in exp.context_selections:
            sel.not_injected_item_refs = [i for i in sel.selected_item_refs
                                          if i not in named and i in known]
    return exp


def _event_keys(events: list[ContextEvent]) -> set[tuple[str, str | None, str]]:
    return {(str(e.event_class), e.subject_ref, e.occurred_at) for e in events}


def _expected_event_keys(b: Bundle) -> set[tuple[str, str | None, str]]:
    keys = set()
    for s in b.context_surfaces:
        keys.add(("context.surface.created", f"surface:{s.surface_id}", s.created_at))
        if s.removed_item_refs:
            keys.add(("context.surface.updated", f"surface:{s.surface_id}", s.completed_at))
    for s in b.context_selections:
        keys.add(("context.selection.started", f"selection:{s.selection_id}", s.created_at))
        keys.add(("context.selection.completed", f"selection:{s.selection_id}", s.completed_at))
    for x in b.context_budgets:
        keys.add(("context.budget.applied", f"budget:{x.budget_id}", x.completed_at))
    for a in b.context_assemblies:
        keys.add(("context.assembly.created", f"assembly:{a.assembly_id}", a.created_at))
    for i in b.context_injections:
        keys.add(("context.injection.applied", f"injection:{i.injection_id}", i.created_at))
    for c in b.context_compactions:
        keys.add(("context.compaction.started", f"compaction:{c.compaction_id}", c.created_at))
        keys.add(("context.compaction.completed", f"compaction:{c.compaction_id}",
                  c.completed_at))
    for s in b.context_summaries:
        keys.add(("context.summary.created", f"summary:{s.summary_id}", s.created_at))
    for m in b.missing_context:
        keys.add(("context.missing.detected", f"missing:{m.missing_id}", m.created_at))
        if m.requested_at:
            keys.add(("context.missing.requested", f"missing:{m.missing_id}", m.requested_at))
        if m.resolved_at:
            keys.add(("context.missing.resolved", f"missing:{m.missing_id}", m.resolved_at))
    return keys


def _roundtrip(bundle: Bundle, capture: bool) -> tuple[dict[str, Any], CapturedTelemetry]:
    tel = CapturedTelemetry(capture_content=capture, blocked_sensitivities=[BLOCKED])
    emit_bundle(bundle, tel.agent_context)
    (rebuilt,) = tel.bundles()
    return rebuilt, tel


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.data_too_large])
@given(bundle=bundles(), capture=st.booleans())
def test_record_spans_rebuild_roundtrip(bundle: Bundle, capture: bool) -> None:
    rebuilt, tel = _roundtrip(bundle, capture)
    jsonschema.validate(rebuilt, SCHEMA)
    assert rebuilt["rebuild"]["status"] == "complete", rebuilt["rebuild"]
    assert rebuilt["rebuild"]["expected_spans"] == rebuilt["rebuild"]["received_spans"]

    got = Bundle.from_dict(rebuilt)
    exp = _expected(bundle, capture)
    assert got.context_envelope.telemetry_refs  # every span it came from
    got.context_envelope.telemetry_refs = []
    assert got.context_envelope == exp.context_envelope
    assert {i.item_id: i for i in got.context_items} == {i.item_id: i for i in exp.context_items}
    for field in ("context_surfaces", "context_selections", "context_budgets", "context_windows",
                  "context_assemblies", "context_injections", "context_compactions",
                  "context_summaries", "missing_context"):
        assert getattr(got, field) == getattr(exp, field), field

    keys = _event_keys(got.context_events)
    assert _expected_event_keys(bundle) <= keys
    blocked = {i.item_id for i in bundle.context_items
               if i.sensitivity == BLOCKED and (i.title or i.content)}
    redacted = {e.subject_ref for e in got.context_events
                if e.event_class == "context.redaction.applied"}
    assert redacted == ({f"item:{i}" for i in blocked} if capture else set())

    # no content attribute leaves the process unless capture is on
    if not capture:
        for span in tel.spans():
            for key in (span.attributes or {}):
                assert key not in ("context.selection.query", "context.selection.rationale")
            for ev in span.events:
                assert "context.item.content" not in (ev.attributes or {})
                assert "context.summary.content" not in (ev.attributes or {})
                assert "context.missing.question" not in (ev.attributes or {})


@pytest.mark.parametrize("capture", [False, True])
def test_twelve_hundred_candidates_split_over_items_spans(capture: bool) -> None:
    its = [ContextItem(item_id=f"d{i}", context_kind="retrieval_result", token_estimate=i)
           for i in range(1_200)]
    sel = ContextSelection(selection_id="sel", candidate_item_refs=[i.item_id for i in its],
                           selected_item_refs=["d0"],
                           omitted_item_refs=[OmittedRef(item_id=i.item_id, reason="budget")
                                              for i in its[1:]], candidate_count=1_200,
                           created_at="2026-11-22T10:00:00Z", completed_at="2026-11-22T10:00:01Z")
    bundle = Bundle(context_envelope=ContextEnvelope(context_id="c", scope="turn",
                                                     created_at="2026-11-22T09:59:59Z",
                                                     completed_at="2026-11-22T10:00:02Z"),
                    context_surfaces=[ContextSurface(surface_id="s",
                                                     item_refs=[i.item_id for i in its],
                                                     created_at="2026-11-22T09:59:59.5Z",
                                                     completed_at="2026-11-22T09:59:59.6Z")],
                    context_items=its, context_selections=[sel])
    rebuilt, tel = _roundtrip(bundle, capture)
    spans = tel.spans()
    assert all(len(s.events) <= 100 for s in spans)
    items_spans = [s for s in spans if s.name == "context.items"]
    # 1,200 surface + 1,200 selection events: 100 on each stage span, 11 x 100 in parts each
    assert len(items_spans) == 22
    assert sorted(s.attributes["context.items.part"] for s in items_spans) == sorted(
        list(range(1, 12)) * 2)
    got = Bundle.from_dict(rebuilt)
    assert got.context_selections[0].candidate_item_refs == [i.item_id for i in its]
    assert len(got.context_selections[0].omitted_item_refs) == 1_199
    assert rebuilt["rebuild"] == {"status": "complete", "expected_spans": 24,
                                  "received_spans": 24, "dropped_events": 0,
                                  "dropped_attributes": 0}
