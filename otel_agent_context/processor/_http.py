"""HTTP: the OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/logs``) and the metrics/health
endpoint.

Both are the standard library's threading HTTP/1.1 server (keep-alive, one thread a
connection): the work per request is the pipeline's, not the server's. TLS handshakes run
in the connection's thread, never in the accept loop.

OTLP/HTTP rules followed: ``application/x-protobuf`` or ``application/json`` (the reply in
the request's type), optional gzip, a request limit checked before and after
decompression (413), 400 with a ``google.rpc.Status`` message for malformed bodies,
503 with ``Retry-After`` under backpressure, partial success for rejected spans (log
records on ``/v1/logs``).
"""

from __future__ import annotations

import hmac
import logging
import math
import socket
import ssl
import threading
import zlib
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..exceptions import ConfigError
from ._config import Endpoint
from ._decode import InvalidRequest, json_to_protobuf
from ._decode_logs import logs_json_to_protobuf
from ._metrics import MetricsRegistry
from ._pipeline import Backpressure, Pipeline

__all__ = ["HttpServer", "MetricsServer", "OtlpHttpReceiver"]

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None
    owner: Any = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(30)  # a handshake that never comes must not hold the thread
        secure = self.ssl_context.wrap_socket(request, server_side=True)
        try:
            secure.settimeout(None)
            super().finish_request(secure, client_address)
        finally:
            secure.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("HTTP connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpServer:
    """A threading HTTP server on an :class:`Endpoint`, run in a background thread."""

    def __init__(self, endpoint: Endpoint, handler: type[BaseHTTPRequestHandler], owner: Any,
                 *, key: str, ssl_context: ssl.SSLContext | None = None) -> None:
        server_class = _Server6 if ":" in endpoint.host else _Server
        try:
            self.server = server_class((endpoint.host, endpoint.port), handler)
        except OSError as exc:
            raise ConfigError(key, f"cannot listen on {endpoint}: {exc.strerror}") from None
        self.server.ssl_context = ssl_context
        self.server.owner = owner
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={
            "poll_interval": 0.1}, name=f"otel-ac-http-{self.port}", daemon=True)

    def start(self) -> int:
        self._thread.start()
        return self.port

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: only if it runs
            self.server.shutdown()
            self._thread.join(5)
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otel-agent-context"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        log.debug("%s - " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _OtlpHandler(_Handler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        receiver: OtlpHttpReceiver = self.server.owner
        receiver.handle(self)

    def _not_allowed(self) -> None:
        path = self.path.split("?", 1)[0]
        self.close_connection = True
        if path in (TRACES_PATH, LOGS_PATH):
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"use POST\n", "text/plain",
                       (("Allow", "POST"),))
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed  # noqa: N815


