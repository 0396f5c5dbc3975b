"""Context Runtime ABI: the seed's rules, and the checks of append-only history and its GC."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from .. import _semconv as S
from ._abi_reader import (
    CHILD_DIR,
    EVENTS,
    GC_POLICY,
    MESSAGES,
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


def _file_state(reader: _Reader, rel: str, previous: FileState | None
                ) -> tuple[FileState | None, RuleBreach | None]:
    st = reader.stat(rel)
    if st is None:
        return None, None
    if previous is not None and (st.st_size, st.st_mtime_ns) == (previous.size, previous.mtime_ns):
        return previous, None  # unchanged since last seen
    data = reader.read(rel)
    if data is None:
        return None, None
    state = FileState(len(data), st.st_mtime_ns, _sha256(data))
    if previous is None:
        return state, None
    rule = RULE_MESSAGES_APPEND_ONLY if rel == MESSAGES else RULE_EVENTS_APPEND_ONLY
    if len(data) < previous.size:
        return state, RuleBreach(rule, rel, f"{rel} shrank from {previous.size} to "
                                            f"{len(data)} bytes since last seen")
    if _sha256(data[:previous.size]) != previous.sha256:
        return state, RuleBreach(rule, rel, f"the first {previous.size} bytes of {rel} were "
                                            "rewritten since last seen (not an append)")
    return state, None


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
