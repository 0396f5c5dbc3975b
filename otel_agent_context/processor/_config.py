"""Configuration of ``otel-agent-context serve``: YAML file, command-line flags, validation.

Every setting has one dotted key (the YAML path, e.g. ``buffer.envelope_timeout``), a
default (a ``DEFAULT_*`` constant) and, for the common ones, a flag. Flags win over the
file. :func:`load_config` validates everything before anything listens, and a bad value
raises :class:`~otel_agent_context.exceptions.ConfigError` naming the key, which the CLI
turns into exit code 2.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ..exceptions import ConfigError
from ..rebuild._completion import (  # the engine's defaults, shared with BundleSpanProcessor
    DEFAULT_DEDUPE_MAX,
    DEFAULT_DEDUPE_WINDOW,
    DEFAULT_ENVELOPE_TIMEOUT,
    DEFAULT_MAX_SPANS,
    DEFAULT_MAX_TRACES,
    DEFAULT_ORPHAN_TIMEOUT,
)
from ._memory import DEFAULT_MAX_MEMORY, parse_byte_size

__all__ = [
    "DEFAULT_ENVELOPE_TIMEOUT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_TRACES",
    "DEFAULT_METRICS",
    "DEFAULT_OTLP_GRPC",
    "DEFAULT_OTLP_HTTP",
    "DEFAULT_OUT",
    "DEFAULT_TRACE_URL",
    "SETTINGS",
    "Endpoint",
    "ProcessorConfig",
    "Setting",
    "load_config",
    "parse_hostport",
    "parse_target",
]

DEFAULT_OTLP_GRPC = "127.0.0.1:4317"
DEFAULT_OTLP_HTTP = "127.0.0.1:4318"
DEFAULT_METRICS = "127.0.0.1:9464"
DEFAULT_OUT = "agent-context-out"
#: Jaeger's trace page (docker-compose.yml publishes Jaeger's UI on 16686).
DEFAULT_TRACE_URL = "http://localhost:16686/trace/{trace_id}"
#: The SQLite store's file under the output directory.
DEFAULT_STORE_FILE = "context.db"
#: OTLP's recommended receive limit (grpcio's own default is only 4 MiB).
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
DEFAULT_GRPC_WORKERS = 8
#: Seconds a connection may stay silent (idle keep-alive, half-open, a stalled body or TLS
#: handshake) before the HTTP servers close it.
DEFAULT_HTTP_READ_TIMEOUT = 30.0
#: Open connections an HTTP server accepts; one more is answered 503 and closed.
DEFAULT_HTTP_MAX_CONNECTIONS = 2_000
#: Log-based context events held (waiting for their span, or on a buffered one).
DEFAULT_MAX_EVENTS = 200_000
#: Encoded bytes of the log-based events waiting for their span.
DEFAULT_MAX_EVENT_BYTES = 64 * 1024 * 1024
#: Finished envelopes waiting for the emitter and the sinks; beyond this the receivers push
#: back. Eight of the emitter's batches: enough to keep it busy; more only lengthens the wait
#: before a bundle is written and raises the memory a sustained overload ends at (10,000,
#: the earlier default, held about 95 MiB of envelopes in the soak: benchmarks/soak.md).
DEFAULT_QUEUE_SIZE = 2_048
DEFAULT_RETRY_AFTER = 1.0
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
DEFAULT_SINK_TIMEOUT = 10.0
DEFAULT_FORWARD_QUEUE = 1_000
#: gRPC's default receive limit, which the Collector's OTLP receiver keeps unless told.
DEFAULT_FORWARD_MAX_REQUEST_BYTES = 4 * 1024 * 1024
DEFAULT_METRICS_INTERVAL = 15.0
#: Distinct values of one label of a contract metric (beyond: 'other').
DEFAULT_LABEL_VALUES = 100

_OFF = frozenset({"off", "none", "disabled", "false", ""})


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """A listening address; ``port`` 0 asks the OS for a free one."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_hostport(key: str, value: Any) -> Endpoint | None:
    """``HOST:PORT`` (IPv6 as ``[::1]:PORT``) or ``off``; ConfigError naming ``key``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f"expected HOST:PORT, got {value!r}")
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port:
        raise ConfigError(key, f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ConfigError(key, f"expected HOST:PORT with a host, got {value!r}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(key, f"port must be a number, got {port!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(key, f"port must be 0-65535, got {number}")
    return Endpoint(host, number)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """An OTLP/gRPC endpoint to send to: ``host:port`` or ``http(s)://host:port``."""

    address: str  # host:port for grpc
    secure: bool

    def __str__(self) -> str:
        return ("https://" if self.secure else "http://") + self.address


