"""The callback handler LangChain calls for every run: envelopes and retrievals.

Registered once, globally, through LangChain's own configure hook, so every callback
manager LangChain configures carries it (and hands it down to child runs). It keeps a map
from run id to the run tree's root:

* a top-level chain (an agent or a LangGraph graph invocation, a chain, a runnable) opens an
  envelope (scope ``turn``, ``gen_ai.agent.name`` = the run name, e.g. ``create_agent(name=)``
  or the graph's configured name, none for a default one such as ``LangGraph`` or
  ``RunnableSequence``, ``gen_ai.conversation.id``
  = LangGraph's ``thread_id``); a top-level retriever or model call opens an implicit one;
  an envelope that is already current (the application's own, or an outer run's) is joined
  instead. The envelope is current while the run lasts, so other instrumentations (the
  OpenAI and Anthropic ones) and the patches (``trim_messages``, summarization, filters)
  record into it; nested runs join their root's envelope.
* a retriever run collects a :class:`~._retrieval.Retrieval`; the outermost one records it;
* a node inside a run whose state update removes messages (``RemoveMessage``, the LangChain
  1.x way of trimming in a ``@before_model`` middleware) is a budget with one truncation
  record per removed message (:mod:`._removals`).

The handler runs inline (``run_inline``): LangChain then calls it in the caller's context,
sync and async alike, which is what makes the envelope current for the run.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from ..._api import AgentContext, Envelope, current_envelope
from ..._enums import Scope
from ..._envelope import _RUN_ENVELOPE
from ..._failsafe import is_strict
from .._common import KNOWN_MESSAGES, TEXT_PARTS, TOOL_CALL, TOOL_RESULT
from ._items import (
    ROLES,
    call_id,
    call_ids,
    message_id,
    message_role,
    message_text,
    message_type,
    named_by_reader,
    text_parts,
)
from ._official import deferring, official_run_context
from ._removals import input_messages, record_removals
from ._retrieval import Retrieval
from ._state import ACTIVE_RETRIEVAL, STATE, guarded

__all__ = ["ContextCallbackHandler"]

#: Exceptions that steer a graph rather than fail it (LangGraph interrupts, a stream the
#: caller stopped reading): the envelope ends normally.
_CONTROL_FLOW = frozenset({"GraphBubbleUp", "GeneratorExit"})


def _is_control_flow(error: BaseException) -> bool:
    return any(cls.__name__ in _CONTROL_FLOW for cls in type(error).__mro__)


class _Root:
    __slots__ = ("env", "owned", "run_id", "token")

    def __init__(self, run_id: UUID, env: Envelope | None, owned: bool) -> None:
        self.run_id = run_id
        self.env = env
        self.owned = owned
        #: the run variable's token (None for an envelope the run joined)
        self.token: contextvars.Token[Any] | None = None


#: Run names LangChain and LangGraph give a runnable nobody named: a class, not an agent.
_DEFAULT_NAMES = frozenset({
    "LangGraph", "CompiledStateGraph", "CompiledGraph", "Pregel", "RunnableSequence",
    "RunnableParallel", "RunnableLambda", "RunnableAssign", "RunnablePassthrough",
    "RunnableBinding", "RunnableWithFallbacks", "RunnableBranch"})


def _agent_name(name: str | None) -> str | None:
    """The run's name as the agent's, unless it is only the class's default (then the
    envelope has no agent name rather than a misleading one)."""
    return None if name in _DEFAULT_NAMES else name


class _Batch:
    """The model runs one ``generate``/``agenerate`` started together (``batch_size`` of
    them; a lone run is a batch of one): LangChain starts every run before calling the model
    for any, then makes a call a run and ends them all after. ``outer``: the value
    ``KNOWN_MESSAGES`` held before the first, put back when the last ends. ``index``: each
    text of the runs' messages, and which runs hold it (made at the first call)."""

    __slots__ = ("index", "outer", "pending", "runs", "size")

    def __init__(self, outer: Any, size: int) -> None:
        self.outer = outer
        self.size = size
        self.pending: set[UUID] = set()
        self.runs: list[_RunIds] = []
        self.index: dict[str, list[int]] | None = None

    def texts_index(self) -> dict[str, list[int]]:
        index = self.index
        if index is None:
            index = self.index = {}
            for i, run in enumerate(self.runs):
                texts = {key[1] for key in run if type(key[1]) is str}
                run.texts = len(texts)
                for text in texts:
                    index.setdefault(text, []).append(i)
        return index


