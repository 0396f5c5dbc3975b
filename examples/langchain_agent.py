"""A small offline LangChain RAG agent, instrumented with one call, printing its rebuilt bundle.

    python examples/langchain_agent.py          # a summary of the bundle
    python examples/langchain_agent.py --full   # the whole bundle (JSON)

A LangChain 1.x agent (``create_agent``, a LangGraph graph underneath) with two middlewares:
``SummarizationMiddleware`` folds older turns into a summary, and a RAG middleware retrieves
knowledge through a ``ContextualCompressionRetriever`` (a redundancy filter, then an
embeddings relevance filter) and trims the history to a token budget with
``trim_messages``. Offline: deterministic fake embeddings, an in-memory vector store and fake
chat models. ``instrument()`` turns the context instrumentation on; ``BundleSpanProcessor``
rebuilds the agent run's envelope in-process, exactly as the processor does from OTLP: the
retrieval's candidates and why three were dropped, the truncated messages, and the compaction
with its coverage. On an existing agent the one-line way is
``opentelemetry-instrument python agent.py``.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware, wrap_model_call
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import (
    DocumentCompressorPipeline,
    EmbeddingsFilter,
)
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    trim_messages,
)
from langchain_core.vectorstores import InMemoryVectorStore
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.rebuild import BundleSpanProcessor

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # langchain-community is being sunset
    from langchain_community.document_transformers import EmbeddingsRedundantFilter

QUESTION = "How long do refunds take?"
KNOWLEDGE = [
    Document("Refunds are issued within 14 days of receiving the item.",
             metadata={"source": "kb/refunds.md", "title": "Refunds"}, id="kb-refunds"),
    Document("Refunds are issued within 14 days of receiving the item.",
             metadata={"source": "kb/faq.md", "title": "FAQ"}, id="kb-faq-refunds"),
    Document("Standard shipping takes 3 business days.",
             metadata={"source": "kb/shipping.md"}, id="kb-shipping"),
    Document("Our office is in Lisbon.", metadata={"source": "kb/about.md"}, id="kb-about"),
]


def words(messages: list[BaseMessage]) -> int:
    """Token counter for the example: one token a word, easy to follow."""
    return sum(len(str(m.content).split()) for m in messages)


def build_agent() -> Any:
    embeddings = DeterministicFakeEmbedding(size=64)
    store = InMemoryVectorStore(embeddings)
    store.add_documents(KNOWLEDGE)
    retriever = ContextualCompressionRetriever(
        base_compressor=DocumentCompressorPipeline(transformers=[
            EmbeddingsRedundantFilter(embeddings=embeddings),
            EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.9)]),
        base_retriever=store.as_retriever(search_kwargs={"k": 4}))

    @wrap_model_call
    def rag(request: Any, handler: Callable[[Any], Any]) -> Any:
        # the fake embeddings only match identical text: ask with the knowledge's wording
        docs = retriever.invoke(KNOWLEDGE[0].page_content)
        notes = "\n".join(f"[{d.metadata['source']}] {d.page_content}" for d in docs)
        window = trim_messages(request.messages, max_tokens=60, token_counter=words,
                               strategy="last", start_on="human")
        return handler(request.override(
            system_message=SystemMessage(f"Answer from these notes:\n{notes}"),
            messages=window))

    summarize = SummarizationMiddleware(
        model=FakeListChatModel(responses=[
            "The customer's kettle arrived broken; they chose a refund over a replacement."]),
        trigger=("messages", 6), keep=("messages", 3), token_counter=words,
        trim_tokens_to_summarize=30)
    model = FakeListChatModel(responses=["Refunds are issued within 14 days."])
    return create_agent(model=model, tools=[], middleware=[summarize, rag],
                        name="support_agent")


def history() -> list[BaseMessage]:
    turns = [
        ("Hello, my kettle arrived with a broken lid and it leaks everywhere on the counter.",
         "I'm sorry about that! Could you send a photo of the damage so I can check it?"),
        ("Sure, here it is. The hinge is snapped and the lid will not close anymore.",
         "Thank you. Would you prefer a replacement kettle or a refund to your card?"),
        ("A refund please, I already bought another one in a shop nearby.",
         "Understood. I have started the refund for order 1042."),
    ]
    out: list[BaseMessage] = []
    for i, (user, agent) in enumerate(turns, 1):
        out += [HumanMessage(user, id=f"user-{i}"), AIMessage(agent, id=f"agent-{i}")]
    return [*out, HumanMessage(QUESTION, id="user-4")]


def summary(bundle: dict[str, Any]) -> dict[str, Any]:
    """The parts of the bundle worth reading first."""
    env = bundle["context_envelope"]
    out: dict[str, Any] = {"context_id": env["context_id"],
                           "agent": env.get("metadata", {}).get("gen_ai.agent.name"),
                           "lifecycle": env.get("lifecycle")}
    for sel in bundle.get("context_selections", []):
        out["retrieval"] = {
            "policy": sel.get("selection_policy"),
            "selected": sel.get("selected_item_refs", []),
            "omitted": [(o["item_id"], o["reason"], o.get("detail"))
                        for o in sel.get("omitted_item_refs", [])]}
    out["budgets"] = [
        {"max_tokens": b.get("max_tokens"), "actual_tokens": b.get("actual_tokens"),
         "overflow": b.get("overflow"), "strategy": b.get("overflow_strategy"),
         "truncated": [(r.get("item_id"), r.get("tokens_before"), r.get("tokens_after"))
                       for r in b.get("truncation_records", [])]}
        for b in bundle.get("context_budgets", [])]
    for comp in bundle.get("context_compactions", []):
        out["compaction"] = {k: comp.get(k) for k in ("method", "trigger", "source_item_refs",
                                                      "coverage", "loss_notes")}
    out["rebuild"] = bundle["rebuild"]["status"]
    return out


def main(full: bool = False) -> list[dict[str, Any]]:
    bundles: list[dict[str, Any]] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()  # the in-process equivalent of `opentelemetry-instrument`
    try:
        result = build_agent().invoke({"messages": history()},
                                      {"configurable": {"thread_id": "order-1042"}})
        print("agent:", result["messages"][-1].content)
    finally:
        uninstrument()
        provider.shutdown()
    for bundle in bundles:
        print(json.dumps(bundle if full else summary(bundle), indent=2))
    return bundles


if __name__ == "__main__":
    main(full="--full" in sys.argv[1:])
