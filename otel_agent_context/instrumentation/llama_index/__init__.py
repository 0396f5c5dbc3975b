"""Context instrumentation for LlamaIndex (``llama-index-core`` 0.14).

    from otel_agent_context.instrumentation.llama_index import LlamaIndexContextInstrumentor

    LlamaIndexContextInstrumentor().instrument()

or ``opentelemetry-instrument python app.py`` (entry point ``agent_context_llama_index``).

What it records (``docs/frameworks.md`` has the table):

* a query (``query`` / ``aquery`` of a query engine) or a chat turn (``chat``, ``achat``,
  ``stream_chat``, ``astream_chat`` of a chat engine) is one envelope, scope ``turn``; the
  model calls made inside it (through the ``openai`` client, recorded by the OpenAI context
  instrumentor) join it; a retriever called on its own gets an implicit one; so is an
  agent's run (``FunctionAgent.run``, ``ReActAgent.run``, ``CodeActAgent.run``,
  ``AgentWorkflow.run``: the workflow run's span), with the agent's name; an agent run
  started by a running agent's tool (an agent used as a tool) is an envelope of its own,
  scope ``tool_invocation``, a child of the running agent's (ours or the application's);
* an ``AgentWorkflow`` handoff is an envelope of scope ``handoff`` (``_handoff``): the agent
  handed to, linked to the sender's envelope, the reason and the messages that went across as
  its selection; the next agent's model calls are recorded in it; the same when the run
  joined the application's envelope (the handoff's is then its child);
* the retrieval is a ``context.surface`` of every node the retriever returned and a
  ``context.selection`` of the nodes handed to the response synthesizer (rank, score, the
  retriever's score as a signal when a reranker changed it); what each node postprocessor
  dropped (``SimilarityPostprocessor``'s cutoff, a reranker's ``top_n``, a keyword filter) is
  an omitted item with the score it had and the postprocessor named in the detail;
* a ``ChatMemoryBuffer`` that cuts the history to its ``token_limit`` is a
  ``context.budget`` with one truncation record per message left out; LlamaIndex's ``Memory``
  flushing its oldest messages for its token limit is a budget with one truncation per
  message (and a ``context.compaction`` when a memory block takes them), its memory blocks
  cut by priority in ``get`` truncation records (``_memory_queue``); the prompt's blocks
  name a memory's messages as the truncation records do;
* the synthesizer's prompt is the model call's assembly (the OpenAI instrumentor's); its
  blocks name the selected nodes they carry (``context.block.source_item_refs``).

Mechanism: a span handler on LlamaIndex's root instrumentation dispatcher (the hook its
instrumentation module offers to observability tools: it sees every ``dispatcher.span``
method with its bound arguments and result), added when ``llama_index_instrumentation`` is
imported, so instrumenting imports nothing; and wrappers on ``ChatMemoryBuffer.get`` and
``Memory``'s ``get`` / ``aget`` / ``_manage_queue`` (the dispatcher sees no memory). Node
text is compared with the prompt in process and exported only under content capture.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import wrapt

from .._lazy_patch import LazyInstrumentor, LazyPatches
from . import _memory_queue as queue
from ._memory import wrap_count, wrap_get, wrap_get_all
from ._state import STATE

__all__ = ["LlamaIndexContextInstrumentor"]

_log = logging.getLogger("otel_agent_context")

_instruments = ("llama-index-core >= 0.14, < 0.15",)

_DISPATCH_MODULE = "llama_index_instrumentation"
_MEMORY_MODULE = "llama_index.core.memory.chat_memory_buffer"
_MEMORY_TYPES = "llama_index.core.memory.types"
_QUEUE_MODULE = "llama_index.core.memory.memory"
_SQL_STORE = "llama_index.core.storage.chat_store.sql"


def _buffer(module: Any) -> Any:
    return getattr(module, "ChatMemoryBuffer", None)


def _store_memory(module: Any) -> Any:
    return getattr(module, "BaseChatStoreMemory", None)


def _queue_memory(module: Any) -> Any:
    return getattr(module, "Memory", None)


def _sql_store(module: Any) -> Any:
    return getattr(module, "SQLAlchemyChatStore", None)


_PATCHES = LazyPatches({
    _MEMORY_MODULE: [(_buffer, "get", wrap_get),
                     (_buffer, "_token_count_for_messages", wrap_count)],
    _MEMORY_TYPES: [(_store_memory, "get_all", wrap_get_all)],
    _QUEUE_MODULE: [(_queue_memory, "get", queue.wrap_get),
                    (_queue_memory, "aget", queue.wrap_aget),
                    (_queue_memory, "_manage_queue", queue.wrap_manage_queue),
                    (_queue_memory, "_truncate_memory_blocks", queue.wrap_truncate_blocks)],
    _SQL_STORE: [(_sql_store, "get_messages", queue.wrap_read),
                 (_sql_store, "archive_oldest_messages", queue.wrap_archive)],
}, STATE.on)


class _Handler:
    """Our span handler on the root dispatcher, added once its module is imported."""

    def __init__(self) -> None:
        self.handler: Any = None
        self.hooked = False

    def add(self) -> None:
        module = sys.modules.get(_DISPATCH_MODULE)
        if module is not None:
            self._on_import(module)
        elif not self.hooked:
            self.hooked = True
            wrapt.register_post_import_hook(self._on_import, _DISPATCH_MODULE)

    def _on_import(self, module: Any) -> None:
        if not STATE.on() or self.handler is not None:
            return
        try:
            from ._handler import make_handler

            handler = make_handler()
            module.root_dispatcher.add_span_handler(handler)
            self.handler = handler
        except Exception:
            _log.warning("otel_agent_context: cannot add the LlamaIndex span handler",
                         exc_info=True)

    def remove(self) -> None:
        handler, self.handler = self.handler, None
        module = sys.modules.get(_DISPATCH_MODULE)
        if handler is None or module is None:
            return
        handlers = module.root_dispatcher.span_handlers
        handlers[:] = [h for h in handlers if h is not handler]  # by identity: pydantic ==


class LlamaIndexContextInstrumentor(LazyInstrumentor):
    """Records LlamaIndex queries and chat turns as envelopes (see the module doc).

    ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and
    ``capture_content``, or a ready ``agent_context`` instead.
    """

    _instruments = _instruments
    _switch = STATE
    _patches = _PATCHES
    _dispatch = _Handler()

    def _instrument(self, **kwargs: Any) -> None:
        super()._instrument(**kwargs)
        self._dispatch.add()

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        self._dispatch.remove()