def parse_target(key: str, value: Any) -> Target | None:
    """An OTLP/gRPC destination; ``http://`` (or none) is plaintext, ``https://`` is TLS."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f"expected an endpoint URL, got {value!r}")
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https", "grpc", "grpcs"):
        raise ConfigError(key, f"scheme must be http or https, got {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(key, f"bad port in {value!r}") from None
    if not parts.hostname:
        raise ConfigError(key, f"expected an endpoint with a host, got {value!r}")
    if parts.path not in ("", "/"):
        raise ConfigError(key, f"an OTLP/gRPC endpoint has no path, got {parts.path!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Target(f"{host}:{port or 4317}", parts.scheme in ("https", "grpcs"))


def _positive_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(key, f"expected a number of seconds, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(key, f"expected a number of seconds, got {value!r}") from None
    if not number > 0 or number != number or number == float("inf"):
        raise ConfigError(key, f"must be greater than 0, got {value!r}")
    return number


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(key, f"expected a positive integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.replace("_", ""))
        except ValueError:
            raise ConfigError(key, f"expected a positive integer, got {value!r}") from None
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(key, f"expected a positive integer, got {value!r}")
    return value


#: gRPC takes a message size limit as a C int
_MAX_MESSAGE_BYTES = 2**31 - 1


def _request_bytes(key: str, value: Any) -> int:
    value = _positive_int(key, value)
    if value > _MAX_MESSAGE_BYTES:
        raise ConfigError(key, f"at most {_MAX_MESSAGE_BYTES} (2 GiB - 1, gRPC's limit), "
                               f"got {value}")
    return value


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
        return False
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _optional_str(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(key, f"expected a string, got {value!r}")
    return os.fspath(value)


def _store_writer(key: str, value: Any) -> str:
    """``process``, ``thread``, or ``auto``: a process when this one may run on two or more
    cores (measured: 0.85-0.91x of JSON Lines alone on ctx20 against 0.71-0.80x for the
    thread), else a thread (on one core the child only adds its own decoding)."""
    if value == "auto":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
        return "process" if cores >= 2 else "thread"
    if value in ("process", "thread"):
        return str(value)
    raise ConfigError(key, f"expected auto, process or thread, got {value!r}")


def _store_url(key: str, value: Any) -> str | None:
    """``sqlite`` (the default file under the output directory), ``sqlite:///PATH``, a
    ``postgresql://`` URL, or ``off``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"expected sqlite, sqlite:///PATH, postgresql://... or off, "
                               f"got {value!r}")
    text = value.strip()
    if text == "sqlite" or text.startswith(("sqlite:///", "postgresql://", "postgres://")):
        return text
    raise ConfigError(key, f"expected sqlite, sqlite:///PATH, postgresql://... or off, "
                           f"got {value!r}")


def _duration(key: str, value: Any) -> float | None:
    """Seconds, or a number with a unit: ``90s``, ``30m``, ``12h``, ``7d``; 0 or off: none."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if isinstance(value, str) and value.strip()[-1:].lower() in units:
            seconds = float(value.strip()[:-1]) * units[value.strip()[-1].lower()]
        elif isinstance(value, bool):
            raise ValueError
        else:
            seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected a duration such as 7d, 12h or 3600, got {value!r}"
                          ) from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(key, f"must be a finite duration of at least 0, got {value!r}")
    return seconds or None


def _readable_file(key: str, value: Any) -> str | None:
    path = _optional_str(key, value)
    if path is not None and not os.access(path, os.R_OK):
        raise ConfigError(key, f"cannot read {path!r}")
    return path


def _log_level(key: str, value: Any) -> str:
    text = str(value).strip().upper()
    if text not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(key, f"expected debug, info, warning or error, got {value!r}")
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key: its YAML path, default, flag and parser."""

    key: str
    default: Any
    parse: Callable[[str, Any], Any]
    flag: str | None = None
    help: str = ""
    metavar: str | None = None


