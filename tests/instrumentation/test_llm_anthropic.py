"""The Anthropic instrumentor against the real ``anthropic`` client and the local stub."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from llm_helpers import (
    assert_folded,
    assert_genai,
    assert_no_content,
    block_rows,
    blocks,
    events,
    inference_spans,
    named,
    one_inference,
    segments,
)
from opentelemetry.trace import StatusCode
from stub_server import REPLY

from otel_agent_context import _semconv as S
from otel_agent_context._attributes import digest_text
from otel_agent_context.instrumentation import estimate_tokens
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

MODEL = "claude-sonnet-4-6"
SYSTEM = [{"type": "text", "text": "You are ACME's support agent. " * 40,
           "cache_control": {"type": "ephemeral"}},
          {"type": "text", "text": "Today is Monday."}]


def conversation(tool_results: int = 1) -> list[dict]:
    msgs: list[dict] = [{"role": "user", "content": "Where is my order 1234?"}]
    for i in range(tool_results):
        msgs.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "orders_lookup",
             "input": {"order": 1234}}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "r" * 400}]})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "When will it arrive?"}]})
    return msgs


def client(stub) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                               max_retries=0)


def aclient(stub) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                                    max_retries=0)


EXPECTED = [
    ("system_prompt", "system_prompt"), ("system_prompt", "system_prompt"),
    ("session_history", "message_history"), ("session_history", "message_history"),
    ("tool_result", "message_history"), ("user_message", "message_history"),
]


def check_message_call(tel: CapturedTelemetry, inf, *, cache_write: bool) -> None:
    spans = tel.spans()
    assert_genai(inf, "anthropic", MODEL)
    a = inf.attributes
    assert a[S.CONTEXT_SCOPE] == "turn"
    assert a[S.CONTEXT_SPAN_COUNT] == 0  # no stage spans: the budget is on this span
    cached = estimate_tokens(SYSTEM[0]["text"])
    key = (S.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS if cache_write
           else S.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
    assert a[key] == cached
    mine = [s for s in spans if s.attributes.get(S.CONTEXT_ID) == a[S.CONTEXT_ID]]
    assert assert_folded(mine) is inf
    b = a
    assert b[S.BUDGET_MAX_TOKENS] == 200_000
    assert b[S.BUDGET_RESERVED_TOKENS] == 300
    # all input tokens: uncached + cache read + cache write
    assert b[S.BUDGET_ACTUAL_TOKENS] == a[S.GEN_AI_USAGE_INPUT_TOKENS]
    segs = {e[S.WINDOW_SEGMENT]: e for e in segments(inf)}
    assert segs["cache_prefix_1"][S.WINDOW_USED_TOKENS] == cached
    assert segs["output"][S.WINDOW_RESERVED_TOKENS] == 300


def test_messages_create_and_cache(setup, stub) -> None:
    c = client(stub)
    for _ in range(2):  # the first call writes the cache, the second reads it
        msg = c.messages.create(model=MODEL, max_tokens=300, system=SYSTEM,
                                messages=conversation())
        assert msg.content[0].text == REPLY
    spans = setup.tel.spans()
    first, second = inference_spans(spans)
    assert len(spans) == 2  # one span a call
    check_message_call(setup.tel, first, cache_write=True)
    check_message_call(setup.tel, second, cache_write=False)
    mine = [s for s in spans if s.attributes.get(S.CONTEXT_ID) == first.attributes[S.CONTEXT_ID]]
    kinds = [(k, p) for _, k, p in blocks(mine)]
    assert kinds == EXPECTED
    tool = block_rows(first)[4]
    assert tool[S.ITEM_ID] == "tool_result:toolu_0"
    assert tool[S.GEN_AI_TOOL_CALL_ID] == "toolu_0"
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == ["complete", "complete"]
    assert_no_content(spans)


def test_messages_stream_create(setup, stub) -> None:
    stream = client(stub).messages.create(model=MODEL, max_tokens=300, system=SYSTEM,
                                          messages=conversation(), stream=True)
    assert isinstance(stream, anthropic.Stream)
    text = "".join(e.delta.text for e in stream if e.type == "content_block_delta")
    assert text == REPLY
    inf = one_inference(setup.tel.spans())
    check_message_call(setup.tel, inf, cache_write=True)
    assert setup.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_messages_stream_helper_sync_and_async(setup, stub) -> None:
    with client(stub).messages.stream(model=MODEL, max_tokens=300, system=SYSTEM,
                                      messages=conversation()) as stream:
        assert "".join(stream.text_stream) == REPLY

    async def run() -> str:
        async with aclient(stub).messages.stream(model=MODEL, max_tokens=300, system=SYSTEM,
                                                 messages=conversation()) as s:
            return "".join([t async for t in s.text_stream])

    assert asyncio.run(run()) == REPLY
    first, second = inference_spans(setup.tel.spans())
    check_message_call(setup.tel, first, cache_write=True)
    check_message_call(setup.tel, second, cache_write=False)
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == ["complete", "complete"]


def test_async_create(setup, stub) -> None:
    async def run() -> None:
        c = aclient(stub)
        await c.messages.create(model=MODEL, max_tokens=300, system=SYSTEM,
                                messages=conversation())
        stream = await c.messages.create(model=MODEL, max_tokens=300, system=SYSTEM,
                                         messages=conversation(), stream=True)
        async for _ in stream:
            pass

    asyncio.run(run())
    first, second = inference_spans(setup.tel.spans())
    check_message_call(setup.tel, first, cache_write=True)
    check_message_call(setup.tel, second, cache_write=False)


EDITS = {"edits": [{"type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": 100},
                    "keep": {"type": "tool_uses", "value": 1}}]}


@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
def test_context_management_is_a_compaction(setup, stub, streamed: bool) -> None:
    kwargs = {"model": MODEL, "max_tokens": 300, "messages": conversation(tool_results=3),
              "context_management": EDITS, "betas": ["context-management-2025-06-27"]}
    c = client(stub)
    if streamed:
        with c.beta.messages.stream(**kwargs) as stream:
            msg = stream.get_final_message()
    else:
        msg = c.beta.messages.create(**kwargs)
    (edit,) = msg.context_management.applied_edits
    assert edit.cleared_tool_uses == 2
    spans = setup.tel.spans()
    inf = assert_folded(spans)
    assert inf.attributes[S.CONTEXT_SPAN_COUNT] == 1  # the compaction span
    (cmp,) = named(spans, S.SPAN_COMPACTION)
    c_attrs = cmp.attributes
    assert c_attrs[S.COMPACTION_METHOD] == "provider_context_editing"
    assert c_attrs[S.COMPACTION_TRIGGER] == "clear_tool_uses_20250919"
    assert c_attrs[S.COMPACTION_SOURCE_COUNT] == 2
    assert c_attrs[S.COMPACTION_LOSS_NOTES] == (
        f"clear_tool_uses_20250919 cleared 2 tool uses ({edit.cleared_input_tokens} "
        "input tokens)",)
    sources = events(cmp, S.EVENT_COMPACTION_SOURCE)
    assert [s[S.ITEM_ID] for s in sources] == ["tool_result:toolu_0", "tool_result:toolu_1"]
    assert all(s[S.COMPACTION_COVERED] is False for s in sources)
    assert c_attrs[S.COMPACTION_COVERAGE] == 0.0
    (bundle,) = setup.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    (rec,) = bundle["context_compactions"]
    assert rec["method"] == "provider_context_editing"
    assert rec["source_item_refs"] == ["tool_result:toolu_0", "tool_result:toolu_1"]
    metrics = setup.tel.metrics()
    assert metrics[S.METRIC_COMPACTION_UNCOVERED_SOURCES][0][1] == 2


def test_content_capture(capture_setup, stub) -> None:
    client(stub).messages.create(model=MODEL, max_tokens=300, system=SYSTEM,
                                 messages=conversation())
    spans = capture_setup.tel.spans()
    inf = assert_folded(spans)
    last = block_rows(inf)[-1]
    assert last[S.BLOCK_DIGEST].startswith("hmac-sha256:")
    if capture_setup.capture:
        assert last[S.ITEM_CONTENT] == "When will it arrive?"
        assert "When will it arrive?" in inf.attributes[S.GEN_AI_INPUT_MESSAGES]
        assert REPLY in inf.attributes[S.GEN_AI_OUTPUT_MESSAGES]
    else:
        assert_no_content(spans)


#: the API's two context-length errors: the prompt over the window, and (the stub's 128,000
#: for this model, where our table says 200,000) the prompt within it but not with max_tokens
TOO_LONG = {
    "prompt": (dict(model="claude-3-haiku-20240307", max_tokens=100, content="x" * 900_000),
               "prompt is too long: 225005 tokens > 200000 maximum", 200_000, 100,
               225_005 - 200_000),
    "with_max_tokens": (
        dict(model="claude-sonnet-4-6", max_tokens=8192, content="x" * 500_000),
        "input length and `max_tokens` exceed context limit: 125005 + 8192 > 128000",
        128_000, 8192, 125_005 + 8192 - 128_000)}


def _too_long(c: anthropic.Anthropic, model: str, max_tokens: int, content: str
              ) -> anthropic.BadRequestError:
    with pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(model=model, max_tokens=max_tokens,
                          messages=[{"role": "user", "content": content}])
    return info.value


@pytest.mark.parametrize("case", list(TOO_LONG))
def test_a_context_length_error_is_a_rejected_overflow(stub, case: str) -> None:
    call, wording, window, reserved, over = TOO_LONG[case]
    plain = _too_long(client(stub), **call)
    assert wording in str(plain)
    tel = CapturedTelemetry()
    inst = AnthropicContextInstrumentor()
    inst.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                    agent_context=tel.agent_context)
    try:
        seen = _too_long(client(stub), **call)
    finally:
        inst.uninstrument()
        tel.shutdown()
    assert (type(seen), str(seen), seen.body) == (type(plain), str(plain), plain.body)
    inf = assert_folded(tel.spans())
    assert inf.status.status_code == StatusCode.ERROR
    b = inf.attributes
    # the window the error states is the budget's
    assert (b[S.BUDGET_MAX_TOKENS], b[S.BUDGET_RESERVED_TOKENS]) == (window, reserved)
    assert b[S.BUDGET_OVERFLOW] is True
    assert b[S.BUDGET_OVERFLOW_STRATEGY] == "reject"
    assert b[S.BUDGET_OVERFLOW_TOKENS] == over
    (budget,) = tel.bundles()[0]["context_budgets"]
    assert (budget["max_tokens"], budget["overflow"], budget["overflow_tokens"],
            budget["overflow_strategy"]) == (window, True, over, "reject")


def _media_turn(image: str) -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": image}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "Refund policy: returns within 30 days."}},
        {"type": "document", "source": {"type": "file", "file_id": "file_011Refunds"}},
        {"type": "search_result", "source": "https://kb.example/shipping",
         "title": "Shipping", "content": [{"type": "text", "text": "Orders ship in 2 days."}]},
        {"type": "text", "text": "Which of these applies to me?"}]}]


def test_the_same_text_from_two_sources_is_two_documents(setup, stub) -> None:
    """Two search results of the same title and text from different sources are two
    documents (each its own item, neither a repeat ``#2`` of the other); the same source
    sent again in a later call is the same item."""
    def result(source: str) -> dict[str, Any]:
        return {"type": "search_result", "source": source, "title": "Shipping",
                "content": [{"type": "text", "text": "Orders ship in 2 days."}]}

    turn = [{"role": "user", "content": [
        result("https://kb.example/shipping"), result("https://kb.example/archive"),
        {"type": "text", "text": "Which applies?"}]}]
    c = client(stub)
    c.messages.create(model=MODEL, max_tokens=64, messages=turn)
    c.messages.create(model=MODEL, max_tokens=64, messages=[
        {"role": "user", "content": [result("https://kb.example/shipping"),
                                     {"type": "text", "text": "Which applies?"}]}])
    first, second = (block_rows(s) for s in inference_spans(setup.tel.spans()))
    ids = [r[S.ITEM_ID] for r in first]
    assert len(set(ids)) == 3 and not any("#" in i for i in ids)
    assert first[0][S.BLOCK_DIGEST] != first[1][S.BLOCK_DIGEST]
    assert second[0][S.ITEM_ID] == ids[0]
    for bundle in setup.tel.bundles():
        assert len({i["item_id"] for i in bundle["context_items"]}) == \
            len(bundle["context_items"])
    assert "kb.example" not in str([dict(s.attributes) for s in setup.tel.spans()])


def test_content_nested_past_any_api_limit_is_read_to_a_bound(alone, stub) -> None:
    """Documents nested in documents' content far deeper than the API takes (the SDK sends
    them): the block stands for what it holds past the bound, the call's records kept."""
    source: dict[str, Any] = {"type": "text", "media_type": "text/plain", "data": "deep"}
    for _ in range(250):
        source = {"type": "content",
                  "content": [{"type": "document", "source": source}]}
    client(stub).messages.create(model=MODEL, max_tokens=64, messages=[
        {"role": "user", "content": [{"type": "document", "source": source},
                                     {"type": "text", "text": "Summarise."}]}])
    rows = block_rows(one_inference(alone.tel.spans()))
    assert len(rows) == 2 and rows[0][S.BLOCK_TOKENS] >= 1
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_images_and_documents_are_items_of_their_own(setup, stub) -> None:
    """An image or a document is named by what it carries (a keyed digest of its data, URL
    or file id, never written): two images are two items, the same one sent again is one;
    a text document and a search result are their text (its tokens, its digest)."""
    c = client(stub)
    for image in ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB", "R0lGODlhAQABAIAAAAAAAP",
                  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB"):
        c.messages.create(model=MODEL, max_tokens=64, messages=_media_turn(image))
    calls = [block_rows(s) for s in inference_spans(setup.tel.spans())]
    assert len(calls) == 3
    ids = [[r[S.ITEM_ID] for r in rows] for rows in calls]
    assert len(set(ids[0])) == 5
    assert ids[0][0] != ids[1][0] and ids[2] == ids[0]  # the image: its own identity
    assert ids[1][1:] == ids[0][1:]  # the rest unchanged
    digests = [[r[S.BLOCK_DIGEST] for r in rows] for rows in calls]
    assert digests[0][0] != digests[1][0] and digests[2][0] == digests[0][0]
    text_doc, search = calls[0][1], calls[0][3]
    assert text_doc[S.BLOCK_DIGEST] == digest_text("Refund policy: returns within 30 days.")
    assert text_doc[S.BLOCK_TOKENS] == estimate_tokens(
        "Refund policy: returns within 30 days.")
    assert search[S.BLOCK_DIGEST] == digest_text(
        "https://kb.example/shipping\nShipping\nOrders ship in 2 days.")
    recorded = str([dict(s.attributes) for s in setup.tel.spans()]) + str(setup.tel.bundles())
    for private in ("iVBORw0KGgo", "R0lGODlh", "file_011Refunds", "kb.example"):
        assert private not in recorded
    for bundle in setup.tel.bundles():
        assert bundle["rebuild"]["status"] == "complete"
