"""HTTP: the OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/logs``) and the metrics/health
endpoint.

Both run on aiohttp's low-level server (chosen by measurement, benchmarks/http_server.md) in
one event-loop thread each: an idle or half-open connection costs a socket and a few
objects, not a thread. aiohttp's parser (llhttp) rejects malformed requests and chunk
framing with 400, sets ``TCP_NODELAY`` and writes a small reply in one send, and drains an
unread body for a while after the reply ("lingering"), so a client sees a 413 rather than
a broken pipe. Decoding and the pipeline run in a small thread pool, never in the loop.

Limits: ``read_timeout`` seconds without a byte closes a connection (idle, half-open, or a
stalled body or TLS handshake); beyond ``max_connections`` open connections a new one is
answered 503 and closed.

OTLP/HTTP rules followed: ``application/x-protobuf`` or ``application/json`` (the reply in
the request's type), optional gzip (every member of a multi-member body), a request limit
checked before and after decompression (413), 400 with a ``google.rpc.Status`` message for
malformed bodies, 503 with ``Retry-After`` under backpressure, partial success for rejected
spans (log records on ``/v1/logs``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..exceptions import ConfigError
from ._config import DEFAULT_HTTP_MAX_CONNECTIONS, DEFAULT_HTTP_READ_TIMEOUT, Endpoint
from ._decode import InvalidRequest, json_to_protobuf
from ._decode_logs import logs_json_to_protobuf
from ._metrics import MetricsRegistry
from ._pipeline import Backpressure, Pipeline, RequestTooLarge

__all__ = ["HttpServer", "MetricsServer", "OtlpHttpReceiver", "bearer_matches"]

log = logging.getLogger(__name__)


class _ServerLog:
    """The logger aiohttp's connection handler is given: what it logs with a traceback (a
    request whose framing is malformed, a client that goes away mid-request) comes from
    any client that can connect, so it is logged at most once every ``every`` seconds,
    with how many were left out since; the rest goes to debug."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._next = 0.0
        self._left_out = 0
        self._flush_set = False

    def exception(self, msg: str, *args: Any, **kw: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._left_out += 1
                left_out = -1
                set_flush, self._flush_set = not self._flush_set, True
            else:
                self._next = now + self.every
                left_out, self._left_out = self._left_out, 0
                set_flush = False
        if left_out < 0:
            log.debug(msg, *args, **kw)
            if set_flush:  # on the server's loop: tell the count at the window's end
                try:
                    asyncio.get_running_loop().call_later(self._next - now, self.flush)
                except RuntimeError:  # not on a loop: told with the next one logged
                    self._flush_set = False
            return
        if left_out:
            msg += f" (and {left_out} more such errors since the last one logged)"
        kw.setdefault("exc_info", True)
        log.error(msg, *args, **kw)

    def flush(self) -> None:
        """The errors left out since the last one logged, counted (window end, shutdown)."""
        with self._lock:
            left_out, self._left_out = self._left_out, 0
            self._flush_set = False
            if left_out:
                self._next = time.monotonic() + self.every
        if left_out:
            log.error("%d more errors handling malformed or broken HTTP requests (tracebacks "
                      "at debug)", left_out)

    def __getattr__(self, name: str) -> Any:  # debug, warning, ...: as they are
        return getattr(log, name)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
SERVER_NAME = "otel-agent-context"
#: An unauthenticated request body up to this size is drained so the client reads the 401;
#: a bigger one closes the connection instead of reading it.
_DRAIN_UNAUTHENTICATED = 1 << 20
_FULL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Retry-After: 1\r\nContent-Length: 21\r\nConnection: close\r\n\r\n"
         b"too many connections\n")

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
Reply = tuple[int, bytes, str, tuple[tuple[str, str], ...]]


def bearer_matches(header: str | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header carries ``token`` in the Bearer scheme (the scheme
    name is case-insensitive, RFC 7235 section 2.1)."""
    scheme, _, given = (header or "").strip().partition(" ")
    # compare_digest on every path, so timing tells nothing about the scheme either
    # (a header of non-UTF-8 bytes arrives with surrogates: compared, never a 500)
    same = hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token)
    return same and scheme.lower() == "bearer"


class _Refuse(asyncio.Protocol):
    """A connection beyond the limit: one 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_FULL)
        transport.close()


