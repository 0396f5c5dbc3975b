"""Questions a person debugging an agent asks of the store, answered the same way for the
terminal (``timeline --session``, ``query``), the web page and its JSON API.

A conversation's envelopes are its turns, in time order. Each turn is compared with the
previous turn of the same agent and scope: what entered the window, what left it, what was
truncated or compacted, what was omitted and why, and what the agent knew it lacked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ._store import Store

__all__ = [
    "EnvelopeFilter",
    "Turn",
    "conversations",
    "diff",
    "dropped",
    "envelope",
    "envelopes",
    "session",
    "trace_url",
]

DEFAULT_TRACE_URL = "http://localhost:16686/trace/{trace_id}"

_ENVELOPE_COLUMNS = (
    "trace_id, context_id, span_id, conversation_id, agent_name, scope, lifecycle, status, "
    "parent_context_id, model, created_at, created_ns, window_max_tokens, window_used_tokens, "
    "utilization, overflow, overflow_tokens, candidate_count, selected_count, omitted_count, "
    "truncated_count, compacted_count, missing_count, blocking_missing_count"
)


def trace_url(template: str | None, trace_id: str, span_id: str | None = None) -> str | None:
    if not template or not trace_id:
        return None
    return template.replace("{trace_id}", trace_id).replace("{span_id}", span_id or "")


@dataclasses.dataclass(frozen=True)
class EnvelopeFilter:
    """What the envelope list may be narrowed to (every field optional)."""

    conversation: str | None = None
    agent: str | None = None
    status: str | None = None
    omission_reason: str | None = None
    overflow: bool | None = None
    blocking: bool | None = None
    limit: int = 200
    #: envelopes skipped (newest first) before the ``limit`` listed: the next page
    offset: int = 0

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("conversation_id", self.conversation),
                              ("agent_name", self.agent), ("status", self.status)):
            if value:
                clauses.append(f"e.{column} = ?")
                params.append(value)
        if self.omission_reason:
            clauses.append("EXISTS (SELECT 1 FROM items i WHERE i.trace_id = e.trace_id AND "
                           "i.context_id = e.context_id AND i.omit_reason = ?)")
            params.append(self.omission_reason)
        if self.overflow is not None:
            clauses.append("e.overflow" if self.overflow else "NOT e.overflow")
        if self.blocking is not None:
            clauses.append("e.blocking_missing_count > 0" if self.blocking
                           else "e.blocking_missing_count = 0")
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _bools(row: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if name in row and row[name] is not None:
            row[name] = bool(row[name])
    return row


def envelopes(store: Store, where: EnvelopeFilter | None = None) -> list[dict[str, Any]]:
    """Envelopes, newest first."""
    where = where or EnvelopeFilter()
    clause, params = where.where()
    rows = store.rows(f"SELECT {_ENVELOPE_COLUMNS} FROM envelopes e{clause} "
                      f"ORDER BY e.created_ns DESC, e.context_id, e.trace_id LIMIT ? OFFSET ?",
                      [*params, max(1, min(where.limit, 10_000)), max(0, where.offset)])
    return [_bools(r, "overflow") for r in rows]


def conversations(store: Store, *, agent: str | None = None,
                  limit: int = 200) -> list[dict[str, Any]]:
    """Conversations, most recently active first, with their turn count and worst moments."""
    clause, params = ("WHERE conversation_id IS NOT NULL AND agent_name = ?", [agent]) if agent \
        else ("WHERE conversation_id IS NOT NULL", [])
    return store.rows(
        "SELECT conversation_id, COUNT(*) AS turns, MIN(agent_name) AS agent_name, "
        "MIN(created_at) AS first_at, MAX(created_at) AS last_at, MAX(created_ns) AS last_ns, "
        "MAX(utilization) AS peak_utilization, SUM(omitted_count) AS omitted, "
        "SUM(truncated_count) AS truncated, SUM(compacted_count) AS compacted, "
        "SUM(blocking_missing_count) AS blocking_missing, "
        "SUM(CASE WHEN overflow THEN 1 ELSE 0 END) AS overflows "
        f"FROM envelopes {clause} GROUP BY conversation_id ORDER BY last_ns DESC LIMIT ?",
        [*params, max(1, min(limit, 10_000))])


def envelope(store: Store, context_id: str) -> dict[str, Any] | None:
    """One envelope's full bundle (the newest, if two traces reused the id)."""
    rows = store.rows("SELECT trace_id, bundle FROM envelopes WHERE context_id = ? "
                      "ORDER BY created_ns DESC LIMIT 1", [context_id])
    return rows[0]["bundle"] if rows else None


