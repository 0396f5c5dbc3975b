"""Which retrieved documents reached the prompt, in a LangChain RAG chain written as
LangChain's docs write one (a vector-store retriever, ``format_docs``, a chat prompt
template, ``ChatOpenAI`` on a loopback stub): the block whose text carries a document names
it (``context.block.source_item_refs``); a document the retriever returned but the chain
left out of the prompt is selected but never injected, in the bundle and in the processor's
``/metrics``. Content capture off: no document text leaves the process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from lc_helpers import assert_no_content, embeddings
from lc_openai_stub import ANSWER, OpenAIStub

from otel_agent_context import AgentContext
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

DOCS = {
    "refunds": "Refunds are issued within 14 days of the return reaching our warehouse.",
    "shipping": "Orders ship within three business days from the Lisbon warehouse.",
    "hours": "Support answers from 9:00 to 18:00 on weekdays, Lisbon time.",
}
QUESTION = "How long do refunds take?"


def _store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(embeddings())
    store.add_documents([Document(text, metadata={"source": f"kb/{key}.md"}, id=key)
                         for key, text in DOCS.items()])
    return store


def _chain(base_url: str, seen: list[list[str]], keep: int) -> Any:
    """The LangChain docs' RAG chain; ``format_docs`` keeps the first ``keep`` documents
    (the application's own cut, which the retriever knows nothing about)."""
    retriever = _store().as_retriever(search_kwargs={"k": 3})

    def format_docs(docs: list[Document]) -> str:
        seen.append([str(d.id) for d in docs])
        return "\n\n".join(d.page_content for d in docs[:keep])

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer the question from this context only.\n\n{context}"),
        ("human", "{question}")])
    model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-offline",
                       max_retries=0)
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt | model | StrOutputParser()).with_config(run_name="rag_agent")


def _on(**kw: Any) -> list[Any]:
    ours = [LangChainContextInstrumentor(), OpenAIContextInstrumentor()]
    for inst in ours:
        inst.instrument(**kw)
    return ours


@pytest.fixture(params=[False, True], ids=["no_content", "content"])
def tel(request: pytest.FixtureRequest) -> Iterator[CapturedTelemetry]:
    t = CapturedTelemetry(capture_content=request.param)
    ours = _on(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider,
               agent_context=t.agent_context)
    try:
        yield t
    finally:
        for inst in ours:
            inst.uninstrument()
        t.shutdown()


def _exported(spans: Any) -> str:
    return json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                       for s in spans], default=str)


def test_the_system_block_names_the_documents_it_carries(tel: CapturedTelemetry) -> None:
    seen: list[list[str]] = []
    with OpenAIStub() as stub:
        assert _chain(stub.url, seen, keep=2).invoke(QUESTION) == ANSWER
        (body,) = stub.requests
    (order,) = seen
    assert sorted(order) == sorted(DOCS)
    placed, left_out = order[:2], order[2:]
    system = body["messages"][0]["content"]
    assert all(DOCS[key] in system for key in placed)
    assert DOCS[left_out[0]] not in system

    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "rag_agent"
    (selection,) = bundle["context_selections"]
    assert selection["selected_item_refs"] == order  # the retriever's ranking
    (assembly,) = bundle["context_assemblies"]
    system_block, question_block = assembly["ordered_blocks"]
    assert system_block["context_kind"] == "system_prompt"
    assert system_block["source_item_refs"] == placed  # in the order the envelope saw them
    assert "source_item_refs" not in question_block
    assert selection["not_injected_item_refs"] == left_out
    metric = {(labels["agent"], labels["kind"]): value
              for labels, value in tel.metrics()["context.items.not_injected"]}
    assert metric == {("rag_agent", "retrieval_result"): 1}

    exported = _exported(tel.spans())
    for text in DOCS.values():  # the documents' own content attributes only
        assert (text in exported) is tel.agent_context.capture_content
    if not tel.agent_context.capture_content:
        assert_no_content(tel)
        assert "Answer the question from this context" not in exported


def test_every_document_in_the_prompt_leaves_none_behind(tel: CapturedTelemetry) -> None:
    seen: list[list[str]] = []
    with OpenAIStub() as stub:
        _chain(stub.url, seen, keep=3).invoke(QUESTION)
    (bundle,) = tel.bundles()
    (assembly,) = bundle["context_assemblies"]
    assert assembly["ordered_blocks"][0]["source_item_refs"] == seen[0]
    assert "not_injected_item_refs" not in bundle["context_selections"][0]
    assert "context.items.not_injected" not in tel.metrics()


def test_the_processor_counts_documents_selected_but_never_injected(tmp_path: Path) -> None:
    """Real OTLP/gRPC export to the processor; its ``/metrics`` counts the document the
    chain left out; its bundle carries ids and digests, no document text."""
    import urllib.request

    import orjson
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from prometheus_client.parser import text_string_to_metric_families

    from otel_agent_context.processor import Processor, ProcessorConfig

    config = ProcessorConfig.from_values({
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0",
        "receivers.otlp_http.endpoint": "127.0.0.1:0",
        "metrics.endpoint": "127.0.0.1:0", "output.dir": str(tmp_path / "out")})
    processor = Processor(config).start()
    try:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=processor.addresses["otlp_grpc"], insecure=True),
            schedule_delay_millis=50))
        meters = MeterProvider()  # the agent exports no metrics: the processor derives them
        ctx = AgentContext(tracer_provider=provider, meter_provider=meters,
                           capture_content=False)
        ours = _on(tracer_provider=provider, meter_provider=meters, agent_context=ctx)
        seen: list[list[str]] = []
        try:
            with OpenAIStub() as stub:
                for _ in range(2):  # two turns, one document left out of each prompt
                    _chain(stub.url, seen, keep=2).invoke(QUESTION)
        finally:
            for inst in ours:
                inst.uninstrument()
            provider.shutdown()
            meters.shutdown()
        self_metrics = processor.metrics.self
        deadline_ok = _wait(lambda: self_metrics.get("context_processor_bundles_written_total",
                                                     ("jsonl",)) == 2)
        assert deadline_ok, "the processor wrote no bundles"
        url = f"http://{processor.addresses['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        processor.stop(timeout=10)

    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = [(s.labels, s.value) for s in families["context_items_not_injected"].samples
               if s.name == "context_items_not_injected_total"]
    assert samples == [({"agent": "rag_agent", "kind": "retrieval_result"}, 2.0)]
    selected = [s.value for s in families["context_items_selected"].samples
                if s.name == "context_items_selected_total"]
    assert selected == [6.0]

    lines = [line for path in sorted((tmp_path / "out").glob("bundles-*.jsonl"))
             for line in path.read_bytes().splitlines() if line.strip()]
    bundles = [orjson.loads(line) for line in lines]
    assert len(bundles) == 2
    for bundle, order in zip(sorted(bundles, key=lambda b: b["context_envelope"]["created_at"]),
                             seen, strict=True):
        assert bundle["context_assemblies"][0]["ordered_blocks"][0]["source_item_refs"] == \
            order[:2]
        assert bundle["context_selections"][0]["not_injected_item_refs"] == order[2:]
    raw = b"\n".join(lines).decode()
    assert not any(text in raw for text in DOCS.values())
    assert "Answer the question from this context" not in raw


def _wait(predicate: Any, timeout: float = 15.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
