"""The GenAI conventions' messages (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``) are typed ``any`` there, and spans SHOULD carry them
structured: sent so by the plain SDK through the real OTLP exporters, as hand-built OTLP/JSON,
and in process, they give the bundle their JSON text gives, with nothing repaired. And what a
repair shows of a value it received: never content, never a long text (the repair goes to the
bundle, serve's log and the partial-success reply)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import orjson
import pytest
from processor_testkit import wait_for
from test_boundary import bundles, by_id, post
from test_folded_boundary import call
from test_folded_offspec import _json_value, folded, in_process, post_otlp_json, send_sdk

from otel_agent_context.rebuild._encode import encode_bundle

CANARY = "CANARY-5e1d private words"
INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
SYSTEM = "gen_ai.system_instructions"
MESSAGES: dict[str, Any] = {
    INPUT: [
        {"role": "user", "parts": [{"type": "text", "content": CANARY}]},
        {"role": "assistant", "parts": [{
            "type": "tool_call", "id": "call_1", "name": "lookup",
            "arguments": {"query": CANARY, "limit": 2, "exact": True, "weight": 0.5}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                                    "result": ["a", "b"]}]}],
    OUTPUT: [{"role": "assistant", "parts": [{"type": "text", "content": CANARY}],
              "finish_reason": "stop"}],
    SYSTEM: [{"type": "text", "content": CANARY}],
}
AS_TEXT = {key: json.dumps(value) for key, value in MESSAGES.items()}


def comparable(bundle: dict[str, Any]) -> Any:
    """A bundle without what differs between two sends of one call: its context id, times
    and telemetry ids."""
    cid = bundle["context_envelope"]["context_id"]
    text = orjson.dumps(bundle).decode().replace(cid, "<cid>")
    text = re.sub(r'"\d{4}-\d\d-\d\dT[^"]*"', '"<time>"', text)
    text = re.sub(r'"[0-9a-f]{32}"|"[0-9a-f]{16}"', '"<id>"', text)
    return orjson.loads(text)


def _any_json(value: Any) -> dict[str, Any]:
    """``value`` as an OTLP/JSON AnyValue, maps as kvlists."""
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _any_json(v)}
                                           for k, v in value.items()]}}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_json(v) for v in value]}}
    return _json_value(value)  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_structured_messages_give_the_bundle_of_their_json_text(start_processor, caplog,
                                                                 protocol: str) -> None:
    """Before: each structured attribute was a ``type`` repair (the bundle partial, a
    warning) whose ``received`` copied the messages' text."""
    caplog.set_level(logging.DEBUG)
    processor = start_processor()
    send_sdk(protocol, processor, folded("ctx_structured", **MESSAGES))
    send_sdk(protocol, processor, folded("ctx_text", **AS_TEXT))
    found = by_id(bundles(processor, 2))
    structured, text = found["ctx_structured"], found["ctx_text"]
    assert structured["rebuild"]["status"] == "complete", structured["rebuild"]
    assert text["rebuild"]["status"] == "complete", text["rebuild"]
    assert comparable(structured) == comparable(text)
    # the rebuild maps no field from them: the messages are the GenAI side's, not a bundle's
    assert CANARY not in orjson.dumps(structured).decode()
    assert "off-spec" not in caplog.text and CANARY not in caplog.text
    # in process, the SDK's own structured values: the same bundle again
    local = in_process(folded("ctx_structured", **MESSAGES))
    assert local["rebuild"]["status"] == "complete", local["rebuild"]
    assert comparable(local) == comparable(structured)
    assert comparable(in_process(folded("ctx_structured", **AS_TEXT))) == comparable(local)


def test_hand_built_otlp_json_kvlists_are_taken_and_the_sender_told_nothing(
        start_processor) -> None:
    processor = start_processor()
    response = post_otlp_json(processor, 0x6A1, folded("ctx_json", **{
        key: _any_json(value) for key, value in MESSAGES.items()}))
    assert not response.get("partialSuccess"), response
    text = post_otlp_json(processor, 0x6A2, folded("ctx_json_text", **AS_TEXT))
    assert not text.get("partialSuccess"), text
    found = by_id(bundles(processor, 2))
    assert found["ctx_json"]["rebuild"]["status"] == "complete"
    assert comparable(found["ctx_json"]) == comparable(found["ctx_json_text"])


def test_a_repair_shows_no_long_text_in_the_bundle_the_log_or_the_reply(start_processor,
                                                                       caplog) -> None:
    """Before: a repair showed the first 120 characters of any value that was not content:
    a wrong-typed free-text or numeric attribute copied the sender's text out."""
    caplog.set_level(logging.DEBUG)
    long_text = f"{CANARY}, and more words to make it long: " + "x" * 40
    processor = start_processor()
    response = post(processor, [call("ctx_long", **{
        "context.producer": [long_text],  # a list where a string is due: dropped
        "context.budget.max_tokens": long_text,  # not a number: dropped
        "context.budget.reserved_tokens": "12"})])  # short: shown as it came
    (bundle,) = bundles(processor)
    said = {r["field"]: r for r in bundle["rebuild"]["repairs"]}
    assert said["context.producer"]["received"] == "<array of 1 element, not shown>"
    assert said["context.budget.max_tokens"]["received"] == \
        f"<text of {len(long_text)} characters, not shown>"
    assert said["context.budget.reserved_tokens"]["received"] == "12"
    assert CANARY not in orjson.dumps(bundle).decode()
    message = response.partial_success.error_message
    assert "attribute context.producer=<array of 1 element, not shown>" in message
    assert CANARY not in message
    wait_for(lambda: "off-spec telemetry" in caplog.text, message="the warning")
    assert CANARY not in caplog.text


def test_a_content_attribute_of_a_wrong_type_shows_no_text_in_process(caplog) -> None:
    """A message JSON cannot carry (an int beyond 64 bits, which the SDK keeps) is dropped;
    before, as a string attribute given a tuple, its repair copied the messages' text."""
    caplog.set_level(logging.DEBUG)
    messages = ({"role": "user", "parts": ({"type": "text", "content": CANARY},),
                 "tokens": 1 << 70},)
    bundle = in_process(folded("ctx_bad", **{INPUT: messages, OUTPUT: "ok"}))
    said = {r["field"]: r for r in bundle["rebuild"]["repairs"]}
    assert set(said) == {INPUT}
    assert said[INPUT]["kind"] == "type"
    assert said[INPUT]["received"] == "<content not shown: array of 1 element>"
    assert CANARY not in orjson.dumps(bundle).decode()
    assert CANARY not in caplog.text


def test_a_text_repair_of_a_content_field_shows_no_text() -> None:
    """A lone surrogate (in process) in an item's content, and in a long metadata value:
    the repair says where and how long, not what (before: up to 120 characters of it)."""
    bundle: dict[str, Any] = {
        "context_envelope": {"context_id": "c", "metadata": {"note": "n" * 80 + "\ud800"}},
        "context_items": [{"item_id": "i1", "content": f"{CANARY}\ud800"}],
        "rebuild": {"status": "complete"}}
    written = orjson.loads(encode_bundle(bundle))
    said = {r["field"]: r["received"] for r in written["rebuild"]["repairs"]}
    assert said == {
        "context_items[0].content": f"<content not shown: text of {len(CANARY) + 1} characters>",
        "context_envelope.metadata.note": "<text of 81 characters, not shown>"}
    assert written["context_items"][0]["content"] == f"{CANARY}\ufffd"  # the bundle's own
