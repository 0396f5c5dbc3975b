"""Contract v0.2's folded form from a foreign emitter, through the real processor over OTLP
(protobuf and JSON): a model call as one inference span whose budget, window segments,
blocks and injection are attributes (parallel arrays). Well-formed, it rebuilds to the same
records as the span-and-event form; off-spec (arrays of other lengths, elements of the
wrong type, unknown enum values, source counts that do not add up, an array without the one
it runs parallel to), the processor keeps every position, says what it changed, and writes a
bundle that validates."""

from __future__ import annotations

import hashlib
from typing import Any

import jsonschema
from processor_testkit import span
from test_boundary import SCHEMA, T0, TRACE, bundles, post, post_json, repairs

from otel_agent_context import _semconv as S

CID = "ctx_folded"


def call(cid: str = CID, trace: int = TRACE, **overrides: Any) -> Any:
    """One folded chat call, outside any envelope (the span is the envelope)."""
    attributes: dict[str, Any] = {
        S.CONTEXT_ID: cid, S.CONTEXT_SCOPE: "turn", S.CONTEXT_SPAN_COUNT: 0,
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 60,
        S.BUDGET_ID: "bud_1", S.BUDGET_TARGET: "model", S.BUDGET_MAX_TOKENS: 1000,
        S.BUDGET_RESERVED_TOKENS: 100, S.BUDGET_ACTUAL_TOKENS: 60,
        S.BUDGET_OVERFLOW_STRATEGY: "reject",
        S.WINDOW_SEGMENT_NAMES: ["system_prompt", "message_history", "output"],
        S.WINDOW_SEGMENT_ORDERS: [0, 1, 2],
        S.WINDOW_SEGMENT_RESERVED_TOKENS: [-1, -1, 100],
        S.WINDOW_SEGMENT_USED_TOKENS: [10, 50, -1],
        S.ASSEMBLY_ID: "asm_1", S.ASSEMBLY_TARGET: "model", S.ASSEMBLY_BLOCK_COUNT: 3,
        S.ASSEMBLY_TOKEN_COUNT: 60,
        S.ASSEMBLY_BLOCK_ITEM_IDS: ["system:1", "user:1", "user:2"],
        S.ASSEMBLY_BLOCK_KINDS: ["system_prompt", "session_history", "user_message"],
        S.ASSEMBLY_BLOCK_TOKENS: [10, 30, 20],
        S.ASSEMBLY_BLOCK_INJECTION_POINTS: ["system_prompt", "message_history",
                                            "message_history"],
        S.ASSEMBLY_BLOCK_DIGESTS: ["sha256:" + "a" * 64, "", "sha256:" + "b" * 64],
        S.ASSEMBLY_BLOCK_SOURCE_COUNTS: [0, 0, 2],
        S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS: ["kb:refunds", "kb:shipping"],
        S.ASSEMBLY_BLOCK_TOOL_CALL_IDS: ["", "call_9", ""],
        S.INJECTION_ID: "inj_1", S.INJECTION_TARGET: "model",
        S.INJECTION_POINT: "message_history",
    }
    attributes.update(overrides)
    for key in [k for k, v in attributes.items() if v is None]:
        del attributes[key]
    s = span(trace, 1, "chat gpt-4o-mini", attributes, start=T0, duration=5_000)
    s.kind = s.SPAN_KIND_CLIENT
    return s


def test_a_folded_call_rebuilds_to_its_records(start_processor) -> None:
    processor = start_processor()
    response = post(processor, [call()])
    assert response.partial_success.rejected_spans == 0
    (bundle,) = bundles(processor)
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    (budget,) = bundle["context_budgets"]
    assert budget["budget_id"] == "bud_1" and budget["max_tokens"] == 1000
    assert budget["window_segments"] == [
        {"segment": "system_prompt", "order": 0, "used_tokens": 10},
        {"segment": "message_history", "order": 1, "used_tokens": 50},
        {"segment": "output", "order": 2, "reserved_tokens": 100}]
    (asm,) = bundle["context_assemblies"]
    assert asm["budget_ref"] == "bud_1"
    assert asm["ordered_blocks"] == [
        {"index": 0, "item_id": "system:1", "context_kind": "system_prompt", "tokens": 10,
         "injection_point": "system_prompt", "digest": "sha256:" + "a" * 64},
        {"index": 1, "item_id": "user:1", "context_kind": "session_history", "tokens": 30,
         "injection_point": "message_history"},
        {"index": 2, "item_id": "user:2", "context_kind": "user_message", "tokens": 20,
         "injection_point": "message_history", "digest": "sha256:" + "b" * 64,
         "source_item_refs": ["kb:refunds", "kb:shipping"]}]
    assert asm["source_item_refs"] == ["system:1", "user:1", "user:2", "kb:refunds",
                                       "kb:shipping"]
    (injection,) = bundle["context_injections"]
    assert injection["assembly_id"] == "asm_1"
    assert injection["injection_point"] == "message_history"
    items = {i["item_id"]: i for i in bundle["context_items"]}
    # a block with a native id describes its item, as a block event would
    assert items["user:1"]["source_refs"] == [
        {"external_mappings": {"model_api.tool_call_id": "call_9"}}]
    assert items["user:1"]["token_estimate"] == 30
    assert items["system:1"] == {"item_id": "system:1", "context_kind": "system_prompt"}
    classes = [e["event_class"] for e in bundle["context_events"]]
    assert {"context.assembly.created", "context.injection.applied",
            "context.budget.applied"} <= set(classes)


