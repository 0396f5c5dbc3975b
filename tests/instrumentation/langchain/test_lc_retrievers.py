"""Retrievers as a surface and a selection; compressors and filters as omissions."""

from __future__ import annotations

import warnings

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import (
    DocumentCompressorPipeline,
    EmbeddingsFilter,
    LLMChainFilter,
)
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableLambda
from lc_helpers import (
    QUERY,
    assert_no_content,
    embeddings,
    events,
    knowledge_base,
    one,
    strip_times,
    tree,
)

from otel_agent_context import _semconv as S
from otel_agent_context._attributes import digest_text
from otel_agent_context._digest import short_digest
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunsetting
    from langchain_community.document_transformers import EmbeddingsRedundantFilter

SHIPPING = "Shipping takes 3 business days."
ABOUT = "Our office is in Lisbon."
DIGEST = digest_text(QUERY)


def _item(item_id: str, text: str, uri: str, **extra):
    attrs = {S.ITEM_ID: item_id, S.ITEM_KIND: "retrieval_result", S.ITEM_CONTENT_MODE: "inline",
             S.ITEM_TOKEN_ESTIMATE: (len(text) + 3) // 4, S.ITEM_BYTE_SIZE: len(text),
             S.ITEM_DIGEST: digest_text(text), S.SOURCE_ID: item_id, S.SOURCE_URI: uri,
             S.SOURCE_KIND: "InMemoryVectorStore"}
    attrs.update(extra)
    return attrs


REFUNDS = _item("refunds", QUERY, "kb/refunds.md", **{S.SOURCE_SELECTOR: "page:1"})
FAQ = _item("faq-refunds", QUERY, "kb/faq.md")


def test_retriever_alone_is_an_implicit_envelope_with_surface_and_selection(tel) -> None:
    docs = knowledge_base().as_retriever(search_kwargs={"k": 2}).invoke(QUERY)
    assert [d.id for d in docs] == ["refunds", "faq-refunds"]

    assert tree(tel) == [("context.envelope", None), ("context.surface", "context.envelope"),
                         ("context.selection", "context.envelope")]
    env = one(tel, "context.envelope")
    assert dict(env.attributes) == {
        S.CONTEXT_ID: "ctx_1", S.CONTEXT_SCOPE: "turn", S.CONTEXT_SCHEMA_VERSION: "0.1",
        S.CONTEXT_PRODUCER: "otel-agent-context/0.1.0", S.CONTEXT_LIFECYCLE: "selected",
        S.CONTEXT_SPAN_COUNT: 2}
    surface = one(tel, "context.surface")
    assert dict(surface.attributes) == {S.SURFACE_ID: "srf_1", S.CONTEXT_ID: "ctx_1",
                                        S.SURFACE_ITEM_COUNT: 2, S.SURFACE_TOKEN_ESTIMATE: 18}
    assert events(surface) == [(S.EVENT_ITEM_ADDED, REFUNDS), (S.EVENT_ITEM_ADDED, FAQ)]
    selection = one(tel, "context.selection")
    assert dict(selection.attributes) == {
        S.SELECTION_ID: "sel_1", S.SURFACE_ID: "srf_1", S.SELECTION_INTENT: "retrieval",
        S.SELECTION_POLICY: "VectorStoreRetriever", S.CONTEXT_ID: "ctx_1",
        S.SELECTION_CANDIDATE_COUNT: 2, S.SELECTION_SELECTED_COUNT: 2,
        S.SELECTION_OMITTED_COUNT: 0}
    assert events(selection) == [
        (S.EVENT_ITEM_SELECTED, {**REFUNDS, S.SELECTION_RANK: 1}),
        (S.EVENT_ITEM_SELECTED, {**FAQ, S.SELECTION_RANK: 2}),
    ]
    assert_no_content(tel)

    (bundle,) = tel.bundles()
    assert strip_times(bundle) == {
        "context_envelope": {
            "context_id": "ctx_1", "scope": "turn", "schema_version": "0.1",
            "lifecycle": "selected", "producer": "otel-agent-context/0.1.0",
            "surface_refs": ["srf_1"], "item_refs": ["refunds", "faq-refunds"],
            "selection_refs": ["sel_1"],
            "telemetry_refs": [
                {"trace_id": f"{1:032x}", "span_id": f"{i:016x}", "span_name": name}
                for i, name in ((1, "context.envelope"), (2, "context.surface"),
                                (3, "context.selection"))],
        },
        "context_surfaces": [{"surface_id": "srf_1", "item_refs": ["refunds", "faq-refunds"],
                              "item_count": 2, "token_estimate": 18}],
        "context_items": [
            {"item_id": "refunds", "context_kind": "retrieval_result", "content_mode": "inline",
             "token_estimate": 9, "byte_size": 34, "digest": DIGEST,
             "source_refs": [{"source_id": "refunds", "uri": "kb/refunds.md",
                              "source_kind": "InMemoryVectorStore", "selector": "page:1"}]},
            {"item_id": "faq-refunds", "context_kind": "retrieval_result",
             "content_mode": "inline", "token_estimate": 9, "byte_size": 34, "digest": DIGEST,
             "source_refs": [{"source_id": "faq-refunds", "uri": "kb/faq.md",
                              "source_kind": "InMemoryVectorStore"}]},
        ],
        "context_selections": [{
            "selection_id": "sel_1", "surface_id": "srf_1", "intent": "retrieval",
            "selection_policy": "VectorStoreRetriever", "candidate_count": 2,
            "candidate_item_refs": ["refunds", "faq-refunds"],
            "selected_item_refs": ["refunds", "faq-refunds"],
            "ranking_signals": [{"item_id": "refunds", "rank": 1},
                                {"item_id": "faq-refunds", "rank": 2}],
        }],
        "context_events": [
            {"event_class": cls, "context_id": "ctx_1", "subject_ref": subject,
             "trace_id": f"{1:032x}", "span_id": f"{span:016x}"}
            for cls, subject, span in (
                ("context.surface.created", "surface:srf_1", 2),
                ("context.selection.started", "selection:sel_1", 3),
                ("context.item.added", "item:refunds", 2),
                ("context.item.added", "item:faq-refunds", 2),
                ("context.selection.completed", "selection:sel_1", 3))
        ],
        "rebuild": {"status": "complete", "expected_spans": 2, "received_spans": 2,
                    "dropped_events": 0, "dropped_attributes": 0},
    }


