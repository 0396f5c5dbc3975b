"""Context instrumentation for LangChain and LangGraph.

    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    LangChainContextInstrumentor().instrument()

or ``opentelemetry-instrument python agent.py`` (entry point ``agent_context_langchain``).

What it records (``docs/instrumentation-langchain.md`` has the full table):

* an agent or graph run (any top-level chain) is an envelope (scope ``turn``); a retriever
  or model call outside any run gets an implicit one; nested runs join their root's;
* a retriever is a ``context.surface`` of its candidates and a ``context.selection`` of
  what it returned (rank, score), with what its document compressors and filters dropped
  as omitted items (``low_relevance``, or ``duplicate_coverage`` for redundancy filters);
* ``trim_messages`` is a ``context.budget`` with ``max_tokens``, overflow and one
  truncation record per dropped or cut message;
* ``SummarizationMiddleware`` (LangChain 1.x agents) and the classic summary memories are a
  ``context.compaction`` (``rolling_summary``) whose sources are the summarized messages,
  with the coverage of what the summarizer actually saw;
* the model calls of a summarizer or an LLM filter, extractor or reranker run in an envelope
  of their own (scope ``task`` or ``review``, ``context.parent_id`` the agent's), never in the
  agent's assemblies;
* a node's ``RemoveMessage`` edits (LangChain 1.x trimming middleware) are a budget with a
  truncation record per removed message;
* composed with the official GenAI LangChain instrumentor, a run's envelope is a child of
  its run span (one trace) and each model call is its chat span, carrying our records.

Mechanism: LangChain's own callback system for runs and retrievers (a handler registered
with ``register_configure_hook``, which LangChain adds to every callback manager it
configures), and wrappers where callbacks see nothing (``trim_messages``' two strategy
functions, the document compressors, the summarization hooks). Wrappers are applied when
their module is imported, so instrumenting costs no import. Content (document text,
queries, summaries) is recorded only under the GenAI content-capture switch.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from ..._api import AgentContext
from ..._enums import Scope
from ._auxiliary import SUMMARIZERS, wrap_auxiliary
from ._official import MANAGER_MODULE, START_METHODS, wrap_start
from ._retrieval import FILTERS, PIPELINES, wrap_filter
from ._state import STATE
from ._summary import MEMORIES, MIDDLEWARE, wrap_memory, wrap_middleware
from ._trim import TRIM_MODULE, wrap_trim

__all__ = ["LangChainContextInstrumentor"]

_log = logging.getLogger("otel_agent_context")

_instruments = ("langchain-core >= 0.3, < 2",)

_HOOK_MODULE = "langchain_core.tracers.context"
_MARK = "_self_otel_agent_context"

#: module -> [(class name or None for the module itself, attribute, wrapper)]
_Target = tuple[str | None, str, Callable[..., Any]]


def _targets() -> dict[str, list[_Target]]:
    out: dict[str, list[_Target]] = {}
    # a top-level run's envelope opens once every handler saw the start (composed with the
    # official instrumentor: under its span), and not at all when a handler refused it
    out[MANAGER_MODULE] = [(cls, method, wrap_start(asynchronous))
                           for cls, asynchronous in (("CallbackManager", False),
                                                     ("AsyncCallbackManager", True))
                           for method in START_METHODS]
    out.setdefault(TRIM_MODULE, []).extend([
        (None, "_first_max_tokens", wrap_trim("first")),
        (None, "_last_max_tokens", wrap_trim("last")),
    ])
    for group, make in ((FILTERS, lambda a: wrap_filter(False, a)),
                        (PIPELINES, lambda a: wrap_filter(True, a)),
                        (MIDDLEWARE, wrap_middleware), (MEMORIES, wrap_memory),
                        (SUMMARIZERS, lambda a: wrap_auxiliary(Scope.TASK, a))):
        for module, cls, sync, asyn in group:
            out.setdefault(module, []).extend([(cls, sync, make(False)), (cls, asyn, make(True))])
    return out


class _Patches:
    """Wrappers applied (when their module is imported) and removed on uninstrument."""

    def __init__(self) -> None:
        self.targets = _targets()
        self.applied: list[tuple[Any, str, Any]] = []
        self.hooked: set[str] = set()

    def apply_all(self) -> None:
        for module_name in self.targets:
            module = sys.modules.get(module_name)
            if module is not None:
                self.apply(module)
            elif module_name not in self.hooked:
                self.hooked.add(module_name)
                wrapt.register_post_import_hook(self._on_import, module_name)

    def _on_import(self, module: Any) -> None:
        if STATE.active:
            self.apply(module)

    def apply(self, module: Any) -> None:
        for cls_name, attr, wrapper in self.targets.get(module.__name__, ()):
            try:
                owner = module if cls_name is None else getattr(module, cls_name, None)
                if owner is None:
                    continue
                # only what the class itself defines: wrapping an inherited method would
                # also catch the sync method its base's async default runs in a thread
                original = vars(owner).get(attr)
                # ours already there (outermost, or under another's wrapper: the mark is
                # looked up through the wrappers above it)
                if original is None or getattr(original, _MARK, False):
                    continue
                proxy = wrapt.FunctionWrapper(original, wrapper)
                setattr(proxy, _MARK, True)
                setattr(owner, attr, proxy)
                self.applied.append((owner, attr, proxy))
            except Exception:
                _log.warning("otel_agent_context: cannot instrument %s.%s.%s",
                             module.__name__, cls_name, attr, exc_info=True)

    def remove_all(self) -> None:
        """Take our wrappers off where they are outermost. One under another instrumentor's
        (the official LangChain one wraps the async managers' start methods too) stays, and
        does nothing while we are off: taking it out from under the other would take the
        other's off too (an attribute lookup on a wrapper reaches the one it wraps, so the
        mark is compared on the proxy itself)."""
        kept = []
        for owner, attr, proxy in reversed(self.applied):
            if vars(owner).get(attr) is proxy:
                setattr(owner, attr, proxy.__wrapped__)
            else:
                kept.append((owner, attr, proxy))
        self.applied = kept


class LangChainContextInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records the context lifecycle of LangChain and LangGraph runs (see the module doc).

    ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and
    ``capture_content`` (default: the GenAI content-capture switch), or a ready
    ``agent_context`` (an :class:`~otel_agent_context.AgentContext`) instead.
    """

    _handler: Any = None
    _hook: tuple[Any, ...] | None = None
    _patches: _Patches | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        ctx = kwargs.get("agent_context")
        if not isinstance(ctx, AgentContext):
            ctx = AgentContext(tracer_provider=kwargs.get("tracer_provider"),
                               meter_provider=kwargs.get("meter_provider"),
                               capture_content=kwargs.get("capture_content"))
        STATE.ctx = ctx
        if self._patches is None:
            self._patches = _Patches()
        self._patches.apply_all()
        if _HOOK_MODULE in sys.modules:
            self._register_handler(sys.modules[_HOOK_MODULE])
        else:
            wrapt.register_post_import_hook(self._register_handler, _HOOK_MODULE)

    def _register_handler(self, module: Any) -> None:
        if not STATE.active or self._hook is not None:
            return
        try:
            from ._handler import ContextCallbackHandler

            handler = ContextCallbackHandler()
            var: contextvars.ContextVar[Any] = contextvars.ContextVar(
                "otel_agent_context.langchain.handler", default=handler)
            module.register_configure_hook(var, True)
            self._handler = handler
            self._hook = module._configure_hooks[-1]
        except Exception:
            _log.warning("otel_agent_context: cannot register the LangChain callback handler",
                         exc_info=True)

    def _uninstrument(self, **kwargs: Any) -> None:
        STATE.ctx = None
        if self._patches is not None:
            self._patches.remove_all()
        if self._hook is not None:
            hooks = getattr(sys.modules.get(_HOOK_MODULE), "_configure_hooks", None)
            if isinstance(hooks, list) and self._hook in hooks:
                hooks.remove(self._hook)
            self._hook = None
            self._handler = None
