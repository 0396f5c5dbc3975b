"""One query or chat turn: its envelope, and the retrieval collected while it runs.

The retriever's nodes are the candidates; each node postprocessor reports what it kept;
when the synthesizer starts (or the turn ends without one) the retrieval becomes a
``context.surface`` (every candidate) and a ``context.selection`` (the nodes handed on,
ranked, the rest omitted with the postprocessor that dropped them). It is recorded before
the synthesizer's model call, so that call's blocks can name the nodes they carry.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context

from ..._api import Envelope
from ..._enums import OmissionReason
from ..._envelope import _ENVELOPE_KEY, _RUN_ENVELOPE
from .._common import KNOWN_MESSAGES
from .._omissions import describe_component
from ._handoff import Pending, end_handoffs
from ._items import node_id, node_item, node_of, node_score
from ._state import TURN, failed

__all__ = ["Turn", "describe_postprocessor"]

_LOW = OmissionReason.LOW_RELEVANCE


def _live(env: Any) -> bool:
    return isinstance(env, Envelope) and not env._ended


#: What each known postprocessor's drop means (the detail names the class and parameters).
_WHY = {
    "SimilarityPostprocessor": "score below the similarity cutoff",
    "KeywordNodePostprocessor": "filtered by required or excluded keywords",
    "LLMRerank": "ranked below top_n",
    "SentenceTransformerRerank": "ranked below top_n",
    "CohereRerank": "ranked below top_n",
    "FlagEmbeddingReranker": "ranked below top_n",
    "ColbertRerank": "ranked below top_n",
    "RankGPTRerank": "ranked below top_n",
    "FixedRecencyPostprocessor": "not among the top_k most recent",
    "EmbeddingRecencyPostprocessor": "older near-duplicate of a kept node",
    "TimeWeightedPostprocessor": "ranked below top_k by time-weighted score",
    "SentenceEmbeddingOptimizer": "no sentence above the cutoff",
}
#: Drops that mean "covered by a node kept".
_DUPLICATES = frozenset({"EmbeddingRecencyPostprocessor"})
_PARAMS = ("similarity_cutoff", "top_n", "top_k", "choice_batch_size")


def describe_postprocessor(component: Any) -> tuple[OmissionReason, str]:
    """The omission reason and detail for nodes ``component`` dropped (a keyword filter's
    keywords counted, never named)."""
    return describe_component(component, _PARAMS, _WHY, _DUPLICATES,
                              ("required_keywords", "exclude_keywords"))


#: class -> the attributes of ``_params``' list its instances have: looking a missing one up
#: on a pydantic model raises and catches an AttributeError inside pydantic, each time.
_HAS: dict[tuple[type, tuple[str, ...]], tuple[str, ...]] = {}
_MISSING = object()


def _params(component: Any, attrs: tuple[str, ...]) -> str:
    cls = type(component)
    has = _HAS.get((cls, attrs))
    if has is None:
        has = _HAS[(cls, attrs)] = tuple(
            a for a in attrs if getattr(component, a, _MISSING) is not _MISSING)
    name = cls.__name__
    params = []
    for a in has:
        value = getattr(component, a, None)
        if isinstance(value, int) and not isinstance(value, bool):
            params.append(f"{a}={value}")
    return f"{name}({', '.join(params)})" if params else name


class Turn:
    """The envelope of one query or chat turn and its pending retrieval."""

    def __init__(self, env: Envelope, owned: bool, root_id: str | None) -> None:
        self.env = env
        self.owned = owned  # opened here: ended here
        self.root_id = root_id
        self.tokens: tuple[Any, Any, Any] | None = None
        #: message ids given to the turn's model calls (``_memory.name_messages``): current
        #: in the turn's context from its start, so that the tasks it starts (an agent's
        #: steps) share it
        self.known: dict[tuple[str, str], list[str]] = {}
        self.known_tokens: list[Any] = []
        #: the engine returned a stream: the turn goes on until its writer ends
        self.streaming = False
        self._writer_done: BaseException | None | bool = False  # or the writer's error
        self._lock = threading.Lock()
        self._ended = False
        #: an agent workflow's run: the agent running, the handoff its tool asked for, and
        #: the envelope of the last handoff (its model calls') (``_handoff``)
        self.agent: str | None = None
        self.pending: Pending | None = None
        self.agent_env: Envelope | None = None
        self._reset()

    def _reset(self) -> None:
        self.start_ns: int | None = None
        self.query: str | None = None
        self.steps: list[str] = []
        self.candidates: dict[str, Any] = {}  # node id -> the node as first seen
        self.first_score: dict[str, float] = {}
        self.scores: dict[str, dict[str, float]] = {}  # node id -> {step: score}
        self.drops: dict[str, tuple[OmissionReason, str, float | None]] = {}
        self.open_retrievals: set[str] = set()

    # -- current in the context of the turn's span -----------------------------------------

    def enter(self) -> None:
        self.known_tokens.append(KNOWN_MESSAGES.set(self.known))
        outer = None
        if self.owned and _live(otel_context.get_value(_ENVELOPE_KEY)):
            # an envelope of the application's is current in the OpenTelemetry context,
            # where it wins over the run's: an agent run inside a run that joined it (its
            # span's start and end in one task). Taken out for this run, the span kept.
            outer = otel_context.attach(otel_context.set_value(_ENVELOPE_KEY, None))
        self.tokens = (TURN.set(self), _RUN_ENVELOPE.set(self.env) if self.owned else None,
                       outer)

    def leave(self) -> None:
        while self.known_tokens:
            with contextlib.suppress(ValueError):  # set in another context: leave it
                KNOWN_MESSAGES.reset(self.known_tokens.pop())
        if self.tokens is None:
            return
        turn_token, env_token, outer = self.tokens
        self.tokens = None
        with contextlib.suppress(ValueError):  # reset from another context: leave it
            if env_token is not None:
                _RUN_ENVELOPE.reset(env_token)
            TURN.reset(turn_token)
        if outer is not None:
            otel_context.detach(outer)

    def stream(self) -> None:
        """The engine's span ended with a stream its writer reads into the memory (in a
        thread or task of its own, which may have ended already): the turn ends with it."""
        self.flush(None)
        self.leave()
        with self._lock:
            done = self._writer_done
            self.streaming = done is False
        if done is not False:
            self.finish(done if isinstance(done, BaseException) else None)

    def written(self, error: BaseException | None) -> None:
        """The stream's writer ended."""
        with self._lock:
            streaming = self.streaming
            self._writer_done = error if error is not None else True
        if streaming:
            self.finish(error)

    def finish(self, error: BaseException | None) -> None:
        self.flush(None, error)
        self.leave()
        if self.agent_env is not None or self.pending is not None:
            try:
                end_handoffs(self, error)
            except Exception:
                failed("handoff end")
        with self._lock:
            if not self.owned or self._ended:
                return
            self._ended = True
        try:
            if error is None:
                self.env.stop()
            else:
                self.env.fail(error)
        except Exception:
            failed("turn end")

    # -- the retrieval -----------------------------------------------------------------------

    def _add(self, nodes: Sequence[Any]) -> None:
        for nws in nodes:
            nid = node_id(nws)
            if nid is not None and nid not in self.candidates:
                self.candidates[nid] = nws
                score = node_score(nws)
                if score is not None:
                    self.first_score[nid] = score

    def retrieved(self, retriever: Any, query: str | None, nodes: Any) -> None:
        if not isinstance(nodes, list):
            return
        if self.start_ns is None:
            self.start_ns = time.time_ns()
        self.query = self.query or query
        self.steps.append(_params(retriever, ("similarity_top_k", "top_k")))
        self._add(nodes)

    def filtered(self, component: Any, inputs: Sequence[Any], outputs: Any) -> None:
        """``component`` turned ``inputs`` into ``outputs``: the rest were dropped."""
        if not isinstance(outputs, list) or not self.candidates and not inputs:
            return
        self.steps.append(_params(component, ("top_n", "top_k")))
        self._add(inputs)
        self._add(outputs)  # a postprocessor may add nodes (neighbours)
        why: tuple[OmissionReason, str] | None = None  # described on its first drop
        name = type(component).__name__
        kept = {}
        for nws in outputs:
            nid = node_id(nws)
            if nid is not None:
                kept[nid] = nws
        for nws in inputs:
            nid = node_id(nws)
            if nid is None:
                continue
            if nid not in kept:
                if nid not in self.drops:
                    if why is None:
                        why = describe_postprocessor(component)
                    self.drops[nid] = (why[0], why[1], node_score(nws))
                continue
            before, after = node_score(nws), node_score(kept[nid])
            if after is not None and after != before:
                self.scores.setdefault(nid, {})[name] = after

    def flush(self, chosen: Any, error: BaseException | None = None) -> None:
        """Record the retrieval: ``chosen`` the nodes handed to the synthesizer (None: the
        turn ended without one, every node kept by the last step counts as chosen; with
        ``error``, the turn failed before choosing: the selection fails)."""
        if not self.candidates:
            self._reset()
            return
        try:
            self._emit(chosen, error)
        except Exception:
            failed("retrieval")
        finally:
            self._reset()

    def _emit(self, chosen: Any, error: BaseException | None) -> None:
        env = self.env
        surface = env.surface(start_time=self.start_ns)
        items = {}  # one item per candidate, for its surface and selection events
        for nid, nws in self.candidates.items():
            item = items[nid] = node_item(nws, nid)
            surface.add(item)
        surface.stop()
        selection = env.selection(surface_id=surface.surface_id, intent="retrieval",
                                  query=self.query, policy=" > ".join(self.steps) or None,
                                  start_time=self.start_ns)
        if error is not None:
            selection.fail(error)
            return
        if isinstance(chosen, list):
            picked = chosen
        else:
            picked = [n for i, n in self.candidates.items() if i not in self.drops]
        done: set[str] = set()
        for nws in picked:
            found = node_id(nws)
            if found is None or found in done:
                continue
            done.add(found)
            nid = found
            score = node_score(nws)
            signals: dict[str, float] = {}
            first = self.first_score.get(nid)
            if nid in self.scores and first is not None:
                signals = {"retrieval": first, **self.scores[nid]}
            # the candidate's item, unless a postprocessor handed on another node of that id
            same = nid in items and node_of(nws) is node_of(self.candidates[nid])
            selection.selected(items[nid] if same else node_item(nws, nid), rank=len(done),
                               score=score, signals=signals or None)
        for nid, nws in self.candidates.items():
            if nid in done:
                continue
            reason, detail, score = self.drops.get(
                nid, (_LOW, "not passed to the response synthesizer", node_score(nws)))
            selection.omitted(items[nid], reason=reason, detail=detail, score=score)
        selection.stop()
