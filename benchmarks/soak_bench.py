"""Soak: 16 concurrent exporters against a real ``serve`` subprocess, SIGKILLed and restarted
twice midway. CI does not run it.

    python benchmarks/soak_bench.py [--seconds 300] [--kills 2] [--workers 16]
    python benchmarks/soak_bench.py --seconds 20 --kills 0 --workers 1 --kinds raw-json

Workers, a quarter of each kind, every request ``--envelopes`` complete envelopes of
``1 + --stages`` spans with context ids of their own:

- ``sdk-grpc``: the SDK's OTLP/gRPC span exporter (its own retries, then ours);
- ``sdk-http``: the SDK's OTLP/HTTP (protobuf) span exporter;
- ``raw-grpc``: a ``TraceService`` stub on raw requests;
- ``raw-json``: OTLP/JSON on one keep-alive ``http.client`` connection.

A request is retried, unchanged, until acknowledged (connection refused while ``serve`` is
down, UNAVAILABLE/503 under backpressure): at-least-once from the client's side. At the end
``serve`` gets SIGTERM (it flushes) and the bundles are counted: an acknowledged context id
missing from the output is lost, one written twice is duplicated. Reported: acknowledged
spans/s, p50/p99 of the time from first send to acknowledgement (kill downtime included),
RSS of ``serve`` and of the store's child process (``store.writer: process``) every 2 s
(across restarts) beside the sum of ``serve``'s ``context_processor_memory_bytes`` (what
``--max-memory`` counts) and the machine's 1-minute load average, and each worker's
requests/s on its connection (requests over the time spent in its sends).
``--serve-env`` and ``--serve-arg`` pass serve an environment variable or an argument
(``MALLOC_ARENA_MAX=2``, ``--config=x.yaml``); ``--serve-env PYTHONPATH=benchmarks/memprobe
--serve-env MEMPROBE_DIR=DIR`` splits RSS into its owners (see that probe's docstring).
``--serve-checkout DIR`` runs serve from another checkout (its own ``.venv``), the code before
a change, for a comparison on the same machine.
Results: benchmarks/soak.md.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
import orjson
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "processor"))
from processor_testkit import envelope_spans, request  # noqa: E402 - the tests' OTLP builders

KINDS = ("sdk-grpc", "sdk-http", "raw-grpc", "raw-json")
RESOURCE = Resource.create({"service.name": "soak-agent"})
SCOPE = InstrumentationScope("soak")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


def _readable(spans: list[Any]) -> list[ReadableSpan]:
    """The same spans as the SDK hands its exporters."""
    out = []
    for s in spans:
        trace = int.from_bytes(s.trace_id, "big")
        context = SpanContext(trace, int.from_bytes(s.span_id, "big"), False, TraceFlags(1))
        parent = SpanContext(trace, int.from_bytes(s.parent_span_id, "big"), False,
                             TraceFlags(1)) if s.parent_span_id else None
        out.append(ReadableSpan(
            name=s.name, context=context, parent=parent, resource=RESOURCE,
            attributes={kv.key: _value(kv.value) for kv in s.attributes},
            events=[Event(e.name, {kv.key: _value(kv.value) for kv in e.attributes},
                          e.time_unix_nano) for e in s.events],
            kind=SpanKind.INTERNAL, start_time=s.start_time_unix_nano,
            end_time=s.end_time_unix_nano, instrumentation_scope=SCOPE))
    return out


def _json(req: Any) -> bytes:
    document = json_format.MessageToDict(req)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for s in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:  # OTLP/JSON ids are hex
                        s[key] = base64.b64decode(s[key]).hex()
    return orjson.dumps(document)


class Serve:
    """``serve`` on fixed ports, so a restart keeps the exporters' addresses."""

    def __init__(self, tmp: Path, env: dict[str, str], extra: list[str],
                 checkout: Path | None = None) -> None:
        self.extra = extra
        # another checkout (with its own .venv): the code before a change, in the same run
        self.checkout = checkout or REPO
        self.python = str(checkout / ".venv/bin/python") if checkout else sys.executable
        self.grpc_port, self.http_port = _free_port(), _free_port()
        self.metrics_port = _free_port()
        self.env = {**os.environ, **env}
        self.out = tmp / "out"
        self.ready = tmp / "ready.json"
        self.log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - open for the whole run
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        began = time.monotonic()
        if self.ready.exists():
            self.ready.unlink()
        self.process = subprocess.Popen(
            [self.python, "-m", "otel_agent_context", "serve",
             "--otlp-grpc", f"127.0.0.1:{self.grpc_port}",
             "--otlp-http", f"127.0.0.1:{self.http_port}",
             "--metrics", f"127.0.0.1:{self.metrics_port}",
             "--out", str(self.out), "--ready-file", str(self.ready), *self.extra],
            cwd=self.checkout, stdout=subprocess.DEVNULL, stderr=self.log, env=self.env)
        while not self.ready.exists():
            if self.process.poll() is not None:
                raise SystemExit(f"serve exited {self.process.returncode}: see serve.log")
            time.sleep(0.02)
        return time.monotonic() - began

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(120)

    def held_mib(self) -> float | None:
        """The sum of ``context_processor_memory_bytes`` (what ``--max-memory`` counts)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("context_processor_memory_bytes{")) / 2**20

    def rss_mib(self) -> float | None:
        assert self.process is not None
        return _rss_mib(self.process.pid)

    def child_rss_mib(self) -> float | None:
        """RSS of ``serve``'s children (the store's process), summed; None without any."""
        assert self.process is not None
        values = [_rss_mib(pid) for pid in _children(self.process.pid)]
        present = [v for v in values if v is not None]
        return sum(present) if present else None


def _rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (from any of its threads)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


class Worker(threading.Thread):
    def __init__(self, index: int, kind: str, serve: Serve, stop: threading.Event,
                 envelopes: int, stages: int) -> None:
        super().__init__(name=f"soak-{kind}-{index}", daemon=True)
        self.index, self.kind, self.serve, self.stop_event = index, kind, serve, stop
        self.envelopes, self.stages = envelopes, stages
        self.acked: list[str] = []
        self.spans = 0
        self.latencies: list[float] = []
        self.requests = 0
        self.busy = 0.0

    def _payload(self, seq: int) -> tuple[list[str], list[Any]]:
        ids, spans = [], []
        for k in range(self.envelopes):
            context_id = f"soak-{self.index:02d}-{seq:07d}-{k}"
            trace = (self.index + 1) << 64 | seq << 8 | k
            ids.append(context_id)
            spans.extend(envelope_spans(trace, context_id, stages=self.stages))
        return ids, spans

    def run(self) -> None:
        host = "127.0.0.1"
        grpc_target = f"{host}:{self.serve.grpc_port}"
        send: Any
        if self.kind == "sdk-grpc":
            exporter = GrpcExporter(endpoint=grpc_target, insecure=True, timeout=10)

            def send(spans: list[Any]) -> bool:
                return exporter.export(_readable(spans)) == SpanExportResult.SUCCESS
        elif self.kind == "sdk-http":
            http_exporter = HttpExporter(
                endpoint=f"http://{host}:{self.serve.http_port}/v1/traces", timeout=10)

            def send(spans: list[Any]) -> bool:
                return http_exporter.export(_readable(spans)) == SpanExportResult.SUCCESS
        elif self.kind == "raw-grpc":
            stub = TraceServiceStub(grpc.insecure_channel(grpc_target))

            def send(spans: list[Any]) -> bool:
                stub.Export(request(spans), timeout=10)
                return True
        else:
            state: dict[str, Any] = {"connection": None}

            def send(spans: list[Any]) -> bool:
                body = _json(request(spans))
                if state["connection"] is None:
                    state["connection"] = http.client.HTTPConnection(
                        host, self.serve.http_port, timeout=10)
                try:
                    state["connection"].request("POST", "/v1/traces", body,
                                                {"Content-Type": "application/json"})
                    response = state["connection"].getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    state["connection"].close()
                    state["connection"] = None
                    raise
                return response.status == 200

        seq = 0
        while not self.stop_event.is_set():
            ids, spans = self._payload(seq)
            seq += 1
            began = time.monotonic()
            deadline = began + 120
            while True:
                try:
                    attempt = time.monotonic()
                    ok = send(spans)
                    self.busy += time.monotonic() - attempt
                    self.requests += 1
                except Exception:  # noqa: BLE001 - down during a kill, or backpressure
                    ok = False
                if ok:
                    break
                if time.monotonic() > deadline:
                    print(f"{self.name}: gave up on {ids[0]}", file=sys.stderr)
                    break
                time.sleep(0.1)
            if ok:
                self.latencies.append(time.monotonic() - began)
                self.acked.extend(ids)
                self.spans += len(spans)


def _read_bundle_ids(out: Path) -> list[str]:
    ids = []
    for path in sorted(out.glob("bundles-*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            if line.strip():
                ids.append(orjson.loads(line)["context_envelope"]["context_id"])
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--envelopes", type=int, default=5, help="envelopes a request")
    parser.add_argument("--stages", type=int, default=4, help="stage spans an envelope")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="worker kinds, taken in turn (e.g. raw-json alone: one "
                        "connection's rate, nothing else competing)")
    parser.add_argument("--serve-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for serve (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for serve (e.g. --serve-arg=--config=x.yaml)")
    parser.add_argument("--serve-checkout", type=Path, metavar="DIR",
                        help="run serve from another checkout with its own .venv (e.g. a "
                        "worktree of an older commit), to compare with it on this machine")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, aiohttp {version('aiohttp')}, grpcio "
          f"{version('grpcio')}, opentelemetry-sdk {version('opentelemetry-sdk')}, "
          f"load average at start {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        serve = Serve(Path(tmp_dir), dict(v.split("=", 1) for v in args.serve_env),
                      args.serve_arg, args.serve_checkout)
        serve.start()
        stop = threading.Event()
        kinds = args.kinds.split(",")
        unknown = set(kinds) - set(KINDS)
        if unknown:
            parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        workers = [Worker(i, kinds[i % len(kinds)], serve, stop, args.envelopes, args.stages)
                   for i in range(args.workers)]
        rss: list[tuple[float, float]] = []
        child_rss: list[tuple[float, float | None]] = []
        held: list[tuple[float, float | None]] = []
        load_samples: list[tuple[float, float]] = []
        began = time.monotonic()
        for worker in workers:
            worker.start()
        kill_at = [began + args.seconds * (k + 1) / (args.kills + 1) for k in range(args.kills)]
        restarts = []
        end = began + args.seconds
        while time.monotonic() < end:
            now = time.monotonic()
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                serve.kill()
                restarts.append(round(serve.start(), 2))
                print(f"t={now - began:.0f}s SIGKILL, restarted in {restarts[-1]} s", flush=True)
            value = serve.rss_mib()
            if value is not None:
                rss.append((now - began, value))
                child_rss.append((now - began, serve.child_rss_mib()))
                held.append((now - began, serve.held_mib()))
            load_samples.append((now - began, os.getloadavg()[0]))
            time.sleep(2)
        stop.set()
        for worker in workers:
            worker.join(180)
        elapsed = time.monotonic() - began
        load = os.getloadavg()
        code = serve.stop()
        written = _read_bundle_ids(serve.out)
    acked = [i for w in workers for i in w.acked]
    counts: dict[str, int] = {}
    for context_id in written:
        counts[context_id] = counts.get(context_id, 0) + 1
    lost = [i for i in acked if i not in counts]
    duplicated = [i for i, n in counts.items() if n > 1]
    latencies = sorted(x for w in workers for x in w.latencies)
    spans = sum(w.spans for w in workers)
    rates = {k: [round(w.requests / w.busy, 1) for w in workers if w.kind == k and w.busy]
             for k in KINDS}
    summary = {
        "seconds": round(elapsed, 1), "workers": args.workers, "kills": args.kills,
        "restart_seconds": restarts, "serve_exit_code": code,
        "acknowledged_envelopes": len(acked), "written_bundles": len(written),
        "lost": len(lost), "duplicated": len(duplicated),
        "accepted_spans_per_s": round(spans / elapsed),
        "ack_p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "ack_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1)
        if latencies else None,
        "requests_by_kind": {k: sum(len(w.latencies) for w in workers if w.kind == k)
                             for k in KINDS},
        "requests_per_s_per_worker": {k: v for k, v in rates.items() if v},
        "rss_mib": [(round(t), round(v)) for t, v in rss[:: max(1, len(rss) // 30)]],
        "rss_mib_max": round(max(v for _, v in rss)) if rss else None,
        "store_child_rss_mib": [(round(t), None if v is None else round(v))
                                for t, v in child_rss[:: max(1, len(child_rss) // 30)]],
        "store_child_rss_mib_max": max((round(v) for _, v in child_rss if v is not None),
                                       default=None),
        "held_mib": [(round(t), None if v is None else round(v, 1))
                     for t, v in held[:: max(1, len(held) // 30)]],
        "load_average_at_end": load,
        "load_1min": [(round(t), round(v, 1))
                      for t, v in load_samples[:: max(1, len(load_samples) // 30)]],
    }
    for key, value in summary.items():
        print(f"{key}: {orjson.dumps(value).decode()}")
    if lost:
        print("lost, first 5:", lost[:5])
    if duplicated:
        print("duplicated, first 5:", duplicated[:5])


if __name__ == "__main__":
    main()