def test_content_capture_on_records_text_title_and_query(tel_content) -> None:
    knowledge_base().as_retriever(search_kwargs={"k": 1}).invoke(QUERY)
    selection = one(tel_content, "context.selection")
    assert selection.attributes[S.SELECTION_QUERY] == QUERY
    ((name, attrs),) = events(selection)
    assert name == S.EVENT_ITEM_SELECTED
    assert attrs == {**REFUNDS, S.SELECTION_RANK: 1, S.ITEM_CONTENT: QUERY,
                     S.ITEM_TITLE: "Refunds"}
    (bundle,) = tel_content.bundles()
    assert bundle["context_selections"][0]["query"] == QUERY
    assert bundle["context_items"][0]["content"] == QUERY
    assert bundle["context_items"][0]["title"] == "Refunds"


def test_compression_pipeline_drops_are_omissions_with_reasons(tel) -> None:
    emb = embeddings()
    pipeline = DocumentCompressorPipeline(transformers=[
        EmbeddingsRedundantFilter(embeddings=emb),
        EmbeddingsFilter(embeddings=emb, similarity_threshold=0.9),
    ])
    retriever = ContextualCompressionRetriever(
        base_compressor=pipeline,
        base_retriever=knowledge_base().as_retriever(search_kwargs={"k": 4}))
    docs = retriever.invoke(QUERY)
    # the redundancy filter keeps one of the two identical documents (a copy without id)
    assert [d.metadata["source"] for d in docs] == ["kb/faq.md"]

    # one envelope: the inner retriever and the compressors report into the outer retrieval
    assert tree(tel) == [("context.envelope", None), ("context.surface", "context.envelope"),
                         ("context.selection", "context.envelope")]
    selection = one(tel, "context.selection")
    assert dict(selection.attributes) == {
        S.SELECTION_ID: "sel_1", S.SURFACE_ID: "srf_1", S.SELECTION_INTENT: "retrieval",
        S.SELECTION_POLICY: "ContextualCompressionRetriever", S.CONTEXT_ID: "ctx_1",
        S.SELECTION_CANDIDATE_COUNT: 4, S.SELECTION_SELECTED_COUNT: 1,
        S.SELECTION_OMITTED_COUNT: 3}
    (selected, *omitted) = events(selection)
    assert selected[0] == S.EVENT_ITEM_SELECTED
    assert selected[1].pop(S.SELECTION_SCORE) == pytest.approx(1.0)
    assert selected[1] == {**FAQ, S.SELECTION_RANK: 1}
    dup = "EmbeddingsRedundantFilter(similarity_threshold=0.95): near-duplicate of a kept document"
    low = "EmbeddingsFilter(similarity_threshold=0.9, k=20): not similar enough to the query"
    # what EmbeddingsFilter dropped keeps the similarity it was dropped for (below 0.9)
    dropped_scores = [a.pop(S.SELECTION_SCORE) for _, a in omitted[1:]]
    assert all(score < 0.9 for score in dropped_scores) and len(dropped_scores) == 2
    assert omitted == [
        (S.EVENT_ITEM_OMITTED, {**REFUNDS, S.OMISSION_REASON: "duplicate_coverage",
                                S.OMISSION_DETAIL: dup}),
        (S.EVENT_ITEM_OMITTED, {**_item("about", ABOUT, "kb/about.md"),
                                S.OMISSION_REASON: "low_relevance", S.OMISSION_DETAIL: low}),
        (S.EVENT_ITEM_OMITTED, {**_item("shipping", SHIPPING, "kb/shipping.md"),
                                S.OMISSION_REASON: "low_relevance", S.OMISSION_DETAIL: low}),
    ]
    assert_no_content(tel)

    (bundle,) = tel.bundles()
    (sel,) = bundle["context_selections"]
    assert sel["selected_item_refs"] == ["faq-refunds"]
    assert sel["omitted_item_refs"] == [
        {"item_id": "refunds", "reason": "duplicate_coverage", "detail": dup},
        {"item_id": "about", "reason": "low_relevance", "detail": low,
         "score": dropped_scores[0]},
        {"item_id": "shipping", "reason": "low_relevance", "detail": low,
         "score": dropped_scores[1]},
    ]
    assert sel["ranking_signals"] == [{"item_id": "faq-refunds", "rank": 1,
                                       "score": pytest.approx(1.0)}]
    assert bundle["context_surfaces"][0]["item_refs"] == ["refunds", "faq-refunds", "about",
                                                         "shipping"]
    assert bundle["rebuild"]["status"] == "complete"
    omitted_metric = tel.metrics()["context.items.omitted"]
    assert sorted((a["reason"], v) for a, v in omitted_metric) == [
        ("duplicate_coverage", 1), ("low_relevance", 2)]


