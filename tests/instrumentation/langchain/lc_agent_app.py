"""An unmodified LangChain/LangGraph agent, with no OpenTelemetry code of its own.

The tests run it under ``opentelemetry-instrument python lc_agent_app.py`` (and in-process
after ``otel_agent_context.instrumentation.instrument()``). Offline: deterministic fake
embeddings, an in-memory vector store and fake chat models.
"""

from __future__ import annotations

import warnings
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
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
from langgraph.graph import START, MessagesState, StateGraph

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langchain_community.document_transformers import EmbeddingsRedundantFilter

QUERY = "Refunds are issued within 14 days."


def words(messages: list[BaseMessage]) -> int:
    return sum(len(str(m.content).split()) for m in messages)


def rag_agent() -> Any:
    embeddings = DeterministicFakeEmbedding(size=32)
    store = InMemoryVectorStore(embeddings)
    store.add_documents([
        Document(QUERY, metadata={"source": "kb/refunds.md"}, id="refunds"),
        Document(QUERY, metadata={"source": "kb/faq.md"}, id="faq-refunds"),
        Document("Shipping takes 3 business days.", metadata={"source": "kb/shipping.md"},
                 id="shipping"),
        Document("Our office is in Lisbon.", metadata={"source": "kb/about.md"}, id="about"),
    ])
    retriever = ContextualCompressionRetriever(
        base_compressor=DocumentCompressorPipeline(transformers=[
            EmbeddingsRedundantFilter(embeddings=embeddings),
            EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.9)]),
        base_retriever=store.as_retriever(search_kwargs={"k": 4}))
    model = FakeListChatModel(responses=["Refunds take up to 14 days."])

    def retrieve(state: MessagesState) -> dict[str, Any]:
        docs = retriever.invoke(state["messages"][-1].content)
        return {"messages": [SystemMessage("\n".join(d.page_content for d in docs),
                                           id="knowledge")]}

    def respond(state: MessagesState) -> dict[str, Any]:
        window = trim_messages(state["messages"], max_tokens=12, token_counter=words,
                               strategy="last")
        return {"messages": [model.invoke(window)]}

    graph = StateGraph(MessagesState)
    graph.add_node("retrieve", retrieve)
    graph.add_node("respond", respond)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "respond")
    return graph.compile(name="rag_agent")


def summarizing_agent() -> Any:
    middleware = SummarizationMiddleware(
        model=FakeListChatModel(responses=["A broken kettle; the customer wants a refund."]),
        trigger=("messages", 4), keep=("messages", 2), token_counter=words)
    return create_agent(model=FakeListChatModel(responses=["About five days."]), tools=[],
                        middleware=[middleware], name="summarizing_agent")


def run() -> list[str]:
    history = [HumanMessage("My kettle arrived broken.", id="h1"),
               AIMessage("Sorry! Refund or replacement?", id="a1"),
               HumanMessage(QUERY, id="h2")]
    answer = rag_agent().invoke({"messages": history},
                                {"configurable": {"thread_id": "thread-1"}})
    summarized = summarizing_agent().invoke(
        {"messages": [*history, AIMessage("Yes, I can arrange that.", id="a2"),
                      HumanMessage("How long will it take?", id="h3")]})
    return [answer["messages"][-1].content, summarized["messages"][-1].content]


if __name__ == "__main__":
    for line in run():
        print(line)