def _parts_hash(lines: list[str]) -> str:
    return "sha256:" + hashlib.sha256("".join(f"{x}\n" for x in lines).encode()).hexdigest()


def test_the_hashes_left_out_are_derived_and_sent_ones_kept(start_processor) -> None:
    """The folded form need not carry `context.assembly.hash` / `context.injection.hash`
    (ours does not): the rebuild derives the assembly's from the block ids and digests, one
    `<index>:<item id>:<digest>` line each, and gives the injection the same; a hash the
    span carries is kept as sent, and an injection hash of its own too."""
    processor = start_processor()
    sent = "hmac-sha256:" + "c" * 64
    post(processor, [call(), call("ctx_sent", 0x7E59, **{S.ASSEMBLY_HASH: sent}),
                     call("ctx_own", 0x7E5A, **{S.INJECTION_HASH: "sha256:" + "d" * 64})])
    found = {b["context_envelope"]["context_id"]: b for b in bundles(processor, 3)}
    derived = _parts_hash([f"0:system:1:sha256:{'a' * 64}", "1:user:1:",
                           f"2:user:2:sha256:{'b' * 64}"])
    bundle = found[CID]
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    assert "repairs" not in bundle["rebuild"]
    assert bundle["context_assemblies"][0]["hash"] == derived
    assert bundle["context_injections"][0]["hash"] == derived
    assert found["ctx_sent"]["context_assemblies"][0]["hash"] == sent
    assert found["ctx_sent"]["context_injections"][0]["hash"] == sent
    assert found["ctx_own"]["context_assemblies"][0]["hash"] == derived
    assert found["ctx_own"]["context_injections"][0]["hash"] == "sha256:" + "d" * 64
    for b in found.values():
        jsonschema.validate(b, SCHEMA)


def test_no_hash_is_derived_from_blocks_not_all_there(start_processor) -> None:
    """A hash derived from repaired arrays would be no emitter's: none when the boundary cut
    or padded the digests or dropped a block without an id, nor when the span counts more
    blocks than it carries; an empty assembly's is the hash of no lines, as the explicit
    form's; an empty hash sent counts as none."""
    processor = start_processor()
    empty = {S.ASSEMBLY_BLOCK_COUNT: 0, S.ASSEMBLY_TOKEN_COUNT: 0}
    for key in (S.ASSEMBLY_BLOCK_ITEM_IDS, S.ASSEMBLY_BLOCK_KINDS, S.ASSEMBLY_BLOCK_TOKENS,
                S.ASSEMBLY_BLOCK_INJECTION_POINTS, S.ASSEMBLY_BLOCK_DIGESTS,
                S.ASSEMBLY_BLOCK_SOURCE_COUNTS, S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS,
                S.ASSEMBLY_BLOCK_TOOL_CALL_IDS):
        empty[key] = None
    empty[S.ASSEMBLY_BLOCK_ITEM_IDS] = []
    post(processor, [
        call("ctx_short", 0x7E61, **{S.ASSEMBLY_BLOCK_DIGESTS: ["sha256:" + "a" * 64]}),
        call("ctx_unnamed", 0x7E62, **{S.ASSEMBLY_BLOCK_ITEM_IDS: ["system:1", "", "user:2"]}),
        call("ctx_counted", 0x7E63, **{S.ASSEMBLY_BLOCK_COUNT: 4}),
        call("ctx_empty", 0x7E64, **empty),
        call("ctx_blank", 0x7E65, **{S.ASSEMBLY_HASH: ""})])
    found = {b["context_envelope"]["context_id"]: b for b in bundles(processor, 5)}
    for cid in ("ctx_short", "ctx_unnamed", "ctx_counted"):
        (asm,) = found[cid]["context_assemblies"]
        assert "hash" not in asm and "hash" not in found[cid]["context_injections"][0], cid
        assert found[cid]["rebuild"]["status"] == "partial", cid
    assert found["ctx_empty"]["context_assemblies"][0]["hash"] == _parts_hash([])
    assert found["ctx_blank"]["context_assemblies"][0]["hash"] == _parts_hash(
        [f"0:system:1:sha256:{'a' * 64}", "1:user:1:", f"2:user:2:sha256:{'b' * 64}"])
    for b in found.values():
        jsonschema.validate(b, SCHEMA)


