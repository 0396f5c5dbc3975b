"""Cost of recording a typical turn through the API, against raw SDK spans with the same data.

    python benchmarks/api_bench.py [--turns 300] [--rounds 7]

A typical turn: a surface of 50 candidates, a selection (10 selected, 40 omitted), a budget
with 4 window segments and 3 truncations, an assembly of 12 blocks, an injection, a
compaction of 20 sources with a summary, one missing-context record. Three variants run in
one process on the same SDK ``TracerProvider`` (no exporter, so only recording is timed):

- ``api``: this package's API (``AgentContext``), items as ``ContextItem`` records;
- ``raw``: hand-written OpenTelemetry SDK calls producing the same spans, events and
  attributes from the same items (what a careful user would write from the contract alone:
  each event's attributes built from the item's fields that are set);
- ``api-no-sdk``: the API with no SDK configured (the no-op path), per turn and per stage call.

Prints medians (of per-turn times over all rounds) and the ratio api/raw.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from otel_agent_context import AgentContext, ContextItem, ContextSourceRef

N_SURFACE, N_SELECTED, N_BLOCKS, N_SOURCES = 50, 10, 12, 20
STAGE_CALLS = (1 + 1 + N_SURFACE + 1 + N_SURFACE + 1 + 4 + 3 + 1 + 1 + N_BLOCKS + 1
               + 1 + N_SOURCES + 1 + 1 + 1)  # envelope, stages, item events, stops, ...


def _items() -> list[ContextItem]:
    return [ContextItem(item_id=f"kb:doc:{i}", context_kind="document_excerpt",
                        content_mode="ref", token_estimate=100 + i, freshness="current",
                        digest="sha256:" + hashlib.sha256(str(i).encode()).hexdigest(),
                        source_refs=[ContextSourceRef(uri=f"kb://docs/{i}.md",
                                                      selector=f"line_range:{i}-{i + 9}")])
            for i in range(N_SURFACE)]


def _raw_item(item: ContextItem) -> dict[str, Any]:
    """A careful hand-written emitter's attributes for an item: built per event from the
    agent's own item data, only the fields that are set (what ``item_attributes`` does)."""
    src = item.source_refs[0] if item.source_refs else None
    attrs: dict[str, Any] = {"context.item.id": item.item_id}
    if item.context_kind is not None:
        attrs["context.item.kind"] = item.context_kind._value_
    if item.content_mode is not None:
        attrs["context.item.content_mode"] = item.content_mode._value_
    if item.token_estimate is not None:
        attrs["context.item.token_estimate"] = item.token_estimate
    if item.freshness is not None:
        attrs["context.item.freshness"] = item.freshness
    if item.digest is not None:
        attrs["context.item.digest"] = item.digest
    if src is not None:
        if src.uri is not None:
            attrs["context.source.uri"] = src.uri
        if src.selector is not None:
            attrs["context.source.selector"] = src.selector
    return attrs


def turn_api(ctx: AgentContext, items: list[ContextItem], tracer: trace.Tracer) -> None:
    with ctx.envelope(scope="turn", agent_name="bench", conversation_id="c1") as env:
        with env.surface() as srf:
            for it in items:
                srf.add(it)
        with env.selection(surface_id=srf.surface_id, intent="answer") as sel:
            for rank, it in enumerate(items):
                if rank < N_SELECTED:
                    sel.selected(it, rank=rank + 1, score=1.0 - rank / 100)
                else:
                    sel.omitted(it, reason="budget", score=0.1)
        with env.budget(max_tokens=8192, reserved_tokens=1024,
                        overflow_strategy="truncate_middle") as bud:
            for order, seg in enumerate(("system", "history", "retrieval", "output")):
                bud.segment(seg, order=order, reserved_tokens=1000, used_tokens=800)
            for it in items[:3]:
                bud.truncated(item_id=it.item_id, strategy="truncate_middle",
                              tokens_before=400, tokens_after=100)
            bud.actual(tokens=7000)
        with env.assembly(budget_id=bud.budget_id) as asm:
            for it in items[:N_BLOCKS]:
                asm.block(it, injection_point="message_history")
        with tracer.start_as_current_span("chat bench-model", kind=SpanKind.CLIENT) as chat:
            asm.inject(span=chat, injection_point="message_history")
        with env.compaction(method="rolling_summary", trigger="budget") as comp:
            for it in items[:N_SOURCES]:
                comp.source(it, covered=True)
            comp.summary(token_estimate=300, digest="sha256:00")
        env.missing(severity="blocking", needed_for="refund", blocked_actions=["refund"])


