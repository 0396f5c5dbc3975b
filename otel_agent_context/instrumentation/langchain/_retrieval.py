"""Retrievals: the candidates a retriever found, what its compressors and filters dropped
and why, and the surface + selection that records it.

A retrieval collects while it runs: child retrievers hand it their documents
(candidates), and document compressors and transformers (patched, see ``FILTERS``) report
each document they dropped with the omission reason their class stands for. When the
outermost retriever ends, the retrieval becomes one ``context.surface`` (every candidate)
and one ``context.selection`` (the documents returned, ranked by position, with their scores;
the rest omitted with reasons). A compressor called on its own, outside any retriever, makes
a retrieval of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..._api import Envelope
from ..._enums import OmissionReason, Scope
from .._omissions import describe_component
from ._auxiliary import JUDGES, auxiliary
from ._items import DocIndex, doc_item, doc_scores
from ._state import ACTIVE_RETRIEVAL, active_retrieval, guarded, recording, stage_envelope

__all__ = ["FILTERS", "PIPELINES", "Retrieval", "describe_filter", "wrap_filter"]

_LOW = OmissionReason.LOW_RELEVANCE
_DUP = OmissionReason.DUPLICATE_COVERAGE

#: Filters that drop near-duplicates: what they drop is covered by a document they kept.
_DUPLICATE_FILTERS = frozenset({"EmbeddingsRedundantFilter", "EmbeddingsClusteringFilter"})
#: Why each known filter drops a document (the omission detail names the class and its
#: parameters, then this).
_WHY = {
    "EmbeddingsFilter": "not similar enough to the query",
    "LLMChainFilter": "judged not relevant by the model",
    "LLMChainExtractor": "no relevant extract",
    "LLMListwiseRerank": "ranked below top_n",
    "CrossEncoderReranker": "ranked below top_n",
    "CohereRerank": "ranked below top_n",
    "FlashrankRerank": "ranked below top_n",
    "EmbeddingsRedundantFilter": "near-duplicate of a kept document",
    "EmbeddingsClusteringFilter": "not the representative of its cluster",
}
_PARAMS = ("similarity_threshold", "k", "top_n", "num_clusters", "num_closest")

_COMPRESSORS = "langchain_classic.retrievers.document_compressors"
_COMPRESSORS_0_3 = "langchain.retrievers.document_compressors"
_COMMUNITY = "langchain_community.document_transformers.embeddings_redundant_filter"

#: (module, class, sync method, async method) of the document filters recorded as omissions.
FILTERS: tuple[tuple[str, str, str, str], ...] = tuple(
    (f"{pkg}.{mod}", cls, "compress_documents", "acompress_documents")
    for pkg in (_COMPRESSORS, _COMPRESSORS_0_3)
    for mod, cls in (("embeddings_filter", "EmbeddingsFilter"),
                     ("chain_filter", "LLMChainFilter"),
                     ("chain_extract", "LLMChainExtractor"),
                     ("listwise_rerank", "LLMListwiseRerank"),
                     ("cross_encoder_rerank", "CrossEncoderReranker"))
) + (
    (_COMMUNITY, "EmbeddingsRedundantFilter", "transform_documents", "atransform_documents"),
    (_COMMUNITY, "EmbeddingsClusteringFilter", "transform_documents", "atransform_documents"),
)
#: Compressor pipelines: their steps report on their own; the pipeline only groups them
#: into one retrieval when it runs outside a retriever.
PIPELINES: tuple[tuple[str, str, str, str], ...] = tuple(
    (f"{pkg}.base", "DocumentCompressorPipeline", "compress_documents", "acompress_documents")
    for pkg in (_COMPRESSORS, _COMPRESSORS_0_3)
)


def describe_filter(component: Any) -> tuple[OmissionReason, str]:
    """The omission reason and detail for documents ``component`` dropped."""
    return describe_component(component, _PARAMS, _WHY, _DUPLICATE_FILTERS)


class Retrieval:
    """Candidates and drops of one retrieval, collected while it runs."""

    def __init__(self, name: str, query: str | None, source_kind: str | None,
                 parent: Retrieval | None = None) -> None:
        self.name = name
        self.query = query
        self.source_kind = source_kind
        self.parent = parent
        self.start_ns = time.time_ns()
        self.index = DocIndex()
        self.candidates: dict[str, None] = {}
        self.drops: dict[str, tuple[OmissionReason, str]] = {}
        self.scores: dict[str, dict[str, float]] = {}
        self.token: Any = None
        #: ended: a context that could not be reset (async callbacks) may still hold it
        self.done = False

    def add_candidates(self, docs: Sequence[Any]) -> None:
        for doc in docs:
            iid = self.index.add(doc)
            self.candidates.setdefault(iid, None)

    def filtered(self, component: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 input_scores: Sequence[float] | None = None) -> None:
        """``component`` turned ``inputs`` into ``outputs``: the rest were dropped.
        ``input_scores``: the score it gave each input (kept or not), when it was seen."""
        reason, detail = describe_filter(component)
        self.add_candidates(inputs)
        if input_scores is not None and len(input_scores) == len(inputs):
            for doc, score in zip(inputs, input_scores, strict=True):
                iid = self.index.find(doc)
                if iid is not None:
                    self.scores.setdefault(iid, {}).setdefault(_SIMILARITY, score)
        kept = set()
        for doc in outputs:
            iid = self.index.find(doc)
            if iid is not None:
                kept.add(iid)
                scores = doc_scores(doc)
                if scores:
                    self.scores.setdefault(iid, {}).update(scores)
        for doc in inputs:
            iid = self.index.find(doc)
            if iid is not None and iid not in kept:
                self.drops.setdefault(iid, (reason, detail))

    def merge_into(self, parent: Retrieval, outputs: Sequence[Any]) -> None:
        """A child retriever ended: its candidates and drops become the parent's."""
        self.add_candidates(outputs)
        parent.source_kind = parent.source_kind or self.source_kind
        for iid in self.candidates:
            piid = parent.index.add(self.index.docs[iid])
            parent.candidates.setdefault(piid, None)
            if iid in self.drops:
                parent.drops.setdefault(piid, self.drops[iid])
            if iid in self.scores:
                parent.scores.setdefault(piid, {}).update(self.scores[iid])
        for doc in outputs:
            parent.index.add(doc)

    def emit(self, env: Envelope, outputs: Sequence[Any],
             error: BaseException | None = None) -> None:
        """Record the surface (all candidates) and the selection (returned vs dropped)."""
        if not recording(env):
            return
        outputs = list(outputs)
        self.add_candidates(outputs)
        kind = self.source_kind
        surface = env.surface(start_time=self.start_ns)
        items = {}  # one item per candidate, for its surface and selection events
        for iid in self.candidates:
            item = items[iid] = doc_item(self.index.docs[iid], iid, kind)
            surface.add(item)
        surface.stop()
        selection = env.selection(surface_id=surface.surface_id, intent="retrieval",
                                  query=self.query, policy=self.name,
                                  start_time=self.start_ns)
        if error is not None:
            selection.fail(error)
            return
        chosen: dict[str, None] = {}
        for doc in outputs:
            found = self.index.find(doc)
            if found is None or found in chosen:
                continue
            chosen[found] = None
            scores = doc_scores(doc) or self.scores.get(found, {})
            origin = self.index.docs[found]
            # the candidate's item, unless another document of that id was returned
            item = items[found] if doc is origin and found in items else doc_item(
                doc, found, kind, origin)
            selection.selected(item, rank=len(chosen),
                               score=next(iter(scores.values()), None),
                               signals=scores if len(scores) > 1 else None)
        for iid in self.candidates:
            if iid in chosen:
                continue
            doc = self.index.docs[iid]
            reason, detail = self.drops.get(iid, (_LOW, f"not returned by {self.name}"))
            scores = self.scores.get(iid) or doc_scores(doc)
            selection.omitted(items[iid], reason=reason, detail=detail,
                              score=next(iter(scores.values()), None))
        selection.stop()


