"""``timeline --session`` and ``query``: the store's answers in a terminal.

``SOURCE`` is anything :func:`open_source` reads: a ``postgresql://`` URL, a SQLite file,
``serve``'s output directory, or bundles JSON Lines. ``--json`` prints the same answers as
the web page's JSON API, for scripts.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

import orjson

from .._store import StoreError
from .._store._session import (
    DEFAULT_TRACE_URL,
    EnvelopeFilter,
    Turn,
    conversations,
    diff,
    dropped,
    envelopes,
    session,
)
from .._store._source import open_source
from ._config import DEFAULT_OUT
from ._summary import render_table

__all__ = ["add_query_arguments", "render_turns", "run_query", "run_session"]

_LIST = 12


#: C0 controls but newline and tab, DEL and C1 controls: escape sequences in an id from
#: someone's telemetry would otherwise reach the terminal (retitle it, clear it, ...).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _pct(value: Any) -> str:
    return f"{value * 100:.0f}%" if isinstance(value, (int, float)) else "?"


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _ids(ids: Sequence[str], sign: str, limit: int = _LIST) -> str:
    shown = ", ".join(f"{sign}{i}" for i in ids[:limit])
    return shown + (f", … {len(ids) - limit} more" if len(ids) > limit else "")


def render_turns(conversation_id: str, turns: Sequence[Turn], *,
                 all_omitted: bool = False) -> list[str]:
    """A conversation turn by turn, for a terminal."""
    agents = sorted({t.envelope["agent_name"] or "unknown" for t in turns})
    lines = [f"conversation {conversation_id}: {len(turns)} turns, "
             f"agent {', '.join(agents)}", ""]
    header = ("turn", "envelope", "window", "use", "added", "removed", "truncated",
              "compacted", "omitted", "missing")
    rows = [header]
    for t in turns:
        e = t.envelope
        rows.append((str(t.number), e["context_id"],
                     f"{_num(e['window_used_tokens'])}/{_num(e['window_max_tokens'])}",
                     _pct(e["utilization"]) + (" OVERFLOW" if e["overflow"] else ""),
                     f"+{len(t.added)}", f"-{len(t.removed)}", str(len(t.truncated)),
                     str(sum(len(c["sources"]) for c in t.compactions)), str(len(t.omitted)),
                     (f"{len(t.missing)} blocking" if e["blocking_missing_count"]
                      else str(len(t.missing)))))
    lines.extend(render_table(rows))
    for t in turns:
        e = t.envelope
        flags = [e["status"] or "?"]
        if e["scope"] and e["scope"] != "turn":
            flags.append(f"scope {e['scope']}")
        if e["overflow"]:
            flags.append(f"OVERFLOW +{e['overflow_tokens'] or '?'} tokens")
        lines += ["", f"Turn {t.number}  {e['context_id']}  {e['agent_name'] or 'unknown'}  "
                      f"{'  '.join(flags)}  {e['created_at'] or ''}"]
        kinds = ", ".join(f"{k} {n:,}" for k, n in t.by_kind.items()) or "no blocks recorded"
        lines.append(f"  window {_num(e['window_used_tokens'])}/{_num(e['window_max_tokens'])} "
                     f"({_pct(e['utilization'])}): {kinds}")
        if t.by_point:
            lines.append("  by injection point: " +
                         ", ".join(f"{p} {n:,}" for p, n in t.by_point.items()))
        since = f"since turn {t.previous}" if t.previous else "in the window"
        changes = [_ids(t.added, "+")] if t.added else []
        if t.removed:
            changes.append(_ids(t.removed, "-"))
        lines.append(f"  {since}: " + ("; ".join(changes) if changes else "no change"))
        for tr in t.truncated:
            lines.append(f"  truncated {tr['item_id']}: {tr['tokens_before']} -> "
                         f"{tr['tokens_after']} tokens")
        for c in t.compactions:
            text = (f"  compacted ({c['method'] or 'compaction'}): {len(c['sources'])} sources, "
                    f"{c['tokens_before']} -> {c['tokens_after']} tokens, coverage "
                    f"{_pct(c['coverage'])}")
            if c["uncovered_sources"]:
                text += f"; not covered: {', '.join(c['uncovered_sources'])}"
            lines.append(text)
            lines.extend(f"    loss: {note}" for note in c["loss_notes"] or [])
        if t.omitted:
            reasons = Counter(o["reason"] or "unspecified" for o in t.omitted).most_common()
            lines.append(f"  omitted {len(t.omitted)}: " +
                         ", ".join(f"{r} {n}" for r, n in reasons))
            if all_omitted:
                lines.extend(f"    {o['item_id']}  {o['reason'] or ''}" + (
                    f"  score {o['score']:.3f}" if o["score"] is not None else "")
                    for o in t.omitted)
        if t.not_injected:
            lines.append("  selected, never in the prompt: " + ", ".join(t.not_injected))
        for m in t.missing:
            tag = "[BLOCKING] " if m["severity"] == "blocking" else ""
            lines.append(f"  missing {tag}{m['needed_for'] or m['missing_id']}: "
                         f"{m['status'] or '?'}")
        if t.trace_url:
            lines.append(f"  trace: {t.trace_url}")
    return lines


def run_session(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``timeline SOURCE --session CONVERSATION``."""
    try:
        store = open_source(args.file, warn=lambda text: print(text, file=err))
    except StoreError as exc:
        print(f"otel-agent-context timeline: {exc}", file=err)
        return 2
    with store:
        try:
            turns = session(store, args.session, trace_url_template=args.trace_url)
        except StoreError as exc:
            print(f"otel-agent-context timeline: {exc}", file=err)
            return 2
        if not turns:
            known = [c["conversation_id"] for c in conversations(store, limit=5)]
            print(_printable(f"otel-agent-context timeline: no conversation {args.session!r} "
                             f"in {args.file}" + (f" (recent: {', '.join(known)})" if known
                                                  else "")), file=err)
            return 1
        if args.json:
            out.write(orjson.dumps({"conversation_id": args.session,
                                    "turns": [t.as_json() for t in turns]},
                                   default=str).decode() + "\n")
        else:
            print(_printable("\n".join(render_turns(args.session, turns,
                                                     all_omitted=args.all_items))), file=out)
    return 0


