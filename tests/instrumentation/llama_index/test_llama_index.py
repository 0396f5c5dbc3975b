"""The LlamaIndex instrumentor on real LlamaIndex engines (``llama-index-core``), an
in-memory ``VectorStoreIndex`` over the test's own embedding model, and a chat model answering
through the ``openai`` client on the loopback stub (``li_app``): exact bundles, and the app's
outputs and requests the same with and without instrumentation."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import li_app
import pytest
from framework_helpers import framework_on
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from stub_server import REPLY, StubServer

from otel_agent_context.instrumentation.llama_index import LlamaIndexContextInstrumentor
from otel_agent_context.instrumentation.llama_index._items import message_id
from otel_agent_context.testing import CapturedTelemetry

CUT = ("SimilarityPostprocessor(similarity_cutoff=0.3): score below the similarity cutoff")


def _plain_scores() -> list[tuple[str, float]]:
    """What the retriever alone finds (uninstrumented): the candidates and their scores."""
    with StubServer() as stub:
        retriever = li_app.build_index(stub.openai_base_url).as_retriever(similarity_top_k=3)
        return [(n.node.node_id, n.score or 0.0) for n in retriever.retrieve(li_app.QUESTION)]


def _ask() -> tuple[tuple[str, list[tuple[str, float]]], list[Any]]:
    with StubServer() as stub:
        out = li_app.ask(stub.openai_base_url)
        return out, stub.requests


def _chat() -> tuple[list[str], list[Any]]:
    with StubServer() as stub:
        out = li_app.chat(stub.openai_base_url)
        return out, stub.requests


@pytest.fixture
def li_on(capture_setup: Any) -> Iterator[CapturedTelemetry]:
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        yield tel


def _exported(tel: CapturedTelemetry) -> str:
    return json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                       for s in tel.spans()], default=str)


def test_query_engine_retrieval_cutoff_and_prompt(capture_setup: Any) -> None:
    candidates = _plain_scores()
    plain, plain_requests = _ask()  # before LlamaIndex is instrumented
    capture_setup.tel.span_exporter.clear()
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        out, requests = _ask()
    assert out == plain and out[0] == REPLY
    assert json.dumps(requests) == json.dumps(plain_requests)  # the same bodies

    (bundle,) = tel.bundles()  # the query: one envelope, its model call in it
    assert bundle["context_envelope"]["scope"] == "turn"
    assert [c[0] for c in candidates] == ["kb-refunds", "kb-returns", "kb-shipping"]
    (surface,) = bundle["context_surfaces"]
    assert surface["item_refs"] == [c[0] for c in candidates]
    (selection,) = bundle["context_selections"]
    assert selection["intent"] == "retrieval"
    assert selection["selection_policy"] == (
        "VectorIndexRetriever(similarity_top_k=3) > SimilarityPostprocessor")
    assert selection["selected_item_refs"] == ["kb-refunds"]
    assert selection["selected_item_refs"] == [n for n, _ in out[1]]
    kept = [c for c in candidates if c[1] >= li_app.CUTOFF]
    assert [c[0] for c in kept] == ["kb-refunds"]
    assert selection["omitted_item_refs"] == [
        {"item_id": item_id, "reason": "low_relevance", "detail": CUT, "score": score}
        for item_id, score in candidates[1:]]
    assert all(score < li_app.CUTOFF for _, score in candidates[1:])
    (assembly,) = bundle["context_assemblies"]
    # the synthesizer's prompt: its question block carries the one node that passed
    assert [(b["context_kind"], b.get("source_item_refs")) for b in
            assembly["ordered_blocks"]] == [("system_prompt", None),
                                             ("user_message", ["kb-refunds"])]
    assert "not_injected_item_refs" not in selection
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["kb-returns"]["source_refs"] == [
        {"uri": "kb/kb-returns.md", "source_kind": "document"}]
    exported = _exported(tel)
    assert (li_app.NODES["kb-returns"] in exported) is capture_setup.capture
    assert (li_app.QUESTION in exported) is capture_setup.capture


def test_context_chat_engine_memory_cut_is_a_truncation(capture_setup: Any) -> None:
    plain, plain_requests = _chat()
    capture_setup.tel.span_exporter.clear()
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        out, requests = _chat()
    assert out == plain == [REPLY] * 3
    assert json.dumps(requests) == json.dumps(plain_requests)

    bundles = tel.bundles()
    assert [b["context_envelope"]["scope"] for b in bundles] == ["turn"] * 3
    memory = [[x for x in b["context_budgets"] if x["max_tokens"] == li_app.TOKEN_LIMIT]
              for b in bundles]
    assert all(len(m) == 1 for m in memory)
    first, second, third = (m[0] for m in memory)
    assert (first["actual_items"], first["actual_tokens"], first["overflow"]) == (0, 0, False)
    assert (second["actual_items"], second["actual_tokens"]) == (2, 17)  # 6 + 11 words
    assert "truncation_records" not in second
    q1 = "When does support answer the phone?"
    assert third["overflow_strategy"] == "truncate_middle"
    assert (third["overflow"], third["overflow_tokens"]) == (True, 34 - li_app.TOKEN_LIMIT)
    assert third["truncation_records"] == [
        {"item_id": message_id(ChatMessage(role="user", content=q1)),
         "strategy": "truncate_middle", "tokens_before": 6, "tokens_after": 0},
        {"item_id": message_id(ChatMessage(role="assistant", content=REPLY)),
         "strategy": "truncate_middle", "tokens_before": 11, "tokens_after": 0}]
    assert (third["actual_items"], third["actual_tokens"]) == (2, 17)
    for bundle in bundles:  # the context goes in the system prompt: it names the nodes
        (selection,) = bundle["context_selections"]
        assert len(selection["selected_item_refs"]) == 2
        (assembly,) = bundle["context_assemblies"]
        system = assembly["ordered_blocks"][0]
        assert system["context_kind"] == "system_prompt"
        assert sorted(system["source_item_refs"]) == sorted(selection["selected_item_refs"])
    # the third turn's prompt: system, the kept pair of turn 2, the question
    assert [b["context_kind"] for b in bundles[2]["context_assemblies"][0]["ordered_blocks"]
            ] == ["system_prompt", "session_history", "session_history", "user_message"]
    assert (q1 in _exported(tel)) is capture_setup.capture


def test_async_query_and_the_applications_envelope_joined(li_on: CapturedTelemetry) -> None:
    tel = li_on
    with StubServer() as stub:
        index = li_app.build_index(stub.openai_base_url)
        engine = index.as_query_engine(
            similarity_top_k=3,
            node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=li_app.CUTOFF)])
        with tel.agent_context.envelope(scope="session", agent_name="Shop assistant"):
            response = asyncio.run(engine.aquery(li_app.QUESTION))
    assert str(response) == REPLY
    (bundle,) = tel.bundles()  # the app's envelope, not a second one
    assert bundle["context_envelope"]["scope"] == "session"
    (selection,) = bundle["context_selections"]
    assert selection["selected_item_refs"] == ["kb-refunds"]
    assert [o["item_id"] for o in selection["omitted_item_refs"]] == ["kb-returns",
                                                                      "kb-shipping"]
    (assembly,) = bundle["context_assemblies"]
    assert assembly["ordered_blocks"][-1]["source_item_refs"] == ["kb-refunds"]


def test_a_retriever_alone_is_an_implicit_turn_and_uninstrument_removes_the_handler(
        li_on: CapturedTelemetry) -> None:
    tel = li_on
    with StubServer() as stub:
        retriever = li_app.build_index(stub.openai_base_url).as_retriever(similarity_top_k=2)
        nodes = retriever.retrieve(li_app.QUESTION)
        (bundle,) = tel.bundles()
        (selection,) = bundle["context_selections"]
        assert selection["selected_item_refs"] == [n.node.node_id for n in nodes]
        assert "omitted_item_refs" not in selection
        LlamaIndexContextInstrumentor().uninstrument()
        tel.span_exporter.clear()
        assert retriever.retrieve(li_app.QUESTION) == nodes
        assert tel.spans() == []


def test_streamed_chat_turn_ends_when_the_answer_is_written(li_on: CapturedTelemetry) -> None:
    """``stream_chat`` / ``astream_chat`` return before the model is called (the engine's
    writer reads the stream into memory): the turn holds that call all the same."""
    tel = li_on
    with StubServer() as stub:
        index = li_app.build_index(stub.openai_base_url)
        engine = index.as_chat_engine(chat_mode="context", similarity_top_k=2,
                                      memory=ChatMemoryBuffer.from_defaults(token_limit=30))
        streamed = "".join(engine.stream_chat("When does support answer the phone?")
                           .response_gen)

        async def astream() -> str:
            response = await engine.astream_chat("And how long do refunds take?")
            return "".join([token async for token in response.async_response_gen()])

        astreamed = asyncio.run(astream())
    assert streamed == astreamed == REPLY
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(  # the writer ends just after the reader
            b["rebuild"]["status"] == "complete" for b in tel.bundles()):
        time.sleep(0.02)
    bundles = tel.bundles()
    assert [b["context_envelope"]["scope"] for b in bundles] == ["turn", "turn"]
    for bundle in bundles:  # one envelope each: retrieval, memory, and the model call
        (selection,) = bundle["context_selections"]
        (assembly,) = bundle["context_assemblies"]
        named = [r for b in assembly["ordered_blocks"] for r in b.get("source_item_refs", ())]
        assert sorted(named) == sorted(selection["selected_item_refs"])
        assert len(bundle["context_budgets"]) == 2  # the memory's and the model call's


class ReverseRerank(BaseNodePostprocessor):
    """A reranker of the app's own: the last node first, rescored, the top ``top_n`` kept."""

    top_n: int = 1

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        ranked = [NodeWithScore(node=n.node, score=1.0 - i / 10)
                  for i, n in enumerate(reversed(nodes))]
        return ranked[:self.top_n]