# -- the filter patches ---------------------------------------------------------------------


def _documents(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Sequence[Any] | None:
    docs = args[0] if args else kwargs.get("documents")
    # never consume an iterator the host still needs
    return docs if isinstance(docs, Sequence) else None


def _query(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    query = args[1] if len(args) > 1 else kwargs.get("query")
    return query if isinstance(query, str) else None


#: The score ``EmbeddingsFilter`` gives a document (it keeps it in the kept ones' state).
_SIMILARITY = "query_similarity_score"
#: What the current filter call's similarity function returned (see ``_scores_seen``).
_SEEN: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "otel_agent_context.langchain.similarity", default=None)


class _Watching:
    """A filter's ``similarity_fn``, unchanged, also handing its result to ``_SEEN``."""

    def __init__(self, fn: Any) -> None:
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__(*args, **kwargs)
        seen = _SEEN.get()
        if seen is not None:
            seen.append(result)
        return result


@contextlib.contextmanager
def _scores_seen(instance: Any) -> Iterator[list[Any]]:
    """The similarities an ``EmbeddingsFilter`` computes during the call, the documents it
    drops included (it keeps only the kept ones' in their state): its ``similarity_fn`` is
    watched for the call, then put back. No embedding is computed twice."""
    seen: list[Any] = []
    fn = getattr(instance, "similarity_fn", None)
    if fn is None or isinstance(fn, _Watching) or type(instance).__name__ != "EmbeddingsFilter":
        yield seen
        return
    try:
        object.__setattr__(instance, "similarity_fn", _Watching(fn))
    except Exception:  # noqa: BLE001 - a model that refuses it: no scores, nothing else
        yield seen
        return
    token = _SEEN.set(seen)
    try:
        yield seen
    finally:
        _SEEN.reset(token)
        if isinstance(getattr(instance, "similarity_fn", None), _Watching):
            with contextlib.suppress(Exception):
                object.__setattr__(instance, "similarity_fn", fn)


def _input_scores(seen: list[Any], count: int) -> list[float] | None:
    """The one row of similarities (query against each input) the filter computed."""
    if len(seen) != 1:
        return None
    try:
        row = [float(x) for x in seen[0][0]]
    except (TypeError, ValueError, IndexError):
        return None
    return row if len(row) == count else None


@guarded
def _record(retrieval: Retrieval, instance: Any, docs: Sequence[Any], out: Any,
            pipeline: bool, seen: list[Any] | None = None) -> None:
    if not pipeline and isinstance(out, Sequence):
        retrieval.filtered(instance, docs, out, _input_scores(seen or [], len(docs)))


@guarded
def _start_standalone(instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Retrieval:
    retrieval = Retrieval(type(instance).__name__, _query(args, kwargs), None)
    retrieval.token = ACTIVE_RETRIEVAL.set(retrieval)
    return retrieval


def _end_standalone(retrieval: Retrieval | None) -> None:
    if retrieval is not None:
        retrieval.done = True
    if retrieval is not None and retrieval.token is not None:
        # reset from another context: leave that context alone
        with contextlib.suppress(ValueError):
            ACTIVE_RETRIEVAL.reset(retrieval.token)


@guarded
def _emit_standalone(retrieval: Retrieval | None, env: Envelope | None, out: Any) -> None:
    if retrieval is not None and env is not None and isinstance(out, Sequence):
        retrieval.emit(env, out)


def wrap_filter(pipeline: bool, is_async: bool) -> Any:
    """A wrapt wrapper for a filter's (or pipeline's) sync or async method."""
    from ._state import STATE

    def sync(wrapped: Any, instance: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        docs = _documents(args, kwargs)
        if not STATE.active or docs is None:
            return wrapped(*args, **kwargs)
        judge = type(instance).__name__ in JUDGES  # its model calls: its own envelope
        active = active_retrieval()
        if active is not None:
            with auxiliary(instance, Scope.REVIEW) if judge else contextlib.nullcontext(), \
                    _scores_seen(instance) as seen:
                out = wrapped(*args, **kwargs)
            _record(active, instance, docs, out, pipeline, seen)
            return out
        with stage_envelope() as env:
            retrieval = _start_standalone(instance, args, kwargs)
            try:
                with auxiliary(instance, Scope.REVIEW) if judge else contextlib.nullcontext(), \
                        _scores_seen(instance) as seen:
                    out = wrapped(*args, **kwargs)
            finally:
                _end_standalone(retrieval)
            if retrieval is not None:
                _record(retrieval, instance, docs, out, pipeline, seen)
                _emit_standalone(retrieval, env, out)
            return out

    async def asynchronous(wrapped: Any, instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        docs = _documents(args, kwargs)
        if not STATE.active or docs is None:
            return await wrapped(*args, **kwargs)
        judge = type(instance).__name__ in JUDGES
        active = active_retrieval()
        if active is not None:
            with auxiliary(instance, Scope.REVIEW) if judge else contextlib.nullcontext(), \
                    _scores_seen(instance) as seen:
                out = await wrapped(*args, **kwargs)
            _record(active, instance, docs, out, pipeline, seen)
            return out
        with stage_envelope() as env:
            retrieval = _start_standalone(instance, args, kwargs)
            try:
                with auxiliary(instance, Scope.REVIEW) if judge else contextlib.nullcontext(), \
                        _scores_seen(instance) as seen:
                    out = await wrapped(*args, **kwargs)
            finally:
                _end_standalone(retrieval)
            if retrieval is not None:
                _record(retrieval, instance, docs, out, pipeline, seen)
                _emit_standalone(retrieval, env, out)
            return out

    return asynchronous if is_async else sync