class HttpServer:
    """An aiohttp server on an :class:`Endpoint`, its event loop in a background thread.

    The socket is bound here, so a taken port fails at construction (naming ``key``)."""

    def __init__(self, endpoint: Endpoint, handler: Handler, *, key: str,
                 ssl_context: ssl.SSLContext | None = None,
                 read_timeout: float = DEFAULT_HTTP_READ_TIMEOUT,
                 max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS) -> None:
        family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((endpoint.host, endpoint.port))
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            raise ConfigError(key, f"cannot listen on {endpoint}: {exc.strerror}") from None
        sock.setblocking(False)
        self._sock = sock
        self.port: int = sock.getsockname()[1]
        self._handler = handler
        self._ssl_context = ssl_context
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._loop = asyncio.new_event_loop()
        self._server_log = _ServerLog()
        self._web: web.Server | None = None
        self._server: asyncio.Server | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"otel-ac-http-{self.port}",
                                        daemon=True)

    @property
    def connections(self) -> int:
        """Open connections (TLS ones once their handshake is done)."""
        return len(self._web.connections) if self._web is not None else 0

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._listen())
        finally:
            self._started.set()
        self._loop.run_forever()

    async def _listen(self) -> None:
        self._web = server = web.Server(
            self._handler, access_log=None, logger=self._server_log,
            keepalive_timeout=self.read_timeout,
            lingering_time=self.read_timeout, auto_decompress=False,
            handler_cancellation=False,  # a started ingest finishes even if the client goes
        )

        def protocol() -> asyncio.BaseProtocol:
            if len(server.connections) >= self.max_connections:
                return _Refuse()
            return server()

        self._server = await self._loop.create_server(
            protocol, sock=self._sock, ssl=self._ssl_context, backlog=1024,
            ssl_handshake_timeout=self.read_timeout if self._ssl_context else None,
        )

    def start(self) -> int:
        self._thread.start()
        self._started.wait(10)
        return self.port

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._web is not None:
            await self._web.shutdown(2.0)
        self._server_log.flush()

    def stop(self) -> None:
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            except Exception:  # noqa: BLE001 - best effort: the loop stops below anyway
                log.debug("HTTP server shutdown failed", exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()
        self._sock.close()


def _response(status: int, body: bytes, content_type: str,
              headers: tuple[tuple[str, str], ...] = ()) -> web.Response:
    response = web.Response(status=status, body=body,
                            headers={"Content-Type": content_type, "Server": SERVER_NAME})
    for name, value in headers:
        response.headers[name] = value
    return response


def _error_reply(http_status: int, code: int, message: str, as_json: bool,
                 headers: tuple[tuple[str, str], ...] = (), status: Any = None) -> Reply:
    status = status if status is not None else status_pb2.Status(code=code, message=message)
    if as_json:
        return http_status, json_format.MessageToJson(status, indent=None).encode(), JSON, headers
    return http_status, status.SerializeToString(), PROTOBUF, headers


class OtlpHttpReceiver:
    """``POST /v1/traces`` and ``POST /v1/logs`` into the pipeline."""

    def __init__(self, pipeline: Pipeline, endpoint: Endpoint, *, max_request_bytes: int,
                 ssl_context: ssl.SSLContext | None = None,
                 bearer_token: str | None = None,
                 read_timeout: float = DEFAULT_HTTP_READ_TIMEOUT,
                 max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS,
                 workers: int = 8) -> None:
        self.pipeline = pipeline
        self.max_request_bytes = max_request_bytes
        self.read_timeout = read_timeout
        self._token = bearer_token.encode() if bearer_token else None
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="otel-ac-http-work")
        self._http = HttpServer(endpoint, self.handle, key="receivers.otlp_http.endpoint",
                                ssl_context=ssl_context, read_timeout=read_timeout,
                                max_connections=max_connections)
        self.port = self._http.port

    @property
    def connections(self) -> int:
        return self._http.connections

    def start(self) -> int:
        return self._http.start()

    def stop(self) -> None:
        self._http.stop()
        self._pool.shutdown(wait=True)

    # -- one request -----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        count = self.pipeline.metrics.self.inc
        logs = request.path == LOGS_PATH
        if request.path != TRACES_PATH and not logs:
            return _closing(_response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain"))
        if request.method != "POST":
            return _closing(_response(HTTPStatus.METHOD_NOT_ALLOWED, b"use POST\n",
                                      "text/plain", (("Allow", "POST"),)))
        content_type = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        as_json = content_type == JSON
        if self._token is not None and not bearer_matches(request.headers.get("Authorization"),
                                                          self._token):
            count("context_processor_requests_total", ("http", "unauthenticated"))
            response = _reply(_error_reply(
                HTTPStatus.UNAUTHORIZED, code_pb2.UNAUTHENTICATED,
                "missing or wrong bearer token", as_json, (("WWW-Authenticate", "Bearer"),)))
            length = request.content_length
            if length is None or length > _DRAIN_UNAUTHENTICATED:
                _closing(response)  # not worth reading: close instead of draining
            return response
        if content_type not in (PROTOBUF, JSON):
            count("context_processor_requests_total", ("http", "unsupported"))
            return _reply(_error_reply(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE, code_pb2.INVALID_ARGUMENT,
                f"Content-Type must be {PROTOBUF} or {JSON}, got {content_type!r}", False))
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            count("context_processor_requests_total", ("http", "unsupported"))
            return _reply(_error_reply(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE, code_pb2.INVALID_ARGUMENT,
                f"Content-Encoding must be gzip or identity, got {encoding!r}", as_json))
        limit = self.max_request_bytes
        length = request.content_length
        if length is None and "chunked" not in request.headers.get("Transfer-Encoding", ""):
            return _closing(_reply(_error_reply(
                HTTPStatus.LENGTH_REQUIRED, code_pb2.INVALID_ARGUMENT,
                "Content-Length is required", as_json)))
        if length is not None and length > limit:
            count("context_processor_requests_total", ("http", "too_large"))
            # not read now; aiohttp drains it after the reply (up to read_timeout)
            return _reply(_error_reply(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                f"request of {length} bytes is larger than the limit of {limit}", as_json))
        try:
            body = await self._read(request, limit)
        except asyncio.TimeoutError:
            return _closing(_reply(_error_reply(
                HTTPStatus.REQUEST_TIMEOUT, code_pb2.INVALID_ARGUMENT,
                f"no body bytes for {self.read_timeout} s", as_json)))
        except Exception as exc:  # noqa: BLE001 - aiohttp's framing errors (bad chunks, short)
            count("context_processor_requests_total", ("http", "invalid"))
            return _closing(_reply(_error_reply(
                HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT,
                f"malformed request body: {exc}", as_json)))
        if body is None:
            count("context_processor_requests_total", ("http", "too_large"))
            return _reply(_error_reply(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                f"request larger than {limit} bytes", as_json))
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self._pool, self._ingest, body, logs, as_json,
                                           encoding == "gzip")
        return _reply(reply)

    async def _read(self, request: web.BaseRequest, limit: int) -> bytes | None:
        """The whole body, or None once it passes ``limit``; TimeoutError when no byte
        arrives for ``read_timeout`` seconds."""
        content = request.content
        parts: list[bytes] = []
        total = 0
        while True:
            chunk = content.read_nowait()  # what is buffered already: no timer needed
            if not chunk and not content.is_eof():
                chunk = await asyncio.wait_for(content.readany(), self.read_timeout)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                return None
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _ingest(self, body: bytes, logs: bool, as_json: bool, gzipped: bool) -> Reply:
        """Decompress, decode and ingest one request (in the worker pool)."""
        count = self.pipeline.metrics.self.inc
        if gzipped:
            try:
                body = gunzip(body, self.max_request_bytes)
            except _TooLarge:
                count("context_processor_requests_total", ("http", "too_large"))
                return _error_reply(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                    f"request larger than {self.max_request_bytes} bytes after decompression",
                    as_json)
            except ValueError as exc:
                count("context_processor_requests_total", ("http", "invalid"))
                return _error_reply(HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT,
                                    str(exc), as_json)
        ingest = self.pipeline.ingest_logs if logs else self.pipeline.ingest
        try:
            if as_json:
                request = (logs_json_to_protobuf if logs else json_to_protobuf)(body)
                result = ingest(None, "http", request=request)
            else:
                result = ingest(body, "http")
        except RequestTooLarge as exc:  # can never fit in memory.max_bytes
            count("context_processor_requests_total", ("http", "too_large"))
            return _error_reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, code_pb2.INVALID_ARGUMENT,
                                str(exc), as_json)
        except InvalidRequest as exc:
            count("context_processor_requests_total", ("http", "invalid"))
            return _error_reply(HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT, str(exc),
                                as_json)
        except Backpressure as exc:
            count("context_processor_requests_total", ("http", "unavailable"))
            return _unavailable(exc, as_json)
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
            return HTTPStatus.OK, json_format.MessageToJson(response, indent=None).encode(), \
                JSON, ()
        return HTTPStatus.OK, response.SerializeToString(), PROTOBUF, ()


