"""Context Runtime ABI: the seed's rules, and the checks of append-only history and its GC."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import _semconv as S
from ._abi_reader import (
    CHILD_DIR,
    EVENTS,
    GC_POLICY,
    MESSAGES,
    TAIL_BYTES,
    FileState,
    _log,
    _Reader,
    _sha256,
)

RULE_MESSAGES_APPEND_ONLY = "messages_append_only"
RULE_EVENTS_APPEND_ONLY = "events_append_only"
RULE_SUMMARY_NOT_ONLY_COPY = "summary_not_only_copy"
RULE_GC_KEEPS_DURABLE_HISTORY = "gc_keeps_durable_history"
RULE_GC_KEEPS_REFERENCED_CHILD_RESULT = "gc_keeps_referenced_child_result"

#: rule -> (level, the seed's wording)
RULES: Mapping[str, tuple[str, str]] = {
    RULE_MESSAGES_APPEND_ONLY: ("must", "messages.jsonl MUST be append-only logical history."),
    RULE_EVENTS_APPEND_ONLY: ("should", "events.jsonl SHOULD be append-only runtime history."),
    RULE_SUMMARY_NOT_ONLY_COPY: ("must", "A summary is never the only copy of history."),
    RULE_GC_KEEPS_DURABLE_HISTORY: (
        "must", "GC MUST NOT delete messages.jsonl or events.jsonl unless explicit "
                "archive/delete policy allows it."),
    RULE_GC_KEEPS_REFERENCED_CHILD_RESULT: (
        "must", "GC MUST NOT delete a child result while parent context references it."),
}


@dataclasses.dataclass(frozen=True, slots=True)
class RuleBreach:
    """A breach of one of the ABI's rules, found in a session folder."""

    rule: str  # one of RULES
    path: str  # the file concerned, relative to the session folder
    detail: str

    @property
    def level(self) -> str:
        """``must`` or ``should``: the keyword of the seed's rule."""
        return RULES[self.rule][0]

    def attributes(self) -> dict[str, str]:
        """Attributes of the ``context.runtime.rule_breach`` event."""
        return {S.RUNTIME_RULE: self.rule, S.RUNTIME_RULE_LEVEL: self.level,
                S.RUNTIME_RULE_DETAIL: self.detail, S.RUNTIME_PATH: self.path}


# ---------------------------------------------------------------------------------------
# append-only history and GC of durable history