# -- query ----------------------------------------------------------------------------------------

def _add_source_arguments(parser: argparse.ArgumentParser, default: Any, flag: Any) -> None:
    parser.add_argument("--store", metavar="SOURCE", default=default,
                        help="postgresql://..., a SQLite file, serve's --out directory, or "
                             f"bundles JSON Lines (default: {DEFAULT_OUT})")
    parser.add_argument("--json", action="store_true", default=flag,
                        help="JSON instead of a table")


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    _add_source_arguments(parser, DEFAULT_OUT, False)
    sub = parser.add_subparsers(dest="question", required=True, metavar="QUESTION")
    listing = sub.add_parser("conversations", help="conversations, most recent first")
    listing.add_argument("--agent")
    env = sub.add_parser("envelopes", help="envelopes, newest first, with filters")
    for name in ("conversation", "agent", "status", "reason"):
        env.add_argument(f"--{name}")
    env.add_argument("--overflow", action="store_true", help="only envelopes that overflowed")
    env.add_argument("--blocking", action="store_true",
                     help="only envelopes with blocking missing context")
    env.add_argument("--limit", type=int, default=50)
    drop = sub.add_parser("dropped", help="in which turns an item was omitted, and why")
    drop.add_argument("item_id", metavar="ITEM_ID")
    drop.add_argument("--reason", help="only this omission reason (e.g. budget)")
    drop.add_argument("--conversation")
    change = sub.add_parser("diff", help="what changed in the window between two turns")
    change.add_argument("conversation", metavar="CONVERSATION")
    change.add_argument("first", metavar="FROM", type=int)
    change.add_argument("second", metavar="TO", type=int)
    window = sub.add_parser("window", help="how full the window was, by kind, turn by turn")
    window.add_argument("conversation", metavar="CONVERSATION")
    # also after the question, as users type them; SUPPRESS keeps a value given before it
    for question in (listing, env, drop, change, window):
        _add_source_arguments(question, argparse.SUPPRESS, argparse.SUPPRESS)