#: Every setting ``serve`` knows, in the order docs/processor.md lists them.
SETTINGS: tuple[Setting, ...] = (
    Setting("receivers.otlp_grpc.endpoint", DEFAULT_OTLP_GRPC, parse_hostport, "--otlp-grpc",
            "OTLP/gRPC listen address, or 'off'", "HOST:PORT"),
    Setting("receivers.otlp_http.endpoint", DEFAULT_OTLP_HTTP, parse_hostport, "--otlp-http",
            "OTLP/HTTP listen address (POST /v1/traces, /v1/logs), or 'off'", "HOST:PORT"),
    Setting("receivers.max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, _request_bytes, None,
            "largest accepted request, after decompression"),
    Setting("receivers.grpc_workers", DEFAULT_GRPC_WORKERS, _positive_int, None,
            "gRPC handler threads"),
    Setting("receivers.read_timeout", DEFAULT_HTTP_READ_TIMEOUT, _positive_float, None,
            "seconds of silence before an HTTP connection is closed"),
    Setting("receivers.max_connections", DEFAULT_HTTP_MAX_CONNECTIONS, _positive_int, None,
            "open connections per HTTP server; more are answered 503"),
    Setting("receivers.tls.cert_file", None, _readable_file, "--tls-cert",
            "PEM certificate: serve both receivers over TLS", "FILE"),
    Setting("receivers.tls.key_file", None, _readable_file, "--tls-key",
            "PEM private key of --tls-cert", "FILE"),
    Setting("receivers.auth.bearer_token", None, _optional_str, "--bearer-token",
            "require 'Authorization: Bearer TOKEN' on both receivers", "TOKEN"),
    Setting("receivers.auth.bearer_token_file", None, _readable_file, "--bearer-token-file",
            "read the bearer token from FILE (keeps it out of the process list)", "FILE"),
    Setting("metrics.endpoint", DEFAULT_METRICS, parse_hostport, "--metrics",
            "address of /metrics, /healthz and /readyz, or 'off'", "HOST:PORT"),
    Setting("metrics.auth", False, _bool, "--metrics-auth",
            "require the receivers' bearer token on /metrics too"),
    Setting("metrics.otlp.endpoint", None, parse_target, "--metrics-otlp",
            "also push the metrics over OTLP/gRPC to ENDPOINT", "ENDPOINT"),
    Setting("metrics.otlp.interval", DEFAULT_METRICS_INTERVAL, _positive_float, None,
            "seconds between OTLP metric pushes"),
    Setting("metrics.label_values", DEFAULT_LABEL_VALUES, _positive_int,
            "--metrics-label-values",
            "distinct values one label of a contract metric takes at most; more count as "
            "'other'", "N"),
    Setting("output.dir", DEFAULT_OUT, _optional_str, "--out",
            "directory of the JSON Lines bundles (the default sink)", "DIR"),
    Setting("output.max_file_bytes", DEFAULT_MAX_FILE_BYTES, _positive_int, None,
            "start a new bundles file beyond this size"),
    Setting("output.fsync", True, _bool, None,
            "fsync bundle files before the WAL forgets their envelopes"),
    Setting("store.url", "sqlite", _store_url, "--store",
            "bundle store: sqlite (DIR/context.db), sqlite:///PATH, postgresql://... or off",
            "URL"),
    Setting("store.writer", "auto", _store_writer, "--store-writer",
            "where the store's writes run: process (a child process, no shared GIL), thread "
            "(a thread of the processor), or auto (a process on two or more cores, else a "
            "thread)", "auto|process|thread"),
    Setting("store.retention", None, _duration, "--store-retention",
            "delete stored envelopes older than this (e.g. 30d; default: keep)", "DURATION"),
    Setting("ui.endpoint", None, parse_hostport, "--ui",
            "serve the web page (conversations, session timelines) on this address",
            "HOST:PORT"),
    Setting("ui.trace_url", DEFAULT_TRACE_URL, _optional_str, "--trace-url",
            "link from an envelope to its trace; {trace_id} and {span_id} are replaced",
            "TEMPLATE"),
    Setting("wal.dir", None, _optional_str, "--wal",
            "write-ahead log directory (default: OUT/wal)", "DIR"),
    Setting("wal.segment_bytes", DEFAULT_SEGMENT_BYTES, _positive_int, None,
            "WAL segment size"),
    Setting("wal.fsync", True, _bool, None,
            "fsync the WAL before acknowledging an export (false: survives a process crash, "
            "not a power loss)"),
    Setting("memory.max_bytes", DEFAULT_MAX_MEMORY, parse_byte_size, "--max-memory",
            "bytes of spans, events, queues and caches held at most (suffixes: 512MiB, "
            "1GiB); beyond a part's share the receivers push back", "BYTES"),
    Setting("buffer.envelope_timeout", DEFAULT_ENVELOPE_TIMEOUT, _positive_float,
            "--envelope-timeout",
            "seconds to wait after the last span for promised stage spans before emitting "
            "'partial'", "SECONDS"),
    Setting("buffer.orphan_timeout", DEFAULT_ORPHAN_TIMEOUT, _positive_float,
            "--orphan-timeout",
            "seconds to wait after the last span for an envelope span that has not come",
            "SECONDS"),
    Setting("buffer.max_traces", DEFAULT_MAX_TRACES, _positive_int, "--max-traces",
            "traces in flight; beyond it the oldest envelope is emitted 'partial'", "N"),
    Setting("buffer.max_spans", DEFAULT_MAX_SPANS, _positive_int, None,
            "spans in flight; beyond it the oldest envelope is emitted 'partial'"),
    Setting("buffer.max_events", DEFAULT_MAX_EVENTS, _positive_int, None,
            "log-based context events held, waiting for their span or on a buffered one; "
            "beyond it the oldest waiting are dropped, else the oldest envelope is emitted "
            "'partial'"),
    Setting("buffer.max_event_bytes", DEFAULT_MAX_EVENT_BYTES, _positive_int, None,
            "bytes of log-based context events waiting for their span; beyond it the oldest "
            "are dropped"),
    Setting("buffer.dedupe_window", DEFAULT_DEDUPE_WINDOW, _positive_float, None,
            "seconds an emitted envelope is remembered to drop client retries"),
    Setting("buffer.dedupe_max", DEFAULT_DEDUPE_MAX, _positive_int, None,
            "most emitted envelopes remembered for retries (fewer when memory.max_bytes's "
            "remembered share holds fewer)"),
    Setting("pipeline.queue_size", DEFAULT_QUEUE_SIZE, _positive_int, None,
            "envelopes waiting for the sinks before the receivers push back"),
    Setting("pipeline.retry_after", DEFAULT_RETRY_AFTER, _positive_float, None,
            "seconds a client is told to wait when the processor pushes back"),
    Setting("sinks.otlp_logs.endpoint", None, parse_target, "--otlp-logs",
            "also emit each bundle as an OTLP log record (event 'context.envelope') to "
            "this OTLP/gRPC endpoint", "ENDPOINT"),
    Setting("sinks.otlp_logs.timeout", DEFAULT_SINK_TIMEOUT, _positive_float, None,
            "seconds one OTLP log export may take"),
    Setting("forward.endpoint", None, parse_target, "--forward",
            "pass every received request (traces, logs) on unchanged to this OTLP/gRPC "
            "endpoint", "ENDPOINT"),
    Setting("forward.queue_size", DEFAULT_FORWARD_QUEUE, _positive_int, None,
            "requests waiting for the next hop before the receivers push back"),
    Setting("forward.max_request_bytes", DEFAULT_FORWARD_MAX_REQUEST_BYTES, _request_bytes,
            None, "the next hop's largest request: a larger one is split before it is sent"),
    Setting("log_level", "INFO", _log_level, "--log-level", "debug, info, warning, error",
            "LEVEL"),
    Setting("ready_file", None, _optional_str, "--ready-file",
            "write the bound addresses as JSON to FILE once listening", "FILE"),
)

