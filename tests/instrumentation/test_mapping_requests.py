"""Messages, items and content blocks given as mappings that are not dicts
(``MappingProxyType`` here; an application's own ``Mapping`` alike): the SDKs send them as
they send dicts, so the call is recorded as it is with dicts (the same blocks: ids, kinds,
tokens, digests, content when captured). They were read as empty: ``None:`` ids, and no
Anthropic blocks at all. The real clients against the stub, content capture off and on."""

from __future__ import annotations

import collections
import types
from typing import Any

import anthropic
import openai
import pytest
from llm_helpers import block_rows, one_inference

from otel_agent_context import _semconv as S

ANSWER = '{"status": "shipped"}'
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAA"
         "BJRU5ErkJggg==")

SCHEMA = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}

CHAT = {"model": "gpt-4o-mini", "max_completion_tokens": 64, "tools": [
    {"type": "function", "function": {"name": "lookup", "description": "Find an order.",
                                      "parameters": SCHEMA}}], "messages": [
    {"role": "system", "content": "You track orders."},
    {"role": "user", "content": "Where is order 42?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"id": "42"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": ANSWER},
    {"role": "user", "content": [
        {"type": "text", "text": "And this label?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        {"type": "input_audio", "input_audio": {"data": PIXEL, "format": "wav"}}]}]}

RESPONSES = {"model": "gpt-4o-mini", "instructions": "You track orders.",
             "max_output_tokens": 64, "tools": [
                 {"type": "function", "name": "lookup", "description": "Find an order.",
                  "parameters": SCHEMA}], "input": [
                 {"role": "user", "content": "Where is order 42?"},
                 {"type": "function_call", "call_id": "call_1", "name": "lookup",
                  "arguments": '{"id": "42"}'},
                 {"type": "function_call_output", "call_id": "call_1", "output": ANSWER},
                 {"role": "user", "content": [
                     {"type": "input_text", "text": "And this label?"},
                     {"type": "input_image",
                      "image_url": f"data:image/png;base64,{PIXEL}"}]}]}

MESSAGES = {"model": "claude-sonnet-4-6", "max_tokens": 64, "tools": [
                {"name": "lookup", "description": "Find an order.", "input_schema": SCHEMA}],
            "system": [{"type": "text", "text": "You track orders."}], "messages": [
                {"role": "user", "content": "Where is order 42?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                     "input": {"id": "42"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": ANSWER}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "And this label?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": PIXEL}}]}]}


#: the same with context management (the beta API): its edits as mappings too
BETA_MESSAGES = {**MESSAGES, "betas": ["context-management-2025-06-27"],
                 "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}


def _frozen(value: Any, kind: type) -> Any:
    """``value`` with every dict a mapping of ``kind`` (lists kept as lists), but a tool's
    schema: the SDKs send a schema as JSON as it is (the OpenAI SDK fails on one of
    mappings, uninstrumented too)."""
    if isinstance(value, dict):
        return kind({k: v if k in ("parameters", "input_schema") else _frozen(v, kind)
                     for k, v in value.items()})
    if isinstance(value, list):
        return [_frozen(v, kind) for v in value]
    return value


def _call(stub: Any, api: str, request: dict[str, Any]) -> None:
    if api.startswith("anthropic"):
        client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                                     max_retries=0)
        (client.beta if "beta" in api else client).messages.create(**request)
        return
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    if api == "openai chat":
        client.chat.completions.create(**request)
    else:
        client.responses.create(**request)


@pytest.mark.parametrize("kind", [types.MappingProxyType, collections.UserDict],
                         ids=["MappingProxyType", "UserDict"])
@pytest.mark.parametrize(("api", "request_"), [("openai chat", CHAT),
                                               ("openai responses", RESPONSES),
                                               ("anthropic messages", MESSAGES),
                                               ("anthropic beta messages", BETA_MESSAGES)])
def test_mappings_that_are_not_dicts_are_read_as_dicts(capture_setup, stub, api: str,
                                                       request_: dict[str, Any],
                                                       kind: type) -> None:
    """(A ``UserDict``'s ``data`` is its key, not its attribute: an image's data.)"""
    tel = capture_setup.tel
    recorded = []
    for given in (request_, {k: v if k == "betas" else _frozen(v, kind)
                             for k, v in request_.items()}):
        tel.span_exporter.clear()
        _call(stub, api, given)
        span = one_inference(tel.spans())
        recorded.append((block_rows(span), {k: v for k, v in span.attributes.items()
                                            if k.startswith("context.")
                                            and not k.endswith((".id", "_id", ".hash"))}))
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    as_dicts, as_mappings = recorded
    assert as_mappings == as_dicts
    rows = as_dicts[0]
    assert len(rows) >= 5 and not any(r["context.item.id"].startswith("None") for r in rows)
    segments = dict(zip(as_dicts[1][S.WINDOW_SEGMENT_NAMES],
                        as_dicts[1][S.WINDOW_SEGMENT_USED_TOKENS], strict=True))
    assert segments["tool_definitions"] > 10  # the tool definitions' estimate
    plain, frozen = (body for _, body in stub.requests)
    assert frozen == plain  # what the SDK sent: the same
