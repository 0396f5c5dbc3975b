"""ContextOS: each seed example maps to the exact bundle expected (written by hand from the
seed text, seed 004), through emitted spans and the rebuild; tool statuses; unpinned packs;
W3C trace context; the invokeAgent helper.

Fixtures (tests/adapters/fixtures/contextos) are the seed's examples as they are, except
``tool_result.json``: the seed's ToolResultEnvelope has a trailing comma after ``metadata``
(not JSON); the fixture drops it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from adapters_helpers import CONTEXTOS, events, load, records

from otel_agent_context import _semconv as S
from otel_agent_context import emit_bundle
from otel_agent_context._attributes import digest_text
from otel_agent_context.adapters import (
    AgentInvocation,
    ContextOSRefs,
    compiled_context_bundle,
    contextos_bundle,
    current_invocation,
    decision_refs,
    pack_ref_gaps,
    run_context_refs,
    tool_result_records,
    trace_parent,
    wrap_invoke_agent,
)
from otel_agent_context.testing import CapturedTelemetry

T = "2026-05-04T09:31:00Z"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_URN = "agent:contextos/support-refund@1.2.0"
PRODUCER = "otel-agent-context/0.1.0"
META = {"gen_ai.agent.name": "support-refund", "gen_ai.agent.id": "agt_support",
        "gen_ai.conversation.id": "sess_42f1", "user.id": "usr_771"}
BUCKETS = [("policy", 1800, 940), ("tool", 1500, 220), ("evidence", 3500, 2100),
           ("memory", 1500, 460), ("business", 1500, 510), ("session", 2200, 490)]


def sha(text: str) -> str:
    return digest_text(text)  # keyed, as the adapter records it


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rebuilt(bundle: Any, tel: CapturedTelemetry) -> dict[str, Any]:
    emit_bundle(bundle, tel.agent_context)
    (out,) = tel.bundles()
    assert out["rebuild"]["status"] == "complete"
    return out


def envelope(**fields: Any) -> dict[str, Any]:
    return {"scope": "turn", "schema_version": "0.1", "created_at": T, "completed_at": T,
            "producer": PRODUCER, **fields}


def test_the_seed_tool_result_is_not_json_and_the_fixture_fixes_only_that() -> None:
    seed_text = (
        '{"metadata": {"cost_cents": 0.31},\n}')  # the shape of the seed's last lines
    with pytest.raises(json.JSONDecodeError):
        json.loads(seed_text)
    assert load("tool_result.json")["metadata"]["cost_cents"] == 0.31
    assert sorted(p.name for p in CONTEXTOS.iterdir()) == [
        "compiled_context.json", "decision_record.json", "invoke_agent.json",
        "invoke_agent_builder.json", "run_context.json", "tool_call.json", "tool_result.json",
        "trace_context.json"]


# -- CompiledContext -------------------------------------------------------------------------


def test_compiled_context_maps_to_the_expected_bundle(tel: CapturedTelemetry) -> None:
    bundle = rebuilt(compiled_context_bundle(load("compiled_context.json"), at=T), tel)
    pack = {"source_id": "ctxpack.support@5.2.0", "source_kind": "context_pack",
            "external_mappings": {"contextos.pack_ref": "ctxpack.support@5.2.0"}}
    prompt = [{"item_id": f"compiled_prompt.{part}", "context_kind": kind,
               "content_mode": "inline", "digest": sha("..."), "source_refs": [pack]}
              for part, kind in (("system", "system_prompt"),
                                 ("developer", "developer_instruction"),
                                 ("task", "user_message"))]
    policy = {"item_id": "policy:POLICY_RETURNS_V4", "context_kind": "policy_note",
              "content_mode": "ref",
              "source_refs": [{"source_id": "POLICY_RETURNS_V4", "source_kind": "policy_bundle",
                               "external_mappings": {
                                   "contextos.rule_ids": "R_REFUND_REQUIRES_IDV"}}]}
    tool = {"item_id": "capability:adp_payments.issue_refund", "context_kind": "custom",
            "content_mode": "ref",
            "source_refs": [{"source_id": "adp_payments.issue_refund",
                             "source_kind": "tool_capability",
                             "external_mappings": {
                                 "contextos.adapter_id": "adp_payments",
                                 "contextos.capability": "issue_refund",
                                 "contextos.kind": "write",
                                 "contextos.risk_level": "write_irreversible",
                                 "contextos.approval_mode": "destructive",
                                 "contextos.source": "adapter_registry"}}]}
    kg = "kg:order:ord_881#snapshot_kg_2026_05_03_T0930"
    evidence = {"item_id": kg, "context_kind": "retrieval_result", "content_mode": "ref",
                "content_ref": kg, "source_refs": [{"source_id": kg, "source_kind": "evidence"}]}
    dropped = {"item_id": "ev_low_priority_7", "context_kind": "retrieval_result"}
    segments = [{"segment": b, "order": i, "reserved_tokens": alloc, "used_tokens": used}
                for i, (b, alloc, used) in enumerate(BUCKETS)]
    selected = ["policy:POLICY_RETURNS_V4", "capability:adp_payments.issue_refund", kg]
    assembled = ["compiled_prompt.system", "compiled_prompt.developer", "compiled_prompt.task"]
    assert records(bundle) == {
        "context_envelope": envelope(
            context_id="contextos:req_9f3a12", lifecycle="assembled",
            runtime_refs=["context_pack:ctxpack.support@5.2.0", "request:req_9f3a12"],
            policy_refs=["policy:POLICY_RETURNS_V4#R_REFUND_REQUIRES_IDV"],
            evidence_refs=[kg], surface_refs=["contextos-surface"],
            item_refs=selected + assembled, selection_refs=["contextos-selection"],
            budget_ref="contextos-budget", assembly_refs=["contextos-assembly"]),
        "context_surfaces": [{
            "surface_id": "contextos-surface",
            "item_refs": [*assembled, *selected, "ev_low_priority_7"], "item_count": 7,
            "created_at": T, "completed_at": T}],
        "context_items": [*prompt, policy, tool, evidence, dropped],
        "context_selections": [{
            "selection_id": "contextos-selection", "surface_id": "contextos-surface",
            "budget_ref": "contextos-budget", "candidate_count": 4,
            "candidate_item_refs": [*selected, "ev_low_priority_7"],
            "selected_item_refs": selected,
            "omitted_item_refs": [{
                "item_id": "ev_low_priority_7", "reason": "budget",
                "detail": "evidence bucket exceeded budget; dropped 1 low-priority block"}],
            "created_at": T, "completed_at": T}],
        "context_budgets": [{
            "budget_id": "contextos-budget", "target": "model",
            "max_tokens": 12000,  # the allocations: 1800+1500+3500+1500+1500+2200
            "actual_tokens": 4720, "overflow_strategy": "custom", "overflow": True,
            "utilization": 4720 / 12000, "window_ref": "contextos-window",
            "truncation_records": [{"segment": "evidence", "strategy": "custom",
                                    "tokens_after": 2100}],
            "window_segments": segments, "created_at": T, "completed_at": T}],
        "context_windows": [{
            "window_id": "contextos-window", "budget_ref": "contextos-budget",
            "target": "model", "max_tokens": 12000, "segments": segments, "created_at": T}],
        "context_assemblies": [{
            "assembly_id": "contextos-assembly", "target": "model",
            "budget_ref": "contextos-budget", "block_count": 3, "token_count": 4720,
            "hash": "sha256:9f0b...",
            "ordered_blocks": [
                {"index": 0, "item_id": "compiled_prompt.system", "context_kind": "system_prompt",
                 "injection_point": "system_prompt", "digest": sha("...")},
                {"index": 1, "item_id": "compiled_prompt.developer",
                 "context_kind": "developer_instruction", "injection_point": "developer_prompt",
                 "digest": sha("...")},
                {"index": 2, "item_id": "compiled_prompt.task", "context_kind": "user_message",
                 "injection_point": "message_history", "digest": sha("...")}],
            "source_item_refs": assembled, "created_at": T}],
    }
    assert events(bundle) == [
        ("context.surface.created", "surface:contextos-surface"),
        *[("context.item.added", f"item:{i}") for i in [*assembled, *selected,
                                                        "ev_low_priority_7"]],
        ("context.selection.started", "selection:contextos-selection"),
        ("context.selection.completed", "selection:contextos-selection"),
        ("context.budget.applied", "budget:contextos-budget"),
        ("context.assembly.created", "assembly:contextos-assembly")]


def test_compiled_context_blocks_are_selected_items_and_assembly_blocks(
        tel: CapturedTelemetry) -> None:
    compiled = load("compiled_context.json")
    compiled["compiled_prompt"]["context_blocks"] = [
        {"block_id": "ev_order_881", "bucket": "evidence", "tokens": 700, "content": "Order 881"},
        "plain text block"]
    compiled["context_ledger"]["memory_refs"] = ["mem:cus_77:prefers_email"]
    bundle = rebuilt(compiled_context_bundle(compiled, at=T), tel)
    (asm,) = bundle["context_assemblies"]
    assert [(b["index"], b["item_id"], b.get("context_kind"), b.get("tokens"))
            for b in asm["ordered_blocks"][3:]] == [
        (3, "ev_order_881", "retrieval_result", 700),
        (4, "context_blocks[1]", "custom", None)]
    (sel,) = bundle["context_selections"]
    assert sel["selected_item_refs"][:2] == ["ev_order_881", "context_blocks[1]"]
    assert "mem:cus_77:prefers_email" in sel["selected_item_refs"]
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["ev_order_881"]["digest"] == sha("Order 881")
    assert items["mem:cus_77:prefers_email"]["context_kind"] == "durable_memory"


def test_a_budget_report_without_truncation_is_no_overflow() -> None:
    compiled = load("compiled_context.json")
    compiled["budget_report"]["bucket_truncations"] = {}
    compiled["budget_report"]["dropped_block_ids"] = {}
    bundle = compiled_context_bundle(compiled)
    (budget,) = bundle.context_budgets
    assert budget.overflow is False and budget.overflow_strategy is None
    assert budget.truncation_records == []
    assert bundle.context_selections[0].omitted_item_refs == []


# -- RunContext and the invokeAgent envelope ---------------------------------------------------


def test_run_context_maps_to_the_expected_bundle(tel: CapturedTelemetry) -> None:
    bundle = rebuilt(contextos_bundle(run_context=load("run_context.json"), at=T), tel)
    segments = [{"segment": b, "order": i, "reserved_tokens": alloc}
                for i, (b, alloc, _) in enumerate(BUCKETS)]
    assert records(bundle) == {
        "context_envelope": envelope(
            context_id="contextos:run_a1b2c3d4e5f60718", lifecycle="draft",
            actor_refs=["user:usr_771", AGENT_URN],
            runtime_refs=["run:run_a1b2c3d4e5f60718", "session:sess_42f1",
                          "tenant:tenant_acme_prod"],
            metadata=META, budget_ref="contextos-budget"),
        "context_budgets": [{
            "budget_id": "contextos-budget", "target": "model", "max_tokens": 12000,
            "window_ref": "contextos-window", "window_segments": segments,
            "created_at": T, "completed_at": T}],
        "context_windows": [{
            "window_id": "contextos-window", "budget_ref": "contextos-budget",
            "target": "model", "max_tokens": 12000, "segments": segments, "created_at": T}],
    }


@pytest.mark.parametrize(("fixture", "agent_ref", "packs", "evidence", "meta"), [
    ("invoke_agent.json", AGENT_URN,
     ["ctxpack.support@5.2.0", "decision-catalog.support@2.1.0"],
     ["artifact:art_invoice_881"], META),
    ("invoke_agent_builder.json", "agent:agt_support", ["ctxpack.support@5.2.0"], [],
     {**META, "gen_ai.agent.name": "agt_support"}),
])
def test_invoke_agent_envelope_maps_to_the_expected_bundle(
        tel: CapturedTelemetry, fixture: str, agent_ref: str, packs: list[str],
        evidence: list[str], meta: dict[str, str]) -> None:
    bundle = rebuilt(contextos_bundle(request=load(fixture), at=T), tel)
    env = envelope(
        context_id="contextos:req_9f3a12", lifecycle="draft",
        actor_refs=["user:usr_771", agent_ref],
        runtime_refs=["request:req_9f3a12", "session:sess_42f1", "tenant:tenant_acme_prod",
                      *[f"context_pack:{p}" for p in packs]],
        metadata=meta)
    if evidence:
        env["evidence_refs"] = evidence
    assert records(bundle) == {"context_envelope": env}


def test_trace_context_baggage_and_tracestate_name_runtime_refs() -> None:
    run_context = {**load("run_context.json"), **load("trace_context.json")}
    refs = run_context_refs(run_context)
    assert refs == ContextOSRefs(
        actor_refs=("user:usr_771", AGENT_URN),
        runtime_refs=("run:run_a1b2c3d4e5f60718", "session:sess_42f1",
                      "tenant:tenant_acme_prod", "decision:support.refund.execute",
                      "context_pack:ctxpack.support@5.2.0"))


# -- tool envelopes ----------------------------------------------------------------------------


def test_tool_envelopes_map_to_the_expected_bundle(tel: CapturedTelemetry) -> None:
    call, result = load("tool_call.json"), load("tool_result.json")
    bundle = rebuilt(contextos_bundle(tool_calls=[call], tool_results=[result], at=T), tel)
    output = sha(canonical(result["output"]))
    item_id = "tool:adp_payments.issue_refund:tool_118"
    assert records(bundle) == {
        "context_envelope": envelope(
            context_id="contextos:run_a1b2c3d4e5f60718", lifecycle="injected",
            actor_refs=["user:usr_771", AGENT_URN],
            policy_refs=["policy_decision:pol_9901"],
            evidence_refs=["kg:order:ord_881#snapshot_kg_2026_05_03_T0930",
                           "policy:POLICY_RETURNS_V1#R_HIGH_VALUE_REQUIRES_APPROVAL",
                           item_id],
            surface_refs=["contextos-surface"],
            injection_refs=["tool_call:tool_118", "tool_result:tool_118"]),
        "context_surfaces": [{"surface_id": "contextos-surface", "item_refs": [item_id],
                              "item_count": 1, "created_at": T, "completed_at": T}],
        "context_items": [{
            "item_id": item_id, "context_kind": "tool_result",
            "content_mode": "tool_result_ref", "mime_type": "application/json",
            "redaction_state": "none", "digest": output,
            "source_refs": [{"source_id": "tool_118", "source_kind": "tool",
                             "external_mappings": {
                                 "model_api.tool_call_id": "tool_118",
                                 "contextos.capability_id": "adp_payments.issue_refund",
                                 "contextos.status": "completed",
                                 "contextos.run_id": "run_a1b2c3d4e5f60718",
                                 "contextos.policy_decision_id": "pol_9901",
                                 "contextos.tool_transcript_id": "tool_tx_118"}}]}],
        "context_injections": [
            {"injection_id": "tool_call:tool_118", "target": "tool",
             "injection_point": "tool_argument", "native_id": "tool_118",
             "visibility": ["tool"], "final_ref": "capability:adp_payments.issue_refund",
             "hash": sha(canonical(call["args"])), "created_at": T},
            {"injection_id": "tool_result:tool_118", "target": "model",
             "injection_point": "message_history", "native_id": "tool_118",
             "visibility": ["model"], "hash": output, "created_at": T}],
    }
    # the tool call id is the GenAI attribute on the wire
    (added,) = [e for s in tel.spans() for e in s.events if e.name == S.EVENT_ITEM_ADDED]
    assert added.attributes[S.GEN_AI_TOOL_CALL_ID] == "tool_118"


@pytest.mark.parametrize(("status", "severity"), [
    ("ok", None), ("completed", None), ("paused", "medium"), ("blocked", "high"),
    ("rejected", "high"), ("failed", "high"), ("error", "high")])
def test_every_tool_status_is_a_tool_result_item_and_its_injection(
        tel: CapturedTelemetry, status: str, severity: str | None) -> None:
    result = load("tool_result.json")
    result["status"] = status
    if status not in ("ok", "completed"):
        result["output"] = None
        result["error"] = {"code": status.upper(), "message": f"tool {status}"}
    bundle = rebuilt(contextos_bundle(tool_results=[result], at=T), tel)
    (item,) = bundle["context_items"]
    assert item["source_refs"][0]["external_mappings"]["contextos.status"] == status
    payload = result["output"] if result["output"] is not None else result["error"]
    assert item["digest"] == sha(canonical(payload))
    (injection,) = bundle["context_injections"]
    assert (injection["injection_point"], injection["target"]) == ("message_history", "model")
    if severity is None:
        assert "missing_context" not in bundle
    else:
        (gap,) = bundle["missing_context"]
        assert gap == {"missing_id": "tool_result:tool_118", "scope": "tool_invocation",
                       "needed_for": "adp_payments.issue_refund", "severity": severity,
                       "blocked_actions": ["adp_payments.issue_refund"], "status": "open",
                       "created_at": T}


def test_tool_result_question_and_content_are_recorded_only_under_content_capture() -> None:
    result = load("tool_result.json")
    result["status"] = "paused"
    records_ = tool_result_records(result)
    assert records_.missing is not None
    assert records_.missing.question == (
        "the result of adp_payments.issue_refund (tool_118) is paused: approval, an "
        "external dependency or a continuation is pending")
    tel = CapturedTelemetry(capture_content=True)
    try:
        bundle = rebuilt(contextos_bundle(tool_results=[result], at=T), tel)
    finally:
        tel.shutdown()
    assert bundle["context_items"][0]["content"] == canonical(result["output"])
    assert bundle["missing_context"][0]["question"] == records_.missing.question


# -- DecisionRecord -------------------------------------------------------------------------


def test_decision_record_maps_to_the_expected_bundle(tel: CapturedTelemetry) -> None:
    record = load("decision_record.json")
    bundle = rebuilt(contextos_bundle(decision=record, at=T), tel)
    assert records(bundle) == {"context_envelope": envelope(
        context_id="contextos:req_9f3a12", lifecycle="draft",
        actor_refs=["user:usr_771", AGENT_URN],
        runtime_refs=["context_pack:ctxpack.support@5.2.0"],
        policy_refs=["policy_decision:pol_9900", "policy_decision:pol_9901"],
        evidence_refs=["kg:order:ord_881#snapshot_kg_2026_05_03_T0930",
                       "tool:adp_orders.lookup:tc_117", "tool:adp_policy.eval:tc_119",
                       "tool:adp_payments.issue_refund:tc_121",
                       "decision_record:dr_2026_05_04_a17", "approval:GATE_FINANCE_APPROVAL"])}
    assert decision_refs(record).evidence_refs[:4] == tuple(record["evidence_refs"])


# -- context_pack_refs ------------------------------------------------------------------------


def test_unpinned_pack_refs_are_blocking_missing_context(tel: CapturedTelemetry) -> None:
    request = load("invoke_agent.json")
    request["context_pack_refs"] = ["ctxpack.support@5.2.0", "ctxpack.support",
                                    "decision-catalog.support@latest", "ctxpack.billing@5.2"]
    bundle = rebuilt(contextos_bundle(request=request, at=T), tel)

    def gap(ref: str, pack: str) -> dict[str, Any]:
        return {"missing_id": f"unpinned:{ref}", "scope": "compile", "needed_for": "compile",
                "severity": "blocking", "candidate_sources": [pack],
                "blocked_actions": ["compile"], "status": "open", "created_at": T}

    assert bundle["missing_context"] == [
        gap("ctxpack.support", "ctxpack.support"),
        gap("decision-catalog.support@latest", "decision-catalog.support"),
        gap("ctxpack.billing@5.2", "ctxpack.billing")]
    assert bundle["context_envelope"]["missing_context_refs"] == [
        "unpinned:ctxpack.support", "unpinned:decision-catalog.support@latest",
        "unpinned:ctxpack.billing@5.2"]
    assert [r for r in bundle["context_envelope"]["runtime_refs"]
            if r.startswith("context_pack:")] == ["context_pack:ctxpack.support@5.2.0"]
    assert events(bundle) == [("context.missing.detected", f"missing:{g}")
                              for g in bundle["context_envelope"]["missing_context_refs"]]


def test_no_pack_refs_at_all_is_blocking_missing_context() -> None:
    (gap,) = pack_ref_gaps([])
    assert (gap.missing_id, gap.severity) == ("context_pack_refs", "blocking")
    assert pack_ref_gaps(["ctxpack.support@5.2.0", "x@1.0.0-rc.1+build.5"]) == []


# -- W3C trace context and the invokeAgent helper ---------------------------------------------


def _span(tel: CapturedTelemetry, prefix: str) -> Any:
    (span,) = [s for s in tel.spans() if s.name.startswith(prefix)]
    return span


def test_the_invocation_is_in_the_run_context_trace(tel: CapturedTelemetry) -> None:
    run_context = {**load("run_context.json"), **load("trace_context.json")}
    with AgentInvocation(tel.agent_context, load("invoke_agent.json"), run_context) as inv:
        assert current_invocation() is inv
        inv.compiled(load("compiled_context.json"))
        inv.tool_call(load("tool_call.json"))
        inv.tool_result(load("tool_result.json"))
        inv.decision(load("decision_record.json"))
    assert current_invocation() is None
    invoke = _span(tel, "invoke_agent ")
    assert invoke.name == "invoke_agent support-refund"
    assert format(invoke.context.trace_id, "032x") == TRACE_ID
    assert format(invoke.parent.span_id, "016x") == "b9c7c989f97918e1"  # the traceparent's
    assert dict(invoke.context.trace_state) == {"tenant": "tenant_acme_prod",
                                                "ctxpack": "ctxpack.support@5.2.0"}
    assert invoke.attributes[S.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert invoke.attributes[S.CONTEXT_SCOPE] == "turn"
    stages = [s for s in tel.spans() if s.name.startswith("context.")]
    assert {s.name for s in stages} == {"context.surface", "context.selection",
                                        "context.budget", "context.assembly"}
    assert all(s.parent.span_id == invoke.context.span_id for s in stages)

    (bundle,) = tel.bundles()
    env = bundle["context_envelope"]
    assert env["context_id"] == "contextos:req_9f3a12" and env["lifecycle"] == "injected"
    assert env["actor_refs"] == ["user:usr_771", AGENT_URN]
    assert env["runtime_refs"] == [
        "run:run_a1b2c3d4e5f60718", "session:sess_42f1", "tenant:tenant_acme_prod",
        "decision:support.refund.execute", "context_pack:ctxpack.support@5.2.0",
        "request:req_9f3a12", "context_pack:decision-catalog.support@2.1.0"]
    assert "decision_record:dr_2026_05_04_a17" in env["evidence_refs"]
    assert bundle["rebuild"]["status"] == "complete"
    expected = contextos_bundle(
        request=load("invoke_agent.json"), run_context=run_context,
        compiled=load("compiled_context.json"), tool_calls=[load("tool_call.json")],
        tool_results=[load("tool_result.json")], decision=load("decision_record.json"),
        at=T).to_dict()
    got = records(bundle)
    for key in ("context_items", "context_assemblies", "context_injections"):
        assert _untimed(got[key]) == _untimed(expected[key]), key


def _untimed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items()
             if k not in ("created_at", "completed_at", "source_item_refs", "content")}
            for r in recs]


def test_the_request_trace_block_parents_when_the_run_context_has_none(
        tel: CapturedTelemetry) -> None:
    with AgentInvocation(tel.agent_context, load("invoke_agent.json"), load("run_context.json")):
        pass
    invoke = _span(tel, "invoke_agent ")
    assert format(invoke.context.trace_id, "032x") == TRACE_ID
    assert format(invoke.parent.span_id, "016x") == "00f067aa0ba902b7"


def test_a_bare_trace_id_keeps_the_run_in_its_trace() -> None:
    ctx = trace_parent({"trace_id": TRACE_ID})
    assert ctx is not None
    from opentelemetry import trace
    parent = trace.get_current_span(ctx).get_span_context()
    assert format(parent.trace_id, "032x") == TRACE_ID and parent.is_remote
    assert trace_parent({"trace_id": "not-hex"}) is None
    assert trace_parent({}) is None


def test_an_invalid_traceparent_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    assert trace_parent({"traceparent": "00-zz-yy-01"}) is None
    assert "invalid traceparent" in caplog.text


def test_the_decorator_records_the_returned_decision(tel: CapturedTelemetry) -> None:
    @wrap_invoke_agent(tel.agent_context)
    def invoke_agent(request: dict[str, Any], run_context: dict[str, Any]) -> dict[str, Any]:
        inv = current_invocation()
        assert inv is not None
        inv.compiled(load("compiled_context.json"))
        return load("decision_record.json")

    out = invoke_agent(load("invoke_agent.json"), load("run_context.json"))
    assert out == load("decision_record.json")  # returned unchanged
    (bundle,) = tel.bundles()
    assert "decision_record:dr_2026_05_04_a17" in bundle["context_envelope"]["evidence_refs"]
    assert bundle["context_envelope"]["lifecycle"] == "assembled"


def test_the_decorator_passes_exceptions_through_and_marks_the_span(
        tel: CapturedTelemetry) -> None:
    class Refused(RuntimeError):
        pass

    @wrap_invoke_agent(tel.agent_context, name="support")
    def invoke_agent(request: dict[str, Any], run_context: dict[str, Any]) -> None:
        raise Refused("unpinned context pack")

    request = load("invoke_agent.json")
    request["context_pack_refs"] = ["ctxpack.support"]
    with pytest.raises(Refused, match="unpinned context pack"):
        invoke_agent(request, load("run_context.json"))
    invoke = _span(tel, "invoke_agent support")
    assert invoke.status.status_code.name == "ERROR"
    assert invoke.attributes[S.ERROR_TYPE].endswith("Refused")
    (bundle,) = tel.bundles()
    assert [(g["missing_id"], g["severity"]) for g in bundle["missing_context"]] == [
        ("unpinned:ctxpack.support", "blocking")]


def test_the_decorator_wraps_async_calls(tel: CapturedTelemetry) -> None:
    @wrap_invoke_agent(tel.agent_context)
    async def invoke_agent(request: dict[str, Any], run_context: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        inv = current_invocation()
        assert inv is not None
        inv.tool_result(load("tool_result.json"))
        return load("decision_record.json")

    asyncio.run(invoke_agent(load("invoke_agent.json"), load("run_context.json")))
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["injection_refs"] == ["tool_result:tool_118"]


def test_bad_objects_never_break_the_call(tel: CapturedTelemetry) -> None:
    with AgentInvocation(tel.agent_context, {"request_id": 5, "agent": "x"}, None) as inv:
        inv.compiled({"compiled_prompt": "nope", "budget_report": {"tokens_allocated": [1]}})
        inv.tool_result({"status": "weird", "output": object.__name__})
        inv.decision({"evidence_refs": "not a list"})
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    gaps = {g["missing_id"]: g["severity"] for g in bundle["missing_context"]}
    # no pinned pack; an unknown tool status leaves the result missing
    assert gaps == {"context_pack_refs": "blocking", "tool_result:unknown": "high"}
    assert "evidence_refs" not in bundle["context_envelope"]  # a string is not a list of refs