_BY_KEY = {s.key: s for s in SETTINGS}


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessorConfig:
    """A validated configuration. Build it with :func:`load_config` (or ``from_values``)."""

    otlp_grpc: Endpoint | None
    otlp_http: Endpoint | None
    max_request_bytes: int
    grpc_workers: int
    read_timeout: float
    max_connections: int
    tls_cert_file: str | None
    tls_key_file: str | None
    bearer_token: str | None
    metrics: Endpoint | None
    metrics_auth: bool
    metrics_otlp: Target | None
    metrics_interval: float
    metrics_label_values: int
    out_dir: Path
    max_file_bytes: int
    output_fsync: bool
    store_url: str | None
    store_retention: float | None
    #: "process" (the store writes in a child process) or "thread"
    store_writer: str
    ui: Endpoint | None
    trace_url: str | None
    wal_dir: Path
    segment_bytes: int
    wal_fsync: bool
    max_memory: int
    envelope_timeout: float
    orphan_timeout: float
    max_traces: int
    max_spans: int
    max_events: int
    max_event_bytes: int
    dedupe_window: float
    dedupe_max: int
    queue_size: int
    retry_after: float
    otlp_logs: Target | None
    otlp_logs_timeout: float
    forward: Target | None
    forward_queue_size: int
    forward_max_request_bytes: int
    log_level: str
    ready_file: Path | None

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | None = None) -> ProcessorConfig:
        """Validate dotted-key values (unknown keys are an error) over the defaults."""
        raw: dict[str, Any] = {s.key: s.default for s in SETTINGS}
        for key, value in (values or {}).items():
            if key not in _BY_KEY:
                raise ConfigError(key, "unknown setting")
            raw[key] = value
        parsed = {key: _BY_KEY[key].parse(key, value) for key, value in raw.items()}
        return _build(parsed)

    def tls_credentials(self) -> tuple[bytes, bytes] | None:
        """(private key, certificate chain) PEM bytes when TLS is configured."""
        if self.tls_cert_file is None:
            return None
        assert self.tls_key_file is not None
        return Path(self.tls_key_file).read_bytes(), Path(self.tls_cert_file).read_bytes()