class _TooLarge(Exception):
    pass


def gunzip(body: bytes, limit: int) -> bytes:
    """Every member of a gzip body (RFC 1952 allows several, concatenated). Raises
    _TooLarge past ``limit`` bytes, ValueError for a malformed or truncated body."""
    parts: list[bytes] = []
    total = 0
    rest = body
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(rest, limit - total + 1)
        except zlib.error as exc:
            raise ValueError(f"malformed gzip body: {exc}") from None
        total += len(data)
        if total > limit:
            raise _TooLarge
        parts.append(data)
        if not inflater.eof:
            raise ValueError("truncated gzip body")
        rest = inflater.unused_data
        if not rest.strip(b"\0"):  # trailing zero padding is allowed after the last member
            return b"".join(parts)


def _unavailable(exc: Backpressure, as_json: bool) -> Reply:
    seconds = math.floor(exc.retry_after)
    retry_info = error_details_pb2.RetryInfo(
        retry_delay=Duration(seconds=seconds, nanos=int((exc.retry_after - seconds) * 1e9))
    )
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=str(exc))
    status.details.add().Pack(retry_info)
    retry_after = str(max(1, math.ceil(exc.retry_after)))
    return _error_reply(HTTPStatus.SERVICE_UNAVAILABLE, code_pb2.UNAVAILABLE, str(exc), as_json,
                        (("Retry-After", retry_after),), status)


