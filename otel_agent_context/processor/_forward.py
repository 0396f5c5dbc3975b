"""``--forward``: pass every received request on, unchanged, to a next OTLP/gRPC hop.

Trace requests go to ``TraceService/Export``, log requests (``logs=True``) to
``LogsService/Export``.

The request bytes go out as they came (the JSON ones as their protobuf encoding), from a
bounded queue drained by one thread. When the queue is full (in requests, or in bytes) the
receivers push back (UNAVAILABLE / 503), so a slow next hop slows the senders instead of
losing spans. The queue lives in memory: a crash loses what it held (the WAL protects
bundles, not forwarding); on a graceful stop it is drained for up to ``drain_timeout``
seconds and whatever is left is counted as dropped (reason ``shutdown``).

What the next hop answers decides (the OTLP specification's list of retryable codes):

* ``UNAVAILABLE``, ``CANCELLED``, ``DEADLINE_EXCEEDED``, ``ABORTED``, ``OUT_OF_RANGE``,
  ``DATA_LOSS``, and ``RESOURCE_EXHAUSTED`` carrying a ``google.rpc.RetryInfo``: retried,
  after the delay the RetryInfo asks for, else with exponential backoff;
* ``RESOURCE_EXHAUSTED`` saying the message is too large (gRPC's "larger than max"): the
  request is split in two halves, each with its spans (or log records) under their own
  resource and scope, and the halves go on in its place; a single item too large alone is
  dropped (reason ``too_large``). A limit named in the answer (``(X vs. Y)``) is learnt,
  and so is ``forward.max_request_bytes`` from the start: a request above it is split
  before it is sent;
* anything else (``INVALID_ARGUMENT``, ``UNAUTHENTICATED``, ``RESOURCE_EXHAUSTED`` without
  RetryInfo, ...): the request is dropped and counted, reason the code's name, so one
  refused request never blocks the queue. Each reason is logged once (the counter says how
  often it happens after that).
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from ._config import DEFAULT_FORWARD_MAX_REQUEST_BYTES, Target
from ._decode import subset
from ._sinks import grpc_channel
from ._wire import LiteLogsRequest, LiteRequest

__all__ = ["DEFAULT_FORWARD_MAX_REQUEST_BYTES", "Forwarder", "split_request"]

log = logging.getLogger(__name__)

_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
#: Retried whatever the answer carries (RESOURCE_EXHAUSTED only with RetryInfo).
_RETRYABLE = frozenset({
    grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})
_MAX_BACKOFF = 30.0
_MAX_RETRY_DELAY = 60.0
_STATUS_DETAILS = "grpc-status-details-bin"
_RETRY_INFO = "google.rpc.retryinfo-bin"
_TOO_LARGE = re.compile(r"larger than (the )?max|too large|too big|message size", re.I)
_LIMIT = re.compile(r"\(\s*\d+\s+vs\.?\s+(\d+)\s*\)")
_SPANS = ("resource_spans", "scope_spans", "spans")
_LOGS = ("resource_logs", "scope_logs", "log_records")
_SHUTDOWN = "shutdown"
TOO_LARGE = "too_large"


def retry_delay(exc: grpc.RpcError) -> float | None:
    """The delay a ``google.rpc.RetryInfo`` in the answer asks for (in the status details
    or in its own trailer), None without one."""
    try:
        trailers = exc.trailing_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an error without trailers
        return None
    for key, value in trailers:
        try:
            if key == _RETRY_INFO:
                info = error_details_pb2.RetryInfo.FromString(value)
            elif key == _STATUS_DETAILS:
                for detail in status_pb2.Status.FromString(value).details:
                    if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                        info = error_details_pb2.RetryInfo()
                        detail.Unpack(info)
                        break
                else:
                    continue
            else:
                continue
        except (DecodeError, TypeError):
            continue
        delay = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
        return min(max(delay, 0.0), _MAX_RETRY_DELAY)
    return None


def split_request(body: bytes, *, logs: bool = False) -> tuple[bytes, bytes] | None:
    """Two requests holding the items (spans or log records) of ``body``, each under its
    resource and scope, of about half its size each; None when it holds fewer than two."""
    lite_type, kinds = (LiteLogsRequest, _LOGS) if logs else (LiteRequest, _SPANS)
    try:
        lite = lite_type.FromString(body)
    except DecodeError:
        return None
    items: list[tuple[int, int, int]] = []
    sizes: list[int] = []
    resources_field, scopes_field, items_field = kinds
    for r, resource in enumerate(getattr(lite, resources_field)):
        for s, scope in enumerate(getattr(resource, scopes_field)):
            for i, item in enumerate(getattr(scope, items_field)):
                items.append((r, s, i))
                sizes.append(len(item))
    if len(items) < 2:
        return None
    half, running, cut = sum(sizes) / 2, 0, 1
    for index, size in enumerate(sizes[:-1]):
        running += size
        cut = index + 1
        if running >= half:
            break
    return (subset(lite, items[:cut], lite_type(), kinds),
            subset(lite, items[cut:], lite_type(), kinds))


class Forwarder:
    """A bounded queue of raw requests and the thread that sends them on."""

    def __init__(self, target: Target, *, queue_size: int, timeout: float = 10.0,
                 max_request_bytes: int = DEFAULT_FORWARD_MAX_REQUEST_BYTES,
                 max_bytes: int | None = None) -> None:
        self.target = target
        self.queue_size = queue_size
        #: bytes the queue holds at most (None: bounded by ``queue_size`` alone)
        self.max_bytes = max_bytes
        self.timeout = timeout
        #: the next hop's limit: larger requests are split before they are sent
        self.max_request_bytes = max_request_bytes
        self._queue: collections.deque[tuple[bool, bytes]] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._deadline: float | None = None
        self._channel = grpc_channel(target)
        self._export = self._channel.unary_unary(_METHOD)  # bytes in, bytes out
        self._export_logs = self._channel.unary_unary(_LOGS_METHOD)
        self._thread = threading.Thread(target=self._run, name="otel-ac-forward", daemon=True)
        self.sent = 0
        self.errors = 0
        self.splits = 0
        #: bytes of the requests queued (the memory the queue holds)
        self.queued_bytes = 0
        #: requests dropped, by reason: a status code's name, too_large, shutdown
        self.dropped_by: dict[str, int] = {}
        self._logged: set[str] = set()

    def start(self) -> None:
        self._thread.start()

    @property
    def size(self) -> int:
        return len(self._queue)

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by.values())

    def full(self, size: int = 0) -> bool:
        """Whether a request of ``size`` bytes must wait (the queue is full)."""
        if len(self._queue) >= self.queue_size:
            return True
        return self.max_bytes is not None and self.queued_bytes + size > self.max_bytes

    def reserve(self, size: int) -> bool:
        """Take room for a request of ``size`` bytes (then :meth:`put` it with
        ``reserved=True``, or :meth:`release` it); False when the queue is full."""
        with self._cond:
            if self.full(size):
                return False
            self.queued_bytes += size
            return True

    def release(self, size: int) -> None:
        with self._cond:
            self.queued_bytes -= size

    def put(self, body: bytes, *, logs: bool = False, reserved: bool = False) -> None:
        with self._cond:
            self._queue.append((logs, body))
            if not reserved:
                self.queued_bytes += len(body)
            self._cond.notify()

    # -- the sending thread ----------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                logs, body = self._queue[0]
            if len(body) > self.max_request_bytes:
                self._split_head(logs, body, f"{len(body)} bytes, over the next hop's limit "
                                 f"of {self.max_request_bytes}")
                continue
            try:
                (self._export_logs if logs else self._export)(body, timeout=self.timeout)
            except grpc.RpcError as exc:
                self.errors += 1
                delay = self._failed(exc, logs, body)
                if delay is None:
                    backoff = 0.1
                    continue
                with self._cond:
                    if self._stopping and self._deadline is not None and \
                            time.monotonic() >= self._deadline:
                        return
                    self._cond.wait(delay if delay > 0 else backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
                continue
            backoff = 0.1
            self.sent += 1
            self._pop()

    def _failed(self, exc: grpc.RpcError, logs: bool, body: bytes) -> float | None:
        """Handle a refused send: the seconds to wait before retrying the head (0: the
        backoff's), or None when the head was split or dropped."""
        code = exc.code() if hasattr(exc, "code") else None
        details = (exc.details() if hasattr(exc, "details") else None) or ""
        name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        if code in _RETRYABLE:
            self._once(name, logging.WARNING, "forward to %s failed (%s: %s); retrying",
                       self.target, name, details)
            delay = retry_delay(exc)
            return delay if delay is not None else 0.0
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            delay = retry_delay(exc)
            if delay is not None:
                self._once("RESOURCE_EXHAUSTED_RETRY", logging.WARNING,
                           "forward to %s: the next hop is busy (%s); retrying as it asks",
                           self.target, details)
                return delay
            if _TOO_LARGE.search(details):
                limit = _LIMIT.search(details)
                if limit is not None and 0 < int(limit.group(1)) < self.max_request_bytes:
                    self.max_request_bytes = int(limit.group(1))
                self._split_head(logs, body, f"the next hop refused it as too large "
                                 f"({details})")
                return None
        self._drop_head(name.lower(), f"refused for good ({name}: {details})")
        return None

    def _split_head(self, logs: bool, body: bytes, why: str) -> None:
        halves = split_request(body, logs=logs)
        if halves is None:
            self._drop_head(TOO_LARGE, f"a request too large to forward ({why}) holds a "
                            "single span or log record")
            return
        with self._cond:
            if self._queue and self._queue[0][1] is body:
                self._queue.popleft()
                self._queue.extendleft(((logs, halves[1]), (logs, halves[0])))
                self.queued_bytes += len(halves[0]) + len(halves[1]) - len(body)
        self.splits += 1
        self._once("split", logging.INFO, "forward to %s: a request split in two (%s)",
                   self.target, why)

    def _drop_head(self, reason: str, why: str) -> None:
        self._once(reason, logging.ERROR, "forward to %s: %s; dropped (counted in "
                   "context_processor_forward_dropped_total{reason=%r}, logged once)",
                   self.target, why, reason)
        with self._cond:
            self.dropped_by[reason] = self.dropped_by.get(reason, 0) + 1
        self._pop()

    def _once(self, kind: str, level: int, message: str, *args: Any) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            log.log(level, message, *args)

    def _pop(self) -> None:
        with self._cond:
            if self._queue:
                self.queued_bytes -= len(self._queue.popleft()[1])

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
                self.dropped_by[_SHUTDOWN] = self.dropped_by.get(_SHUTDOWN, 0) + len(
                    self._queue)
                self._queue.clear()
                self.queued_bytes = 0
        self._channel.close()
