"""What otelcol-contrib 0.159 accepts, for the components our collector configs use.

Written from the components' ``metadata.yaml`` (type names, deprecated aliases, signals) and
``config.schema.yaml`` (configuration keys) in opentelemetry-collector and
opentelemetry-collector-contrib at v0.159.0, the version docker-compose.yml runs. A key tree
maps each allowed key to the tree below it, or to ``ANY`` where the value is a scalar or a
structure we do not check further. Extend the table when a config uses a new component.
"""

from __future__ import annotations

from typing import Any

ANY: None = None
Tree = dict[str, Any]

DURATION_PATTERN = r"^[0-9]+(ns|us|µs|ms|s|m|h)$"

_TLS_COMMON: Tree = dict.fromkeys((
    "ca_file", "ca_pem", "cert_file", "cert_pem", "cipher_suites", "curve_preferences",
    "include_system_ca_certs_pool", "key_file", "key_pem", "max_version", "min_version",
    "reload_interval", "tpm"), ANY)
TLS_CLIENT: Tree = {**_TLS_COMMON, "insecure": ANY, "insecure_skip_verify": ANY,
                    "server_name_override": ANY}
TLS_SERVER: Tree = {**_TLS_COMMON, "client_ca_file": ANY, "client_ca_file_reload": ANY}

GRPC_CLIENT: Tree = {
    "auth": ANY, "authority": ANY, "balancer_name": ANY, "compression": ANY, "endpoint": ANY,
    "headers": ANY, "keepalive": {"permit_without_stream": ANY, "time": ANY, "timeout": ANY},
    "middlewares": ANY, "read_buffer_size": ANY, "tls": TLS_CLIENT, "user_agent": ANY,
    "wait_for_ready": ANY, "write_buffer_size": ANY,
}
GRPC_SERVER: Tree = {
    "endpoint": ANY, "transport": ANY, "dialer": ANY,  # confignet.addr_config, squashed
    "auth": ANY, "include_metadata": ANY, "keepalive": ANY, "max_concurrent_streams": ANY,
    "max_recv_msg_size_mib": ANY, "middlewares": ANY, "read_buffer_size": ANY,
    "tls": TLS_SERVER, "write_buffer_size": ANY,
}
HTTP_SERVER: Tree = {
    "auth": ANY, "compression_algorithms": ANY, "cors": ANY, "endpoint": ANY,
    "idle_timeout": ANY, "include_metadata": ANY, "keep_alives_enabled": ANY,
    "max_request_body_size": ANY, "middlewares": ANY, "read_header_timeout": ANY,
    "read_timeout": ANY, "response_headers": ANY, "tls": TLS_SERVER, "write_timeout": ANY,
}
HTTP_CLIENT: Tree = {
    "auth": ANY, "compression": ANY, "compression_params": ANY, "cookies": ANY,
    "disable_keep_alives": ANY, "endpoint": ANY, "force_attempt_http2": ANY, "headers": ANY,
    "http2_ping_timeout": ANY, "http2_read_idle_timeout": ANY, "idle_conn_timeout": ANY,
    "max_conns_per_host": ANY, "max_idle_conns": ANY, "max_idle_conns_per_host": ANY,
    "middlewares": ANY, "proxy_url": ANY, "read_buffer_size": ANY, "timeout": ANY,
    "tls": TLS_CLIENT, "write_buffer_size": ANY,
}
RETRY: Tree = dict.fromkeys(("enabled", "initial_interval", "max_elapsed_time", "max_interval",
                             "multiplier", "randomization_factor"), ANY)
QUEUE: Tree = {
    "batch": {"flush_timeout": ANY, "max_size": ANY, "min_size": ANY, "partition": ANY,
              "sizer": ANY},
    "block_on_overflow": ANY, "enabled": ANY, "num_consumers": ANY, "queue_size": ANY,
    "sizer": ANY, "storage": ANY, "wait_for_result": ANY,
}
OTLP_GRPC_EXPORTER: Tree = {**GRPC_CLIENT, "timeout": ANY, "retry_on_failure": RETRY,
                            "sending_queue": QUEUE}

ALL_SIGNALS = frozenset({"traces", "metrics", "logs"})


class Component:
    """One component type: its config key tree and the pipelines it can be in."""

    def __init__(self, tree: Tree, signals: frozenset[str] = ALL_SIGNALS,
                 module: str = "") -> None:
        self.tree = tree
        self.signals = signals
        self.module = module


