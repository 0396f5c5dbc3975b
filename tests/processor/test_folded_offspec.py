"""Contract v0.2's folded form as an outside emitter gets it slightly wrong, sent with the
plain OpenTelemetry SDK through the real OTLP exporters (gRPC and HTTP/protobuf) or as
hand-built OTLP/JSON to the real processor on loopback, and through the in-process
``BundleSpanProcessor``: each case checks the bundle, its repairs, and that both paths agree.
"""

from __future__ import annotations

import time
from typing import Any

import jsonschema
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from processor_testkit import post_json_document, read_bundles, wait_for
from test_boundary import (
    AGENT,
    SCHEMA,
    bundles,
    envelope,
    metrics,
    post,
    repairs,
    samples,
    stage,
)
from test_folded_boundary import call

from otel_agent_context.rebuild import BundleSpanProcessor

KINDS = "context.assembly.block_kinds"
TOKENS = "context.assembly.block_tokens"
ITEM_IDS = "context.assembly.block_item_ids"
DIGESTS = "context.assembly.block_digests"
USED = "context.window.segment_used_tokens"
POINTS = "context.assembly.block_injection_points"
COUNTS = "context.assembly.block_source_counts"
REFS = "context.assembly.block_source_item_refs"


def folded(cid: str, **overrides: Any) -> dict[str, Any]:
    """One folded chat call outside any envelope, the attributes as docs/contract.md says."""
    attributes: dict[str, Any] = {
        "context.id": cid, "context.scope": "turn", "context.span_count": 0,
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "context.budget.id": "bud_1", "context.budget.target": "model",
        "context.budget.max_tokens": 1000, "context.budget.actual_tokens": 60,
        "context.window.segment_names": ["system_prompt", "message_history", "output"],
        "context.window.segment_orders": [0, 1, 2],
        USED: [10, 50, -1],
        "context.assembly.id": "asm_1", "context.assembly.target": "model",
        "context.assembly.block_count": 3,
        ITEM_IDS: ["system:1", "user:1", "user:2"],
        KINDS: ["system_prompt", "session_history", "user_message"],
        TOKENS: [10, 30, 20],
        POINTS: ["system_prompt", "message_history", "message_history"],
        DIGESTS: ["sha256:" + "a" * 64, "", "sha256:" + "b" * 64],
        "context.injection.id": "inj_1", "context.injection.target": "model",
        "context.injection.point": "message_history",
    }
    attributes.update(overrides)
    return attributes


def _exporter(protocol: str, processor: Any) -> Any:
    if protocol == "grpc":
        return GrpcExporter(endpoint=processor.addresses["otlp_grpc"], insecure=True)
    return HttpExporter(endpoint=f"http://{processor.addresses['otlp_http']}/v1/traces")


