"""``serve``, ``demo``, ``timeline`` and ``query``: the processor's subcommands.

``serve`` exits 2, before listening, on any bad configuration (file, flag, unusable
address), with a message naming the setting; 0 after a graceful stop (SIGTERM, Ctrl-C).
A second signal during the stop exits at once: the WAL keeps whatever was not written.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from ..exceptions import ConfigError
from . import _demo, _query, _timeline
from ._config import SETTINGS, load_config

__all__ = ["register"]

log = logging.getLogger("otel_agent_context.processor")


def _dest(key: str) -> str:
    return "setting__" + key.replace(".", "__")


def register(subparsers: Any) -> None:
    serve = subparsers.add_parser(
        "serve", help="run the context processor (OTLP in; bundles and metrics out)",
        description="Receive OTLP traces, rebuild Agent Context envelopes, write them as "
                    "JSON Lines, serve their metrics. Flags win over --config.",
    )
    serve.add_argument("--config", metavar="FILE", help="YAML configuration file")
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        default = "" if setting.default is None else f" (default: {setting.default})"
        if setting.default is False:  # an on/off switch: the flag alone turns it on
            serve.add_argument(setting.flag, dest=_dest(setting.key), action="store_const",
                               const=True, default=None,
                               help=f"{setting.help} [{setting.key}]")
            continue
        serve.add_argument(setting.flag, dest=_dest(setting.key), metavar=setting.metavar,
                           default=None, help=f"{setting.help}{default} [{setting.key}]")
    serve.set_defaults(func=_serve)

    demo = subparsers.add_parser(
        "demo", help="run the example agent against an in-process processor",
        description="Run a simulated agent that exercises every context stage, export its "
                    "spans with the real OTLP exporter, and print each rebuilt envelope.",
    )
    _demo.add_arguments(demo)
    demo.set_defaults(func=_demo.run)

    timeline = subparsers.add_parser(
        "timeline", help="show one envelope's ordered timeline in the terminal",
        description="Print the lifecycle of one rebuilt envelope in time order, without Jaeger.",
    )
    _timeline.add_arguments(timeline)
    timeline.set_defaults(func=_timeline.run)

    query = subparsers.add_parser(
        "query", help="ask the bundle store: conversations, envelopes, dropped items, diffs",
        description="Answer questions from the bundle store (or bundles JSON Lines): which "
                    "turns dropped an item and why, what changed between two turns, how full "
                    "the window was by kind.")
    _query.add_query_arguments(query)
    query.set_defaults(func=_query.run_query)


_FLAGS = {s.key: s.flag for s in SETTINGS if s.flag is not None}


def _config_error(exc: ConfigError) -> None:
    """``configuration error: buffer.max_traces (--max-traces): ...``"""
    flag = _FLAGS.get(exc.key)
    text = str(exc)
    if flag is not None:
        text = f"{exc.key} ({flag}){text[len(exc.key):]}"
    print(f"otel-agent-context serve: configuration error: {text}", file=sys.stderr)


def _serve(args: argparse.Namespace) -> int:
    from ._malloc import tune_malloc
    from ._server import Processor, tune_gc

    overrides = {s.key: getattr(args, _dest(s.key)) for s in SETTINGS if s.flag is not None}
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        _config_error(exc)
        return 2
    logging.basicConfig(level=config.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            log.error("second signal: exiting now; the WAL keeps what was not written")
            os._exit(128 + signum)
        log.info("signal %d: stopping gracefully", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tune_malloc()  # before any thread allocates
    processor = Processor(config)
    try:
        processor.start()
    except ConfigError as exc:
        _config_error(exc)
        return 2
    tune_gc()
    while not stop.wait(0.5):
        pass
    processor.stop()
    return 0