class Offline(BaseNodePostprocessor):
    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        raise RuntimeError("reranker offline")


def test_a_reranker_rescores_and_a_failing_postprocessor_fails_the_turn(
        li_on: CapturedTelemetry) -> None:
    tel = li_on
    candidates = dict(_plain_scores())  # (a retrieval of its own)
    tel.span_exporter.clear()
    with StubServer() as stub:
        index = li_app.build_index(stub.openai_base_url)
        engine = index.as_query_engine(similarity_top_k=3,
                                       node_postprocessors=[ReverseRerank()])
        response = engine.query(li_app.QUESTION)
        (bundle,) = tel.bundles()
        tel.span_exporter.clear()
        broken = index.as_query_engine(similarity_top_k=3, node_postprocessors=[Offline()])
        with pytest.raises(RuntimeError, match="reranker offline"):
            broken.query(li_app.QUESTION)
    assert [n.node.node_id for n in response.source_nodes] == ["kb-shipping"]
    (selection,) = bundle["context_selections"]
    assert selection["selection_policy"] == (
        "VectorIndexRetriever(similarity_top_k=3) > ReverseRerank(top_n=1)")
    assert selection["selected_item_refs"] == ["kb-shipping"]
    assert selection["omitted_item_refs"] == [  # with the scores they had when dropped
        {"item_id": i, "reason": "low_relevance", "detail": "ReverseRerank(top_n=1)",
         "score": candidates[i]} for i in ("kb-refunds", "kb-returns")]
    (ranked,) = selection["ranking_signals"]  # the retriever's score and the reranker's
    assert ranked["signals"] == {"retrieval": candidates["kb-shipping"], "ReverseRerank": 1.0}
    (failed,) = tel.bundles()  # the candidates are recorded, the selection and turn failed
    assert failed["context_surfaces"][0]["item_refs"] == list(candidates)
    assert "selected_item_refs" not in failed["context_selections"][0]
    (envelope,) = [s for s in tel.spans() if s.name == "context.envelope"]
    assert envelope.status.status_code.name == "ERROR"
    assert envelope.attributes["error.type"] == "RuntimeError"