def send_sdk(protocol: str, processor: Any, attributes: dict[str, Any]) -> None:
    """One inference span through the plain SDK and a real OTLP exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": "offspec-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(_exporter(protocol, processor)))
    with provider.get_tracer("offspec").start_as_current_span(
            "chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=attributes):
        pass
    provider.shutdown()


def in_process(attributes: dict[str, Any]) -> dict[str, Any]:
    """The same span through the in-process BundleSpanProcessor."""
    found: list[dict[str, Any]] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(found.append))
    with provider.get_tracer("offspec").start_as_current_span(
            "chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=attributes):
        pass
    provider.force_flush()
    wait_for(lambda: found, message="the in-process bundle")
    provider.shutdown()
    (bundle,) = found
    jsonschema.validate(bundle, SCHEMA)
    return bundle


def blocks(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    return bundle["context_assemblies"][0]["ordered_blocks"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_none_elements_keep_their_positions(start_processor, protocol: str) -> None:
    """The SDK takes None inside an attribute sequence and the exporters send it as an
    empty AnyValue: the element has no value, and its position still counts."""
    processor = start_processor()
    attributes = folded("ctx_none", **{
        TOKENS: [10, None, 20], KINDS: ["system_prompt", None, "user_message"],
        DIGESTS: [None, None, "sha256:" + "b" * 64], USED: [None, 50, None],
        ITEM_IDS: ["system:1", None, "user:2"]})
    send_sdk(protocol, processor, attributes)
    (bundle,) = bundles(processor)
    # the block without an id is dropped from every array; the others keep their own values
    assert blocks(bundle) == [
        {"index": 0, "item_id": "system:1", "context_kind": "system_prompt", "tokens": 10,
         "injection_point": "system_prompt"},
        {"index": 1, "item_id": "user:2", "context_kind": "user_message", "tokens": 20,
         "injection_point": "message_history", "digest": "sha256:" + "b" * 64}]
    assert [s.get("used_tokens") for s in bundle["context_budgets"][0]["window_segments"]] == [
        None, 50, None]
    said = repairs(bundle)
    assert ("event_dropped", ITEM_IDS) in said
    assert {field for kind, field in said if kind == "type"} >= {TOKENS, KINDS, DIGESTS, USED}
    assert not any(kind == "array_length" for kind, _ in said), said
    local = in_process(attributes)
    assert blocks(local) == blocks(bundle)
    assert local["context_budgets"][0]["window_segments"] == \
        bundle["context_budgets"][0]["window_segments"]


# -- hand-built OTLP/JSON ------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):  # already an AnyValue
        return value
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_json_value(v) for v in value]}}


def post_otlp_json(processor: Any, trace: int, attributes: dict[str, Any]) -> dict[str, Any]:
    """One span as an emitter writing OTLP/JSON by hand sends it (hex ids, ints as strings)."""
    start = time.time_ns()
    document = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name",
                                     "value": {"stringValue": "offspec-json"}}]},
        "scopeSpans": [{"scope": {"name": "hand-built"}, "spans": [{
            "traceId": f"{trace:032x}", "spanId": f"{trace:016x}", "name": "chat gpt-4o-mini",
            "kind": 3, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5000),
            "attributes": [{"key": k, "value": _json_value(v)} for k, v in attributes.items()],
        }]}]}]}
    return post_json_document(processor.addresses["otlp_http"], document)  # type: ignore[no-any-return]


def test_json_elements_without_a_value_keep_their_positions(start_processor) -> None:
    processor = start_processor()
    post_otlp_json(processor, 0xA1, folded("ctx_json_empty", **{
        TOKENS: [10, {}, 20], KINDS: ["system_prompt", {}, "user_message"]}))
    (bundle,) = bundles(processor)
    assert [(b["item_id"], b.get("context_kind"), b.get("tokens")) for b in blocks(bundle)] == [
        ("system:1", "system_prompt", 10), ("user:1", None, None), ("user:2", "user_message", 20)]
    assert not any(kind == "array_length" for kind, _ in repairs(bundle))


@pytest.mark.parametrize("opaque", [
    {"bytesValue": "AAA="},
    {"kvlistValue": {"values": [{"key": "x", "value": {"stringValue": "y"}}]}}])
def test_an_opaque_element_empties_its_position_not_the_whole_array(start_processor,
                                                                     opaque: Any) -> None:
    """A bytes or kvlist element is no contract type: that element goes, as any element
    that cannot be kept, and the blocks beside it stay."""
    processor = start_processor()
    post_otlp_json(processor, 0xA2, folded("ctx_opaque", **{
        ITEM_IDS: ["system:1", opaque, "user:2"], TOKENS: [10, opaque, 20]}))
    (bundle,) = bundles(processor)
    assert [(b["item_id"], b["context_kind"], b.get("tokens")) for b in blocks(bundle)] == [
        ("system:1", "system_prompt", 10), ("user:2", "user_message", 20)]
    said = repairs(bundle)
    assert ("event_dropped", ITEM_IDS) in said and ("type", TOKENS) in said
    assert not any(kind == "array_length" for kind, _ in said), said


def test_an_opaque_element_of_another_array_still_drops_that_array(start_processor) -> None:
    """Outside the folded form's parallel arrays nothing counts positions: the array goes."""
    processor = start_processor()
    post_otlp_json(processor, 0xA3, folded("ctx_opaque_plain", **{
        "context.assembly.visibility": ["model", {"bytesValue": "AAA="}]}))
    (bundle,) = bundles(processor)
    assert "visibility" not in bundle["context_assemblies"][0]
    assert ("type", "context.assembly.visibility") in repairs(bundle)


def test_a_large_call_with_an_unnamed_block_costs_linear_time(start_processor) -> None:
    """Dropping a block without its id from 40,000 blocks took over 8 s of the receiver's
    CPU (a sum over every prefix of the source counts); the whole call now takes about one.
    CPU time of this process (the processor runs in it), not wall time: a loaded machine
    stretches the one, not the other. (The bundle's schema check is left to the smaller
    cases: in pure Python it alone would take longer than the rebuild.)"""
    n = 40_000
    ids = [f"m:{i}" for i in range(n)]
    ids[5] = ""
    processor = start_processor()
    spans = [call("ctx_large", **{
        ITEM_IDS: ids, KINDS: ["user_message"] * n, TOKENS: [1] * n,
        POINTS: ["message_history"] * n, DIGESTS: [""] * n, COUNTS: [1] * n,
        REFS: [f"kb:{i}" for i in range(n)], "context.assembly.block_count": n})]
    began = time.process_time()
    post(processor, spans)
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 60, 0.05, "the bundle")
    took = time.process_time() - began
    got = blocks(bundle)
    assert len(got) == n - 1
    assert [b["source_item_refs"] for b in got[4:6]] == [["kb:4"], ["kb:6"]]
    assert got[5]["item_id"] == "m:6"
    assert took < 4, f"{took:.1f} s of CPU for one call of {n} blocks"