def turn_raw(tracer: trace.Tracer, items: list[ContextItem], n: list[int]) -> None:
    n[0] += 1
    cid = f"ctx_{n[0]}"
    env = tracer.start_span("context.envelope", attributes={
        "context.id": cid, "context.scope": "turn", "context.schema_version": "0.1",
        "context.producer": "raw/1", "gen_ai.agent.name": "bench",
        "gen_ai.conversation.id": "c1"})
    parent = trace.set_span_in_context(env)
    token = trace.context_api.attach(parent)
    srf = tracer.start_span("context.surface", parent, attributes={
        "context.id": cid, "context.surface.id": f"srf_{n[0]}"})
    for item in items:
        srf.add_event("context.item.added", _raw_item(item))
    srf.set_attributes({"context.surface.item_count": len(items),
                        "context.surface.token_estimate": 7225, "context.id": cid})
    srf.end()
    sel = tracer.start_span("context.selection", parent, attributes={
        "context.id": cid, "context.selection.id": f"sel_{n[0]}",
        "context.surface.id": f"srf_{n[0]}", "context.selection.intent": "answer"})
    for rank, item in enumerate(items):
        it = _raw_item(item)
        if rank < N_SELECTED:
            it["context.selection.rank"] = rank + 1
            it["context.selection.score"] = 1.0 - rank / 100
            sel.add_event("context.item.selected", it)
        else:
            it["context.omission.reason"] = "budget"
            it["context.selection.score"] = 0.1
            sel.add_event("context.item.omitted", it)
    sel.set_attributes({"context.selection.candidate_count": 50,
                        "context.selection.selected_count": 10,
                        "context.selection.omitted_count": 40, "context.id": cid})
    sel.end()
    bud = tracer.start_span("context.budget", parent, attributes={
        "context.id": cid, "context.budget.id": f"bud_{n[0]}", "context.budget.target": "model",
        "context.budget.max_tokens": 8192, "context.budget.reserved_tokens": 1024,
        "context.budget.overflow_strategy": "truncate_middle"})
    for order, seg in enumerate(("system", "history", "retrieval", "output")):
        bud.add_event("context.window.segment", {
            "context.window.segment": seg, "context.window.order": order,
            "context.window.reserved_tokens": 1000, "context.window.used_tokens": 800})
    for item in items[:3]:
        bud.add_event("context.budget.truncated", {
            "context.item.id": item.item_id,
            "context.truncation.strategy": "truncate_middle",
            "context.truncation.tokens_before": 400, "context.truncation.tokens_after": 100})
    bud.set_attributes({"context.budget.actual_tokens": 7000,
                        "context.budget.utilization": 7000 / 8192,
                        "context.budget.overflow": False, "context.id": cid})
    bud.end()
    asm = tracer.start_span("context.assembly", parent, attributes={
        "context.id": cid, "context.assembly.id": f"asm_{n[0]}",
        "context.assembly.target": "model", "context.budget.id": f"bud_{n[0]}"})
    parts = []
    for index, item in enumerate(items[:N_BLOCKS]):
        asm.add_event("context.assembly.block", {
            "context.block.index": index, "context.item.id": item.item_id,
            "context.item.kind": "document_excerpt",
            "context.block.tokens": item.token_estimate,
            "context.injection.point": "message_history",
            "context.block.digest": item.digest})
        parts.append(f"{index}:{item.item_id}:{item.digest}\n")
    digest = "sha256:" + hashlib.sha256("".join(parts).encode()).hexdigest()
    asm.set_attributes({"context.assembly.block_count": N_BLOCKS,
                        "context.assembly.token_count": 1266, "context.assembly.hash": digest,
                        "context.id": cid})
    asm.end()
    with tracer.start_as_current_span("chat bench-model", kind=SpanKind.CLIENT) as chat:
        chat.set_attribute("context.id", cid)
        chat.add_event("context.injection.applied", {
            "context.injection.id": f"inj_{n[0]}", "context.injection.target": "model",
            "context.injection.point": "message_history",
            "context.assembly.id": f"asm_{n[0]}", "context.injection.hash": digest})
    comp = tracer.start_span("context.compaction", parent, attributes={
        "context.id": cid, "context.compaction.id": f"cmp_{n[0]}",
        "context.compaction.method": "rolling_summary", "context.compaction.trigger": "budget"})
    for item in items[:N_SOURCES]:
        comp.add_event("context.compaction.source", {
            "context.item.id": item.item_id, "context.compaction.covered": True,
            "context.item.token_estimate": item.token_estimate,
            "context.item.kind": "document_excerpt"})
    comp.add_event("context.summary.created", {
        "context.summary.id": f"sum_{n[0]}", "context.summary.token_estimate": 300,
        "context.summary.digest": "sha256:00"})
    comp.set_attributes({"context.compaction.source_count": N_SOURCES,
                         "context.compaction.tokens_before": 2190,
                         "context.compaction.coverage": 1.0,
                         "context.compaction.tokens_after": 300,
                         "context.summary.id": f"sum_{n[0]}", "context.id": cid})
    comp.end()
    env.add_event("context.missing.detected", {
        "context.missing.id": f"mis_{n[0]}", "context.missing.severity": "blocking",
        "context.missing.status": "open", "context.missing.needed_for": "refund",
        "context.missing.blocked_actions": ("refund",)})
    env.set_attributes({"context.lifecycle": "injected", "context.scope": "turn",
                        "context.span_count": 6, "context.id": cid})
    trace.context_api.detach(token)
    env.end()


