"""``--forward``: pass every received request on, unchanged, to a next OTLP/gRPC hop.

Trace requests go to ``TraceService/Export``, log requests (``logs=True``) to
``LogsService/Export``.

The request bytes go out as they came (the JSON ones as their protobuf encoding), from a
bounded queue drained by one thread. When the queue is full the receivers push back
(UNAVAILABLE / 503), so a slow next hop slows the senders instead of losing spans. A
request the next hop refuses for good (a non-retryable status) is counted and dropped;
retryable failures are retried with backoff. The queue lives in memory: a crash loses
what it held (the WAL protects bundles, not forwarding); on a graceful stop it is drained
for up to ``drain_timeout`` seconds and whatever is left is counted as dropped.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import grpc

from ._config import Target
from ._sinks import grpc_channel

__all__ = ["Forwarder"]

log = logging.getLogger(__name__)

_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
_RETRYABLE = frozenset({
    grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
})
_MAX_BACKOFF = 30.0


class Forwarder:
    """A bounded queue of raw requests and the thread that sends them on."""

    def __init__(self, target: Target, *, queue_size: int, timeout: float = 10.0) -> None:
        self.target = target
        self.queue_size = queue_size
        self.timeout = timeout
        self._queue: collections.deque[tuple[bool, bytes]] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._channel = grpc_channel(target)
        self._export = self._channel.unary_unary(_METHOD)  # bytes in, bytes out
        self._export_logs = self._channel.unary_unary(_LOGS_METHOD)
        self._thread = threading.Thread(target=self._run, name="otel-ac-forward", daemon=True)
        self.sent = 0
        self.errors = 0
        self.dropped = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def size(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        return len(self._queue) >= self.queue_size

    def put(self, body: bytes, *, logs: bool = False) -> None:
        with self._cond:
            self._queue.append((logs, body))
            self._cond.notify()

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                logs, body = self._queue[0]
            try:
                (self._export_logs if logs else self._export)(body, timeout=self.timeout)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                self.errors += 1
                if code not in _RETRYABLE:
                    log.error("forward to %s refused a request for good (%s); dropped",
                              self.target, code)
                    self.dropped += 1
                    self._pop()
                    continue
                with self._cond:
                    if self._stopping and self._deadline is not None and \
                            time.monotonic() >= self._deadline:
                        return
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
                continue
            backoff = 0.1
            self.sent += 1
            self._pop()

    _deadline: float | None = None

    def _pop(self) -> None:
        with self._cond:
            if self._queue:
                self._queue.popleft()

    def close(self, drain_timeout: float = 10.0) -> None:
        """Drain for up to ``drain_timeout`` seconds, then stop; the rest is counted dropped."""
        with self._cond:
            self._stopping = True
            self._deadline = time.monotonic() + drain_timeout
            self._cond.notify_all()
        self._thread.join(drain_timeout + self.timeout)
        with self._cond:
            if self._queue:
                log.error("forward to %s: %d requests not sent at shutdown", self.target,
                          len(self._queue))
                self.dropped += len(self._queue)
                self._queue.clear()
        self._channel.close()
