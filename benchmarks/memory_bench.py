"""``--max-memory`` under a flood: RSS of a real ``serve`` whose log sink has stalled.

    python benchmarks/memory_bench.py [--max-memory 32MiB] [--send-mib 400] [--workers 4]
                                      [--seconds 60] [--code DIR]

``serve`` runs with ``--otlp-logs`` pointing at a port nothing listens on, so its second
sink fails forever and finished envelopes cannot leave the queue (a log store that stopped
answering). ``--workers`` raw gRPC clients send requests of complete envelopes (spans with a
16 KiB attribute) until ``--send-mib`` MiB were acknowledged or ``--seconds`` passed; a
refused request (UNAVAILABLE) waits its RetryInfo delay. Reported: acknowledged MiB,
refused requests, RSS of ``serve`` at start, peak and end, and what the
``context_processor_memory_bytes`` gauge says at the end. ``--max-memory none`` omits the
flag; ``--code DIR`` runs ``serve`` from another checkout (for a before/after comparison).
Results: benchmarks/memory.md.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "processor"))
from processor_testkit import request, span  # noqa: E402 - the tests' OTLP builders

MiB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _envelopes(worker: int, index: int, count: int = 8, pad: int = 16 * 1024) -> bytes:
    spans = []
    for e in range(count):
        trace = (worker << 40) | (index << 8) | e | 1 << 60
        context_id = f"flood-{worker}-{index}-{e}"
        spans.append(span(trace, 1, "invoke_agent", {
            "context.id": context_id, "context.scope": "turn", "context.span_count": 3,
            "pad": "e" * pad}))
        for stage in range(3):
            spans.append(span(trace, 2 + stage, "context.selection", {
                "context.id": context_id, "context.selection.id": f"{context_id}-{stage}",
                "pad": chr(97 + stage) * pad}, parent=1))
    return bytes(request(spans).SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-memory", default="32MiB")
    parser.add_argument("--send-mib", type=float, default=400)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--code", default=str(REPO), help="checkout to run serve from")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    ready = tmp / "ready.json"
    command = [sys.executable, "-m", "otel_agent_context", "serve", "--out", str(tmp / "out"),
               "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "off", "--metrics", "127.0.0.1:0",
               "--otlp-logs", f"127.0.0.1:{_free_port()}", "--ready-file", str(ready),
               "--log-level", "error"]
    if args.max_memory != "none":
        command += ["--max-memory", args.max_memory]
    env = {**os.environ, "PYTHONPATH": args.code}
    with open(tmp / "serve.log", "wb") as log:
        serve = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 cwd=args.code)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if time.monotonic() > deadline or serve.poll() is not None:
                raise SystemExit(f"serve did not start: {(tmp / 'serve.log').read_text()}")
            time.sleep(0.05)
        time.sleep(0.2)
        addresses = orjson.loads(ready.read_bytes())
        start_rss = _rss(serve.pid)
        peak = [start_rss]
        acked = [0]
        refused = [0]
        lock = threading.Lock()
        stop = threading.Event()
        target = args.send_mib * MiB

        def sample() -> None:
            while not stop.wait(0.25):
                peak[0] = max(peak[0], _rss(serve.pid))

        def worker(number: int) -> None:
            stub = TraceServiceStub(grpc.insecure_channel(addresses["otlp_grpc"]))
            index = 0
            while not stop.is_set():
                body = _envelopes(number, index)
                index += 1
                try:
                    stub.Export(ExportTraceServiceRequest.FromString(body), timeout=30)
                except grpc.RpcError as exc:
                    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                        raise
                    with lock:
                        refused[0] += 1
                    stop.wait(1.0)
                    continue
                with lock:
                    acked[0] += len(body)
                    if acked[0] >= target:
                        stop.set()

        threads = [threading.Thread(target=sample)] + [
            threading.Thread(target=worker, args=(n,)) for n in range(args.workers)]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        stop.wait(args.seconds)
        stop.set()
        for thread in threads:
            thread.join(60)
        elapsed = time.monotonic() - began
        time.sleep(0.5)
        end_rss = _rss(serve.pid)
        text = urllib.request.urlopen(f"http://{addresses['metrics']}/metrics",
                                      timeout=10).read().decode()
        gauges: dict[str, Any] = {
            m.group(1): float(m.group(2)) for m in re.finditer(
                r'^context_processor_memory_bytes\{part="(\w+)"\} (\S+)$', text, re.M)}
        held = sum(gauges.values()) / MiB if gauges else None
        print(f"| {args.max_memory} | {args.workers} | {elapsed:.0f} | {acked[0] / MiB:.0f} | "
              f"{refused[0]} | {start_rss / MiB:.0f} | {peak[0] / MiB:.0f} | "
              f"{end_rss / MiB:.0f} | "
              + (f"{held:.1f}" if held is not None else "-") + " |")
    finally:
        serve.kill()
        serve.wait(30)


if __name__ == "__main__":
    main()