def _build(p: dict[str, Any]) -> ProcessorConfig:
    cert, key = p["receivers.tls.cert_file"], p["receivers.tls.key_file"]
    if (cert is None) != (key is None):
        missing = "receivers.tls.key_file" if key is None else "receivers.tls.cert_file"
        raise ConfigError(missing, "TLS needs both a certificate and a key")
    if cert is not None:
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError("receivers.tls.cert_file", f"cannot load {cert!r}: {exc}") from None
    token = p["receivers.auth.bearer_token"]
    token_file = p["receivers.auth.bearer_token_file"]
    if token is not None and token_file is not None:
        raise ConfigError("receivers.auth.bearer_token_file",
                          "give either bearer_token or bearer_token_file, not both")
    if token_file is not None:
        token = Path(token_file).read_text(encoding="utf-8").strip()
        if not token:
            raise ConfigError("receivers.auth.bearer_token_file", f"{token_file!r} is empty")
    if token is not None and (not token.strip() or any(c.isspace() for c in token)):
        raise ConfigError("receivers.auth.bearer_token", "must be one word, not empty")
    out_dir = p["output.dir"]
    if out_dir is None:
        raise ConfigError("output.dir", "is required")
    out = Path(out_dir)
    wal = Path(p["wal.dir"]) if p["wal.dir"] is not None else out / "wal"
    for setting_key, directory in (("output.dir", out), ("wal.dir", wal)):
        _check_dir(setting_key, directory)
    listeners = [(k, p[k]) for k in ("receivers.otlp_grpc.endpoint",
                                     "receivers.otlp_http.endpoint", "metrics.endpoint",
                                     "ui.endpoint")]
    seen: dict[tuple[str, int], str] = {}
    for setting_key, ep in listeners:
        if ep is None or ep.port == 0:
            continue
        if (ep.host, ep.port) in seen:
            raise ConfigError(setting_key, f"{ep} is also {seen[(ep.host, ep.port)]}")
        seen[(ep.host, ep.port)] = setting_key
    if p["receivers.otlp_grpc.endpoint"] is None and p["receivers.otlp_http.endpoint"] is None:
        raise ConfigError("receivers.otlp_grpc.endpoint",
                          "both receivers are off: nothing could send spans")
    if p["buffer.orphan_timeout"] < p["buffer.envelope_timeout"]:
        raise ConfigError("buffer.orphan_timeout",
                          "must be at least buffer.envelope_timeout")
    if p["ui.endpoint"] is not None and p["store.url"] is None:
        raise ConfigError("ui.endpoint", "the web page reads the bundle store: "
                                         "store.url must not be off")
    if p["metrics.auth"] and token is None:
        raise ConfigError("metrics.auth", "needs receivers.auth.bearer_token (or _file)")
    ready = p["ready_file"]
    return ProcessorConfig(
        otlp_grpc=p["receivers.otlp_grpc.endpoint"],
        otlp_http=p["receivers.otlp_http.endpoint"],
        max_request_bytes=p["receivers.max_request_bytes"],
        grpc_workers=p["receivers.grpc_workers"],
        read_timeout=p["receivers.read_timeout"],
        max_connections=p["receivers.max_connections"],
        tls_cert_file=cert,
        tls_key_file=key,
        bearer_token=token,
        metrics=p["metrics.endpoint"],
        metrics_auth=p["metrics.auth"],
        metrics_otlp=p["metrics.otlp.endpoint"],
        metrics_interval=p["metrics.otlp.interval"],
        metrics_label_values=p["metrics.label_values"],
        out_dir=out,
        max_file_bytes=p["output.max_file_bytes"],
        output_fsync=p["output.fsync"],
        store_url=(f"sqlite:///{(out / DEFAULT_STORE_FILE).resolve()}"
                   if p["store.url"] == "sqlite" else p["store.url"]),
        store_retention=p["store.retention"],
        store_writer=p["store.writer"],
        ui=p["ui.endpoint"],
        trace_url=p["ui.trace_url"],
        wal_dir=wal,
        segment_bytes=p["wal.segment_bytes"],
        wal_fsync=p["wal.fsync"],
        max_memory=p["memory.max_bytes"],
        envelope_timeout=p["buffer.envelope_timeout"],
        orphan_timeout=p["buffer.orphan_timeout"],
        max_traces=p["buffer.max_traces"],
        max_spans=p["buffer.max_spans"],
        max_events=p["buffer.max_events"],
        max_event_bytes=p["buffer.max_event_bytes"],
        dedupe_window=p["buffer.dedupe_window"],
        dedupe_max=p["buffer.dedupe_max"],
        queue_size=p["pipeline.queue_size"],
        retry_after=p["pipeline.retry_after"],
        otlp_logs=p["sinks.otlp_logs.endpoint"],
        otlp_logs_timeout=p["sinks.otlp_logs.timeout"],
        forward=p["forward.endpoint"],
        forward_queue_size=p["forward.queue_size"],
        forward_max_request_bytes=p["forward.max_request_bytes"],
        log_level=p["log_level"],
        ready_file=Path(ready) if ready is not None else None,
    )