def test_llm_filter_judges_in_an_envelope_of_its_own_linked_to_the_retrieval(tel) -> None:
    judge = FakeListChatModel(responses=["YES", "NO", "YES", "NO"])
    retriever = ContextualCompressionRetriever(
        base_compressor=LLMChainFilter.from_llm(judge),
        base_retriever=knowledge_base().as_retriever(search_kwargs={"k": 4}))
    docs = retriever.invoke(QUERY)
    assert [d.id for d in docs] == ["refunds", "about"]
    # the judge's model calls are not the agent's: they run in a review envelope of their
    # own, linked to the retrieval's; what it dropped is the retrieval's selection
    by_scope = {b["context_envelope"]["scope"]: b for b in tel.bundles()}
    assert sorted(by_scope) == ["review", "turn"]
    review = by_scope["review"]["context_envelope"]
    assert review["parent_id"] == by_scope["turn"]["context_envelope"]["context_id"]
    assert review["metadata"]["gen_ai.agent.name"] == "LLMChainFilter"
    assert "context_selections" not in by_scope["review"]
    bundle = by_scope["turn"]
    (sel,) = bundle["context_selections"]
    why = "LLMChainFilter: judged not relevant by the model"
    assert sel["selected_item_refs"] == ["refunds", "about"]
    assert sel["omitted_item_refs"] == [
        {"item_id": "faq-refunds", "reason": "low_relevance", "detail": why},
        {"item_id": "shipping", "reason": "low_relevance", "detail": why}]


def test_compressor_on_its_own_is_a_selection_in_an_implicit_envelope(tel) -> None:
    docs = [Document(QUERY, metadata={"source": "kb/refunds.md"}),
            Document(ABOUT, metadata={"source": "kb/about.md", "relevance_score": 0.2})]
    kept = EmbeddingsFilter(embeddings=embeddings(), similarity_threshold=0.9,
                            k=3).compress_documents(docs, QUERY)
    assert [d.page_content for d in kept] == [QUERY]
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["scope"] == "turn"
    (sel,) = bundle["context_selections"]
    # documents without ids get one from their source and text
    refunds_id = "doc_" + short_digest("kb/refunds.md", QUERY, length=16)
    about_id = "doc_" + short_digest("kb/about.md", ABOUT, length=16)
    assert sel["selection_policy"] == "EmbeddingsFilter"
    assert sel["selected_item_refs"] == [refunds_id]
    why = "EmbeddingsFilter(similarity_threshold=0.9, k=3): not similar enough to the query"
    # its score is the similarity the filter dropped it for (its retriever's 0.2 aside)
    (omitted,) = sel["omitted_item_refs"]
    assert omitted.pop("score") < 0.9
    assert omitted == {"item_id": about_id, "reason": "low_relevance", "detail": why}
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items[refunds_id]["source_refs"] == [{"uri": "kb/refunds.md",
                                                  "source_kind": "document"}]