def test_many_blocks_without_an_id_are_one_repair(start_processor) -> None:
    """Each empty id was a repair of its own: 40,000 of them made a 7 MB bundle (and as
    many lines in the sender's partial success) out of a request a tenth of that size."""
    n = 5_000
    processor = start_processor()
    response = post(processor, [call("ctx_unnamed", **{
        ITEM_IDS: [""] * (n - 1) + ["user:2"], KINDS: ["user_message"] * n, TOKENS: [1] * n,
        POINTS: None, DIGESTS: None, COUNTS: None, REFS: None,
        "context.assembly.block_tool_call_ids": None})])
    (bundle,) = bundles(processor)
    assert [b["item_id"] for b in blocks(bundle)] == ["user:2"]
    dropped = [r for r in bundle["rebuild"]["repairs"] if r["kind"] == "event_dropped"]
    assert len(dropped) == 1 and dropped[0]["field"] == ITEM_IDS
    assert dropped[0]["action"].startswith(f"{n - 1} positions have no id")
    assert len(response.partial_success.error_message) < 2_000


def _repair(bundle: dict[str, Any], field: str) -> dict[str, str]:
    (found,) = [r for r in bundle["rebuild"]["repairs"] if r["field"] == field]
    return found  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_array_repair_says_every_change_and_the_worst_kind(start_processor,
                                                             protocol: str) -> None:
    """One repair per array said only what was done to its last changed element: a kind
    made ``custom`` hid behind a case folded (counted as ``enum_case``), a fraction dropped
    behind whole doubles taken as ints."""
    processor = start_processor()
    attributes = folded("ctx_said", **{
        KINDS: ["SYSTEM_PROMPT", "web_page", "User_Message"],
        TOKENS: [10.0, 30.5, 20.0],
        POINTS: ["System_Prompt", "header", "MESSAGE_HISTORY"]})
    send_sdk(protocol, processor, attributes)
    (bundle,) = bundles(processor)
    assert [(b["context_kind"], b.get("tokens"), b["injection_point"])
            for b in blocks(bundle)] == [("system_prompt", 10, "system_prompt"),
                                         ("custom", None, "custom"),
                                         ("user_message", 20, "message_history")]
    kinds = _repair(bundle, KINDS)
    assert kinds["kind"] == "enum_custom"
    assert "element 1: not a value of the enum: recorded as custom" in kinds["action"]
    assert "element 0: matched ignoring case: system_prompt" in kinds["action"]
    assert _repair(bundle, POINTS)["kind"] == "enum_custom"
    tokens = _repair(bundle, TOKENS)
    assert "element 1: must be an int, got a fraction: dropped" in tokens["action"]
    assert "elements 0, 2: an element taken as an int" in tokens["action"]
    text, _ = metrics(processor)
    assert 'context_processor_repairs_total{kind="enum_custom"} 2.0' in text
    assert 'kind="enum_case"' not in text
    local = in_process(attributes)
    assert [(r["kind"], r["action"]) for r in local["rebuild"]["repairs"]] == [
        (r["kind"], r["action"]) for r in bundle["rebuild"]["repairs"]]


