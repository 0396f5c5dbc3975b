"""Which selected documents reached the prompt, through the real ``openai`` and
``anthropic`` clients on the loopback stub: the application selects documents with the API,
puts some of them in the request as its own messages, and the block that carries a
document's text names it (``context.block.source_item_refs``); the one it left out is
selected but never injected. Ids only leave the process: no text, unless content capture
is on."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from llm_helpers import assert_folded, assert_no_content, block_rows, inference_spans

from otel_agent_context import ContextItem
from otel_agent_context import _semconv as S

MODEL = "gpt-4o-mini"
REFUNDS = "Refunds are issued within 14 days of the return reaching our warehouse."
SHIPPING = "Orders ship within three business days from the Lisbon warehouse."
HOURS = "Support answers from 9:00 to 18:00 on weekdays, Lisbon time."
DOCS = {"kb:refunds": REFUNDS, "kb:shipping": SHIPPING, "kb:hours": HOURS}
SYSTEM = "You are a support agent for ACME. Answer from the notes only."


def _retrieve(env: Any) -> None:
    """What a RAG application records with the API: three documents selected."""
    with env.selection(intent="retrieval", policy="top_k") as sel:
        for rank, (item_id, text) in enumerate(DOCS.items(), start=1):
            sel.selected(ContextItem(item_id=item_id, context_kind="retrieval_result",
                                     content=text), rank=rank)


def _sources(spans: list[Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(block item id, its source refs) of every block that has some."""
    return [(b[S.ITEM_ID], b[S.BLOCK_SOURCE_ITEM_REFS])
            for b in block_rows(assert_folded(spans)) if S.BLOCK_SOURCE_ITEM_REFS in b]


def _exported(spans: list[Any]) -> str:
    return json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                       for s in spans], default=str)


def _check_not_injected(tel: Any, expected: list[str]) -> None:
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    (selection,) = bundle["context_selections"]
    assert selection["not_injected_item_refs"] == expected
    metric = {(labels["agent"], labels["kind"]): value
              for labels, value in tel.metrics()["context.items.not_injected"]}
    assert metric == {("support", "retrieval_result"): len(expected)}


def test_openai_chat_blocks_name_the_documents_they_carry(setup, stub) -> None:
    tel = setup.tel
    messages = [
        {"role": "system", "content": f"{SYSTEM}\n\nNotes:\n- {REFUNDS}\n- {SHIPPING}"},
        {"role": "user", "content": "How long do refunds take?"},
    ]
    sent = json.loads(json.dumps(messages))
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with tel.agent_context.envelope(agent_name="support") as env:
        _retrieve(env)
        client.chat.completions.create(model=MODEL, messages=messages)
    (_, body), = stub.requests
    assert body["messages"] == sent  # the request is the application's, unchanged
    spans = tel.spans()
    assert _sources(spans) == [("system:" + _system_id(spans), ("kb:refunds", "kb:shipping"))]
    _check_not_injected(tel, ["kb:hours"])
    assert_no_content(spans)
    exported = _exported(spans)
    for text in DOCS.values():
        assert text not in exported  # ids and digests only


def _system_id(spans: list[Any]) -> str:
    first = block_rows(assert_folded(spans))[0]
    return str(first[S.ITEM_ID]).removeprefix("system:")


def test_openai_responses_and_content_capture(capture_setup, stub) -> None:
    tel = capture_setup.tel
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with tel.agent_context.envelope(agent_name="support") as env:
        _retrieve(env)
        client.responses.create(model=MODEL, instructions=SYSTEM, input=[
            {"role": "user", "content": [
                {"type": "input_text", "text": f"Context: {HOURS}"},
                {"type": "input_text", "text": "When can I call you?"}]}])
    spans = tel.spans()
    ((block, refs),) = _sources(spans)
    assert refs == ("kb:hours",)
    _check_not_injected(tel, ["kb:refunds", "kb:shipping"])
    exported = _exported(spans)
    if capture_setup.capture:  # the documents' own content attributes, and the prompt
        assert HOURS in exported and REFUNDS in exported
    else:
        assert_no_content(spans)
        assert not any(text in exported for text in DOCS.values())


