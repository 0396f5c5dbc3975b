"""``otel-agent-context timeline [SOURCE] [--context-id ID | --session CONVERSATION]``: one
envelope in time order, or a whole conversation turn by turn (``_query.run_session``).

FILE is a bundles JSON Lines file (or a directory of them, such as ``serve --out``);
``-`` reads standard input. Without ``--context-id`` the last envelope in FILE is shown.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import orjson

from .._store import StoreError
from .._store._source import bundle_lines, is_sqlite_file
from ._config import DEFAULT_OUT, DEFAULT_TRACE_URL
from ._query import run_session
from ._summary import render_table, summarize, timeline_rows

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="SOURCE", nargs="?", default=DEFAULT_OUT,
                        help="bundles JSON Lines file, a directory of them (serve's --out), "
                             "- for stdin; with --session also a SQLite file or a "
                             f"postgresql:// store (default: {DEFAULT_OUT})")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--context-id", metavar="ID", help="the envelope to show "
                       "(default: the last one in SOURCE)")
    which.add_argument("--session", metavar="CONVERSATION",
                       help="a whole conversation turn by turn: the window against its limit, "
                            "what changed since the previous turn, omissions, gaps")
    parser.add_argument("--all-items", action="store_true",
                        help="one row per item event instead of folding runs of them; with "
                             "--session, every omitted item with its reason")
    parser.add_argument("--json", action="store_true", help="with --session: JSON")
    parser.add_argument("--trace-url", metavar="TEMPLATE", default=DEFAULT_TRACE_URL,
                        help="with --session: the link to a turn's trace ({trace_id})")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    if getattr(args, "session", None):
        return run_session(args, out, err)
    if is_sqlite_file(args.file):
        print(f"otel-agent-context timeline: {args.file} is a bundle store (SQLite): give "
              f"--session CONVERSATION, or the bundles JSON Lines beside it", file=err)
        return 2
    chosen: dict[str, Any] | None = None
    seen: list[str] = []
    bad = 0
    try:
        for name, number, line in bundle_lines(args.file):
            if not line.strip():
                continue
            try:
                bundle = orjson.loads(line)
                context_id = bundle["context_envelope"]["context_id"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                bad += 1
                if bad <= 3:
                    print(f"{name}:{number}: not a bundle, skipped", file=err)
                continue
            seen.append(context_id)
            if args.context_id is None or context_id == args.context_id:
                chosen = bundle
    except StoreError as exc:
        print(f"otel-agent-context timeline: {exc}", file=err)
        return 2
    if chosen is None:
        if not seen:
            print(f"otel-agent-context timeline: no bundles in {args.file}", file=err)
        else:
            sample = ", ".join(seen[-5:])
            print(f"otel-agent-context timeline: no envelope {args.context_id!r} among "
                  f"{len(seen)} in {args.file} (last ones: {sample})", file=err)
        return 1
    print("\n".join(summarize(chosen)), file=out)
    print(file=out)
    rows = timeline_rows(chosen, fold_items=not args.all_items)
    if rows:
        print("\n".join(render_table([("offset", "event", "subject", "facts"), *rows])),
              file=out)
    else:
        print("(no lifecycle events recorded)", file=out)
    if args.context_id is None and len(seen) > 1:
        print(f"\n{len(seen)} envelopes in {args.file}; this is the last. "
              f"Pick another with --context-id (e.g. {seen[0]}).", file=err)
    return 0
