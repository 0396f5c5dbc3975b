"""A LlamaIndex app as its docs write one, offline: a small in-memory ``VectorStoreIndex``
over a deterministic local embedding model, a query engine with a ``SimilarityPostprocessor``
and a context chat engine with a token-limited ``ChatMemoryBuffer``, answering through an
OpenAI-compatible chat model on the local stub. The embedding model and the chat model are the
example's (``examples/llama_index_app.py``: LlamaIndex's custom-LLM pattern over the installed
``openai`` client, since ``llama-index-llms-openai`` pins ``openai<3``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.schema import TextNode

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from llama_index_app import HashEmbedding, OpenAICompatibleLLM  # noqa: E402

NODES = {
    "kb-refunds": "Refunds are issued within 14 days of the return reaching our warehouse.",
    "kb-returns": "Returns need the receipt and the original packaging, within 30 days.",
    "kb-shipping": "Standard shipping takes three to five business days; the receipt comes "
                   "by email.",
    "kb-hours": "Support answers from 9:00 to 18:00 on weekdays, Lisbon time.",
}
QUESTION = "How long until refunds are issued for a return with its receipt?"
CUTOFF = 0.3
TOKEN_LIMIT = 30


def build_index(base_url: str) -> VectorStoreIndex:
    Settings.embed_model = HashEmbedding()
    Settings.llm = OpenAICompatibleLLM(api_base=base_url)
    nodes = [TextNode(id_=node_id, text=text, metadata={"file_path": f"kb/{node_id}.md"})
             for node_id, text in NODES.items()]
    return VectorStoreIndex(nodes)


def ask(base_url: str) -> tuple[str, list[tuple[str, float]]]:
    """A query engine: top 3 by similarity, then the cutoff."""
    index = build_index(base_url)
    engine = index.as_query_engine(
        similarity_top_k=3,
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=CUTOFF)])
    response = engine.query(QUESTION)
    return str(response), [(n.node.node_id, n.score or 0.0) for n in response.source_nodes]


def chat(base_url: str) -> list[str]:
    """A context chat engine over a memory too small for the whole conversation."""
    index = build_index(base_url)
    memory = ChatMemoryBuffer.from_defaults(token_limit=TOKEN_LIMIT,
                                            tokenizer_fn=lambda text: text.split())
    engine = index.as_chat_engine(chat_mode="context", memory=memory, similarity_top_k=2,
                                  system_prompt="You answer questions about our shop.")
    assert isinstance(engine, ContextChatEngine)
    return [str(engine.chat(q)) for q in (
        "When does support answer the phone?",
        "And how long do refunds take?",
        "Do returns need the original packaging?",
    )]


QUESTIONS = ("When does support answer the phone?", "And how long do refunds take?",
             "Do returns need the original packaging?")
MEMORY_LIMIT = 30  # Memory holds its queue to 70% of this: 21 words


class Notes(BaseMemoryBlock[str]):
    """A long-term memory block of the app's own: keeps the words of the messages the memory
    flushes; under pressure it gives up its oldest words first (priority 1: cut first)."""

    name: str = "notes"
    priority: int = 1
    words: list[str] = []

    async def _aget(self, messages: list[ChatMessage] | None = None, **kwargs: Any) -> str:
        return " ".join(self.words)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            self.words.extend((message.content or "").split())

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        return " ".join(content.split()[tokens_to_truncate:]) or None


def memory_engine(base_url: str, notes: bool) -> ContextChatEngine:
    """A context chat engine over LlamaIndex's ``Memory`` (its default memory), small enough to
    flush the first exchange, with or without a long-term memory block."""
    index = build_index(base_url)
    memory = Memory.from_defaults(token_limit=MEMORY_LIMIT, token_flush_size=10,
                                  tokenizer_fn=lambda text: text.split(),
                                  memory_blocks=[Notes()] if notes else None)
    engine = index.as_chat_engine(chat_mode="context", memory=memory, similarity_top_k=2,
                                  system_prompt="You answer questions about our shop.")
    assert isinstance(engine, ContextChatEngine)
    return engine


def memory_chat(base_url: str, notes: bool) -> list[str]:
    engine = memory_engine(base_url, notes)
    return [str(engine.chat(q)) for q in QUESTIONS]


if __name__ == "__main__":
    import os

    url = os.environ["STUB_URL"] + "/v1"
    print("ask:", ask(url)[0])
    print("chat:", " | ".join(chat(url)))
    print("memory:", " | ".join(memory_chat(url, notes=True)))
