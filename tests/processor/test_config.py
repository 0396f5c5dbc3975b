"""Configuration: defaults, YAML, flags over the file, and errors that name the key."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from processor_testkit import REPO

from otel_agent_context.exceptions import ConfigError
from otel_agent_context.processor import SETTINGS, ProcessorConfig, load_config
from otel_agent_context.processor._config import (
    DEFAULT_MAX_REQUEST_BYTES,
    Endpoint,
    parse_hostport,
    parse_target,
)


def test_defaults(tmp_path: Path) -> None:
    config = ProcessorConfig.from_values({"output.dir": str(tmp_path / "out")})
    assert config.otlp_grpc == Endpoint("127.0.0.1", 4317)
    assert config.otlp_http == Endpoint("127.0.0.1", 4318)
    assert config.metrics == Endpoint("127.0.0.1", 9464)
    assert config.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES == 64 * 1024 * 1024
    assert config.wal_dir == tmp_path / "out" / "wal"
    assert config.wal_dir.is_dir()
    assert config.otlp_logs is None and config.forward is None


def test_yaml_nesting_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "processor.yaml"
    path.write_text(
        "receivers:\n"
        "  otlp_grpc: {endpoint: '127.0.0.1:5317'}\n"
        "  otlp_http: {endpoint: 'off'}\n"
        "buffer:\n"
        "  envelope_timeout: 7\n"
        "  max_traces: 50\n"
        f"output: {{dir: '{tmp_path / 'file-out'}'}}\n"
        "sinks:\n"
        "  otlp_logs: {endpoint: 'https://logs.example:4317'}\n"
    )
    config = load_config(path, {"buffer.max_traces": "9", "output.dir": None})
    assert config.otlp_grpc == Endpoint("127.0.0.1", 5317)
    assert config.otlp_http is None
    assert config.envelope_timeout == 7.0
    assert config.max_traces == 9  # the flag wins
    assert config.out_dir == tmp_path / "file-out"  # a flag not given leaves the file's value
    assert config.otlp_logs is not None and config.otlp_logs.secure
    assert config.otlp_logs.address == "logs.example:4317"


@pytest.mark.parametrize(("values", "key"), [
    ({"receivers.otlp_grpc.endpoint": "nohost"}, "receivers.otlp_grpc.endpoint"),
    ({"receivers.otlp_http.endpoint": "127.0.0.1:99999"}, "receivers.otlp_http.endpoint"),
    ({"metrics.endpoint": "127.0.0.1:http"}, "metrics.endpoint"),
    ({"buffer.envelope_timeout": "soon"}, "buffer.envelope_timeout"),
    ({"buffer.envelope_timeout": 0}, "buffer.envelope_timeout"),
    ({"buffer.max_traces": -3}, "buffer.max_traces"),
    ({"buffer.max_traces": True}, "buffer.max_traces"),
    ({"wal.fsync": "sometimes"}, "wal.fsync"),
    ({"sinks.otlp_logs.endpoint": "ftp://x:1"}, "sinks.otlp_logs.endpoint"),
    ({"forward.endpoint": "http://next:4317/v1/traces"}, "forward.endpoint"),
    ({"log_level": "chatty"}, "log_level"),
    ({"receivers.tls.cert_file": "/nonexistent/cert.pem"}, "receivers.tls.cert_file"),
    ({"buffer.nonsense": 1}, "buffer.nonsense"),
    ({"buffer.orphan_timeout": 1, "buffer.envelope_timeout": 5}, "buffer.orphan_timeout"),
    ({"receivers.otlp_grpc.endpoint": "off", "receivers.otlp_http.endpoint": "off"},
     "receivers.otlp_grpc.endpoint"),
    ({"metrics.endpoint": "127.0.0.1:4317"}, "metrics.endpoint"),
    ({"receivers.auth.bearer_token": "two words"}, "receivers.auth.bearer_token"),
    # over gRPC's C int: grpcio raised OverflowError at start-up
    ({"receivers.max_request_bytes": 3_000_000_000}, "receivers.max_request_bytes"),
    ({"forward.max_request_bytes": 2**31}, "forward.max_request_bytes"),
])
def test_bad_values_name_the_key(tmp_path: Path, values: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.from_values({"output.dir": str(tmp_path), **values})
    assert info.value.key == key
    assert str(info.value).startswith(key + ":")


def test_tls_needs_both_halves(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.from_values({"output.dir": str(tmp_path),
                                     "receivers.tls.cert_file": str(cert)})
    assert info.value.key == "receivers.tls.key_file"


def test_unwritable_output_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.from_values({"output.dir": str(blocker / "sub")})
    assert info.value.key == "output.dir"


def test_unknown_yaml_key_and_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("buffer:\n  envelope_timeot: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "buffer.envelope_timeot"
    path.write_text("buffer: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "--config"


def test_a_config_file_not_utf8_or_nested_too_deeply_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"buffer:\n  max_traces: \xff\xfe 3\n")
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        load_config(path)
    assert info.value.key == "--config"
    path.write_text("a:\n  " + "[" * 100_000 + "\n")  # RecursionError inside the YAML parser
    with pytest.raises(ConfigError, match="nested too deeply") as info:
        load_config(path)
    assert info.value.key == "--config"


def test_bearer_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    config = ProcessorConfig.from_values({"output.dir": str(tmp_path),
                                          "receivers.auth.bearer_token_file": str(token)})
    assert config.bearer_token == "s3cret"


def test_endpoint_parsers() -> None:
    assert parse_hostport("k", "[::1]:0") == Endpoint("::1", 0)
    assert str(Endpoint("::1", 80)) == "[::1]:80"
    assert parse_hostport("k", "off") is None
    target = parse_target("k", "collector:4317")
    assert target is not None and target.address == "collector:4317" and not target.secure
    assert parse_target("k", "https://c")is not None


def test_every_flag_has_a_key_and_help() -> None:
    flags = {s.flag for s in SETTINGS if s.flag}
    for flag in ("--otlp-grpc", "--otlp-http", "--metrics", "--out", "--wal",
                 "--envelope-timeout", "--max-traces", "--otlp-logs", "--forward",
                 "--tls-cert", "--tls-key", "--bearer-token"):
        assert flag in flags
    assert all(s.help for s in SETTINGS)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_bad_config_exits_2_before_listening(tmp_path: Path) -> None:
    port = _free_port()
    result = subprocess.run(
        [sys.executable, "-m", "otel_agent_context", "serve", "--out", str(tmp_path),
         "--otlp-grpc", f"127.0.0.1:{port}", "--envelope-timeout", "-1"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert result.returncode == 2
    assert "buffer.envelope_timeout (--envelope-timeout)" in result.stderr
    with socket.socket() as sock:  # nothing listened on the port meanwhile
        sock.bind(("127.0.0.1", port))


def test_serve_port_in_use_exits_2_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "otel_agent_context", "serve", "--out", str(tmp_path),
             "--otlp-grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
             "--otlp-http", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )
    assert result.returncode == 2
    assert "receivers.otlp_http.endpoint (--otlp-http)" in result.stderr
    assert "cannot listen" in result.stderr