class OtlpHttpReceiver:
    """``POST /v1/traces`` and ``POST /v1/logs`` into the pipeline."""

    def __init__(self, pipeline: Pipeline, endpoint: Endpoint, *, max_request_bytes: int,
                 ssl_context: ssl.SSLContext | None = None,
                 bearer_token: str | None = None) -> None:
        self.pipeline = pipeline
        self.max_request_bytes = max_request_bytes
        self._expected_auth = f"Bearer {bearer_token}".encode() if bearer_token else None
        self._http = HttpServer(endpoint, _OtlpHandler, self, key="receivers.otlp_http.endpoint",
                                ssl_context=ssl_context)
        self.port = self._http.port

    def start(self) -> int:
        return self._http.start()

    def stop(self) -> None:
        self._http.stop()

    # -- one request -----------------------------------------------------------------------------
    def handle(self, h: _OtlpHandler) -> None:
        count = self.pipeline.metrics.self.inc
        path = h.path.split("?", 1)[0]
        logs = path == LOGS_PATH
        if path != TRACES_PATH and not logs:
            h.close_connection = True
            h._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        content_type = (h.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        as_json = content_type == JSON
        if self._expected_auth is not None:
            given = (h.headers.get("Authorization") or "").encode()
            if not hmac.compare_digest(given, self._expected_auth):
                count("context_processor_requests_total", ("http", "unauthenticated"))
                self._drain_or_close(h)
                self._error(h, HTTPStatus.UNAUTHORIZED, code_pb2.UNAUTHENTICATED,
                            "missing or wrong bearer token", as_json,
                            (("WWW-Authenticate", "Bearer"),))
                return
        if content_type not in (PROTOBUF, JSON):
            count("context_processor_requests_total", ("http", "unsupported"))
            self._drain_or_close(h)
            self._error(h, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, code_pb2.INVALID_ARGUMENT,
                        f"Content-Type must be {PROTOBUF} or {JSON}, got {content_type!r}",
                        False)
            return
        encoding = (h.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            count("context_processor_requests_total", ("http", "unsupported"))
            self._drain_or_close(h)
            self._error(h, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, code_pb2.INVALID_ARGUMENT,
                        f"Content-Encoding must be gzip or identity, got {encoding!r}", as_json)
            return
        body = self._read_body(h, as_json)
        if body is None:
            return
        if encoding == "gzip":
            body = self._gunzip(h, body, as_json)
            if body is None:
                return
        ingest = self.pipeline.ingest_logs if logs else self.pipeline.ingest
        try:
            if as_json:
                request = (logs_json_to_protobuf if logs else json_to_protobuf)(body)
                result = ingest(None, "http", request=request)
            else:
                result = ingest(body, "http")
        except InvalidRequest as exc:
            count("context_processor_requests_total", ("http", "invalid"))
            self._error(h, HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT, str(exc), as_json)
            return
        except Backpressure as exc:
            count("context_processor_requests_total", ("http", "unavailable"))
            self._unavailable(h, exc, as_json)
            return
        response: Any
        if logs:
            response = ExportLogsServiceResponse()
            if result.message:  # rejections, or repairs only (a warning: rejected 0)
                response.partial_success.rejected_log_records = result.rejected
                response.partial_success.error_message = result.message
        else:
            response = ExportTraceServiceResponse()
            if result.message:  # rejections, or repairs only (a warning: rejected_spans 0)
                response.partial_success.rejected_spans = result.rejected
                response.partial_success.error_message = result.message
        if as_json:
            h._send(HTTPStatus.OK, json_format.MessageToJson(response, indent=None).encode(),
                    JSON)
        else:
            h._send(HTTPStatus.OK, response.SerializeToString(), PROTOBUF)

    def _read_body(self, h: _OtlpHandler, as_json: bool) -> bytes | None:
        count = self.pipeline.metrics.self.inc
        limit = self.max_request_bytes
        if (h.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            body = _read_chunked(h.rfile, limit)
            if body is None:
                count("context_processor_requests_total", ("http", "too_large"))
                h.close_connection = True
                self._error(h, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                            f"request larger than {limit} bytes", as_json)
            return body
        try:
            length = int(h.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if length < 0:
            h.close_connection = True
            self._error(h, HTTPStatus.LENGTH_REQUIRED, code_pb2.INVALID_ARGUMENT,
                        "Content-Length is required", as_json)
            return None
        if length > limit:
            count("context_processor_requests_total", ("http", "too_large"))
            h.close_connection = True  # the body is not read: the connection cannot go on
            self._error(h, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                        f"request of {length} bytes is larger than the limit of {limit}",
                        as_json)
            return None
        body = h.rfile.read(length)
        if len(body) < length:
            h.close_connection = True
            return None
        return body

    def _gunzip(self, h: _OtlpHandler, body: bytes, as_json: bool) -> bytes | None:
        limit = self.max_request_bytes
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error as exc:
            self.pipeline.metrics.self.inc("context_processor_requests_total", ("http", "invalid"))
            self._error(h, HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT,
                        f"malformed gzip body: {exc}", as_json)
            return None
        if len(data) > limit:
            self.pipeline.metrics.self.inc("context_processor_requests_total",
                                           ("http", "too_large"))
            self._error(h, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                        f"request larger than {limit} bytes after decompression", as_json)
            return None
        if not inflater.eof:
            self.pipeline.metrics.self.inc("context_processor_requests_total", ("http", "invalid"))
            self._error(h, HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT,
                        "truncated gzip body", as_json)
            return None
        return data

    def _drain_or_close(self, h: _OtlpHandler) -> None:
        """Read and discard a refused request's body, or close when it is too big to."""
        try:
            length = int(h.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if 0 <= length <= 1 << 20:
            h.rfile.read(length)
        else:
            h.close_connection = True

    @staticmethod
    def _error(h: _OtlpHandler, http_status: int, code: int, message: str, as_json: bool,
               headers: tuple[tuple[str, str], ...] = (), status: Any = None) -> None:
        status = status if status is not None else status_pb2.Status(code=code, message=message)
        if as_json:
            body = json_format.MessageToJson(status, indent=None).encode()
            h._send(http_status, body, JSON, headers)
        else:
            h._send(http_status, status.SerializeToString(), PROTOBUF, headers)

    def _unavailable(self, h: _OtlpHandler, exc: Backpressure, as_json: bool) -> None:
        seconds = math.floor(exc.retry_after)
        retry_info = error_details_pb2.RetryInfo(
            retry_delay=Duration(seconds=seconds, nanos=int((exc.retry_after - seconds) * 1e9))
        )
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=str(exc))
        status.details.add().Pack(retry_info)
        retry_after = str(max(1, math.ceil(exc.retry_after)))
        self._error(h, HTTPStatus.SERVICE_UNAVAILABLE, code_pb2.UNAVAILABLE, str(exc), as_json,
                    (("Retry-After", retry_after),), status)


def _read_chunked(rfile: Any, limit: int) -> bytes | None:
    """A chunked body, or None once it passes ``limit`` bytes."""
    parts: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(1024)
        try:
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        except ValueError:
            return b""
        if size == 0:
            while rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(parts)
        total += size
        if total > limit:
            return None
        parts.append(rfile.read(size))
        rfile.readline(1024)


class _MetricsHandler(_Handler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        owner: MetricsServer = self.server.owner
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body, content_type = owner.registry.render(self.headers.get("Accept"))
            except Exception:  # noqa: BLE001 - a scrape must never kill the server
                log.exception("rendering /metrics failed")
                self._send(500, b"metrics failed\n", "text/plain")
                return
            self._send(200, body, content_type)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready, detail = owner.ready()
            self._send(200 if ready else 503, orjson.dumps(detail) + b"\n", JSON)
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

    do_HEAD = do_GET  # noqa: N815


class MetricsServer:
    """``/metrics`` (Prometheus text or OpenMetrics), ``/healthz`` and ``/readyz``."""

    def __init__(self, registry: MetricsRegistry, endpoint: Endpoint,
                 ready: Callable[[], tuple[bool, dict[str, Any]]]) -> None:
        self.registry = registry
        self.ready = ready
        self._http = HttpServer(endpoint, _MetricsHandler, self, key="metrics.endpoint")
        self.port = self._http.port

    def start(self) -> int:
        return self._http.start()

    def stop(self) -> None:
        self._http.stop()