def _time(fn: Any, turns: int) -> list[float]:
    out = []
    for _ in range(turns):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)

    provider = TracerProvider()  # records spans; no processor, so export is not timed
    tracer = provider.get_tracer("bench")
    items = _items()
    ctx = AgentContext(tracer_provider=provider, capture_content=False)
    noop_ctx = AgentContext(tracer_provider=trace.NoOpTracerProvider())
    noop_tracer = trace.NoOpTracerProvider().get_tracer("bench")
    counter = [0]

    results: dict[str, list[float]] = {"api": [], "raw": [], "api-no-sdk": []}
    for _ in range(args.rounds):  # interleave so drift hits every variant alike
        results["raw"] += _time(lambda: turn_raw(tracer, items, counter), args.turns)
        results["api"] += _time(lambda: turn_api(ctx, items, tracer), args.turns)
        results["api-no-sdk"] += _time(lambda: turn_api(noop_ctx, items, noop_tracer),
                                       args.turns)

    med = {k: statistics.median(v) for k, v in results.items()}
    summary = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
                   f"Python {platform.python_version()}",
        "opentelemetry_sdk": version("opentelemetry-sdk"),
        "turns": args.turns * args.rounds,
        "median_us_per_turn": {k: round(v, 1) for k, v in med.items()},
        "api_over_raw": round(med["api"] / med["raw"], 3),
        "no_sdk_us_per_stage_call": round(med["api-no-sdk"] / STAGE_CALLS, 3),
        "stage_calls_per_turn": STAGE_CALLS,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"machine: {summary['machine']}; opentelemetry-sdk {summary['opentelemetry_sdk']}")
        for k, v in summary["median_us_per_turn"].items():
            print(f"  {k:<11} {v:>9.1f} us/turn (median of {summary['turns']})")
        print(f"  api/raw     {summary['api_over_raw']:.3f}  (goal <= 1.0)")
        print(f"  no SDK      {summary['no_sdk_us_per_stage_call']:.3f} us per stage call "
              f"({STAGE_CALLS} calls a turn; goal <= 2)")
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