class _RunIds(dict):  # type: ignore[type-arg]
    """A model run's message ids (``_message_ids``) as ``KNOWN_MESSAGES`` holds them, in its
    :class:`_Batch`. The value current while a batch's calls run is its last run's: each
    call takes its own run's (``for_call``, when the call reads its request). When the last
    run ends the batch's ids are emptied in place, as a run may end in another task
    (``ainvoke``, ``agenerate``): in whatever order and task they end, no run's ids stay for
    a later call."""

    __slots__ = ("batch", "claimed", "texts")

    def __init__(self, ids: dict[Any, Any], batch: _Batch) -> None:
        super().__init__(ids)
        self.batch = batch
        #: whether a call took its ids
        self.claimed = False
        #: how many texts its messages have (``_Batch.texts_index``)
        self.texts = 0
        batch.runs.append(self)

    def for_call(self, request: Any) -> Any:
        """The ids for the model call reading ``request`` (the client's keyword arguments)
        now. A run's own, or, for a run that has ended (its end put the outer value back in
        another task's context: ``ainvoke``), the value it was started under. In a batch
        of several (whose calls may come in any order: ``agenerate`` behind a cache that
        waits, a run answered from the cache or failing before its call): the run whose
        texts the request holds most of, then the one with fewest texts the request lacks
        (a list that is the start of another), then one no call took yet, then the first
        started; none when the request holds none of any run's."""
        batch = self.batch
        if not batch.pending:  # ended
            outer = batch.outer
            return outer.for_call(request) if isinstance(outer, _RunIds) else outer
        runs = batch.runs
        if len(runs) == 1:
            return self
        index = batch.texts_index()
        n = len(runs)
        held = [0] * n
        everyone = 0  # texts every run holds: the same to each (a shared system prompt)
        for text in _texts(request):
            holders = index.get(text)
            if holders is not None:
                if len(holders) == n:
                    everyone += 1
                    continue
                for i in holders:
                    held[i] += 1
        best = -1
        rank: tuple[int, int, bool, int] = (0, 0, False, 0)
        for i, run in enumerate(runs):
            if held[i] or everyone:
                mine = (held[i] + everyone, held[i] + everyone - run.texts, not run.claimed,
                        -i)
                if best < 0 or mine > rank:
                    best, rank = i, mine
        if best < 0 or not held[best] and rank[1] < 0:
            # none, or only texts every run holds, and not all of the best run's: a call
            # of the model's own (a check of the system prompt) tells no run from another
            return {}
        chosen = runs[best]
        chosen.claimed = True
        return chosen


