"""``watch``: follow a Context Runtime ABI session folder and emit one envelope per pack build.

    otel-agent-context watch SESSION_DIR [--once] [--out FILE] [--interval SECONDS]
                                         [--state FILE]

Where to: by default an OTLP span exporter configured by the standard ``OTEL_EXPORTER_OTLP_*``
variables (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``:
``grpc``, the default, or ``http/protobuf``) and a resource from ``OTEL_SERVICE_NAME`` /
``OTEL_RESOURCE_ATTRIBUTES``; with ``--out FILE`` the envelopes are rebuilt in-process and
appended to FILE as JSON Lines, with no network at all. Nothing is ever written into the
session folder: ``--out`` and ``--state`` must lie outside it. Exit codes: 0 done (rule
breaches and malformed files are reported, not failures), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .._api import AgentContext
from .._signals import stop_on_signals
from ..exceptions import ConfigError
from ..rebuild import BundleSpanProcessor
from ._watch import SessionWatcher

__all__ = ["register"]

_log = logging.getLogger("otel_agent_context.adapters")

DEFAULT_INTERVAL = 1.0
DEFAULT_SERVICE_NAME = "otel-agent-context-watch"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "watch", help="emit a Context Runtime ABI session folder's pack builds",
        description="Follow SESSION_DIR (a Context Runtime ABI session folder) and emit one "
                    "context envelope per new context/pack.json, with the ABI's rule breaches.")
    p.add_argument("session_dir", metavar="SESSION_DIR", help="the session folder to follow")
    p.add_argument("--once", action="store_true",
                   help="emit the current pack build (and breaches) and exit")
    p.add_argument("--out", metavar="FILE",
                   help="append rebuilt bundles to FILE as JSON Lines instead of sending OTLP")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
                   help=f"seconds between looks at the folder (default {DEFAULT_INTERVAL})")
    p.add_argument("--state", metavar="FILE",
                   help="remember what was seen in FILE (JSON), so a later run only emits "
                        "what is new and sees history rewritten in between")
    p.set_defaults(func=_watch)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _check(args: argparse.Namespace) -> tuple[Path, Path | None, Path | None]:
    session = Path(args.session_dir)
    if not session.is_dir():
        raise ConfigError("SESSION_DIR", f"{session} is not a directory")
    if not args.interval > 0:
        raise ConfigError("--interval", f"must be a positive number of seconds, "
                                        f"got {args.interval}")
    out = Path(args.out) if args.out else None
    state = Path(args.state) if args.state else None
    for key, path in (("--out", out), ("--state", state)):
        if path is not None and _inside(path, session):
            raise ConfigError(key, f"{path} is inside the session folder, which is never "
                                   "written to")
        if path is not None and path.is_dir():
            raise ConfigError(key, f"{path} is a directory")
        if path is not None and not path.parent.is_dir():
            raise ConfigError(key, f"{path.parent} does not exist")
    return session, out, state


class _Reporting(SpanExporter):
    """The OTLP exporter, counting the batches it could not deliver (``watch`` exits
    non-zero, saying where it could not send, rather than losing envelopes quietly)."""

    def __init__(self, exporter: SpanExporter, endpoint: str) -> None:
        self.exporter = exporter
        self.endpoint = endpoint
        self.failed = 0
        self.sent = 0

    def export(self, spans: Any) -> SpanExportResult:
        result = self.exporter.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.sent += 1
        else:
            self.failed += 1
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


def _otlp_processor() -> tuple[SpanProcessor, _Reporting]:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
    exporter: Any
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter()
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPSpanExporter,
        )
        exporter = HTTPSpanExporter()
    else:
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL",
                          f"expected grpc or http/protobuf, got {protocol!r}")
    endpoint = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or ("localhost:4317" if protocol == "grpc" else "localhost:4318"))
    reporting = _Reporting(exporter, endpoint)
    return BatchSpanProcessor(reporting), reporting


def _load_state(path: Path | None) -> dict[str, Any] | None:
    if path is None or not path.exists():
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        _log.warning("watch: cannot read state %s (%s); starting afresh", path, exc)
        return None
    return doc if isinstance(doc, dict) else None


def _save_state(path: Path | None, state: dict[str, Any]) -> None:
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(orjson.dumps(state))
        os.replace(tmp, path)
    except OSError as exc:
        _log.warning("watch: cannot save state to %s (%s)", path, exc)


def _configure_logging() -> None:
    logger = logging.getLogger("otel_agent_context")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("otel-agent-context %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _watch(args: argparse.Namespace) -> int:
    try:
        session, out, state_path = _check(args)
        reporting: _Reporting | None = None
        if out is not None:
            processor: SpanProcessor = BundleSpanProcessor(path=out, envelope_timeout=5.0,
                                                           orphan_timeout=5.0)
        else:
            processor, reporting = _otlp_processor()
    except ConfigError as exc:
        print(f"watch: {exc}", file=sys.stderr)
        return 2
    _configure_logging()
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(processor)
    watcher = SessionWatcher(session, AgentContext(tracer_provider=provider),
                             state=_load_state(state_path))
    with stop_on_signals(active=not args.once) as stop:
        try:
            if not args.once and reporting is not None:
                # fail fast: the first build goes out at once, and if nothing can take it,
                # say so and stop instead of following the folder into the void
                watcher.poll()
                provider.force_flush()
                if reporting.failed and not reporting.sent:
                    return _unreachable(reporting)
            watcher.run(interval=args.interval, stop=stop,
                        max_polls=1 if args.once else None)
        finally:
            _save_state(state_path, watcher.state())
            provider.shutdown()  # flushes the exporter / the bundle file
    if reporting is not None and reporting.failed:
        return _unreachable(reporting)
    return 0


def _unreachable(reporting: _Reporting) -> int:
    print(f"watch: could not send {reporting.failed} batch(es) of spans to the OTLP "
          f"endpoint {reporting.endpoint} (is a collector or `otel-agent-context serve` "
          "listening there? set OTEL_EXPORTER_OTLP_ENDPOINT, or use --out FILE)",
          file=sys.stderr)
    return 1