def test_negative_token_figures_never_make_a_counter_go_down(start_processor) -> None:
    """Token counts are never negative (the contract's "(≥ 0)"): an omitted item of -5000
    tokens took 5000 off a Prometheus counter (rate() reads a decrease as a reset). The
    boundary drops the figure and says so; the counter only ever grows."""
    processor = start_processor()
    post(processor, [envelope("ctx-negative", 1), stage(2, "context.selection", "ctx-negative", {
        "context.selection.id": "s1", "context.selection.candidate_count": 2}, events=[
        ("context.item.omitted", {"context.item.id": "i1", "context.omission.reason": "budget",
                                  "context.item.token_estimate": -5000}),
        ("context.item.omitted", {"context.item.id": "i2", "context.omission.reason": "budget",
                                  "context.item.token_estimate": 300})])])
    (bundle,) = bundles(processor)
    assert {i["item_id"]: i.get("token_estimate") for i in bundle["context_items"]} == {
        "i1": None, "i2": 300}
    assert ("type", "context.item.token_estimate") in repairs(bundle)
    assert bundle["rebuild"]["status"] == "partial"
    wait_for(lambda: processor.metrics.contract.value(
        "context.envelopes", ("turn", AGENT, "complete")) or processor.metrics.contract.value(
        "context.envelopes", ("turn", AGENT, "partial")), message="the envelope counted")
    _, families = metrics(processor)
    assert [s.value for s in samples(families, "context_omitted_tokens",
                                     "context_omitted_tokens_total")] == [300.0]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_negative_counts_are_dropped_in_both_forms(start_processor, protocol: str) -> None:
    """A budget of -100 tokens, a negative utilization and block tokens below -1 ("not
    given") were kept as sent and observed by the histograms; now each is dropped (a folded
    array's element becomes -1), one repair each, the same in process."""
    processor = start_processor()
    attributes = folded("ctx_negative_" + protocol, **{
        "context.budget.max_tokens": -100, "context.budget.utilization": -0.5,
        "context.assembly.block_count": -3, TOKENS: [-5, 30, -1], USED: [10, -50, -1]})
    send_sdk(protocol, processor, attributes)
    (bundle,) = bundles(processor)
    (budget,) = bundle["context_budgets"]
    assert "max_tokens" not in budget and "utilization" not in budget
    assert [b.get("tokens") for b in blocks(bundle)] == [None, 30, None]
    assert [s.get("used_tokens") for s in budget["window_segments"]] == [10, None, None]
    said = repairs(bundle)
    for field in ("context.budget.max_tokens", "context.budget.utilization",
                  "context.assembly.block_count", TOKENS, USED):
        assert ("type", field) in said, (field, said)
    assert bundle["rebuild"]["status"] == "partial"
    local = in_process(attributes)
    assert blocks(local) == blocks(bundle)
    assert local["context_budgets"][0].get("max_tokens") is None
    assert sorted(repairs(local)) == sorted(said)


