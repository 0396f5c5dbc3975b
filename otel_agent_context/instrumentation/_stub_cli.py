"""``stub``: serve the bundled OpenAI/Anthropic stub, to try the instrumentation offline.

    otel-agent-context stub [--port PORT] [--requests]

Serves on 127.0.0.1 only (it has no authentication and answers anything) until interrupted
(Ctrl-C or SIGTERM, exit 0). The first line of output is the stub's URL; the lines after it
say which variables point the real ``openai`` and ``anthropic`` clients at it. With
``--requests`` each request's path, model and message count is printed as it arrives.
Exit codes: 0 stopped, 2 the port could not be bound.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from .._signals import stop_on_signals

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stub", help="serve a local OpenAI/Anthropic stub to try the instrumentation offline",
        description="Serve the bundled stub of the OpenAI and Anthropic APIs on 127.0.0.1 "
                    "until interrupted: deterministic replies and token counts, streaming, "
                    "tool calls on request, context-length errors. Never calls out.")
    p.add_argument("--port", type=int, default=0,
                   help="port to listen on (default: a free one, printed on the first line)")
    p.add_argument("--requests", action="store_true",
                   help="print each request's path, model and message count as it arrives")
    p.set_defaults(func=_stub)


def _describe(path: str, body: dict[str, Any]) -> str:
    items = body.get("messages", body.get("input"))
    count = len(items) if isinstance(items, list) else (1 if items else 0)
    stream = " stream" if body.get("stream") else ""
    return f"{path} model={body.get('model')!r} items={count}{stream}"


def _stub(args: argparse.Namespace) -> int:
    from ._stub import StubServer

    if not 0 <= args.port <= 65535:
        print(f"otel-agent-context stub: --port {args.port} is not a port (0-65535)",
              file=sys.stderr)
        return 2
    printing = threading.Lock()

    def show(path: str, body: dict[str, Any]) -> None:
        with printing:  # the server answers on a thread per connection
            print(_describe(path, body), flush=True)

    try:
        stub = StubServer(port=args.port, keep_requests=False,
                          on_request=show if args.requests else None)
    except OSError as exc:
        print(f"otel-agent-context stub: cannot listen on 127.0.0.1:{args.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    with stop_on_signals() as stop, stub:
        print(stub.url, flush=True)
        print(f"OPENAI_BASE_URL={stub.openai_base_url} OPENAI_API_KEY=stub\n"
              f"ANTHROPIC_BASE_URL={stub.anthropic_base_url} ANTHROPIC_API_KEY=stub\n"
              "serving until interrupted (Ctrl-C)", flush=True)
        stop.wait()
    return 0