def _gc_policy(reader: _Reader) -> dict[str, str]:
    data = reader.read(GC_POLICY)
    if data is None:
        return {}
    policy = {}
    for number, line in enumerate(reader.text(GC_POLICY, data).splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            reader.warn(GC_POLICY, f"line {number}: expected key=value, got {line!r}; ignored")
            continue
        policy[key.strip()] = value.strip()
    return policy


def _deletion_allowed(policy: Mapping[str, str], rel: str) -> bool:
    """``keep_messages=0`` / ``keep_events=0`` is the explicit policy that allows deletion."""
    key = "keep_messages" if rel == MESSAGES else "keep_events"
    return policy.get(key, "1").strip().lower() in ("0", "false", "no")


#: The running sha256 of history files seen by this process, so that a grown file is hashed
#: from where it was: (size, digest, hasher, digest of its head, of its tail, when it was last
#: read whole). Keyed by (folder, file); bounded: an evicted entry means one whole read.
_RUNNING: collections.OrderedDict[tuple[str, str], tuple[int, str, Any, str, str, float]] = \
    collections.OrderedDict()
_RUNNING_MAX = 256
#: Seconds between whole reads of a file that keeps growing (the check of everything before
#: the last TAIL_BYTES; the incremental look checks the first and last TAIL_BYTES).
FULL_CHECK_EVERY = 60.0


def _remember(reader: _Reader, rel: str, size: int, hasher: Any, head: bytes, tail: bytes,
              checked_at: float) -> str:
    key = (reader._real_root, rel)
    digest = str(hasher.hexdigest())
    _RUNNING[key] = (size, digest, hasher, _sha256(head), _sha256(tail), checked_at)
    _RUNNING.move_to_end(key)
    while len(_RUNNING) > _RUNNING_MAX:
        _RUNNING.popitem(last=False)
    return digest


def _file_state(reader: _Reader, rel: str, previous: FileState | None
                ) -> tuple[FileState | None, RuleBreach | None]:
    """The file's state now, and a breach of append-only against ``previous``.

    Memory stays bounded: files are hashed in chunks of ``CHUNK_BYTES``. A file that only
    grew since this process last read it is read incrementally: its first and last
    :data:`TAIL_BYTES` as they were (which must be unchanged), then only the new bytes; the
    whole file is read again at most every :data:`FULL_CHECK_EVERY` seconds, so a rewrite
    in the middle of a long history is found within that time."""
    st = reader.stat(rel)
    if st is None:
        return None, None
    if previous is not None and (st.st_size, st.st_mtime_ns) == (previous.size, previous.mtime_ns):
        return previous, None  # unchanged since last seen
    rule = RULE_MESSAGES_APPEND_ONLY if rel == MESSAGES else RULE_EVENTS_APPEND_ONLY
    running = _RUNNING.get((reader._real_root, rel))
    now = time.monotonic()
    if (previous is not None and running is not None
            and running[:2] == (previous.size, previous.sha256)
            and st.st_size >= previous.size and now - running[5] < FULL_CHECK_EVERY):
        grown = _grown(reader, rel, st.st_mtime_ns, previous, running)
        if grown is not None:
            return grown
    state, prefix = _whole(reader, rel, st.st_mtime_ns, previous.size if previous else None)
    if state is None or previous is None:
        return state, None
    if state.size < previous.size:
        return state, RuleBreach(rule, rel, f"{rel} shrank from {previous.size} to "
                                            f"{state.size} bytes since last seen")
    if prefix != previous.sha256:
        return state, RuleBreach(rule, rel, f"the first {previous.size} bytes of {rel} were "
                                            "rewritten since last seen (not an append)")
    return state, None


def _grown(reader: _Reader, rel: str, mtime_ns: int, previous: FileState,
           running: tuple[int, str, Any, str, str, float]
           ) -> tuple[FileState | None, RuleBreach | None] | None:
    """The incremental look (see :func:`_file_state`); None when the file must be read
    whole instead (its head or tail changed: the whole read says how)."""
    head_len = min(previous.size, TAIL_BYTES)
    head_chunks = reader.chunks(rel, 0, head_len)
    if head_chunks is None:
        return None, None
    head = b"".join(head_chunks)
    if _sha256(head) != running[3]:
        return None
    start = max(0, previous.size - TAIL_BYTES)
    chunks = reader.chunks(rel, start)
    if chunks is None:
        return None, None
    hasher = running[2].copy()
    window = bytearray()
    tail = bytearray()
    size = start
    for chunk in chunks:
        size += len(chunk)
        if len(window) < previous.size - start:
            need = previous.size - start - len(window)
            window += chunk[:need]
            chunk = chunk[need:]
        if chunk:
            hasher.update(chunk)
            tail = (tail + chunk)[-TAIL_BYTES:]
    if bytes(window) and _sha256(bytes(window)) != running[4] or size < previous.size:
        return None
    tail = (window + tail)[-TAIL_BYTES:]
    new_head = head
    if previous.size < TAIL_BYTES:  # the head grows with the file while the file is shorter
        first = reader.chunks(rel, 0, TAIL_BYTES)
        new_head = b"" if first is None else b"".join(first)
    digest = _remember(reader, rel, size, hasher, new_head, bytes(tail), running[5])
    return FileState(size, mtime_ns, digest), None


def _whole(reader: _Reader, rel: str, mtime_ns: int, prefix_at: int | None
           ) -> tuple[FileState | None, str | None]:
    """Hash the whole file in chunks: its state, and the digest of its first ``prefix_at``
    bytes (None when it is shorter)."""
    chunks = reader.chunks(rel)
    if chunks is None:
        return None, None
    hasher = hashlib.sha256()
    prefix = hashlib.sha256(b"").hexdigest() if prefix_at == 0 else None
    size = 0
    head = b""
    tail = b""
    for chunk in chunks:
        if prefix_at and prefix is None and size + len(chunk) >= prefix_at:
            cut = prefix_at - size
            hasher.update(chunk[:cut])
            prefix = hasher.hexdigest()
            hasher.update(chunk[cut:])
        else:
            hasher.update(chunk)
        if len(head) < TAIL_BYTES:
            head += chunk[:TAIL_BYTES - len(head)]
        size += len(chunk)
        tail = (tail + chunk)[-TAIL_BYTES:]
    digest = _remember(reader, rel, size, hasher, head, tail, time.monotonic())
    return FileState(size, mtime_ns, digest), prefix


def _check_history(reader: _Reader, previous: Mapping[str, FileState], policy: Mapping[str, str]
                   ) -> tuple[dict[str, FileState], list[RuleBreach]]:
    states: dict[str, FileState] = {}
    breaches = []
    for rel in (MESSAGES, EVENTS):
        before = previous.get(rel)
        state, breach = _file_state(reader, rel, before)
        if breach is not None:
            breaches.append(breach)
        if state is not None:
            states[rel] = state
        elif before is not None and not _deletion_allowed(policy, rel):
            breaches.append(RuleBreach(
                RULE_GC_KEEPS_DURABLE_HISTORY, rel,
                f"{rel} was deleted ({before.size} bytes when last seen) and "
                f"{GC_POLICY} does not allow it"))
    return states, breaches


def check_history(path: str | os.PathLike[str], previous: Mapping[str, FileState]
                  ) -> tuple[dict[str, FileState], list[RuleBreach], list[str]]:
    """Compare ``messages.jsonl`` and ``events.jsonl`` with what was seen before:
    (states now, breaches, warnings). Cheap when nothing changed (stat only)."""
    reader = _Reader(Path(path))
    states, breaches = _check_history(reader, previous, _gc_policy(reader))
    for breach in breaches:
        log_breach(reader.root, breach)
    return states, breaches, reader.warnings


def referenced_history_gone(policy: Mapping[str, str], states: Mapping[str, FileState],
                            previous: Mapping[str, FileState], refers: set[str]
                            ) -> list[RuleBreach]:
    """GC of durable history that the context still refers to, on first sight of the folder:
    ``messages.jsonl`` / ``events.jsonl`` absent now, never seen before, not allowed by the
    policy to be deleted, and named by the session's context (``refers``)."""
    breaches = []
    for rel in (MESSAGES, EVENTS):
        if rel in states or _deletion_allowed(policy, rel) or previous.get(rel):
            continue
        if rel in refers:
            breaches.append(RuleBreach(
                RULE_GC_KEEPS_DURABLE_HISTORY, rel,
                f"{rel} does not exist but the session's context refers to it, and "
                f"{GC_POLICY} does not allow deleting it"))
    return breaches


# ---------------------------------------------------------------------------------------
# breaches found while mapping the folder, and their log


def log_breach(root: Path, breach: RuleBreach) -> None:
    _log.warning("context runtime rule breach in %s: %s (%s): %s", root, breach.rule,
                 breach.level.upper(), breach.detail)


def missing_child_result(root: Path, path: str, referrer: str) -> RuleBreach | None:
    """A breach when ``path``, a child result that ``referrer`` points at, does not exist."""
    # only names inside the child folder are looked up: never probe outside the session
    if not path.startswith(CHILD_DIR + "/") or ".." in Path(path).parts \
            or os.path.lexists(root / path):
        return None
    return RuleBreach(RULE_GC_KEEPS_REFERENCED_CHILD_RESULT, path,
                      f"{path} is referenced by {referrer} but does not exist")


def summary_only_copy(rel: str, ranges: str, have: str) -> RuleBreach:
    """The breach of a derived file citing ``ranges`` of history that ``messages.jsonl``
    (which ``have``) no longer holds."""
    return RuleBreach(RULE_SUMMARY_NOT_ONLY_COPY, rel,
                      f"{rel} cites {ranges} but {MESSAGES} has {have}: the derived file is "
                      "the only copy of that history")
