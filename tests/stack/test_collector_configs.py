"""The otelcol-contrib configurations under collector/, checked offline: every component is a
real otelcol-contrib 0.159 component under its current name, every key is one it accepts, the
pipelines are wired and ordered as the Collector recommends, and the endpoints meet the
processor, Jaeger and Prometheus where docker-compose.yml puts them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from otelcol_components import (
    ANY,
    COMPONENTS,
    DEBUG_VERBOSITY,
    DEPRECATED,
    DURATION_PATTERN,
    ROUTING_KEYS,
    TELEMETRY_LEVELS,
)
from stack_support import COLLECTOR, COMPOSE_FILE

from otel_agent_context.processor._config import read_config_file

SINGLE = COLLECTOR / "otelcol.yaml"
LOAD_BALANCING = COLLECTOR / "otelcol-loadbalancing.yaml"
CONFIGS = [SINGLE, LOAD_BALANCING]

_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_DURATION_KEYS = {"timeout", "check_interval", "interval", "initial_interval", "max_interval",
                  "max_elapsed_time", "flush_timeout"}


def load(path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The config as the Collector sees it: ``${env:NAME:-default}`` expanded from ``env``."""
    env = env or {}

    def expand(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        assert default is not None, f"{path.name}: ${{env:{name}}} has no default"
        return default

    text = path.read_text(encoding="utf-8")
    assert "${" not in _ENV.sub("", text), f"{path.name}: an unsupported ${{...}} reference"
    return yaml.safe_load(_ENV.sub(expand, text))


def component_type(component_id: str) -> str:
    type_, _, name = component_id.partition("/")
    assert re.fullmatch(r"[a-z][a-z0-9_]*", type_), component_id
    assert not _ or re.fullmatch(r"[A-Za-z0-9_.\-]+", name), component_id
    return type_


def check_keys(where: str, value: Any, tree: dict[str, Any] | None) -> None:
    """Every key of ``value`` is in ``tree``, recursively; durations are Go durations."""
    if tree is ANY or value is None:
        return
    assert isinstance(value, dict), f"{where}: expected a mapping, got {value!r}"
    for key, sub in value.items():
        assert key in tree, f"{where}: unknown key {key!r} (known: {sorted(tree)})"
        if key in _DURATION_KEYS and isinstance(sub, str):
            assert re.fullmatch(DURATION_PATTERN, sub), f"{where}.{key}: {sub!r} not a duration"
        check_keys(f"{where}.{key}", sub, tree[key])


def hostport(value: str) -> tuple[str, int]:
    match = re.fullmatch(r"(?:https?://)?([A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(\d+)", value)
    assert match, f"{value!r} is not host:port"
    port = int(match.group(2))
    assert 0 < port < 65536, value
    return match.group(1), port


@pytest.fixture(params=CONFIGS, ids=lambda p: p.name)
def config(request) -> tuple[str, dict[str, Any]]:
    return request.param.name, load(request.param)


def test_every_component_is_a_current_otelcol_contrib_component(config):
    name, cfg = config
    assert set(cfg) <= {"receivers", "processors", "exporters", "extensions", "connectors",
                        "service"}, name
    for kind, known in COMPONENTS.items():
        for component_id, settings in (cfg.get(kind) or {}).items():
            type_ = component_type(component_id)
            old = DEPRECATED.get(kind, {}).get(type_)
            assert old is None, f"{name}: {kind} {component_id!r} is deprecated, use {old}"
            assert type_ in known, f"{name}: {kind} {type_!r} is not in the component table"
            check_keys(f"{name}: {kind}.{component_id}", settings, known[type_].tree)


def test_pipelines_are_wired_and_ordered(config):
    name, cfg = config
    service = cfg["service"]
    pipelines = service["pipelines"]
    assert "traces" in pipelines
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline_id, pipeline in pipelines.items():
        signal = pipeline_id.partition("/")[0]
        assert signal in {"traces", "metrics", "logs"}, pipeline_id
        assert pipeline.get("receivers") and pipeline.get("exporters"), pipeline_id
        for kind in ("receivers", "processors", "exporters"):
            for component_id in pipeline.get(kind) or []:
                assert component_id in (cfg.get(kind) or {}), \
                    f"{name}: {pipeline_id} uses undefined {kind[:-1]} {component_id!r}"
                type_ = component_type(component_id)
                assert signal in COMPONENTS[kind][type_].signals, (pipeline_id, component_id)
                used[kind].add(component_id)
        processors = pipeline.get("processors") or []
        assert processors[:1] == ["memory_limiter"], f"{pipeline_id}: memory_limiter first"
        assert processors[-1:] == ["batch"], f"{pipeline_id}: batch last"
    for kind, ids in used.items():
        unused = set(cfg.get(kind) or {}) - ids
        assert not unused, f"{name}: {kind} defined but in no pipeline: {sorted(unused)}"
    extensions = service.get("extensions") or []
    assert set(extensions) == set(cfg.get("extensions") or {}), name
    # Storage an exporter's queue names must be an enabled extension.
    for exporter_id, settings in (cfg.get("exporters") or {}).items():
        queue = (settings or {}).get("sending_queue") or {}
        if queue.get("storage"):
            assert queue["storage"] in extensions, exporter_id
            assert component_type(queue["storage"]) == "file_storage"


def test_component_settings_are_plausible(config):
    name, cfg = config
    limiter = cfg["processors"]["memory_limiter"]
    assert re.fullmatch(DURATION_PATTERN, limiter["check_interval"])
    if "limit_percentage" in limiter:
        assert 0 < limiter["spike_limit_percentage"] < limiter["limit_percentage"] <= 100
    else:
        assert 0 < limiter["spike_limit_mib"] < limiter["limit_mib"]
    batch = cfg["processors"]["batch"]
    assert 0 < batch["send_batch_size"] <= batch.get("send_batch_max_size",
                                                      batch["send_batch_size"])
    grpc = cfg["receivers"]["otlp"]["protocols"]["grpc"]
    assert hostport(grpc["endpoint"])[1] == 4317
    assert grpc["max_recv_msg_size_mib"] == 64  # OTLP's recommendation, the processor's limit
    assert hostport(cfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"])[1] == 4318
    for exporter_id, settings in cfg["exporters"].items():
        type_ = component_type(exporter_id)
        if type_ == "otlp_grpc":
            hostport(settings["endpoint"])
            assert settings["tls"]["insecure"] is True  # plain gRPC inside the compose network
        if type_ == "debug":
            assert settings["verbosity"] in DEBUG_VERBOSITY
        retry = (settings or {}).get("retry_on_failure")
        if retry:
            assert retry["enabled"] is True
    telemetry = cfg["service"]["telemetry"]["metrics"]
    assert telemetry["level"] in TELEMETRY_LEVELS
    (reader,) = telemetry["readers"]
    prometheus = reader["pull"]["exporter"]["prometheus"]
    assert prometheus["port"] == 8888 and prometheus["host"] == "0.0.0.0"


def test_single_tier_fans_out_to_jaeger_and_the_processor():
    cfg = load(SINGLE)
    traces = cfg["service"]["pipelines"]["traces"]
    endpoints = {cfg["exporters"][e]["endpoint"] for e in traces["exporters"]}
    assert endpoints == {"jaeger:4317", "processor:4317"}
    context = next(e for e in traces["exporters"]
                   if cfg["exporters"][e]["endpoint"] == "processor:4317")
    assert component_type(context) == "otlp_grpc"
    queue = cfg["exporters"][context]["sending_queue"]
    assert queue["enabled"] is True and queue["storage"].startswith("file_storage")
    # The processor's envelopes come back as OTLP logs and have somewhere to go.
    assert cfg["service"]["pipelines"]["logs"]["receivers"] == ["otlp"]


def test_load_balancing_tier_routes_by_trace_id_to_the_processors():
    cfg = load(LOAD_BALANCING)
    traces = cfg["service"]["pipelines"]["traces"]
    assert "load_balancing" in traces["exporters"]
    assert "otlp_grpc/jaeger" in traces["exporters"]
    lb = cfg["exporters"]["load_balancing"]
    assert lb["routing_key"] in ROUTING_KEYS
    assert lb["routing_key"] == "traceID"
    otlp = lb["protocol"]["otlp"]
    assert "endpoint" not in otlp  # the resolver sets it per backend
    assert otlp["tls"]["insecure"] is True
    (resolver_kind,) = lb["resolver"]
    assert resolver_kind == "dns"
    dns = lb["resolver"]["dns"]
    assert dns["hostname"] == "processor" and dns["port"] == "4317"


def test_endpoints_meet_the_processor_and_compose():
    processor = read_config_file(COLLECTOR / "processor.yaml")
    grpc_port = hostport(processor["receivers.otlp_grpc.endpoint"])[1]
    metrics_port = hostport(processor["metrics.endpoint"])[1]
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    services = compose["services"]
    otelcol = services["otelcol"]
    env = {k: str(v) for k, v in otelcol["environment"].items()}
    for path in CONFIGS:
        # Every ${env:...} the configs read is set by compose, and to the same defaults.
        names = set(_ENV.findall(path.read_text(encoding="utf-8")))
        for var, default in names:
            assert var in env, f"{path.name}: compose does not set {var}"
            assert env[var] == default, (var, env[var], default)
        mounted = f"./collector/{path.name}:/etc/otelcol-contrib/{path.name}:ro"
        assert mounted in otelcol["volumes"], mounted
    single = load(SINGLE, env)
    assert single["exporters"]["otlp_grpc/context"]["endpoint"] == f"processor:{grpc_port}"
    assert single["exporters"]["otlp_grpc/jaeger"]["endpoint"] == "jaeger:4317"
    assert single["extensions"]["file_storage/queue"]["directory"] == env["OTELCOL_QUEUE_DIR"]
    assert any(v.endswith(":" + env["OTELCOL_QUEUE_DIR"]) for v in otelcol["volumes"])
    lb = load(LOAD_BALANCING, env)
    assert lb["exporters"]["load_balancing"]["resolver"]["dns"]["port"] == str(grpc_port)
    # The processor sends its envelopes (OTLP logs) to the collector's gRPC receiver.
    assert processor["sinks.otlp_logs.endpoint"] == "http://otelcol:4317"
    # Prometheus scrapes the processor's metrics port and the collector's telemetry port.
    prometheus = yaml.safe_load((COLLECTOR.parent / "dashboards" / "prometheus" /
                                 "prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    (sd,) = jobs["agent-context-processor"]["dns_sd_configs"]
    assert sd["names"] == ["processor"] and sd["port"] == metrics_port
    assert jobs["otelcol"]["static_configs"][0]["targets"] == ["otelcol:8888"]


def test_the_checker_rejects_what_the_collector_would_reject(tmp_path):
    """The checks above can fail: a deprecated name, an unknown key, a bad order."""
    base = SINGLE.read_text(encoding="utf-8")
    broken = {
        "deprecated exporter name": base.replace("otlp_grpc/jaeger", "otlp/jaeger"),
        "unknown key": base.replace("send_batch_size: 1024",
                                    "send_batch_size: 1024\n    flush: 1s"),
        "bad duration": base.replace("check_interval: 1s", "check_interval: 1sec"),
        "batch before memory_limiter": base.replace("[memory_limiter, batch]",
                                                    "[batch, memory_limiter]"),
        "undefined exporter": base.replace("exporters: [debug]", "exporters: [debug, kafka]"),
    }
    for label, text in broken.items():
        path = tmp_path / "otelcol.yaml"
        path.write_text(text, encoding="utf-8")
        cfg = ("otelcol.yaml", load(path))
        with pytest.raises(AssertionError):
            test_every_component_is_a_current_otelcol_contrib_component(cfg)
            test_pipelines_are_wired_and_ordered(cfg)
            test_component_settings_are_plausible(cfg)
        assert text != base, label


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_agents_log_events_reach_the_processor_and_nothing_else_does(path):
    # The filter's OTTL condition, read back and applied here to each name: a log record is
    # dropped from the processor's pipeline when the condition holds.
    from otel_agent_context._semconv import SPAN_ENVELOPE
    from otel_agent_context._table import EVENTS

    cfg = load(path)
    pipeline = cfg["service"]["pipelines"]["logs/context_events"]
    assert pipeline["receivers"] == ["otlp"]
    (exporter,) = pipeline["exporters"]
    assert exporter in cfg["service"]["pipelines"]["traces"]["exporters"]  # where spans go
    assert exporter != "otlp_grpc/jaeger"
    (condition,) = cfg["processors"]["filter/context_events"]["logs"]["log_record"]
    match = re.fullmatch(r'not IsMatch\(event_name, "(.+)"\) or event_name == "(.+)"', condition)
    assert match, condition
    pattern = re.compile(match.group(1).replace("\\\\", "\\"))
    excluded = match.group(2)

    def dropped(name: str) -> bool:
        return not pattern.search(name) or name == excluded

    assert EVENTS and not any(dropped(name) for name in EVENTS)
    assert dropped(SPAN_ENVELOPE)  # the processor's own output never loops back into it
    assert dropped("http.request") and dropped("")
