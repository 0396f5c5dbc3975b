"""An offline LlamaIndex app (a query engine with a similarity cutoff, a context chat engine
with a token-limited memory), instrumented with one call, printing what each query and chat
turn put into its context.

    python examples/llama_index_app.py          # needs: pip install 'otel-agent-context[examples]'

Written as LlamaIndex's docs write an app: ``Settings``, documents in a ``VectorStoreIndex``,
``as_query_engine(node_postprocessors=[SimilarityPostprocessor(...)])`` and
``as_chat_engine(chat_mode="context", memory=ChatMemoryBuffer.from_defaults(...))``. Offline:
the embedding model is a tiny local one (words hashed into a vector), and the chat model is
LlamaIndex's custom-LLM pattern speaking the OpenAI chat API through the ``openai`` client to
the bundled stub on loopback (``llama-index-llms-openai`` pins ``openai<3``; with it installed,
``OpenAI(model=..., api_base=...)`` is the usual choice and is recorded the same way).

``instrument()`` turns on every otel-agent-context instrumentor whose library is installed
(here LlamaIndex's and the OpenAI client's); ``BundleSpanProcessor`` rebuilds the envelopes
in process. Each query and chat turn is an envelope: the retrieved nodes with their scores,
the ones the cutoff dropped, the memory's cut, and which nodes the prompt carried.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable
from typing import Any

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.postprocessor import SimilarityPostprocessor
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context.instrumentation import instrument, uninstrument
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.rebuild import BundleSpanProcessor

#: Words that say nothing about a topic: no dimension of their own.
STOP = frozenset({"a", "an", "the", "of", "to", "and", "or", "do", "does", "how", "when", "is",
                  "are", "our", "we", "you", "your", "after", "within", "on", "in", "for",
                  "from", "its", "with"})


class HashEmbedding(BaseEmbedding):
    """Words hashed into 1024 dimensions, unit length: deterministic, local, tiny."""

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * 1024
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            if word not in STOP:
                vec[zlib.crc32(word.encode()) % 1024] += 1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        return [x / norm for x in vec]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


class OpenAICompatibleLLM(CustomLLM):
    """A chat model behind an OpenAI-compatible chat completions endpoint."""

    model: str = "gpt-4o-mini"
    api_base: str = ""
    api_key: str = "sk-offline"
    _client: OpenAI | None = PrivateAttr(default=None)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=True, context_window=128_000)

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        if self._client is None:
            self._client = OpenAI(base_url=self.api_base, api_key=self.api_key, max_retries=0)
        client = self._client
        body = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        reply = client.chat.completions.create(model=self.model, messages=body)
        text = reply.choices[0].message.content or ""
        return ChatResponse(message=ChatMessage(role="assistant", content=text))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        reply = self.chat([ChatMessage(role="user", content=prompt)])
        return CompletionResponse(text=reply.message.content or "")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        text = self.complete(prompt).text
        yield CompletionResponse(text=text, delta=text)


DOCS = [
    Document(text="Refunds are issued within 14 days of the return reaching our warehouse.",
             doc_id="refunds", metadata={"file_path": "kb/refunds.md"}),
    Document(text="Returns need the receipt and the original packaging, within 30 days.",
             doc_id="returns", metadata={"file_path": "kb/returns.md"}),
    Document(text="Support answers from 9:00 to 18:00 on weekdays, Lisbon time.",
             doc_id="hours", metadata={"file_path": "kb/hours.md"}),
]


def run_app(api_base: str) -> None:
    Settings.embed_model = HashEmbedding()
    Settings.llm = OpenAICompatibleLLM(api_base=api_base)
    index = VectorStoreIndex.from_documents(DOCS)

    query_engine = index.as_query_engine(
        similarity_top_k=3, node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.3)])
    print("query:", query_engine.query("How long until refunds are issued for a return?"))

    memory = ChatMemoryBuffer.from_defaults(token_limit=30)
    chat_engine = index.as_chat_engine(chat_mode="context", memory=memory,
                                       system_prompt="You answer questions about our shop.")
    for question in ("When does support answer?", "How long do refunds take?",
                     "Do returns need the original packaging?"):
        print("chat:", chat_engine.chat(question))


def summary(bundle: dict) -> dict:
    env = bundle["context_envelope"]
    selections = bundle.get("context_selections", [])
    return {
        "context_id": env["context_id"],
        "scope": env["scope"],
        "selected": [s.get("selected_item_refs", []) for s in selections],
        "omitted": [(o["item_id"], o["reason"], round(o.get("score", 0), 3))
                    for s in selections for o in s.get("omitted_item_refs", [])],
        "memory_cut": [(t["item_id"], t["tokens_before"])
                       for b in bundle.get("context_budgets", [])
                       for t in b.get("truncation_records", [])],
        "prompt_sources": [b["source_item_refs"] for a in bundle.get("context_assemblies", [])
                           for b in a["ordered_blocks"] if "source_item_refs" in b],
        "rebuild": bundle["rebuild"]["status"],
    }


def run_offline(app: Callable[[str], Any], summarize: Callable[[dict], dict]) -> None:
    """Every instrumentor on, ``app`` run against the bundled stub (its OpenAI base URL), then
    ``summarize`` of each envelope rebuilt in process printed (also for
    ``llama_index_agents_app.py``)."""
    provider = TracerProvider()
    bundles: list[dict] = []
    provider.add_span_processor(BundleSpanProcessor(bundles.append))
    trace.set_tracer_provider(provider)
    instrument()
    try:
        with StubServer() as stub:
            app(stub.openai_base_url)
    finally:
        uninstrument()
        provider.shutdown()
    for bundle in bundles:
        print(json.dumps(summarize(bundle), indent=2))


def main() -> None:
    run_offline(run_app, summary)


if __name__ == "__main__":
    main()
