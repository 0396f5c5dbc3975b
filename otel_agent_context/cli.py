"""The ``otel-agent-context`` command.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``func`` (called with the parsed arguments, returns the exit code).
Exit codes: 0 success, 1 the work found problems (e.g. invalid bundles), 2 bad usage or
bad configuration.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from . import __version__

#: Modules that add subcommands, in the order ``--help`` lists them.
_COMMAND_MODULES = (
    "otel_agent_context.processor._cli",  # serve, demo, timeline
    "otel_agent_context._schema_cli",  # schema, validate
    "otel_agent_context.adapters._cli",  # watch
    "otel_agent_context.instrumentation._stub_cli",  # stub
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-agent-context",
        description="See what an LLM agent put into its context window and what it left out.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command module not built yet in this checkout
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # the command's own usage names the flags it has; the top level's names none
        commands = next((a.choices for a in parser._actions
                         if isinstance(a, argparse._SubParsersAction)), {})
        commands.get(args.command, parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `... | head`: the reader left; not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
