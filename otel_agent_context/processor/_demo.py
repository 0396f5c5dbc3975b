"""``otel-agent-context demo``: the example agent, the real OTLP exporter, and a processor.

Default: a processor in this process on free loopback ports, the demo agent exporting to it
over OTLP/gRPC with the stock ``OTLPSpanExporter``, one short summary per rebuilt envelope,
and where the files are; it ends by itself. ``--endpoint`` sends to an external OTLP
endpoint instead (the docker-compose demo agent), ``--forever`` keeps sending a round of
``--turns`` envelopes every ``--interval`` seconds until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .._signals import stop_on_signals
from ..exceptions import ConfigError
from ._summary import summarize
from ._ui import session_path

__all__ = ["add_arguments", "run"]

_WAIT_FOR_BUNDLES = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", metavar="URL",
                        help="send to this OTLP endpoint instead of an in-process processor "
                             "(gRPC: http://host:4317; with --protocol http: "
                             "http://host:4318/v1/traces)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc",
                        help="OTLP transport of the exporter (default: grpc)")
    parser.add_argument("--turns", type=_positive_int, default=3, metavar="N",
                        help="envelopes (agent turns) per round (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated agent")
    parser.add_argument("--forever", action="store_true",
                        help="keep sending a round every --interval seconds until stopped")
    parser.add_argument("--interval", type=_positive_float, default=5.0, metavar="SECONDS",
                        help="seconds between rounds with --forever (default: 5)")
    parser.add_argument("--ui", metavar="HOST:PORT",
                        help="also serve the web page (session timelines) on this address, "
                             "and keep serving it after the rounds until Ctrl-C")
    parser.add_argument("--out", metavar="DIR",
                        help="where the in-process processor writes bundles "
                             "(default: a new temporary directory)")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


class _CollectSink:
    """Keeps the bundles the processor writes, so the demo can print them as they come."""

    name = "demo"

    def __init__(self) -> None:
        self.bundles: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()

    def write(self, batch: Sequence[tuple[tuple[str, str], dict[str, Any], bytes]]) -> None:
        with self._cond:
            for (_, context_id), bundle, _ in batch:
                self.bundles[context_id] = bundle
            self._cond.notify_all()

    def wait_for(self, context_ids: Sequence[str], timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(cid in self.bundles for cid in context_ids):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return [self.bundles[cid] for cid in context_ids if cid in self.bundles]

    def close(self) -> None:
        return None


def _conversation(bundle: dict[str, Any]) -> str | None:
    metadata = (bundle.get("context_envelope") or {}).get("metadata") or {}
    value = metadata.get("gen_ai.conversation.id")
    return value if isinstance(value, str) else None


def _tracer_provider(endpoint: str, protocol: str) -> tuple[Any, Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter: Any = OTLPSpanExporter(endpoint=endpoint)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        exporter = GrpcExporter(endpoint=endpoint, insecure=not endpoint.startswith("https"))
    from ..adapters._cli import _Reporting

    reporting = _Reporting(exporter, endpoint)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent-demo"}))
    provider.add_span_processor(BatchSpanProcessor(reporting, schedule_delay_millis=200))
    return provider, reporting


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from .._demo_agent import run_demo

    with stop_on_signals() as stop:
        if args.endpoint:
            return _run_external(args, run_demo, stop, out)
        return _run_embedded(args, run_demo, stop, out)


def _run_external(args: argparse.Namespace, run_demo: Any, stop: threading.Event,
                  out: TextIO) -> int:
    provider, reporting = _tracer_provider(args.endpoint, args.protocol)
    total = 0
    round_number = 0
    try:
        while True:
            failed = reporting.failed
            ids = run_demo(provider, turns=args.turns, seed=args.seed + round_number)
            provider.force_flush()
            if reporting.failed > failed:
                # --forever keeps trying: the collector of the compose stack may start later
                print(f"otel-agent-context demo: could not send {reporting.failed - failed} "
                      f"batch(es) of spans to {args.endpoint} (is a collector or "
                      "`otel-agent-context serve` listening there? gRPC: http://HOST:4317; "
                      "--protocol http: http://HOST:4318/v1/traces)", file=sys.stderr,
                      flush=True)
            else:
                total += len(ids)
                print(f"sent {len(ids)} envelopes to {args.endpoint} ({total} in all)",
                      file=out, flush=True)
            round_number += 1
            if not args.forever or stop.wait(args.interval):
                break
    finally:
        provider.shutdown()
    return 1 if reporting.failed and not args.forever else 0


def _embedded_config(args: argparse.Namespace, out_dir: Path) -> Any:
    from ._config import ProcessorConfig

    return ProcessorConfig.from_values({
        "ui.endpoint": args.ui,
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0",
        "receivers.otlp_http.endpoint": "127.0.0.1:0",
        "metrics.endpoint": "127.0.0.1:0",
        "output.dir": str(out_dir),
        "buffer.envelope_timeout": 5.0,
        "buffer.orphan_timeout": 10.0,
    })


def _run_embedded(args: argparse.Namespace, run_demo: Any, stop: threading.Event,
                  out: TextIO) -> int:
    from ._server import Processor

    out_dir = Path(args.out) if args.out else Path(
        tempfile.mkdtemp(prefix="otel-agent-context-demo-"))
    try:
        config = _embedded_config(args, out_dir)
    except ConfigError as exc:
        print(f"otel-agent-context demo: {exc}", file=sys.stderr)
        return 2
    collected = _CollectSink()
    try:
        processor = Processor(config, sinks=[collected]).start()
    except ConfigError as exc:
        print(f"otel-agent-context demo: {exc}", file=sys.stderr)
        return 2
    target = processor.addresses["otlp_grpc" if args.protocol == "grpc" else "otlp_http"]
    endpoint = f"http://{target}" + ("/v1/traces" if args.protocol == "http" else "")
    print(f"demo agent → OTLP/{args.protocol} {target} → context processor (in this process)",
          file=out)
    print(f"metrics while it runs: http://{processor.addresses['metrics']}/metrics", file=out,
          flush=True)
    if "ui" in processor.addresses:
        print(f"web page: {processor.addresses['ui']}/", file=out, flush=True)
    print(file=out, flush=True)
    provider, _ = _tracer_provider(endpoint, args.protocol)
    written = 0
    last_id = None
    conversations: set[str] = set()
    round_number = 0
    try:
        while True:
            ids = run_demo(provider, turns=args.turns, seed=args.seed + round_number)
            provider.force_flush()
            bundles = collected.wait_for(ids, _WAIT_FOR_BUNDLES)
            for bundle in bundles:
                print("\n".join(summarize(bundle)) + "\n", file=out, flush=True)
            written += len(bundles)
            if len(bundles) < len(ids):
                print(f"only {len(bundles)} of {len(ids)} envelopes were rebuilt in "
                      f"{_WAIT_FOR_BUNDLES:.0f}s", file=out)
            last_id = ids[-1] if ids else last_id
            conversations.update(c for c in map(_conversation, bundles) if c)
            round_number += 1
            if not args.forever or stop.wait(args.interval):
                break
        if args.ui and not stop.is_set():
            for conversation in sorted(c for c in conversations if c):
                print(f"session:  {processor.addresses['ui']}{session_path(conversation)}",
                      file=out)
            print("serving the web page until Ctrl-C", file=out, flush=True)
            while not stop.wait(0.5):
                pass
    finally:
        provider.shutdown()
        processor.stop()
    files = sorted(out_dir.glob("bundles-*.jsonl"))
    print(f"bundles:  {', '.join(str(f) for f in files)} ({written} envelopes)", file=out)
    print(f"WAL:      {config.wal_dir}", file=out)
    if config.store_url is not None:
        print(f"store:    {config.store_url}", file=out)
        for conversation in sorted(c for c in conversations if c):
            print(f"session:  otel-agent-context timeline {out_dir} --session {conversation}",
                  file=out)
    if files and last_id:
        print(f"timeline: otel-agent-context timeline {files[-1]} --context-id {last_id}",
              file=out)
    return 0 if written else 1