def _check_dir(key: str, directory: Path) -> None:
    """The directory exists (or can be made) and is writable: fail now, not at first span."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(key, f"cannot create {str(directory)!r}: {exc.strerror}") from None
    if not directory.is_dir():
        raise ConfigError(key, f"{str(directory)!r} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(key, f"{str(directory)!r} is not writable")


def _flatten(prefix: str, node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, Mapping):
        for name, value in node.items():
            if not isinstance(name, str):
                raise ConfigError(prefix or "<root>", f"keys must be strings, got {name!r}")
            key = f"{prefix}.{name}" if prefix else name
            if key in _BY_KEY:
                out[key] = value
            elif isinstance(value, Mapping):
                _flatten(key, value, out)
            else:
                raise ConfigError(key, "unknown setting")
    else:
        raise ConfigError(prefix or "<root>", "expected a mapping")


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The dotted-key values of a YAML config file (``--config``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {os.fspath(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("--config", f"{os.fspath(path)!r} is not UTF-8 text "
                                      f"(byte {exc.start})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("--config", f"{os.fspath(path)!r} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError("--config", f"{os.fspath(path)!r} is nested too deeply") from None
    out: dict[str, Any] = {}
    if document is not None:
        try:
            _flatten("", document, out)
        except RecursionError:
            raise ConfigError("--config", f"{os.fspath(path)!r} is nested too deeply") from None
    return out


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ProcessorConfig:
    """File values, then ``overrides`` (flags, by dotted key; ``None`` means not given)."""
    values = read_config_file(config_file) if config_file is not None else {}
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    return ProcessorConfig.from_values(values)
