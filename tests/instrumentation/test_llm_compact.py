"""OpenAI ``responses.compact`` (sync, async, ``with_raw_response``) through the real
``openai`` client on the loopback stub: the call is a compaction. The items the API
replaces are its sources, the user messages it gives back as they are are not, its summary
is the returned compaction item, and the call's own span is not marked as having sent a
compacted conversation (it sent the whole one). The application gets the API's answer
unchanged; alone and with the official GenAI instrumentor."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from llm_helpers import assert_no_content, inference_spans, named

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation._tokens import estimate_tokens

MODEL = "gpt-4o-mini"
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "My order 42 has not arrived."},
    {"role": "assistant", "content": "Let me look it up."},
    {"type": "function_call", "call_id": "call_1", "name": "lookup_order",
     "arguments": '{"order_id": "42"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": '{"status": "lost"}'},
    {"role": "assistant", "content": "It was lost; a refund is on its way."},
    {"role": "user", "content": "How much is the refund?"},
]


def _client(stub: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)


def _check(tel: Any, result: Any) -> None:
    assert result.object == "response.compaction"
    assert [o.type for o in result.output] == ["message", "message", "compaction"]
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    (cmp,) = bundle["context_compactions"]
    assert cmp["method"] == "provider_context_editing"
    assert cmp["trigger"] == "responses.compact"
    blocks = bundle["context_assemblies"][0]["ordered_blocks"]
    ids = [b["item_id"] for b in blocks]
    # the two user messages are given back: every other item is a source, covered
    assert cmp["source_item_refs"] == [ids[1], ids[2], ids[3], ids[4]]
    assert all(s["covered"] for s in cmp["source_coverage"])
    kept = estimate_tokens(ITEMS[0]["content"]) + estimate_tokens(ITEMS[5]["content"])
    assert cmp["tokens_after"] == kept + result.usage.output_tokens
    assert cmp["tokens_before"] == sum(b["tokens"] for b in blocks)
    (summary,) = bundle["context_summaries"]
    assert summary["summary_id"] == f"compaction:{result.output[-1].id}"
    assert summary["token_estimate"] == result.usage.output_tokens
    assert "encrypted" in cmp["loss_notes"][0]
    spans = tel.spans()
    (inf,) = inference_spans(spans)
    assert S.GEN_AI_CONVERSATION_COMPACTED not in inf.attributes
    assert inf.attributes[S.GEN_AI_USAGE_INPUT_TOKENS] == result.usage.input_tokens
    assert len(named(spans, S.SPAN_COMPACTION)) == 1
    assert_no_content(spans)


def test_compact(setup, stub) -> None:
    result = _client(stub).responses.compact(model=MODEL, input=ITEMS)
    _check(setup.tel, result)
    assert result.output[0].content[0].text == ITEMS[0]["content"]  # the API's answer


def test_compact_async_and_raw(alone, stub) -> None:
    async def run() -> Any:
        client = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                    max_retries=0)
        return await client.responses.compact(model=MODEL, input=ITEMS)

    _check(alone.tel, asyncio.run(run()))
    alone.tel.clear()
    raw = _client(stub).responses.with_raw_response.compact(model=MODEL, input=ITEMS)
    assert raw.http_response.status_code == 200
    _check(alone.tel, raw.parse())


def test_compact_too_long_is_a_rejected_overflow(alone, stub) -> None:
    with pytest.raises(openai.BadRequestError):
        _client(stub).responses.compact(model="gpt-4",
                                        input=[{"role": "user", "content": "word " * 9000}])
    (bundle,) = alone.tel.bundles()
    (budget,) = bundle["context_budgets"]
    assert budget["overflow"] is True and budget["max_tokens"] == 8192
    assert "context_compactions" not in bundle