def test_openai_stream_in_a_tool_loop_names_each_document_once_per_block(alone, stub) -> None:
    tel = alone.tel
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    history = [{"role": "system", "content": SYSTEM},
               {"role": "user", "content": "How long do refunds take?"},
               {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(
                   {"results": [REFUNDS]})}]
    with tel.agent_context.envelope(agent_name="support") as env:
        _retrieve(env)
        for _ in range(2):  # two model calls of one turn see the same tool result
            stream = client.chat.completions.create(model=MODEL, messages=history, stream=True)
            for _chunk in stream:
                pass
    calls = inference_spans(tel.spans())
    assert len(calls) == 2
    for call in calls:
        assert_folded([call])
        found = [(b[S.ITEM_ID], b[S.BLOCK_SOURCE_ITEM_REFS])
                 for b in block_rows(call) if S.BLOCK_SOURCE_ITEM_REFS in b]
        assert found == [("tool_result:call_1", ("kb:refunds",))]
    _check_not_injected(tel, ["kb:shipping", "kb:hours"])


def test_anthropic_messages_blocks_name_the_documents_they_carry(alone, stub) -> None:
    tel = alone.tel
    client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                                 max_retries=0)
    with tel.agent_context.envelope(agent_name="support") as env:
        _retrieve(env)
        client.messages.create(model="claude-sonnet-4-6", max_tokens=256,
                               system=f"{SYSTEM}\n{SHIPPING}",
                               messages=[{"role": "user", "content": [
                                   {"type": "text", "text": f"<doc>{REFUNDS}</doc>"},
                                   {"type": "text", "text": f"<doc>{HOURS}</doc>"},
                                   {"type": "text", "text": "Summarise."}]}])
    found = dict(_sources(tel.spans()))
    assert sorted(refs for refs in found.values()) == [
        ("kb:hours",), ("kb:refunds",), ("kb:shipping",)]
    (bundle,) = tel.bundles()
    assert "not_injected_item_refs" not in bundle["context_selections"][0]
    assert "context.items.not_injected" not in tel.metrics()
    assert not any(text in _exported(tel.spans()) for text in DOCS.values())


def test_a_model_call_without_selected_items_records_no_sources(alone, stub) -> None:
    tel = alone.tel
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    client.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": f"{SYSTEM}\n{REFUNDS}"},
        {"role": "user", "content": "How long?"}])
    assert _sources(tel.spans()) == []
    (bundle,) = tel.bundles()
    assert "context_selections" not in bundle


def test_concurrent_calls_and_selections_in_one_envelope(alone, stub) -> None:
    """Threads of one envelope select documents and call the model at the same time (strict
    mode: an internal error would raise here); each block names its own document."""
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    tel = alone.tel
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)

    def ask(env: Any, i: int) -> None:
        text = f"Document {i}: {REFUNDS}"
        with env.selection(intent="retrieval") as sel:
            sel.selected(ContextItem(item_id=f"kb:{i}", context_kind="retrieval_result",
                                     content=text))
        client.chat.completions.create(model=MODEL, messages=[
            {"role": "system", "content": f"{SYSTEM}\n{text}"},
            {"role": "user", "content": "How long?"}])

    with tel.agent_context.envelope(agent_name="support") as env, \
            ThreadPoolExecutor(max_workers=8) as pool:
        done = [pool.submit(contextvars.copy_context().run, ask, env, i) for i in range(24)]
        for future in done:
            future.result()
    (bundle,) = tel.bundles()
    assert len(bundle["context_assemblies"]) == 24
    named = sorted(ref for asm in bundle["context_assemblies"]
                   for block in asm["ordered_blocks"] for ref in block.get("source_item_refs", ()))
    assert named == sorted(f"kb:{i}" for i in range(24))
    assert "context.items.not_injected" not in tel.metrics()
