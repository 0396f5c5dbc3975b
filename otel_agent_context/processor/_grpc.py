"""The OTLP/gRPC receiver: ``TraceService/Export`` and ``LogsService/Export`` on raw bytes.

The handler takes the request undecoded (no deserializer), so the pipeline controls the
answer to a malformed one (INVALID_ARGUMENT with a message, not grpcio's INTERNAL) and can
write an all-context request to the WAL exactly as it came. Over the 64 MiB limit grpcio
itself answers RESOURCE_EXHAUSTED (OTLP: not retryable). Under backpressure the answer is
UNAVAILABLE with a ``google.rpc.RetryInfo`` both in the status details (read by the
Collector's exporter) and in the ``google.rpc.retryinfo-bin`` trailer (read by the Python
exporter); never RESOURCE_EXHAUSTED without it, which the Collector would drop. Logs (for
log-based context events) are served the same way, by the same server, token and limits.

The bearer token is checked by a server interceptor on the call's metadata, before the
request message is read: grpcio reads a unary request in the worker thread, just before the
handler, so a call without the token is answered by a stream-request handler that never
iterates its (lazy) request stream. An unauthenticated 60 MiB call costs at most HTTP/2's
flow-control window, not 60 MiB (benchmarks/grpc_auth_memory.py).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..exceptions import ConfigError
from ._config import Endpoint
from ._decode import InvalidRequest
from ._http import bearer_matches
from ._pipeline import Backpressure, IngestResult, Pipeline, RequestTooLarge

__all__ = ["GrpcReceiver", "retry_status"]

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
RETRY_INFO_TRAILER = "google.rpc.retryinfo-bin"
STATUS_DETAILS_TRAILER = "grpc-status-details-bin"


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status
):
    """A ``grpc.Status`` (what ``grpc_status.rpc_status.to_status`` builds)."""


def retry_status(message: str, retry_after: float) -> grpc.Status:
    """UNAVAILABLE carrying RetryInfo in the status details and in its own trailer."""
    seconds = math.floor(retry_after)
    retry_info = error_details_pb2.RetryInfo(
        retry_delay=Duration(seconds=seconds, nanos=int((retry_after - seconds) * 1e9))
    )
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
    status.details.add().Pack(retry_info)
    return _Status(
        grpc.StatusCode.UNAVAILABLE,
        message,
        (
            (STATUS_DETAILS_TRAILER, status.SerializeToString()),
            (RETRY_INFO_TRAILER, retry_info.SerializeToString()),
        ),
    )


def _refuse_unauthenticated(requests: Iterator[bytes], context: Any) -> bytes:
    """The handler of a call without the token: the request stream is never read."""
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
    raise AssertionError("unreachable: abort raises")


class _BearerInterceptor(grpc.ServerInterceptor):
    """Answers UNAUTHENTICATED on the metadata alone, before the body is received."""

    def __init__(self, token: bytes, on_refused: Callable[[], None]) -> None:
        self._token = token
        self._on_refused = on_refused
        self._refuse = grpc.stream_unary_rpc_method_handler(_refuse_unauthenticated)

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        header = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                header = value.decode() if isinstance(value, bytes) else value
                break
        if bearer_matches(header, self._token):
            return continuation(handler_call_details)
        self._on_refused()
        return self._refuse


class GrpcReceiver:
    """A grpcio server with generic handlers for the trace and logs Export methods."""

    def __init__(
        self,
        pipeline: Pipeline,
        endpoint: Endpoint,
        *,
        max_request_bytes: int,
        workers: int,
        tls: tuple[bytes, bytes] | None = None,
        bearer_token: str | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.endpoint = endpoint
        interceptors = []
        if bearer_token:
            interceptors.append(_BearerInterceptor(bearer_token.encode(), self._count_refused))
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otel-ac-grpc"),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_request_bytes),
                ("grpc.max_send_message_length", 4 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
            ],
        )
        handler = grpc.unary_unary_rpc_method_handler(self._export)
        logs_handler = grpc.unary_unary_rpc_method_handler(self._export_logs)
        self._server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),
            grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": logs_handler}),
        ))
        self._tls = tls
        self.port = 0

    def bind(self) -> int:
        """Bind (``endpoint.port`` 0 picks a free port) without serving yet; the port."""
        address = str(self.endpoint)
        try:
            if self._tls is not None:
                port = self._server.add_secure_port(
                    address, grpc.ssl_server_credentials([self._tls])
                )
            else:
                port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise ConfigError("receivers.otlp_grpc.endpoint",
                              f"cannot listen on {address}: {exc}") from None
        if not port:
            raise ConfigError("receivers.otlp_grpc.endpoint", f"cannot listen on {address}")
        self.port = port
        return port

    def start(self) -> int:
        """Serve (binding first if :meth:`bind` was not called); the bound port."""
        if not self.port:
            self.bind()
        self._server.start()
        return self.port

    def stop(self, grace: float = 5.0) -> None:
        """Refuse new calls, let in-flight ones finish for up to ``grace`` seconds."""
        self._server.stop(grace).wait(grace + 1)

    def _count_refused(self) -> None:
        self.pipeline.metrics.self.inc("context_processor_requests_total",
                                       ("grpc", "unauthenticated"))

    def _export(self, request: bytes, context: Any) -> bytes:
        result = self._ingest(self.pipeline.ingest, request, context)
        response = ExportTraceServiceResponse()
        if result.message:  # rejections, or repairs only (a warning: rejected_spans 0)
            response.partial_success.rejected_spans = result.rejected
            response.partial_success.error_message = result.message
        return response.SerializeToString()

    def _export_logs(self, request: bytes, context: Any) -> bytes:
        result = self._ingest(self.pipeline.ingest_logs, request, context)
        response = ExportLogsServiceResponse()
        if result.message:  # rejections, or repairs only (a warning: rejected 0)
            response.partial_success.rejected_log_records = result.rejected
            response.partial_success.error_message = result.message
        return response.SerializeToString()

    def _ingest(self, ingest: Any, request: bytes, context: Any) -> IngestResult:
        count = self.pipeline.metrics.self.inc
        try:
            result: IngestResult = ingest(request, "grpc")
        except RequestTooLarge as exc:  # can never fit: RESOURCE_EXHAUSTED, not retried
            count("context_processor_requests_total", ("grpc", "too_large"))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except InvalidRequest as exc:
            count("context_processor_requests_total", ("grpc", "invalid"))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Backpressure as exc:
            count("context_processor_requests_total", ("grpc", "unavailable"))
            context.abort_with_status(retry_status(str(exc), exc.retry_after))
        return result