def _texts(value: Any, found: set[str] | None = None, depth: int = 0) -> set[str]:
    """The strings in a client request's arguments (dicts and lists, a few levels deep)."""
    if found is None:
        found = set()
    if depth > 8 or len(found) > 10_000:
        return found
    if type(value) is str:
        found.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            _texts(item, found, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _texts(item, found, depth + 1)
    return found


def _message_ids(messages: Any, every: bool = False) -> dict[tuple[str, str], list[Any]]:
    """The ids LangChain's trim and summary records name a chat model run's input messages
    by (``message_id``), for the client call's blocks to take, in order: by (role, text), a
    tool's result by (``TOOL_RESULT``, its call id), a message's calls (``TOOL_CALL``) and
    text parts (``TEXT_PARTS``) too. Nothing when the blocks name every message so by
    themselves (a template's messages: the readers' plain path stays open), unless
    ``every`` (a batch's run: its texts tell its call from the others'). One message
    list: LangChain batches are lists of lists."""
    if not isinstance(messages, list) or len(messages) != 1 or \
            not every and all(map(named_by_reader, messages[0])):
        return {}
    out: dict[tuple[str, str], list[Any]] = {}
    for message in messages[0]:
        # each field read once: this runs for every message of every model call
        kind, native = message_type(message), getattr(message, "id", None)
        if not (isinstance(native, str) and native):
            native = None
        if kind == "tool" and (called := call_id(message)):
            # every result of the call, so each takes its own in its place
            out.setdefault((TOOL_RESULT, called), []).append(native or message_id(message))
            continue
        role = message_role(message) if kind == "chat" else ROLES.get(kind)
        if role is None:
            continue
        content = getattr(message, "content", None)
        text = content if type(content) is str else message_text(message)
        named = native or message_id(message)
        out.setdefault((role, text), []).append(named)  # all, so each takes its own in place
        if isinstance(content, list):
            parts = [t for t in text_parts(message) if t.strip()]  # (a client drops blanks)
            if len(parts) > 1:
                # several text parts, which a client may send as blocks of their own
                # (Anthropic): the run of blocks of these texts is this message, its first
                # block named by it
                out.setdefault((TEXT_PARTS + role, parts[0]), []).append((tuple(parts), named))
        if kind == "ai":
            # every call, in order, so a call id used again in another message takes its
            # own; a message of calls alone is its first call's block where a client sends
            # each call as one (a Responses input item, an Anthropic tool use)
            for n, called in enumerate(call_ids(message)):
                out.setdefault((TOOL_CALL, called), []).append("" if n or text else named)
    return out


def _name(serialized: Any, kwargs: Mapping[str, Any]) -> str | None:
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if isinstance(serialized, Mapping):
        ident = serialized.get("id")
        if isinstance(ident, list) and ident and isinstance(ident[-1], str):
            return ident[-1]
        name = serialized.get("name")
        if isinstance(name, str):
            return name
    return None


def _model(metadata: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str | None:
    model = (metadata or {}).get("ls_model_name")
    if isinstance(model, str) and model:
        return model
    params = kwargs.get("invocation_params")
    if isinstance(params, Mapping):
        for key in ("model", "model_name", "model_id"):
            value = params.get(key)
            if isinstance(value, str) and value:
                return value
    return None


class ContextCallbackHandler(BaseCallbackHandler):
    """Opens and closes envelopes for run trees and records retrievals."""

    run_inline = True

    def __init__(self) -> None:
        super().__init__()
        self._roots: dict[UUID, _Root] = {}
        self._retrievals: dict[UUID, Retrieval] = {}
        #: node run -> (the state's messages it started with, its start time)
        self._inputs: dict[UUID, tuple[list[Any], int]] = {}
        #: model run -> its message ids as the context holds them (see _RunIds)
        self._known: dict[UUID, _RunIds] = {}
        #: model run -> the token of its run's envelope made current for it (see _pin)
        self._pinned: dict[UUID, contextvars.Token[Any]] = {}

    @property
    def raise_error(self) -> bool:  # type: ignore[override]
        # internal errors surface under the test kit's strict mode, never in production
        return is_strict()

    # -- run trees ---------------------------------------------------------------------

    def _start(self, run_id: UUID, parent_run_id: UUID | None, *, opens: bool,
               name: str | None = None, metadata: Mapping[str, Any] | None = None,
               model: str | None = None) -> None:
        root = self._roots.get(parent_run_id) if parent_run_id is not None else None
        if root is None:
            if not opens:
                return
            root = self._open(run_id, parent_run_id, name, metadata, model)
            if root is None:
                return
        self._roots[run_id] = root

    def _open(self, run_id: UUID, parent_run_id: UUID | None, name: str | None,
              metadata: Mapping[str, Any] | None, model: str | None) -> _Root | None:
        ctx = STATE.ctx
        if ctx is None:
            return None
        env = current_envelope()
        if env is not None and not (parent_run_id is None and self._runs(env)):
            return _Root(run_id, env, owned=False)
        # (a run with no parent never joins another run's envelope: a batch starts all its
        # runs in the caller's context before running any)
        root = _Root(run_id, None, owned=True)
        # composed with the official LangChain instrumentor: a child of its span for this
        # run, so the run is one trace and its model calls one span each (see _official)
        pending = deferring()
        if pending is not None:  # opened once every handler saw the start (see _official)
            start = time.time_ns()
            pending.append((
                lambda: self._open_envelope(ctx, root, name, metadata, model, start),
                lambda: self._drop(run_id)))
        else:
            self._open_envelope(ctx, root, name, metadata, model, None,
                                official_run_context(run_id))
        return root

    def _runs(self, env: Envelope) -> bool:
        """Whether ``env`` is the envelope of a run this handler opened (not one the
        application or another framework's instrumentor made current)."""
        return any(root.owned and root.env is env for root in self._roots.values())

    def _drop(self, run_id: UUID) -> None:
        """A run whose start raised (LangChain reports no end for it): nothing was opened."""
        self._roots.pop(run_id, None)
        self._forget_messages(run_id)

    @staticmethod
    def _open_envelope(ctx: AgentContext, root: _Root, name: str | None,
                       metadata: Mapping[str, Any] | None, model: str | None,
                       start: int | None, official: Context | None = None) -> None:
        if start is not None:  # put off: the official span for the run exists now
            official = official_run_context(root.run_id)
            if official is not None:  # never before the span it is a child of
                begun = getattr(trace.get_current_span(official), "start_time", None)
                if isinstance(begun, int) and begun > start:
                    start = begun
        thread = (metadata or {}).get("thread_id")
        token = otel_context.attach(official) if official is not None else None
        try:
            env = ctx.envelope(scope=Scope.TURN, agent_name=_agent_name(name),
                               conversation_id=str(thread) if thread is not None else None,
                               model=model, start_time=start)
        finally:
            if token is not None:
                otel_context.detach(token)
        root.env = env
        # Not an attached OpenTelemetry context: async runs end their callbacks in another
        # task (LangChain shields them), where it could not be detached, and a sync stream
        # runs the caller's code between chunks. Nested model calls find the envelope through
        # this variable and parent their spans to it; nothing else is changed.
        root.token = _RUN_ENVELOPE.set(env)

    def _end(self, run_id: UUID, error: BaseException | None) -> None:
        root = self._roots.pop(run_id, None)
        if root is None or root.run_id != run_id or not root.owned or root.env is None:
            return
        failed = error is not None and not _is_control_flow(error)
        if root.token is not None:
            with contextlib.suppress(ValueError):  # ended in another context: nothing to undo
                _RUN_ENVELOPE.reset(root.token)
        if failed:
            assert error is not None
            root.env.fail(error)
        else:
            root.env.stop()

    # -- chains, tools, models -----------------------------------------------------------

    @guarded
    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: Any = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, opens=True, name=_name(serialized, kwargs),
                    metadata=metadata)
        if parent_run_id is not None and parent_run_id in self._roots:
            messages = input_messages(inputs)
            if messages is not None:  # a node of a run: it may remove some of them
                self._inputs[run_id] = (messages, time.time_ns())

    @guarded
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._inputs.pop(run_id, None)
        try:
            if started is not None:
                root = self._roots.get(run_id)
                record_removals(root.env if root is not None else None, started[0], outputs,
                                started[1])
        finally:
            self._end(run_id, None)

    @guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._inputs.pop(run_id, None)
        self._end(run_id, error)

    @guarded
    def on_tool_start(self, serialized: Any, input_str: Any, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, opens=False)

    @guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, None)

    @guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    @guarded
    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: Any = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, opens=True, metadata=metadata,
                    model=_model(metadata, kwargs))
        self._pin(run_id)
        size = kwargs.get("batch_size")
        size = size if type(size) is int and size > 1 else 1
        known = _message_ids(messages, every=size > 1)
        current = KNOWN_MESSAGES.get()
        while isinstance(current, _RunIds) and not current.batch.pending:
            # runs that ended in another task (emptied): what they were started under
            current = current.batch.outer
        # the client call below names its blocks by these (none: a run started inside
        # another, not ended, must not give it the outer one's)
        if known or size > 1 or isinstance(current, _RunIds):
            if isinstance(current, _RunIds) and \
                    len(current.batch.runs) < current.batch.size:
                batch = current.batch  # the next run of the batch being started
            else:
                batch = _Batch(current, size)
            ids = _RunIds(known, batch)
            batch.pending.add(run_id)
            KNOWN_MESSAGES.set(ids)
            self._known[run_id] = ids

    def _pin(self, run_id: UUID) -> None:
        """For a model run, make its run's envelope the one the client call below finds,
        when another run's is there: a batch starts every run before running any, so the
        context each run then executes in holds the envelope of the last one started."""
        root = self._roots.get(run_id)
        if root is not None and root.owned and root.env is not None and \
                root.run_id != run_id and _RUN_ENVELOPE.get() is not root.env:
            self._pinned[run_id] = _RUN_ENVELOPE.set(root.env)

    def _forget_messages(self, run_id: UUID, failed: bool = False) -> None:
        ids = self._known.pop(run_id, None)
        if ids is not None:
            batch = ids.batch
            batch.pending.discard(run_id)
            if failed:
                # ``generate`` stops at a failed run: the batch's runs after it never end
                # (``agenerate`` has made every call by then); none of its ids stays
                for other in batch.pending:
                    self._known.pop(other, None)
                batch.pending.clear()
            if not batch.pending:
                # the last of the runs started together ends: their ids emptied where they
                # are (a run may end in another task, whose context is a copy), and here
                # what was there before them again
                for started in batch.runs:
                    started.clear()
                current = KNOWN_MESSAGES.get()
                if any(current is started for started in batch.runs):
                    KNOWN_MESSAGES.set(batch.outer)
        pinned = self._pinned.pop(run_id, None)
        if pinned is not None:
            with contextlib.suppress(ValueError):  # ended in another context
                _RUN_ENVELOPE.reset(pinned)

    @guarded
    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: Any = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, opens=True, metadata=metadata,
                    model=_model(metadata, kwargs))
        self._pin(run_id)

    @guarded
    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._forget_messages(run_id)
        self._end(run_id, None)

    @guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._forget_messages(run_id, failed=True)
        self._end(run_id, error)

    # -- retrievers ----------------------------------------------------------------------

    @guarded
    def on_retriever_start(self, serialized: Any, query: Any, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: Any = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not STATE.active:
            return
        self._start(run_id, parent_run_id, opens=True, metadata=metadata)
        provider = (metadata or {}).get("ls_vector_store_provider")
        retrieval = Retrieval(
            _name(serialized, kwargs) or "retriever", query if isinstance(query, str) else None,
            provider if isinstance(provider, str) else None,
            parent=self._retrievals.get(parent_run_id) if parent_run_id is not None else None)
        retrieval.token = ACTIVE_RETRIEVAL.set(retrieval)
        self._retrievals[run_id] = retrieval

    def _finish_retrieval(self, run_id: UUID, documents: Any,
                          error: BaseException | None) -> None:
        retrieval = self._retrievals.pop(run_id, None)
        if retrieval is None:
            return
        retrieval.done = True
        try:
            ACTIVE_RETRIEVAL.reset(retrieval.token)
        except ValueError:  # ended in another context than it started in
            if ACTIVE_RETRIEVAL.get() is retrieval:
                ACTIVE_RETRIEVAL.set(retrieval.parent)
        docs = list(documents) if isinstance(documents, (list, tuple)) else []
        if retrieval.parent is not None:
            retrieval.merge_into(retrieval.parent, docs)
            return
        root = self._roots.get(run_id)
        env = root.env if root is not None else current_envelope()
        if env is not None:
            retrieval.emit(env, docs, error)

    @guarded
    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        try:
            self._finish_retrieval(run_id, documents, None)
        finally:
            self._end(run_id, None)

    @guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID,
                           **kwargs: Any) -> None:
        try:
            self._finish_retrieval(run_id, (), error)
        finally:
            self._end(run_id, error)