@pytest.mark.parametrize("name", ["context.envelope", "invoke_agent support"])
def test_a_folded_call_that_is_its_own_envelope_is_rebuilt_whatever_the_span_name(
        start_processor, name: str) -> None:
    """The span that carries context.scope is the envelope span whatever its name, and a
    folded call outside any envelope is its own envelope: named ``context.envelope``, its
    budget, assembly and injection were silently left out of a bundle said ``complete``."""
    processor = start_processor()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter("grpc", processor)))
    with provider.get_tracer("offspec").start_as_current_span(
            name, attributes=folded(f"ctx_named_{len(name)}")):
        pass
    provider.shutdown()
    (bundle,) = bundles(processor)
    assert [b["item_id"] for b in blocks(bundle)] == ["system:1", "user:1", "user:2"]
    assert [r["budget_id"] for r in bundle["context_budgets"]] == ["bud_1"]
    assert [r["injection_id"] for r in bundle["context_injections"]] == ["inj_1"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_folded_record_without_its_id_is_dropped_and_said(start_processor,
                                                            protocol: str) -> None:
    """As an event lacking its id is dropped alone (never under a made-up id): an empty
    ``context.*.id`` made records with id "" in a bundle said complete, and block arrays
    without ``context.assembly.id`` vanished without a word."""
    processor = start_processor()
    send_sdk(protocol, processor, folded("ctx_empty_ids", **{
        "context.budget.id": "", "context.injection.id": ""}))
    attributes = folded("ctx_no_assembly_id")
    del attributes["context.assembly.id"]
    send_sdk(protocol, processor, attributes)
    found = {b["context_envelope"]["context_id"]: b for b in bundles(processor, 2)}
    empty = found["ctx_empty_ids"]
    assert "context_budgets" not in empty and "context_injections" not in empty
    assert [a["assembly_id"] for a in empty["context_assemblies"]] == ["asm_1"]
    assert {("event_dropped", "context.budget.id"), ("event_dropped", "context.injection.id"),
            ("event_dropped", "context.window.segment_names")} <= set(repairs(empty))
    assert empty["rebuild"]["status"] == "partial"
    unnamed = found["ctx_no_assembly_id"]
    assert "context_assemblies" not in unnamed
    assert ("event_dropped", ITEM_IDS) in repairs(unnamed)
    assert unnamed["rebuild"]["status"] == "partial"
    assert [b["budget_id"] for b in unnamed["context_budgets"]] == ["bud_1"]
    local = in_process(folded("ctx_empty_ids", **{"context.budget.id": "",
                                                  "context.injection.id": ""}))
    assert repairs(local) == repairs(empty)


def test_a_repair_never_copies_content_into_the_log_or_the_repair_list(start_processor,
                                                                       caplog) -> None:
    """Content attributes (registry ``content: true``) are only ever in the bundle, where
    the sender's capture put them: a repair of one copied its text into serve's WARNING log
    (and the repair list and the sender's partial success)."""
    canary = "CANARY-7f3a private words"
    processor = start_processor()
    caplog.set_level("DEBUG")
    response = post(processor, [call("ctx_content", **{
        "context.assembly.block_contents": [canary, canary],  # one short
        "context.selection.query": 42})])  # converted to text: not content-free either
    (bundle,) = bundles(processor)
    said = {r["field"]: r for r in bundle["rebuild"]["repairs"]}
    assert said["context.assembly.block_contents"]["kind"] == "array_length"
    assert canary not in said["context.assembly.block_contents"]["received"]
    assert "2 elements" in said["context.assembly.block_contents"]["received"]
    wait_for(lambda: "off-spec telemetry" in caplog.text, message="the warning")
    assert canary not in caplog.text
    assert canary not in response.partial_success.error_message
    assert "context.assembly.block_contents" in response.partial_success.error_message
    # the bundle keeps what the sender captured, where it belongs
    assert {i.get("content") for i in bundle["context_items"]} >= {canary}


def test_an_injection_in_both_forms_is_one_record_counted_once(start_processor) -> None:
    """A sender that folds the injection onto its inference span and also sends the
    ``context.injection.applied`` event under the same id made two injection records with
    one id and counted the injection twice; ids are unique within an envelope: the first
    record is kept and a ``duplicate_id`` repair says so, in both paths."""
    processor = start_processor()
    attributes = folded("ctx_injected_twice")

    def send(provider: TracerProvider) -> None:
        with provider.get_tracer("offspec").start_as_current_span(
                "chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=attributes) as span:
            span.add_event("context.injection.applied", {
                "context.injection.id": "inj_1", "context.injection.target": "model",
                "context.injection.point": "message_history"})

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter("grpc", processor)))
    send(provider)
    provider.shutdown()
    (bundle,) = bundles(processor)
    assert [r["injection_id"] for r in bundle["context_injections"]] == ["inj_1"]
    assert bundle["context_envelope"]["injection_refs"] == ["inj_1"]
    assert ("duplicate_id", "injection_id") in repairs(bundle)
    families = wait_for(lambda: (f := metrics(processor)[1]) and samples(
        f, "context_injections", "context_injections_total") and f,
        message="the injection counted")
    assert [s.value for s in samples(families, "context_injections",
                                     "context_injections_total")] == [1.0]
    assert [s.value for s in samples(families, "context_processor_repairs",
                                     "context_processor_repairs_total")
            if s.labels.get("kind") == "duplicate_id"] == [1.0]
    local: list[dict[str, Any]] = []
    in_proc = TracerProvider()
    in_proc.add_span_processor(BundleSpanProcessor(local.append))
    send(in_proc)
    in_proc.force_flush()
    wait_for(lambda: local, message="the in-process bundle")
    in_proc.shutdown()
    assert [{k: v for k, v in r.items() if k != "created_at"}
            for r in local[0]["context_injections"]] == [
        {k: v for k, v in r.items() if k != "created_at"} for r in bundle["context_injections"]]
    assert ("duplicate_id", "injection_id") in repairs(local[0])


def test_two_calls_reusing_an_assembly_id_keep_the_first(start_processor) -> None:
    """Two folded calls in one envelope under one assembly id (a sender's id generator
    reset) were two assemblies with one id in a bundle said complete."""
    processor = start_processor()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter("http", processor)))
    tracer = provider.get_tracer("offspec")
    with tracer.start_as_current_span("invoke_agent support", attributes={
            "context.id": "ctx_reused", "context.scope": "turn", "context.span_count": 2}):
        for call_number, tokens in ((1, [10, 30, 20]), (2, [11, 31, 21])):
            call = folded("ctx_reused", **{TOKENS: tokens,
                                           "context.budget.id": f"bud_{call_number}",
                                           "context.injection.id": f"inj_{call_number}"})
            for key in ("context.scope", "context.span_count"):
                del call[key]
            with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT,
                                              attributes=call):
                pass
    provider.shutdown()
    (bundle,) = bundles(processor)
    (assembly,) = bundle["context_assemblies"]
    assert [b["tokens"] for b in assembly["ordered_blocks"]] == [10, 30, 20]
    assert [r["budget_id"] for r in bundle["context_budgets"]] == ["bud_1", "bud_2"]
    assert repairs(bundle) == [("duplicate_id", "assembly_id")]
    assert bundle["rebuild"]["status"] == "partial"
