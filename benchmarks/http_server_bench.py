"""Which HTTP server library carries the OTLP/HTTP receiver: requests/s on one connection and
server CPU per request, OTLP/protobuf (the SDK's own OTLP HTTP exporter) and OTLP/JSON (a raw
keep-alive client: the Python SDK has no JSON exporter).

    pip install uvicorn httptools   # the ASGI peer; not a dependency of the package
    python benchmarks/http_server_bench.py [--rounds 5] [--seconds 3] [--old PATH]

Servers, each a subprocess with the same pipeline behind it (spans without ``context.*``
attributes: the fast path, so the server's own cost dominates):

- ``stdlib``: ``serve`` from ``--old`` (a checkout before issue 13: ``http.server``);
- ``aiohttp``: ``serve`` from this checkout (aiohttp's low-level server);
- ``uvicorn``: this checkout's pipeline and decode (``OtlpHttpReceiver._ingest``) behind a
  minimal ASGI app on uvicorn with httptools (``--asgi-child`` runs it).

Rounds are interleaved (every server, protobuf then JSON, each round); the table gives
medians over rounds. CPU per request is the server process's user+system time over the
requests of that interval. Results: benchmarks/http_server.md.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
SPANS_PER_REQUEST = 10


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_ready(process: subprocess.Popen[bytes], ready: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"server {process.args} did not start")
        time.sleep(0.05)
    time.sleep(0.1)
    return orjson.loads(ready.read_bytes())


def _start(name: str, tree: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = tmp / f"{name}.ready"
    out = tmp / name
    if name == "uvicorn":
        args = [sys.executable, __file__, "--asgi-child", str(out), str(ready)]
    else:
        args = [sys.executable, "-m", "otel_agent_context", "serve", "--otlp-grpc", "off",
                "--otlp-http", "127.0.0.1:0", "--metrics", "off", "--out", str(out),
                "--ready-file", str(ready)]
    process = subprocess.Popen(args, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, _wait_ready(process, ready)["otlp_http"]


def _spans() -> list[Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(SPANS_PER_REQUEST):
        with tracer.start_as_current_span(f"op-{i}") as span:
            span.set_attribute("http.route", "/x")
    return list(memory.get_finished_spans())


def _protobuf_rate(address: str, spans: list[Any], seconds: float) -> int:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=f"http://{address}/v1/traces", timeout=10)
    exporter.export(spans)  # connect and warm up
    count = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        count += 1
    exporter.shutdown()
    return count


def _json_body(spans: list[Any]) -> bytes:
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = json_format.MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:  # OTLP/JSON ids are hex, not base64
                        import base64
                        span[key] = base64.b64decode(span[key]).hex()
    return orjson.dumps(document)


def _json_rate(address: str, body: bytes, seconds: float, path: str = "/v1/traces") -> int:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json"}
    count = -1
    end = time.perf_counter() + seconds
    while count < 0 or time.perf_counter() < end:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        count += 1
    connection.close()
    return count


def timed(pid: int, run: Callable[..., int], *args: Any) -> tuple[float, float]:
    """Requests a second of ``run(*args)`` (which returns how many it made) and the server
    process's CPU µs a request meanwhile."""
    cpu = _cpu_seconds(pid)
    began = time.perf_counter()
    count = run(*args)
    elapsed = time.perf_counter() - began
    cpu = _cpu_seconds(pid) - cpu
    return count / elapsed, cpu / max(count, 1) * 1e6


def stop(servers: Iterable[tuple[subprocess.Popen[bytes], str]]) -> None:
    for process, _ in servers:
        process.terminate()
        process.wait(30)


def _asgi_child(out: str, ready: str) -> None:
    """uvicorn + a minimal ASGI app over the same pipeline and decode as ``serve``."""
    import asyncio

    import uvicorn

    from otel_agent_context.processor import Processor, ProcessorConfig
    from otel_agent_context.processor._http import OtlpHttpReceiver

    config = ProcessorConfig.from_values({
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0", "receivers.otlp_http.endpoint": "off",
        "metrics.endpoint": "off", "output.dir": out})
    processor = Processor(config).start()
    from otel_agent_context.processor._config import Endpoint
    receiver = OtlpHttpReceiver(processor.pipeline, Endpoint("127.0.0.1", 0),
                                max_request_bytes=config.max_request_bytes)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        parts = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        as_json = headers.get(b"content-type", b"").startswith(b"application/json")
        status, body, content_type, _ = await asyncio.get_running_loop().run_in_executor(
            receiver._pool, receiver._ingest, b"".join(parts), False, as_json,
            headers.get(b"content-encoding") == b"gzip")
        await send({"type": "http.response.start", "status": int(status),
                    "headers": [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    Path(ready).write_bytes(orjson.dumps({"otlp_http": f"127.0.0.1:{sock.getsockname()[1]}"}))
    server = uvicorn.Server(uvicorn.Config(app, http="httptools", log_level="warning",
                                           access_log=False, lifespan="off"))
    server.run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--old", type=Path, help="a checkout with the http.server receiver")
    parser.add_argument("--asgi-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.asgi_child:
        _asgi_child(*args.asgi_child)
        return
    import aiohttp
    import uvicorn
    print(f"load average {os.getloadavg()}, python {sys.version.split()[0]}, "
          f"aiohttp {aiohttp.__version__}, uvicorn {uvicorn.__version__}")
    spans = _spans()
    json_body = _json_body(spans)
    names = ["aiohttp", "uvicorn"] + (["stdlib"] if args.old else [])
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        servers = {name: _start(name, args.old if name == "stdlib" else REPO, tmp)
                   for name in names}
        try:
            for round_ in range(args.rounds):
                for name in names:
                    process, address = servers[name]
                    for kind in ("protobuf", "json"):
                        results.setdefault((name, kind), []).append(
                            timed(process.pid, _protobuf_rate, address, spans, args.seconds)
                            if kind == "protobuf"
                            else timed(process.pid, _json_rate, address, json_body,
                                       args.seconds))
                print(f"round {round_ + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}",
                      flush=True)
        finally:
            stop(servers.values())
    print("\n| server | kind | requests/s on one connection | server CPU µs/request |")
    print("|---|---|---:|---:|")
    for (name, kind), values in sorted(results.items()):
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name} | {kind} | {rate:.0f} | {cpu:.0f} |")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
