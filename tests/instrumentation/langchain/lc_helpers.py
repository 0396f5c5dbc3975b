"""Shared test data and span/bundle helpers for the LangChain instrumentor tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import BaseMessage
from langchain_core.vectorstores import InMemoryVectorStore

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

TIME_KEYS = frozenset({"created_at", "completed_at", "occurred_at", "requested_at",
                       "resolved_at"})
QUERY = "Refunds are issued within 14 days."


def strip_times(obj: Any) -> Any:
    """A bundle without its timestamps (everything else is deterministic in tests)."""
    if isinstance(obj, dict):
        return {k: strip_times(v) for k, v in obj.items() if k not in TIME_KEYS}
    if isinstance(obj, list):
        return [strip_times(v) for v in obj]
    return obj


def embeddings() -> DeterministicFakeEmbedding:
    return DeterministicFakeEmbedding(size=32)


def knowledge_base() -> InMemoryVectorStore:
    """Four documents: one matches QUERY exactly, one is its duplicate from another file."""
    store = InMemoryVectorStore(embeddings())
    store.add_documents([
        Document(QUERY, metadata={"source": "kb/refunds.md", "page": 1, "title": "Refunds"},
                 id="refunds"),
        Document(QUERY, metadata={"source": "kb/faq.md"}, id="faq-refunds"),
        Document("Shipping takes 3 business days.", metadata={"source": "kb/shipping.md"},
                 id="shipping"),
        Document("Our office is in Lisbon.", metadata={"source": "kb/about.md"}, id="about"),
    ])
    return store


def count_words(messages: list[BaseMessage]) -> int:
    """A token counter in words: easy to check by eye."""
    return sum(len(str(m.content).split()) for m in messages)


def spans(tel: CapturedTelemetry) -> list[Any]:
    """Finished spans ordered by span id (= start order with sequential ids)."""
    return sorted(tel.spans(), key=lambda s: s.context.span_id)


def tree(tel: CapturedTelemetry) -> list[tuple[str, str | None]]:
    """(span name, parent span name) in start order."""
    all_spans = spans(tel)
    names = {s.context.span_id: s.name for s in all_spans}
    return [(s.name, names.get(s.parent.span_id) if s.parent else None) for s in all_spans]


def one(tel: CapturedTelemetry, name: str) -> Any:
    found = [s for s in tel.spans() if s.name == name]
    assert len(found) == 1, [s.name for s in tel.spans()]
    return found[0]


def events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes)) for e in span.events]


def assert_no_content(tel: CapturedTelemetry) -> None:
    """No content attribute on any span or event (capture off)."""
    for span in tel.spans():
        assert not S.CONTENT_ATTRIBUTES & set(span.attributes), span.name
        for event in span.events:
            assert not S.CONTENT_ATTRIBUTES & set(event.attributes), (span.name, event.name)


def with_client(client: Any) -> Iterator[CapturedTelemetry]:
    """Our LangChain instrumentor and ``client``, a client library's (OpenAI's, Anthropic's),
    on one telemetry: the model calls a chain makes recorded by both."""
    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider,
          "agent_context": tel.agent_context}
    ours = [LangChainContextInstrumentor(), client]
    for inst in ours:
        inst.instrument(**kw)
    try:
        yield tel
    finally:
        for inst in ours:
            inst.uninstrument()
        tel.shutdown()
