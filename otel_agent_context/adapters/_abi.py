"""Context Runtime ABI (seed 003): a session folder as Agent Context records.

Orchestration: :func:`read_session` reads the folder (:mod:`._abi_reader`), checks the ABI's
rules (:mod:`._abi_rules`) and maps the current pack build to a bundle
(:mod:`._abi_mapping`); the ``emit_*`` functions send it as telemetry. The folder is only
ever read; malformed files give warnings (:attr:`SessionSnapshot.warnings`), never exceptions.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path

from opentelemetry.trace import SpanKind

from .. import _semconv as S
from .._api import AgentContext
from .._attributes import to_ns
from .._enums import Scope
from .._records import Bundle, ContextEnvelope, ns_to_rfc3339
from .._replay import emit_bundle
from ..exceptions import ConfigError
from ._abi_mapping import _Build, _bundle, _envelope_refs, _names
from ._abi_reader import MESSAGES, PACK, FileState, _History, _Reader, _sha256
from ._abi_rules import (
    RULES,
    RuleBreach,
    _check_history,
    _gc_policy,
    check_history,
    log_breach,
    referenced_history_gone,
)

__all__ = [
    "FileState",
    "check_history",
    "RULES",
    "RuleBreach",
    "SessionSnapshot",
    "emit_rule_breaches",
    "emit_session",
    "emit_snapshot",
    "read_session",
    "session_bundle",
]


@dataclasses.dataclass(slots=True)
class SessionSnapshot:
    """One reading of a session folder."""

    path: Path
    agent: str | None
    session: str
    bundle: Bundle | None  # None when there is no usable context/pack.json
    breaches: list[RuleBreach]
    warnings: list[str]
    history: dict[str, FileState]  # messages.jsonl / events.jsonl as seen now
    pack_key: tuple[int, str] | None  # (mtime_ns, sha256) of context/pack.json


#: The lines of messages.jsonl parsed at the last look at each folder (bounded), so that a
#: watcher parses only what was appended since.
_HISTORIES: collections.OrderedDict[str, tuple[FileState | None, tuple[list[int], list[int], int]]]\
    = collections.OrderedDict()
_HISTORIES_MAX = 64


def _resume(reader: _Reader, previous: Mapping[str, FileState], states: Mapping[str, FileState],
            breaches: list[RuleBreach]) -> tuple[list[int], list[int], int] | None:
    """What was parsed before, when messages.jsonl only grew since (no breach of append-only
    and the state parsed then is the one the caller saw last)."""
    cached = _HISTORIES.get(reader._real_root)
    before = previous.get(MESSAGES)
    if cached is None or before is None or cached[0] != before or MESSAGES not in states:
        return None
    if any(b.path == MESSAGES for b in breaches):
        return None
    return cached[1]


def read_session(path: str | os.PathLike[str], *,
                 previous: Mapping[str, FileState] | None = None) -> SessionSnapshot:
    """Read a session folder once: its current pack as a bundle, and the ABI rule breaches.

    ``previous``: the history files as seen before (:attr:`SessionSnapshot.history` of an
    earlier reading); with it, ``messages.jsonl`` / ``events.jsonl`` that shrank, were
    rewritten or were deleted are breaches too. Raises :class:`ConfigError` only when
    ``path`` is not a directory.
    """
    root = Path(path)
    if not root.is_dir():
        raise ConfigError("session_dir", f"{root} is not a directory")
    reader = _Reader(root)
    policy = _gc_policy(reader)
    states, breaches = _check_history(reader, previous or {}, policy)
    history = _History(reader, _resume(reader, previous or {}, states, breaches))
    _HISTORIES[reader._real_root] = (states.get(MESSAGES), history.resumable())
    _HISTORIES.move_to_end(reader._real_root)
    while len(_HISTORIES) > _HISTORIES_MAX:
        _HISTORIES.popitem(last=False)
    build = _Build(reader, history)

    pack_bytes = reader.read(PACK)
    pack_st = reader.stat(PACK)
    pack = reader.json_object(PACK, pack_bytes) if pack_bytes is not None else None
    pack_key = (pack_st.st_mtime_ns, _sha256(pack_bytes)) \
        if pack_bytes is not None and pack_st is not None else None
    agent, session = _names(root, pack)
    bundle = None
    if pack is not None and pack_key is not None:
        bundle = _bundle(build, pack, pack_key, agent, session)
    elif pack_bytes is None:
        reader.warn(PACK, "absent: no pack built yet, nothing to emit")

    breaches.extend(referenced_history_gone(policy, states, previous or {}, build.refers))
    breaches.extend(build.breaches)
    for breach in breaches:
        log_breach(root, breach)
    return SessionSnapshot(root, agent, session, bundle, breaches, reader.warnings, states,
                           pack_key)


def session_bundle(path: str | os.PathLike[str]) -> Bundle | None:
    """The current pack build of a session folder as a bundle (None when there is no usable
    ``context/pack.json``). Warnings for malformed files are logged."""
    return read_session(path).bundle


# ---------------------------------------------------------------------------------------
# emitting


def emit_snapshot(snapshot: SessionSnapshot, agent_context: AgentContext) -> str | None:
    """Emit a snapshot's bundle with its rule breaches as ``context.runtime.rule_breach``
    events on the envelope span. Returns the context id (None without a bundle)."""
    if snapshot.bundle is None:
        return None
    return _emit(snapshot.bundle, agent_context, snapshot.breaches)


def emit_rule_breaches(path: str | os.PathLike[str], agent: str | None, session: str,
                       breaches: list[RuleBreach], agent_context: AgentContext, *,
                       at_ns: int | None = None) -> str:
    """Emit breaches found between pack builds on a ``session`` envelope of their own."""
    ns = at_ns if at_ns is not None else time.time_ns()
    at = ns_to_rfc3339(ns)
    actors, runtime, meta = _envelope_refs(agent, session)
    bundle = Bundle(context_envelope=ContextEnvelope(
        context_id=f"abi:{agent or '-'}/{session}/check-{ns}", scope=Scope.SESSION, created_at=at,
        completed_at=at, actor_refs=actors, runtime_refs=runtime, metadata=meta))
    _emit(bundle, agent_context, breaches)
    return bundle.context_envelope.context_id


def _emit(bundle: Bundle, agent_context: AgentContext, breaches: list[RuleBreach]) -> str:
    env = bundle.context_envelope
    start = to_ns(env.created_at)
    span = agent_context._tracer.start_span(S.SPAN_ENVELOPE, kind=SpanKind.INTERNAL,
                                            start_time=start)
    try:
        for breach in breaches:
            span.add_event(S.EVENT_RUNTIME_RULE_BREACH, breach.attributes(), timestamp=start)
        emit_bundle(bundle, agent_context, span=span)
    finally:
        span.end(end_time=to_ns(env.completed_at))
    return env.context_id


def emit_session(path: str | os.PathLike[str], agent_context: AgentContext) -> SessionSnapshot:
    """Read a session folder and emit its current pack build (with its rule breaches).
    Returns the snapshot; its bundle's ``context_envelope.context_id`` names the envelope."""
    snapshot = read_session(path)
    emit_snapshot(snapshot, agent_context)
    return snapshot
