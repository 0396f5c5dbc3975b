"""Where rebuilt bundles go: JSON Lines files (the default) and OTLP log records.

A sink's ``write`` either takes the whole batch or raises; the pipeline then retries the
same batch with backoff while the receivers push back, so a stalled sink loses nothing.
JSON Lines is written on the pipeline's emitter thread, every other sink on a thread of its
own (``_pipeline._SinkThread``): a stalled log sink does not hold up the file.

Exactly once across a crash (JSON Lines): the pipeline records in the WAL, after every
written batch, the file position the batch ended at. On restart, the lines past the last
recorded position are bundles written without that record: :meth:`JsonlSink.recover`
returns their keys so they are not written again, and a torn last line (a write the crash
cut short) is cut off, to be written whole by the replay. The OTLP log sink is at least
once: a crash between its export and the WAL record sends that batch again, and bundles the
JSON Lines file took but the WAL never recorded are handed to every other sink at the next
start (the bundle store stores them once, the OTLP log sink sends them, perhaps again).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc
import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import SEVERITY_NUMBER_INFO

from .. import _semconv as S
from .._version import __version__
from ._config import Target

__all__ = [
    "LOG_EVENT_NAME",
    "JsonlSink",
    "OtlpLogSink",
    "Sink",
    "bundle_key",
    "encode_any_value",
    "grpc_channel",
]

log = logging.getLogger(__name__)

#: ``fdatasync`` where the platform has it (Linux), ``fsync`` elsewhere (macOS).
_fdatasync = getattr(os, "fdatasync", os.fsync)

#: Event name of the OTLP log record that carries a bundle (issue 3: ``context.envelope``,
#: the same name as the envelope span).
LOG_EVENT_NAME = S.SPAN_ENVELOPE
_FILE = re.compile(r"^bundles-(\d{6})\.jsonl$")

Key = tuple[str, str]


def bundle_key(bundle: Mapping[str, Any]) -> Key:
    """(trace id, context id) of a bundle: the same key the buffer groups spans by."""
    envelope = bundle.get("context_envelope") or {}
    refs = envelope.get("telemetry_refs") or [{}]
    return (str(refs[0].get("trace_id", "")), str(envelope.get("context_id", "")))


class Sink(Protocol):
    name: str

    def write(self, batch: Sequence[tuple[Key, dict[str, Any], bytes]]) -> None:
        """Write (key, bundle, JSON line) entries, all or none; raise on failure."""

    def close(self) -> None: ...


class JsonlSink:
    """``DIR/bundles-NNNNNN.jsonl``: one bundle a line, a new file past ``max_file_bytes``."""

    name = "jsonl"

    def __init__(self, directory: str | os.PathLike[str], *, max_file_bytes: int,
                 fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.max_file_bytes = max_file_bytes
        self.fsync = fsync
        self._seq = 0
        self._fd = -1
        self._size = 0
        self.directory.mkdir(parents=True, exist_ok=True)

    def _files(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_FILE.match, os.listdir(self.directory)) if m)

    def path(self, seq: int | None = None) -> Path:
        return self.directory / f"bundles-{self._seq if seq is None else seq:06d}.jsonl"

    def open(self) -> None:
        """Open the newest file for appending, cutting off a torn last line."""
        files = self._files()
        self._seq = files[-1] if files else 1
        path = self.path()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        if size:
            keep = _last_newline_end(path, size)
            if keep < size:
                log.warning("%s: cut a torn last line of %d bytes (it will be rewritten)",
                            path.name, size - keep)
                os.ftruncate(self._fd, keep)
                size = keep
        self._size = size

    @property
    def position(self) -> tuple[int, int]:
        """(file number, size): where the next bundle will start."""
        return (self._seq, self._size)

    def recover(self, since: tuple[int, int] | None
                ) -> list[tuple[Key, dict[str, Any], bytes]]:
        """The bundles (key, bundle, line) written at or after ``since`` (the last recorded
        position): written here, perhaps not to the other sinks, before a crash."""
        if since is None:
            return []
        keys: list[tuple[Key, dict[str, Any], bytes]] = []
        for seq in self._files():
            if seq < since[0]:
                continue
            path = self.path(seq)
            with open(path, "rb") as handle:
                if seq == since[0]:
                    handle.seek(since[1])
                for line in handle:
                    if not line.endswith(b"\n"):
                        break  # torn; open() cuts it
                    try:
                        bundle = orjson.loads(line)
                        keys.append((bundle_key(bundle), bundle, line))
                    except orjson.JSONDecodeError:
                        log.error("%s: unreadable line ignored during recovery", path.name)
        return keys

    def write(self, batch: Sequence[tuple[Key, dict[str, Any], bytes]]) -> None:
        if self._size >= self.max_file_bytes:
            self._rotate()
        data = b"".join(line for _, _, line in batch)
        start = self._size
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.fsync:
                _fdatasync(self._fd)
        except OSError:
            # All or none: take back a partial write so a retry leaves no torn line.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                log.exception("%s: could not undo a partial write", self.path().name)
            raise
        self._size = start + len(data)

    def _rotate(self) -> None:
        os.close(self._fd)
        self._seq += 1
        self._fd = os.open(self.path(), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = 0
        if self.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _last_newline_end(path: Path, size: int) -> int:
    """Offset just after the last newline of the file (0 if it has none)."""
    with open(path, "rb") as handle:
        block = 64 * 1024
        end = size
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start)
            index = chunk.rfind(b"\n")
            if index >= 0:
                return start + index + 1
            end = start
    return 0


# -- OTLP logs ------------------------------------------------------------------------------------


def encode_any_value(value: Any, out: AnyValue) -> None:
    """A JSON-shaped value as an OTLP ``AnyValue`` (maps become kvlists, lists arrays)."""
    if value is None:
        return
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, Mapping):
        kvlist = out.kvlist_value
        kvlist.SetInParent()
        for key, item in value.items():
            kv = kvlist.values.add()
            kv.key = str(key)
            encode_any_value(item, kv.value)
    elif isinstance(value, (list, tuple)):
        array = out.array_value
        array.SetInParent()
        for item in value:
            encode_any_value(item, array.values.add())
    else:
        out.string_value = str(value)


def grpc_channel(target: Target) -> grpc.Channel:
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    if target.secure:
        return grpc.secure_channel(target.address, grpc.ssl_channel_credentials(), options)
    return grpc.insecure_channel(target.address, options)


class OtlpLogSink:
    """Each bundle as an OTLP log record with event name ``context.envelope``.

    The body is the bundle itself (a kvlist); the record carries the envelope span's trace
    and span id, so a log store links it to the trace, and ``context.id`` /
    ``context.scope`` as attributes.
    """

    name = "otlp_logs"

    def __init__(self, target: Target, *, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self._channel = grpc_channel(target)
        self._stub = LogsServiceStub(self._channel)

    def request(
        self, batch: Sequence[tuple[Key, dict[str, Any], bytes]]
    ) -> ExportLogsServiceRequest:
        request = ExportLogsServiceRequest()
        resource_logs = request.resource_logs.add()
        kv = resource_logs.resource.attributes.add()
        kv.key = "service.name"
        kv.value.string_value = "otel-agent-context-processor"
        scope_logs = resource_logs.scope_logs.add()
        scope_logs.scope.name = "otel_agent_context.processor"
        scope_logs.scope.version = __version__
        now = time.time_ns()
        for (trace_id, context_id), bundle, _ in batch:
            record = scope_logs.log_records.add()
            record.time_unix_nano = now
            record.observed_time_unix_nano = now
            record.severity_number = SEVERITY_NUMBER_INFO
            record.severity_text = "INFO"
            record.event_name = LOG_EVENT_NAME
            encode_any_value(bundle, record.body)
            envelope = bundle.get("context_envelope") or {}
            for key, value in ((S.CONTEXT_ID, context_id),
                               (S.CONTEXT_SCOPE, envelope.get("scope"))):
                if value:
                    attribute = record.attributes.add()
                    attribute.key = key
                    attribute.value.string_value = str(value)
            try:
                record.trace_id = bytes.fromhex(trace_id)
                refs = envelope.get("telemetry_refs") or []
                if refs and refs[0].get("span_id"):
                    record.span_id = bytes.fromhex(refs[0]["span_id"])
            except ValueError:
                pass
        return request

    def write(self, batch: Sequence[tuple[Key, dict[str, Any], bytes]]) -> None:
        response = self._stub.Export(self.request(batch), timeout=self.timeout)
        rejected = response.partial_success.rejected_log_records
        if rejected:
            # Rejected records are not retryable (OTLP): say so loudly, do not loop on them.
            log.error("OTLP log sink %s rejected %d of %d records: %s", self.target, rejected,
                      len(batch), response.partial_success.error_message)

    def close(self) -> None:
        self._channel.close()