def run_query(args: argparse.Namespace, out: TextIO = sys.stdout,
              err: TextIO = sys.stderr) -> int:
    try:
        store = open_source(args.store, warn=lambda text: print(text, file=err))
    except StoreError as exc:
        print(f"otel-agent-context query: {exc}", file=err)
        return 2
    with store:
        try:
            answer, table = _answer(store, args)
        except LookupError as exc:
            print(f"otel-agent-context query: {exc.args[0]}", file=err)
            return 1
        except StoreError as exc:
            print(f"otel-agent-context query: {exc}", file=err)
            return 2
    if args.json:
        out.write(orjson.dumps(answer, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(_printable("\n".join(table)), file=out)
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    if not rows:
        return ["(none)"]
    return render_table([tuple(header), *[tuple("" if v is None else str(v) for v in r)
                                          for r in rows]])


def _answer(store: Any, args: argparse.Namespace) -> tuple[Any, list[str]]:
    question = args.question
    if question == "conversations":
        rows = conversations(store, agent=args.agent)
        return rows, _table(
            ("conversation", "agent", "turns", "peak use", "overflows", "omitted", "truncated",
             "compacted", "blocking"),
            [(r["conversation_id"], r["agent_name"], r["turns"], _pct(r["peak_utilization"]),
              r["overflows"], r["omitted"], r["truncated"], r["compacted"],
              r["blocking_missing"]) for r in rows])
    if question == "envelopes":
        rows = envelopes(store, EnvelopeFilter(
            conversation=args.conversation, agent=args.agent, status=args.status,
            omission_reason=args.reason, overflow=True if args.overflow else None,
            blocking=True if args.blocking else None, limit=args.limit))
        return rows, _table(
            ("envelope", "conversation", "agent", "status", "window", "overflow", "omitted",
             "truncated", "blocking"),
            [(r["context_id"], r["conversation_id"], r["agent_name"], r["status"],
              f"{_num(r['window_used_tokens'])}/{_num(r['window_max_tokens'])}",
              "yes" if r["overflow"] else "", r["omitted_count"], r["truncated_count"],
              r["blocking_missing_count"]) for r in rows])
    if question == "dropped":
        rows = dropped(store, args.item_id, reason=args.reason, conversation=args.conversation)
        return rows, _table(
            ("conversation", "turn", "envelope", "reason", "score", "tokens", "detail"),
            [(r["conversation_id"], r["turn"], r["context_id"], r["omit_reason"],
              f"{r['score']:.3f}" if r["score"] is not None else None, r["tokens"],
              r["omit_detail"]) for r in rows])
    turns = session(store, args.conversation, trace_url_template=DEFAULT_TRACE_URL)
    if not turns:
        raise LookupError(f"no conversation {args.conversation!r}")
    if question == "window":
        kinds = sorted({k for t in turns for k in t.by_kind})
        rows = [{"turn": t.number, "context_id": t.envelope["context_id"],
                 "max_tokens": t.envelope["window_max_tokens"],
                 "used_tokens": t.envelope["window_used_tokens"],
                 "utilization": t.envelope["utilization"],
                 "overflow": t.envelope["overflow"], "by_kind": t.by_kind} for t in turns]
        peak = max(turns, key=lambda t: t.envelope["utilization"] or 0)
        table = _table(("turn", "used", "limit", "use", *kinds),
                       [(r["turn"], r["used_tokens"], r["max_tokens"],
                         _pct(r["utilization"]) + (" OVERFLOW" if r["overflow"] else ""),
                         *(r["by_kind"].get(k, 0) for k in kinds)) for r in rows])
        table.append(f"peak: turn {peak.number}, {_pct(peak.envelope['utilization'])} of the "
                     f"window")
        return {"turns": rows, "peak_turn": peak.number}, table
    try:
        change = diff(turns, args.first, args.second)
    except KeyError as exc:
        raise LookupError(exc.args[0]) from None
    lines = [f"turn {change['from']} ({change['from_context_id']}) -> turn {change['to']} "
             f"({change['to_context_id']}): {change['tokens']['from']} -> "
             f"{change['tokens']['to']} tokens, {change['kept']} items kept"]
    lines += [f"  + {i}" for i in change["added"]]
    for r in change["removed"]:
        if r["why"] == "omitted":
            because = f"omitted: {r['reason']}" + (f" ({r['detail']})" if r["detail"] else "")
        elif r["why"] == "compacted":
            because = (f"compacted in turn {r['turn']} (coverage {_pct(r['coverage'])}, "
                       f"{'covered' if r['covered'] else 'NOT covered by the summary'})")
            because += "".join(f"; loss: {n}" for n in r["loss_notes"])
        else:
            because = "not in the window"
        lines.append(f"  - {r['item_id']}  {because}")
    lines += [f"  truncated {t['item_id']}: {t['tokens_before']} -> {t['tokens_after']}"
              for t in change["truncated"]]
    lines += [f"  missing {'[BLOCKING] ' if m['severity'] == 'blocking' else ''}"
              f"{m['needed_for'] or m['missing_id']}: {m['status']}" for m in change["missing"]]
    return change, lines