RECEIVERS: dict[str, Component] = {
    "otlp": Component({"protocols": {"grpc": GRPC_SERVER,
                                     "http": {**HTTP_SERVER, "traces_url_path": ANY,
                                              "metrics_url_path": ANY, "logs_url_path": ANY}}},
                      module="go.opentelemetry.io/collector/receiver/otlpreceiver"),
}

PROCESSORS: dict[str, Component] = {
    "memory_limiter": Component(dict.fromkeys((
        "check_interval", "limit_mib", "limit_percentage", "spike_limit_mib",
        "spike_limit_percentage", "min_gc_interval_when_soft_limited",
        "min_gc_interval_when_hard_limited", "max_gc_interval_when_soft_limited",
        "max_gc_interval_when_hard_limited"), ANY),
        module="go.opentelemetry.io/collector/processor/memorylimiterprocessor"),
    "batch": Component(dict.fromkeys((
        "metadata_cardinality_limit", "metadata_keys", "send_batch_max_size", "send_batch_size",
        "timeout"), ANY), module="go.opentelemetry.io/collector/processor/batchprocessor"),
    "filter": Component({
        "error_mode": ANY,
        "traces": {"span": ANY, "spanevent": ANY},
        "metrics": {"metric": ANY, "datapoint": ANY},
        "logs": {"log_record": ANY},
    }, module="github.com/open-telemetry/opentelemetry-collector-contrib/processor/"
              "filterprocessor"),
}

EXPORTERS: dict[str, Component] = {
    "otlp_grpc": Component(OTLP_GRPC_EXPORTER,
                           module="go.opentelemetry.io/collector/exporter/otlpexporter"),
    "otlp_http": Component({**HTTP_CLIENT, "encoding": ANY, "logs_endpoint": ANY,
                            "metrics_endpoint": ANY, "traces_endpoint": ANY,
                            "profiles_endpoint": ANY, "retry_on_failure": RETRY,
                            "sending_queue": QUEUE},
                           module="go.opentelemetry.io/collector/exporter/otlphttpexporter"),
    "load_balancing": Component(
        {
            "protocol": {"otlp": OTLP_GRPC_EXPORTER},
            "resolver": {
                "static": {"hostnames": ANY},
                "dns": {"hostname": ANY, "port": ANY, "interval": ANY, "timeout": ANY},
                "k8s": {"service": ANY, "ports": ANY, "timeout": ANY, "return_hostnames": ANY},
                "aws_cloud_map": {"namespace": ANY, "service_name": ANY, "port": ANY,
                                  "health_status": ANY, "interval": ANY, "timeout": ANY},
            },
            "routing_key": ANY,
            "routing_attributes": ANY,
            "sending_queue": QUEUE,
            "timeout": ANY,
        },
        signals=ALL_SIGNALS,
        module="github.com/open-telemetry/opentelemetry-collector-contrib/exporter/"
               "loadbalancingexporter"),
    "debug": Component(dict.fromkeys(("verbosity", "sampling_initial", "sampling_thereafter",
                                      "use_internal_logger"), ANY),
                       module="go.opentelemetry.io/collector/exporter/debugexporter"),
}

EXTENSIONS: dict[str, Component] = {
    "health_check": Component(dict.fromkeys(("endpoint", "path", "response_body", "tls",
                                             "auth", "cors", "include_metadata",
                                             "check_collector_pipeline"), ANY),
                              module="github.com/open-telemetry/opentelemetry-collector-contrib/"
                                     "extension/healthcheckextension"),
    "file_storage": Component(dict.fromkeys(("directory", "timeout", "compaction", "fsync",
                                             "create_directory", "directory_permissions",
                                             "recreate"), ANY),
                              module="github.com/open-telemetry/opentelemetry-collector-contrib/"
                                     "extension/storage/filestorage"),
}

COMPONENTS: dict[str, dict[str, Component]] = {
    "receivers": RECEIVERS,
    "processors": PROCESSORS,
    "exporters": EXPORTERS,
    "extensions": EXTENSIONS,
}

#: Old type names that still load but log a deprecation warning (or no longer exist).
DEPRECATED: dict[str, dict[str, str]] = {
    "exporters": {"otlp": "otlp_grpc", "otlphttp": "otlp_http", "loadbalancing": "load_balancing",
                  "logging": "debug (removed)"},
}

#: ``routing_key`` values the load_balancing exporter knows.
ROUTING_KEYS = frozenset({"traceID", "service", "resource", "metric", "streamID", "attributes"})
DEBUG_VERBOSITY = frozenset({"basic", "normal", "detailed"})
TELEMETRY_LEVELS = frozenset({"none", "basic", "normal", "detailed"})