def test_node_items_equal_validated_records() -> None:
    """A node's item (copied from a template, not validated: the retrieval's hot path) is
    the record the validated constructor makes from the same fields, and copies share no
    source refs."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    from otel_agent_context._attributes import digest_text
    from otel_agent_context._records import ContextItem, ContextSourceRef
    from otel_agent_context.instrumentation._tokens import estimate_tokens
    from otel_agent_context.instrumentation.llama_index._items import node_item

    text = "Refunds are issued within 14 days — é."
    cases = [
        (TextNode(id_="a", text=text), None, []),
        (TextNode(id_="b", text=text, metadata={"file_path": "kb/b.md", "title": "Refunds"}),
         "Refunds", [ContextSourceRef(uri="kb/b.md", source_kind="document")]),
        (TextNode(id_="c", text=text, metadata={"url": "https://x/c"}, relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-1")}),
         None, [ContextSourceRef(source_id="doc-1", uri="https://x/c", source_kind="document")]),
        (TextNode(id_="d", text="", relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-2")}),
         None, [ContextSourceRef(source_id="doc-2", source_kind="document")]),
    ]
    made = []
    for node, title, refs in cases:
        body = node.get_content(metadata_mode="none")
        expected = ContextItem(
            item_id=node.node_id, context_kind="retrieval_result", content_mode="inline",
            content=body, title=title, token_estimate=estimate_tokens(body),
            byte_size=len(body.encode("utf-8")), digest=digest_text(body), source_refs=refs)
        item = node_item(NodeWithScore(node=node, score=0.5), node.node_id)
        assert item == expected
        assert item.to_dict() == expected.to_dict()
        made.append(item)
    assert made[1].source_refs[0] is not made[2].source_refs[0]
    assert made[0].source_refs is not made[3].source_refs


def test_identical_messages_at_different_places_have_their_own_ids(
        li_on: CapturedTelemetry) -> None:
    """The stub answers every turn alike: the two assistant messages of the history are the
    same text. The memory's third-turn cut drops the first; the prompt keeps the second: it
    is ``<id>#2`` (its place in the conversation), never the id of the message cut, and a
    message has one id in every turn's prompt and truncation records."""
    out, _ = _chat()
    assert out == [REPLY] * 3
    q1, q2, q3 = ("When does support answer the phone?", "And how long do refunds take?",
                  "Do returns need the original packaging?")
    user = [message_id(ChatMessage(role="user", content=q)) for q in (q1, q2, q3)]
    reply = message_id(ChatMessage(role="assistant", content=REPLY))
    bundles = li_on.bundles()
    blocks = [[b["item_id"] for b in bundle["context_assemblies"][0]["ordered_blocks"][1:]]
              for bundle in bundles]
    assert blocks == [[user[0]], [user[0], reply, user[1]],
                      [user[1], f"{reply}#2", user[2]]]
    (memory,) = [x for x in bundles[2]["context_budgets"]
                 if x["max_tokens"] == li_app.TOKEN_LIMIT]
    cut = [r["item_id"] for r in memory["truncation_records"]]
    assert cut == [user[0], reply]  # the ids the second turn's prompt gave them
    assert not set(cut) & set(blocks[2])
    items = [i["item_id"] for i in bundles[2]["context_items"]]
    assert len(items) == len(set(items))