def test_arrays_of_other_lengths_are_cut_or_padded_and_said(start_processor) -> None:
    processor = start_processor()
    post(processor, [call(**{
        S.ASSEMBLY_BLOCK_KINDS: ["system_prompt", "session_history", "user_message",
                                 "user_message"],  # one too many
        S.ASSEMBLY_BLOCK_TOKENS: [10],  # two too few
        S.WINDOW_SEGMENT_ORDERS: [0, 1, 2, 3, 4]})])
    (bundle,) = bundles(processor)
    assert bundle["rebuild"]["status"] == "partial"
    assert "repaired" in bundle["rebuild"]["partial_reasons"]
    assert {("array_length", S.ASSEMBLY_BLOCK_KINDS), ("array_length", S.ASSEMBLY_BLOCK_TOKENS),
            ("array_length", S.WINDOW_SEGMENT_ORDERS)} <= set(repairs(bundle))
    blocks = bundle["context_assemblies"][0]["ordered_blocks"]
    assert [b["item_id"] for b in blocks] == ["system:1", "user:1", "user:2"]
    assert [b.get("tokens") for b in blocks] == [10, None, None]
    assert [b["context_kind"] for b in blocks] == ["system_prompt", "session_history",
                                                   "user_message"]
    assert [s.get("order") for s in bundle["context_budgets"][0]["window_segments"]] == [0, 1, 2]


def test_bad_elements_keep_their_positions(start_processor) -> None:
    processor = start_processor()
    post(processor, [call(**{
        S.ASSEMBLY_BLOCK_KINDS: ["SYSTEM_PROMPT", "web_page", "user_message"],
        S.ASSEMBLY_BLOCK_TOKENS: ["10", 2.5, 20],
        S.ASSEMBLY_BLOCK_INJECTION_POINTS: ["system_prompt", 7, "message_history"]})])
    (bundle,) = bundles(processor)
    blocks = bundle["context_assemblies"][0]["ordered_blocks"]
    assert [b["context_kind"] for b in blocks] == ["system_prompt", "custom", "user_message"]
    assert [b.get("tokens") for b in blocks] == [10, None, 20]
    assert [b.get("injection_point") for b in blocks] == ["system_prompt", "custom",
                                                          "message_history"]
    kinds = {kind for kind, field in repairs(bundle)
             if field in (S.ASSEMBLY_BLOCK_KINDS, S.ASSEMBLY_BLOCK_TOKENS,
                          S.ASSEMBLY_BLOCK_INJECTION_POINTS)}
    assert kinds and kinds <= {"type", "enum_case", "enum_custom"}


def test_source_counts_that_do_not_add_up_drop_both(start_processor) -> None:
    processor = start_processor()
    post(processor, [call(**{S.ASSEMBLY_BLOCK_SOURCE_COUNTS: [0, 1, 2]}),
                     call("ctx_orphans", 0x7E58, **{S.ASSEMBLY_BLOCK_SOURCE_COUNTS: None,
                                                    S.WINDOW_SEGMENT_NAMES: None})])
    found = {b["context_envelope"]["context_id"]: b for b in bundles(processor, 2)}
    bad = found[CID]
    assert ("array_length", S.ASSEMBLY_BLOCK_SOURCE_COUNTS) in repairs(bad)
    assert ("array_length", S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS) in repairs(bad)
    assert all("source_item_refs" not in b
               for b in bad["context_assemblies"][0]["ordered_blocks"])
    orphans = found["ctx_orphans"]
    # refs without counts, and segment arrays without their names: dropped, said
    assert {("array_length", S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS),
            ("array_length", S.WINDOW_SEGMENT_ORDERS)} <= set(repairs(orphans))
    assert "window_segments" not in orphans["context_budgets"][0]


def test_otlp_json_carries_the_int_arrays(start_processor) -> None:
    """OTLP/JSON writes 64-bit ints as strings, inside arrays too."""
    processor = start_processor()
    post_json(processor, [call()])
    (bundle,) = bundles(processor)
    jsonschema.validate(bundle, SCHEMA)
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    assert [b["tokens"] for b in bundle["context_assemblies"][0]["ordered_blocks"]] == [
        10, 30, 20]
