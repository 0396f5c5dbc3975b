"""Contract v0.2's folded form, through the real ``openai`` and ``anthropic`` clients on the
loopback stub: a model call is ONE inference span carrying its budget, window segments,
assembly blocks and injection as attributes (no stage spans, no block events), and the
rebuild makes the same bundle as from the v0.1 span-and-event form, which
``OTEL_AGENT_CONTEXT_STAGE_SPANS=true`` still writes. Every scenario runs both ways."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from llm_helpers import one_inference
from llm_setup import make_setup
from stub_server import StubServer

from otel_agent_context import ContextItem
from otel_agent_context import _semconv as S

STAGE_SPANS = "OTEL_AGENT_CONTEXT_STAGE_SPANS"
SYSTEM = "You are a support agent for ACME. Answer from the notes only."
REFUNDS = "Refunds are issued within 14 days of the return reaching our warehouse."
SHIPPING = "Orders ship within three business days from the Lisbon warehouse."
TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Find an order by id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]
#: what differs between two recordings of the same call: times, span ids, span counts
_TIMES = {"created_at", "completed_at", "occurred_at", "requested_at", "resolved_at",
          "telemetry_refs", "trace_id", "span_id"}


def _openai(stub: StubServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-offline", max_retries=0)


def _anthropic(stub: StubServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-offline",
                               max_retries=0)


def chat_with_tools(stub: StubServer, tel: Any) -> None:
    _openai(stub).chat.completions.create(model="gpt-4o-mini", max_tokens=300, tools=TOOLS,
                                          messages=[
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Where is order 42?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'},
        {"role": "user", "content": "Where is order 42?"},  # a repeat: its own id
    ])


def anthropic_cached(stub: StubServer, tel: Any) -> None:
    _anthropic(stub).messages.create(
        model="claude-opus-4-1", max_tokens=200,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [
            {"type": "text", "text": REFUNDS, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "How long do refunds take?"}]}])


def responses_chained(stub: StubServer, tel: Any) -> None:
    client = _openai(stub)
    first = client.responses.create(model="gpt-4o-mini", input="Hello")
    client.responses.create(model="gpt-4o-mini", previous_response_id=first.id,
                            input=[{"role": "user", "content": "And refunds?"}])


def selected_documents(stub: StubServer, tel: Any) -> None:
    """Inside the application's envelope: two documents selected, one pasted in the prompt
    (its block names it; the other is selected but never injected)."""
    with tel.agent_context.envelope(scope="turn", agent_name="support") as env:
        with env.selection(intent="retrieval") as sel:
            sel.selected(ContextItem(item_id="kb:refunds", context_kind="retrieval_result",
                                     content=REFUNDS), rank=1)
            sel.selected(ContextItem(item_id="kb:shipping", context_kind="retrieval_result",
                                     content=SHIPPING), rank=2)
        _openai(stub).chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Notes: {REFUNDS}\n\nHow long do refunds take?"}])


def truncated_to_fit(stub: StubServer, tel: Any) -> None:
    history = [{"role": "user", "content": "word " * 2500} for _ in range(4)]
    _openai(stub).responses.create(model="gpt-4", input=history, truncation="auto",
                                   max_output_tokens=500)


def too_long(stub: StubServer, tel: Any) -> None:
    with pytest.raises(openai.BadRequestError):
        _openai(stub).chat.completions.create(
            model="gpt-4", max_tokens=100,
            messages=[{"role": "user", "content": "word " * 9000}])


SCENARIOS: dict[str, Callable[[StubServer, Any], None]] = {
    "chat_with_tools": chat_with_tools, "anthropic_cached": anthropic_cached,
    "responses_chained": responses_chained, "selected_documents": selected_documents,
    "truncated_to_fit": truncated_to_fit, "too_long": too_long}


def _record(scenario: str, capture: bool, stage_spans: bool,
            monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[dict[str, Any]]]:
    with monkeypatch.context() as m:
        if stage_spans:
            m.setenv(STAGE_SPANS, "true")
        else:
            m.delenv(STAGE_SPANS, raising=False)
        gen = make_setup("none", capture, m)
        setup = next(gen)
        try:
            with StubServer() as stub:
                SCENARIOS[scenario](stub, setup.tel)
            return setup.tel.spans(), setup.tel.bundles()
        finally:
            gen.close()


def _comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _same(bundle: dict[str, Any]) -> dict[str, Any]:
    out = _comparable(bundle)
    # the stage spans are spans of their own in one form only: counts differ by design
    out["rebuild"] = {k: v for k, v in out["rebuild"].items()
                      if k not in ("expected_spans", "received_spans")}
    out["context_events"] = sorted(json.dumps(e, sort_keys=True)
                                   for e in out.get("context_events", ()))
    return out


@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_folded_and_stage_spans_rebuild_the_same_bundle(scenario: str, capture: bool,
                                                         monkeypatch) -> None:
    folded_spans, folded = _record(scenario, capture, False, monkeypatch)
    staged_spans, staged = _record(scenario, capture, True, monkeypatch)
    assert folded and len(folded) == len(staged)
    # the hashes too: derived by the rebuild from the folded arrays, sent by the stage spans
    assert [_same(b) for b in folded] == [_same(b) for b in staged]
    for bundle in folded:
        assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
        assert bundle.get("context_assemblies"), scenario
        hashes = {a["hash"] for a in bundle["context_assemblies"]}
        assert all(h.startswith("sha256:") for h in hashes), hashes
        assert {i["hash"] for i in bundle["context_injections"]} == hashes
    assert not any(S.ASSEMBLY_HASH in s.attributes or S.INJECTION_HASH in s.attributes
                   for s in folded_spans)
    # the folded form: no stage span of a model call, no block or segment event anywhere
    names = {s.name for s in folded_spans}
    assert not names & {S.SPAN_BUDGET, S.SPAN_ASSEMBLY}, names
    events = {e.name for s in folded_spans for e in s.events}
    assert not events & {S.EVENT_ASSEMBLY_BLOCK, S.EVENT_WINDOW_SEGMENT,
                         S.EVENT_INJECTION_APPLIED}, events
    assert {S.SPAN_BUDGET, S.SPAN_ASSEMBLY} <= {s.name for s in staged_spans}


def test_a_call_outside_any_envelope_is_one_span(alone, stub) -> None:
    """The exact folded span of one chat call: the envelope, its budget, window, blocks and
    injection, all on the inference span; ids and digests only (no content)."""
    chat_with_tools(stub, alone.tel)
    spans = alone.tel.spans()
    assert len(spans) == 1
    (span,) = spans
    assert span is one_inference(spans)
    a = span.attributes
    assert not span.events
    assert a[S.CONTEXT_SCOPE] == "turn" and a[S.CONTEXT_SPAN_COUNT] == 0
    assert a[S.CONTEXT_LIFECYCLE] == "injected"
    ids = list(a[S.ASSEMBLY_BLOCK_ITEM_IDS])
    assert len(ids) == 5 and len(set(ids)) == 5  # the repeated question has its own id
    assert ids[4] == f"{ids[1]}#2"
    # earlier turns are history; the question asked now is the user message
    assert list(a[S.ASSEMBLY_BLOCK_KINDS]) == [
        "system_prompt", "session_history", "session_history", "tool_result", "user_message"]
    assert list(a[S.ASSEMBLY_BLOCK_INJECTION_POINTS]) == [
        "system_prompt", "message_history", "message_history", "message_history",
        "message_history"]
    tokens = list(a[S.ASSEMBLY_BLOCK_TOKENS])
    assert all(t > 0 for t in tokens)  # the tool-call-only message too
    assert a[S.ASSEMBLY_TOKEN_COUNT] == sum(tokens) and a[S.ASSEMBLY_BLOCK_COUNT] == 5
    assert all(d.startswith("hmac-sha256:") for d in a[S.ASSEMBLY_BLOCK_DIGESTS])
    assert list(a[S.ASSEMBLY_BLOCK_TOOL_CALL_IDS]) == ["", "", "", "call_1", ""]
    assert S.ASSEMBLY_BLOCK_CONTENTS not in a
    assert list(a[S.WINDOW_SEGMENT_NAMES]) == [
        "system_prompt", "tool_definitions", "message_history", "output"]
    assert list(a[S.WINDOW_SEGMENT_ORDERS]) == [0, 1, 2, 3]
    assert list(a[S.WINDOW_SEGMENT_RESERVED_TOKENS]) == [-1, -1, -1, 300]
    assert a[S.BUDGET_MAX_TOKENS] == 128_000 and a[S.BUDGET_RESERVED_TOKENS] == 300
    assert a[S.BUDGET_ACTUAL_TOKENS] == a[S.GEN_AI_USAGE_INPUT_TOKENS]
    assert a[S.BUDGET_OVERFLOW] is False
    assert S.ASSEMBLY_HASH not in a and S.INJECTION_HASH not in a  # derived
    assert a[S.INJECTION_POINT] == "message_history" and a[S.INJECTION_TARGET] == "model"
    (bundle,) = alone.tel.bundles()
    assert [b["item_id"] for b in bundle["context_assemblies"][0]["ordered_blocks"]] == ids
    assert [s["segment"] for s in bundle["context_budgets"][0]["window_segments"]] == list(
        a[S.WINDOW_SEGMENT_NAMES])


def test_content_goes_on_the_span_only_under_capture(monkeypatch) -> None:
    spans, _ = _record("chat_with_tools", True, False, monkeypatch)
    (span,) = spans
    contents = list(span.attributes[S.ASSEMBLY_BLOCK_CONTENTS])
    assert contents[0] == SYSTEM and contents[1] == "Where is order 42?"


_ARGS = '{"order_id": "42", "include_history": true, "fields": ["status", "eta"]}'


def test_every_tool_call_only_message_gets_an_estimate(capture_setup, stub) -> None:
    """A message (or Responses item) that is only a tool call is estimated by the call it
    sends (name and arguments), never 0, and a call the API names is named by its call
    (``tool_call:<call id>``, as its output is ``tool_result:<call id>``): chat's tool calls
    and its deprecated ``function_call``, a Responses function call and a custom tool's
    call, Anthropic's ``tool_use``; content capture off and on."""
    oc, ac = _openai(stub), _anthropic(stub)
    oc.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "user", "content": "Where is 42?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "lookup_order", "arguments": _ARGS}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "shipped"}])
    oc.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "user", "content": "Where is 42?"},
        {"role": "assistant", "function_call": {"name": "lookup_order", "arguments": _ARGS}},
        {"role": "function", "name": "lookup_order", "content": "shipped"}])
    oc.responses.create(model="gpt-4o-mini", input=[
        {"role": "user", "content": "Where is 42?"},
        {"type": "function_call", "call_id": "c1", "name": "lookup_order", "arguments": _ARGS},
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "shell",
         "input": "ls -la /var/log/orders/42"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "42.log"},
        # a computer-use call of the GA tool: a batch of actions
        {"type": "computer_call", "id": "cu_1", "call_id": "c3", "status": "completed",
         "pending_safety_checks": [], "actions": [
             {"type": "click", "x": 10, "y": 20, "button": "left"},
             {"type": "type", "text": "order 42 shipped " * 8}]},
        {"type": "computer_call_output", "call_id": "c3", "output": {
            "type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}}])
    ac.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=[
        {"role": "user", "content": "Where is 42?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                           "name": "lookup_order",
                                           "input": json.loads(_ARGS)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "shipped"}]}])
    spans = [s for s in capture_setup.tel.spans() if S.ASSEMBLY_BLOCK_ITEM_IDS in s.attributes]
    blocks = [list(zip(s.attributes[S.ASSEMBLY_BLOCK_ITEM_IDS],
                       s.attributes[S.ASSEMBLY_BLOCK_TOKENS], strict=True)) for s in spans]
    assert [[i for i, _ in b][1:] for b in blocks] == [
        [blocks[0][1][0], "tool_result:c1"], [blocks[1][1][0], blocks[1][2][0]],
        ["tool_call:c1", "tool_result:c1", "tool_call:c2", "tool_result:c2", "tool_call:c3",
         "tool_result:c3"],
        ["tool_use:t1", "tool_result:t1"]]
    calls = [blocks[0][1], blocks[1][1], blocks[2][1], blocks[2][3], blocks[3][1],
             blocks[2][5]]
    assert all(tokens > 0 for _, tokens in calls), calls
    # the same call estimated alike in each form (its name and arguments); the shell
    # command's input is shorter; the computer's actions, the text typed in them, longer
    assert calls[0][1] == calls[1][1] == calls[2][1] > calls[3][1]
    assert calls[5][1] > calls[0][1]