def test_retriever_inside_a_chain_joins_the_chain_envelope(tel) -> None:
    retriever = knowledge_base().as_retriever(search_kwargs={"k": 1})
    chain = retriever | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    assert chain.invoke(QUERY) == QUERY
    assert tree(tel) == [("context.envelope", None), ("context.surface", "context.envelope"),
                         ("context.selection", "context.envelope")]
    env = one(tel, "context.envelope")
    assert S.GEN_AI_AGENT_NAME not in env.attributes  # an unnamed chain: no agent name
    assert env.attributes[S.CONTEXT_SPAN_COUNT] == 2


def test_a_finished_async_retrieval_does_not_swallow_later_filtering(tel) -> None:
    # An async retriever run ends in another task, so its "active retrieval" marker may stay
    # in the caller's context; a compressor used afterwards must still get its own record.
    import asyncio

    docs = [Document(QUERY, metadata={"source": "kb/refunds.md"}),
            Document(ABOUT, metadata={"source": "kb/about.md"})]

    async def run() -> list[Document]:
        await knowledge_base().as_retriever(search_kwargs={"k": 1}).ainvoke(QUERY)
        return EmbeddingsFilter(embeddings=embeddings(), similarity_threshold=0.9,
                                k=3).compress_documents(docs, QUERY)

    assert [d.page_content for d in asyncio.run(run())] == [QUERY]
    bundles = tel.bundles()
    assert len(bundles) == 2  # the retrieval, then the filter on its own
    assert bundles[1]["context_selections"][0]["selection_policy"] == "EmbeddingsFilter"
    assert len(bundles[1]["context_selections"][0]["omitted_item_refs"]) == 1


def test_watching_the_filter_s_similarity_leaves_the_filter_as_it_was(tel) -> None:
    docs = [Document(QUERY, metadata={"source": "kb/refunds.md"}),
            Document(ABOUT, metadata={"source": "kb/about.md"})]
    flt = EmbeddingsFilter(embeddings=embeddings(), similarity_threshold=0.9)
    before = flt.similarity_fn
    kept = flt.compress_documents(docs, QUERY)
    assert flt.similarity_fn is before  # put back after the call
    LangChainContextInstrumentor().uninstrument()
    assert [d.page_content for d in flt.compress_documents(docs, QUERY)] == \
        [d.page_content for d in kept]


def test_document_items_equal_validated_records() -> None:
    """A document's item (copied from a template, not validated: the retrieval's hot path)
    is the record the validated constructor makes from the same fields, and copies share no
    source refs."""
    from langchain_core.documents import Document

    from otel_agent_context._records import ContextItem, ContextSourceRef
    from otel_agent_context.instrumentation._tokens import estimate_tokens
    from otel_agent_context.instrumentation.langchain._items import doc_item

    text = "Refunds are issued within 14 days — é."
    cases = [
        (Document(page_content=text), None, None, None, []),
        (Document(page_content=text, id="d1",
                  metadata={"source": "kb/b.md", "title": "Refunds", "page": 2,
                            "sensitivity": "internal"}),
         "faiss", "Refunds", "internal",
         [ContextSourceRef(source_id="d1", uri="kb/b.md", source_kind="faiss",
                           selector="page:2")]),
        (Document(page_content="", metadata={"title": 7, "sensitivity": None}), None, None,
         None, []),
    ]
    made = []
    for doc, kind, title, sensitivity, refs in cases:
        expected = ContextItem(
            item_id="i", context_kind="retrieval_result", content_mode="inline",
            content=doc.page_content, title=title, token_estimate=estimate_tokens(
                doc.page_content), byte_size=len(doc.page_content.encode("utf-8")),
            sensitivity=sensitivity, source_refs=refs)
        item = doc_item(doc, "i", kind)
        assert item == expected
        assert item.to_dict() == expected.to_dict()
        made.append(item)
    assert made[0].source_refs is not made[2].source_refs
