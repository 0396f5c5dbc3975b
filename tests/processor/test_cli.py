"""The commands as a user runs them: ``demo``, ``demo --endpoint``, ``timeline``."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from processor_testkit import REPO, by_context, read_bundles, serve, wait_for


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_agent_context", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_demo_runs_by_itself_in_seconds(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run("demo", "--turns", "4", "--seed", "2", "--out", str(tmp_path / "demo"))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 20
    out = result.stdout
    assert out.count("envelope ctx_") == 4
    assert "stages: surface → selection → budget" in out
    assert "omitted (" in out and "budget" in out
    assert f"bundles:  {tmp_path / 'demo' / 'bundles-000001.jsonl'}" in out
    assert "timeline: otel-agent-context timeline" in out
    bundles = read_bundles(tmp_path / "demo")
    assert len(bundles) == 4 and all(b["rebuild"]["status"] == "complete" for b in bundles)


def test_demo_over_http_protocol(tmp_path: Path) -> None:
    result = _run("demo", "--turns", "2", "--protocol", "http", "--out", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    assert "OTLP/http" in result.stdout and result.stdout.count("envelope ctx_") == 2


def test_demo_to_an_endpoint_nobody_listens_on_says_so_and_exits_1() -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for args in (("--endpoint", f"http://127.0.0.1:{port}"),
                 ("--endpoint", f"http://127.0.0.1:{port}/v1/traces", "--protocol", "http")):
        result = _run("demo", *args, "--turns", "1")
        assert result.returncode == 1, result.stdout + result.stderr
        assert "sent " not in result.stdout
        assert (f"otel-agent-context demo: could not send 1 batch(es) of spans to {args[1]} "
                "(is a collector or `otel-agent-context serve` listening there?") in result.stderr


def test_demo_to_an_external_endpoint_and_forever(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    process, addresses = serve(["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
                                "--otlp-http", "off", "--metrics", "off"],
                               tmp_path / "ready.json")
    try:
        result = _run("demo", "--endpoint", f"http://{addresses['otlp_grpc']}", "--turns", "3")
        assert result.returncode == 0, result.stderr
        assert "sent 3 envelopes" in result.stdout
        wait_for(lambda: len(read_bundles(out_dir)) == 3, 15, message="3 bundles")
        demo = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context", "demo", "--endpoint",
             f"http://{addresses['otlp_grpc']}", "--turns", "2", "--forever", "--interval",
             "0.2", "--seed", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        wait_for(lambda: len(read_bundles(out_dir)) >= 9, 30, message="steady traffic")
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=30)
        assert demo.returncode == 0, err
        assert out.count("sent 2 envelopes") >= 3
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    bundles = read_bundles(out_dir)
    assert len(by_context(bundles)) == len(bundles)


def test_timeline_of_demo_bundles(tmp_path: Path) -> None:
    assert _run("demo", "--turns", "3", "--seed", "2", "--out", str(tmp_path)).returncode == 0
    bundles = read_bundles(tmp_path)
    chosen = bundles[0]["context_envelope"]["context_id"]
    result = _run("timeline", str(tmp_path / "bundles-000001.jsonl"), "--context-id", chosen)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"envelope {chosen}")
    table = lines[lines.index(next(x for x in lines if x.strip().startswith("offset"))):]
    events = [line.split()[2] for line in table[1:]]
    offsets = [float(line.split()[0].lstrip("+").replace(",", "")) for line in table[1:]]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    assert events.index("context.surface.created") < events.index("context.selection.started")
    assert "context.selection.completed" in events and "context.budget.applied" in events
    assert events.index("context.selection.started") < events.index("context.assembly.created")
    assert "context.item.added" in result.stdout and "items" in result.stdout
    # default: the last envelope of a directory, with a hint on stderr
    result = _run("timeline", str(tmp_path))
    last = bundles[-1]["context_envelope"]["context_id"]
    assert result.returncode == 0 and result.stdout.startswith(f"envelope {last}")
    assert "3 envelopes" in result.stderr
    # every item event on its own row
    result = _run("timeline", str(tmp_path), "--context-id", chosen, "--all-items")
    assert result.stdout.count("context.item.added") > 5


def test_timeline_errors(tmp_path: Path) -> None:
    result = _run("timeline", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "no such file" in result.stderr
    path = tmp_path / "b.jsonl"
    path.write_text('not json\n{"context_envelope": {"context_id": "a"}}\n')
    result = _run("timeline", str(path), "--context-id", "zzz")
    assert result.returncode == 1 and "no envelope 'zzz' among 1" in result.stderr
    assert "not a bundle" in result.stderr
    result = _run("timeline", str(path))
    assert result.returncode == 0 and "(no lifecycle events recorded)" in result.stdout


def test_timeline_of_the_sqlite_store_without_session_says_what_to_give(tmp_path: Path) -> None:
    db = tmp_path / "context.db"
    sqlite3.connect(db).execute("create table t (x)").connection.commit()
    result = _run("timeline", str(db))
    assert result.returncode == 2
    assert result.stderr == (f"otel-agent-context timeline: {db} is a bundle store (SQLite): "
                             "give --session CONVERSATION, or the bundles JSON Lines beside it\n")


def test_a_wrong_flag_shows_the_commands_own_usage() -> None:
    result = _run("serve", "--bogus")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: otel-agent-context serve [-h]")
    assert result.stderr.endswith(
        "otel-agent-context serve: error: unrecognized arguments: --bogus\n")
    result = _run("query", "window", "conv-0000", "--nope")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: otel-agent-context query [-h]")
    assert "unrecognized arguments: --nope" in result.stderr


def test_serve_help_lists_the_flags() -> None:
    result = _run("serve", "--help")
    assert result.returncode == 0
    for flag in ("--config", "--otlp-grpc", "--otlp-http", "--metrics", "--out", "--wal",
                 "--envelope-timeout", "--max-traces", "--otlp-logs", "--forward",
                 "--tls-cert", "--tls-key", "--bearer-token", "--ready-file"):
        assert flag in result.stdout