def test_memory_budget_takes_the_buffers_own_counts(capture_setup: Any) -> None:
    """The buffer counted its whole history and what it kept while it chose: the budget
    takes those counts (the tokenizer is the application's, maybe costly); only each message
    left out is counted again, for its truncation record."""
    calls: list[str] = []

    def tokenizer(text: str) -> list[str]:
        calls.append(text)
        return text.split()

    history = [ChatMessage(role=role, content=text) for role, text in (
        ("user", "When does support answer the phone?"), ("assistant", REPLY),
        ("user", "And how long do refunds take?"), ("assistant", REPLY))]

    def get() -> list[Any]:
        memory = ChatMemoryBuffer.from_defaults(chat_history=list(history),
                                                token_limit=li_app.TOKEN_LIMIT,
                                                tokenizer_fn=tokenizer)
        calls.clear()
        return memory.get()

    plain = get()
    plain_calls = len(calls)
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        kept = get()
    assert kept == plain and len(kept) == 2
    assert len(calls) == plain_calls + 2  # the two messages left out, nothing else
    (bundle,) = tel.bundles()
    (budget,) = bundle["context_budgets"]
    assert (budget["actual_items"], budget["actual_tokens"]) == (2, 17)  # 6 + 11 words
    assert (budget["overflow"], budget["overflow_tokens"]) == (True, 34 - li_app.TOKEN_LIMIT)
    assert [r["tokens_before"] for r in budget["truncation_records"]] == [6, 11]