def _reply(reply: Reply) -> web.Response:
    return _response(*reply)


def _closing(response: web.Response) -> web.Response:
    response.force_close()
    response.headers["Connection"] = "close"
    return response


class MetricsServer:
    """``/metrics`` (Prometheus text or OpenMetrics), ``/healthz`` and ``/readyz``.

    With ``bearer_token``, ``/metrics`` wants ``Authorization: Bearer TOKEN`` (a Prometheus
    scrape config's ``authorization``); the health endpoints stay open for probes."""

    def __init__(self, registry: MetricsRegistry, endpoint: Endpoint,
                 ready: Callable[[], tuple[bool, dict[str, Any]]], *,
                 bearer_token: str | None = None,
                 read_timeout: float = DEFAULT_HTTP_READ_TIMEOUT,
                 max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS) -> None:
        self.registry = registry
        self.ready = ready
        self._token = bearer_token.encode() if bearer_token else None
        # one scrape at a time renders; others wait in the pool's queue, not in the loop
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="otel-ac-metrics")
        self._http = HttpServer(endpoint, self.handle, key="metrics.endpoint",
                                read_timeout=read_timeout, max_connections=max_connections)
        self.port = self._http.port

    def start(self) -> int:
        return self._http.start()

    def stop(self) -> None:
        self._http.stop()
        self._pool.shutdown(wait=True)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return _closing(_response(HTTPStatus.METHOD_NOT_ALLOWED, b"use GET\n",
                                      "text/plain", (("Allow", "GET, HEAD"),)))
        path = request.path
        if path == "/metrics":
            if self._token is not None and not bearer_matches(
                    request.headers.get("Authorization"), self._token):
                return _response(HTTPStatus.UNAUTHORIZED, b"missing or wrong bearer token\n",
                                 "text/plain", (("WWW-Authenticate", "Bearer"),))
            loop = asyncio.get_running_loop()
            try:
                body, content_type = await loop.run_in_executor(
                    self._pool, self.registry.render, request.headers.get("Accept"))
            except Exception:  # noqa: BLE001 - a scrape must never kill the server
                log.exception("rendering /metrics failed")
                return _response(500, b"metrics failed\n", "text/plain")
            return _response(200, body, content_type)
        if path == "/healthz":
            return _response(200, b"ok\n", "text/plain")
        if path == "/readyz":
            ready, detail = self.ready()
            return _response(200 if ready else 503, orjson.dumps(detail) + b"\n", JSON)
        return _response(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")