def dropped(store: Store, item_id: str, *, reason: str | None = None,
            conversation: str | None = None) -> list[dict[str, Any]]:
    """The turns in which ``item_id`` was omitted (for ``reason``, if given)."""
    sql = ("SELECT e.conversation_id, e.agent_name, e.context_id, e.trace_id, e.created_at, "
           "i.omit_reason, i.omit_detail, i.score, i.tokens FROM items i JOIN envelopes e ON "
           "e.trace_id = i.trace_id AND e.context_id = i.context_id "
           "WHERE i.item_id = ? AND i.state = 'omitted'")
    params: list[Any] = [item_id]
    if reason:
        sql += " AND i.omit_reason = ?"
        params.append(reason)
    if conversation:
        sql += " AND e.conversation_id = ?"
        params.append(conversation)
    rows = store.rows(sql + " ORDER BY e.created_ns", params)
    turns = _turn_numbers(store, {r["conversation_id"] for r in rows if r["conversation_id"]})
    for row in rows:
        row["turn"] = turns.get((row["conversation_id"], row["context_id"]))
    return rows


def _turn_numbers(store: Store, conversation_ids: set[str]) -> dict[tuple[str, str], int]:
    numbers: dict[tuple[str, str], int] = {}
    for conversation_id in sorted(conversation_ids):
        rows = store.rows("SELECT context_id FROM envelopes WHERE conversation_id = ? "
                          "ORDER BY created_ns, context_id", [conversation_id])
        for index, row in enumerate(rows, 1):
            numbers[(conversation_id, row["context_id"])] = index
    return numbers


@dataclasses.dataclass
class Turn:
    """One envelope of a conversation and what changed since the previous one."""

    number: int
    envelope: dict[str, Any]
    by_kind: dict[str, int]
    by_point: dict[str, int]
    window: list[str]
    added: list[str]
    removed: list[str]
    truncated: list[dict[str, Any]]
    compactions: list[dict[str, Any]]
    omitted: list[dict[str, Any]]
    not_injected: list[str]
    missing: list[dict[str, Any]]
    previous: int | None
    trace_url: str | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def session(store: Store, conversation_id: str, *,
            trace_url_template: str | None = DEFAULT_TRACE_URL) -> list[Turn]:
    """A conversation turn by turn (an empty list if the store has none of it).

    What a turn shows (its window's items in order, tokens by kind and by injection point,
    its omitted and truncated items) is read from its envelope row, where the writer keeps
    it beside the item and block rows: a 200-turn session has tens of thousands of those."""
    envs = [_bools(r, "overflow") for r in store.rows(
        f"SELECT {_ENVELOPE_COLUMNS}, window_items, tokens_by_kind, tokens_by_point, "
        "omitted_items, truncated_items, not_injected_items FROM envelopes "
        "WHERE conversation_id = ? ORDER BY created_ns, context_id",
        [conversation_id])]
    if not envs:
        return []
    index = {(e["trace_id"], e["context_id"]): n for n, e in enumerate(envs)}
    join = ("JOIN envelopes e ON e.trace_id = t.trace_id AND e.context_id = t.context_id "
            "WHERE e.conversation_id = ?")
    params = [conversation_id]
    count = len(envs)
    windows: list[dict[str, None]] = [dict.fromkeys(e.pop("window_items") or ()) for e in envs]
    by_kind = [e.pop("tokens_by_kind") or {} for e in envs]
    by_point = [e.pop("tokens_by_point") or {} for e in envs]
    omitted = [e.pop("omitted_items") or [] for e in envs]
    truncated = [e.pop("truncated_items") or [] for e in envs]
    not_injected = [e.pop("not_injected_items") or [] for e in envs]
    compactions: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for row in store.rows(
            "SELECT t.trace_id, t.context_id, t.compaction_id, t.method, t.trigger_reason, "
            "t.coverage, t.source_count, t.tokens_before, t.tokens_after, t.source_items, "
            f"t.uncovered_sources, t.loss_notes, t.summary_id FROM compactions t {join}",
            params):
        n = index[(row["trace_id"], row["context_id"])]
        compaction = _strip(row)
        compaction["sources"] = compaction.pop("source_items") or []
        compactions[n].append(compaction)
    missing: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for row in store.rows(
            "SELECT t.trace_id, t.context_id, t.missing_id, t.needed_for, t.severity, t.status, "
            f"t.requested_from, t.blocked_actions FROM missing_context t {join}", params):
        missing[index[(row["trace_id"], row["context_id"])]].append(_strip(row))

    turns: list[Turn] = []
    last_in_lane: dict[tuple[Any, Any], int] = {}
    for n, env in enumerate(envs):
        number = n + 1
        window = list(windows[n])
        lane = (env["agent_name"], env["scope"])
        previous_number = last_in_lane.get(lane)
        last_in_lane[lane] = number
        if previous_number is None:
            added, removed = window, []
        else:
            before = windows[previous_number - 1]
            now = windows[n]
            added = [i for i in window if i not in before]
            removed = [i for i in before if i not in now]
        turns.append(Turn(
            number=number,
            envelope=env,
            by_kind=dict(sorted(by_kind[n].items(), key=lambda kv: -kv[1])),
            by_point=dict(sorted(by_point[n].items(), key=lambda kv: -kv[1])),
            window=window,
            added=added,
            removed=removed,
            truncated=truncated[n],
            compactions=compactions[n],
            omitted=omitted[n],
            not_injected=not_injected[n],
            missing=missing[n],
            previous=previous_number,
            trace_url=trace_url(trace_url_template, env["trace_id"], env["span_id"]),
        ))
    return turns


