"""The processor as one object: pipeline, receivers, metrics endpoint, start and stop.

Start order: metrics endpoint (so ``/healthz`` answers during a long WAL replay), WAL
replay, then the receivers; ``/readyz`` turns 200 and the ready file is written only after
that. Stop order: receivers first (in-flight exports finish), then the pipeline flushes
every pending envelope as ``partial`` and the sinks drain.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import ssl
import threading
from collections.abc import Sequence
from typing import Any

from google.protobuf.internal import api_implementation

from ._config import ProcessorConfig
from ._grpc import GrpcReceiver
from ._http import MetricsServer, OtlpHttpReceiver
from ._metrics import MetricsRegistry, OtlpMetricsPush
from ._pipeline import Pipeline, RebuildFunction
from ._sinks import Sink
from ._ui import UiServer

__all__ = ["GC_THRESHOLD", "Processor", "check_protobuf_backend", "tune_gc"]

log = logging.getLogger(__name__)


#: ``gc.set_threshold`` for a process that is only a processor: every buffered span is a few
#: tracked objects, so the default young-generation threshold (700) runs a collection every
#: request or two; 50,000 cuts ingest time by 10-15% (benchmarks/processor.md).
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """Fewer garbage collections, for a process that runs nothing but the processor
    (``serve`` calls it; an embedding application decides for itself)."""
    gc.freeze()  # what start-up created is never garbage
    gc.set_threshold(*GC_THRESHOLD)


def check_protobuf_backend() -> str:
    """The protobuf backend; warns loudly unless it is upb (the others parse ~100x slower)."""
    backend = api_implementation.Type()
    if backend != "upb":
        log.warning(
            "protobuf backend is %r, not 'upb': decoding will be about 100 times slower. "
            "Install a protobuf wheel for this platform and unset "
            "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION.", backend,
        )
    return backend


class Processor:
    """``otel-agent-context serve`` in-process: ``start()``, ``addresses``, ``stop()``."""

    def __init__(self, config: ProcessorConfig, *, rebuild: RebuildFunction | None = None,
                 sinks: Sequence[Sink] | None = None) -> None:
        self.config = config
        self.metrics = MetricsRegistry(config.metrics_label_values)
        self.pipeline = Pipeline(config, self.metrics, rebuild=rebuild, sinks=sinks)
        self.grpc: GrpcReceiver | None = None
        self.http: OtlpHttpReceiver | None = None
        self.metrics_server: MetricsServer | None = None
        self.ui: UiServer | None = None
        self.addresses: dict[str, str] = {}
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._started = False

    def _ready(self) -> tuple[bool, dict[str, Any]]:
        ready = self._started and self.pipeline.accepting
        return ready, {"ready": ready, "queue": self.pipeline.queue_size,
                       "queue_capacity": self.config.queue_size,
                       "memory_bytes": self.pipeline.memory_held(),
                       "memory_limit_bytes": self.pipeline.memory.by_part()}

    def start(self) -> Processor:
        """Replay the WAL and listen. Raises ConfigError (naming the key) if it cannot bind."""
        check_protobuf_backend()
        config = self.config
        try:
            if config.metrics is not None:
                self.metrics_server = MetricsServer(
                    self.metrics, config.metrics, self._ready,
                    bearer_token=config.bearer_token if config.metrics_auth else None,
                    read_timeout=config.read_timeout, max_connections=config.max_connections)
                port = self.metrics_server.start()
                self.addresses["metrics"] = f"{_host(config.metrics.host)}:{port}"
            if config.metrics_otlp is not None:
                self.metrics.push = OtlpMetricsPush(config.metrics_otlp,
                                                    interval=config.metrics_interval)
            tls = config.tls_credentials()
            ssl_context = None
            if tls is not None:
                ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                assert config.tls_cert_file is not None and config.tls_key_file is not None
                ssl_context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
            # Bind everything before replaying, so a taken port fails before the WAL is
            # touched; serve only after the replay.
            if config.otlp_grpc is not None:
                self.grpc = GrpcReceiver(
                    self.pipeline, config.otlp_grpc, max_request_bytes=config.max_request_bytes,
                    workers=config.grpc_workers, tls=tls, bearer_token=config.bearer_token,
                )
                self.grpc.bind()
            if config.otlp_http is not None:
                self.http = OtlpHttpReceiver(
                    self.pipeline, config.otlp_http, max_request_bytes=config.max_request_bytes,
                    ssl_context=ssl_context, bearer_token=config.bearer_token,
                    read_timeout=config.read_timeout, max_connections=config.max_connections,
                    workers=config.grpc_workers,
                )
            if config.ui is not None:
                self.ui = UiServer(None, config.ui, bearer_token=config.bearer_token,
                                   trace_url_template=config.trace_url,
                                   read_timeout=config.read_timeout,
                                   max_connections=config.max_connections)
            self.pipeline.open()
            if self.ui is not None:
                assert config.ui is not None and self.pipeline.store is not None
                self.ui.store = self.pipeline.store.opened
                port = self.ui.start()
                self.addresses["ui"] = f"http://{_host(config.ui.host)}:{port}"
            if self.grpc is not None:
                assert config.otlp_grpc is not None
                port = self.grpc.start()
                self.addresses["otlp_grpc"] = f"{_host(config.otlp_grpc.host)}:{port}"
            if self.http is not None:
                assert config.otlp_http is not None
                port = self.http.start()
                self.addresses["otlp_http"] = f"{_host(config.otlp_http.host)}:{port}"
        except BaseException:
            self._teardown()
            raise
        self._started = True
        self.addresses["out"] = str(config.out_dir)
        self.addresses["wal"] = str(config.wal_dir)
        if config.ready_file is not None:
            _write_atomically(config.ready_file, {**self.addresses, "pid": os.getpid()})
        log.info("listening %s", " ".join(f"{k}={v}" for k, v in self.addresses.items()))
        return self

    def _teardown(self) -> None:
        for server in (self.grpc, self.http, self.metrics_server, self.ui):
            if server is not None:
                try:
                    server.stop()
                except Exception:  # noqa: BLE001 - best effort on a failed start
                    log.debug("stopping a half-started server failed", exc_info=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :meth:`stop` has run (True) or ``timeout`` passes (False)."""
        return self._stopped.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful stop: finish in-flight exports, flush pending envelopes, close."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.pipeline.accepting = False
            if self.grpc is not None:
                self.grpc.stop(grace=min(5.0, timeout))
            if self.http is not None:
                self.http.stop()
            if self.ui is not None:
                self.ui.stop()  # before the pipeline closes the store it reads
            if self._started:
                self.pipeline.close(timeout)
            if self.metrics.push is not None:
                self.metrics.push.shutdown()
            if self.metrics_server is not None:
                self.metrics_server.stop()
            if self.config.ready_file is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.config.ready_file.unlink()
            self._stopped.set()
            log.info("stopped")

    def __enter__(self) -> Processor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _write_atomically(path: os.PathLike[str], document: dict[str, Any]) -> None:
    target = os.fspath(path)
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
        handle.write("\n")
    os.replace(tmp, target)