def _strip(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("trace_id", "context_id")}


def diff(turns: Sequence[Turn], first: int, second: int) -> dict[str, Any]:
    """What changed in the window from turn ``first`` to turn ``second`` (any two turns),
    and why each item that left it left: omitted (with the reason), compacted (with the
    compaction's coverage and loss notes), or simply no longer surfaced."""
    by_number = {t.number: t for t in turns}
    if first not in by_number or second not in by_number:
        raise KeyError(f"turns are numbered 1 to {len(turns)}")
    a, b = by_number[first], by_number[second]
    before, after = set(a.window), set(b.window)
    omitted = {o["item_id"]: o for o in b.omitted}
    compacted: dict[str, dict[str, Any]] = {}
    for turn in turns:
        if first < turn.number <= second:
            for compaction in turn.compactions:
                for source in compaction["sources"]:
                    compacted[source] = {**compaction, "turn": turn.number}
    truncated = {t["item_id"]: t for t in b.truncated}
    removed = []
    for item_id in a.window:
        if item_id in after:
            continue
        why: dict[str, Any] = {"item_id": item_id}
        if item_id in omitted:
            why.update(why="omitted", reason=omitted[item_id]["reason"],
                       detail=omitted[item_id]["detail"], score=omitted[item_id]["score"])
        elif item_id in compacted:
            c = compacted[item_id]
            why.update(why="compacted", turn=c["turn"], compaction_id=c["compaction_id"],
                       coverage=c["coverage"],
                       covered=item_id not in (c["uncovered_sources"] or []),
                       loss_notes=c["loss_notes"] or [])
        else:
            why.update(why="not in the window")
        removed.append(why)
    kinds = sorted(set(a.by_kind) | set(b.by_kind))
    return {
        "from": first, "to": second,
        "from_context_id": a.envelope["context_id"], "to_context_id": b.envelope["context_id"],
        "added": [i for i in b.window if i not in before],
        "removed": removed,
        "kept": len(before & after),
        "truncated": [truncated[i] for i in b.window if i in truncated],
        "tokens": {"from": a.envelope["window_used_tokens"],
                   "to": b.envelope["window_used_tokens"]},
        "by_kind": {k: [a.by_kind.get(k, 0), b.by_kind.get(k, 0)] for k in kinds},
        "missing": b.missing,
    }
