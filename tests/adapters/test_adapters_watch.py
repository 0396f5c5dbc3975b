"""The watcher emits exactly once per new pack build; ``watch`` as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from adapters_helpers import PACK_AT, ns, records, tree
from test_adapters_abi import expected_seed_bundle

from otel_agent_context import _semconv as S
from otel_agent_context.adapters import SessionWatcher
from otel_agent_context.testing import CapturedTelemetry

PACK = "context/pack.json"


def envelope_ids(tel: CapturedTelemetry) -> list[str]:
    return [str(s.attributes[S.CONTEXT_ID]) for s in tel.spans() if s.name == S.SPAN_ENVELOPE]


def test_the_watcher_emits_once_per_new_pack_build(session: Path,
                                                   tel: CapturedTelemetry) -> None:
    watcher = SessionWatcher(session, tel.agent_context)
    for _ in range(3):
        watcher.poll()
    assert len(envelope_ids(tel)) == 1  # the current build, once

    # history grows, nothing else: no new build, nothing emitted
    with (session / "messages.jsonl").open("ab") as fh:
        fh.write(b'{"id":"msg-241","role":"user","content":"next","tokens":10}\n')
    watcher.poll()
    assert len(envelope_ids(tel)) == 1

    # a rebuild with the same bytes (new mtime) is a new build
    os.utime(session / PACK, ns=(ns("2026-05-04T09:40:00Z"),) * 2)
    watcher.poll()
    watcher.poll()
    assert len(envelope_ids(tel)) == 2

    # new bytes under the same mtime (a coarse clock) are a new build too
    pack = json.loads((session / PACK).read_text())
    pack["items"][0]["tokens"] = 1300
    (session / PACK).write_text(json.dumps(pack))
    os.utime(session / PACK, ns=(ns("2026-05-04T09:40:00Z"),) * 2)
    watcher.poll()
    watcher.poll()
    ids = envelope_ids(tel)
    assert len(ids) == 3 and len(set(ids)) == 3
    assert ids[1].startswith(f"abi:coder/default/pack-{ns('2026-05-04T09:40:00Z')}-")
    assert watcher.emitted == ids


def test_a_half_written_pack_is_emitted_once_complete(session: Path, tel: CapturedTelemetry,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    full = (session / PACK).read_bytes()
    (session / PACK).write_bytes(full[:100])
    watcher = SessionWatcher(session, tel.agent_context)
    watcher.poll()
    watcher.poll()
    assert envelope_ids(tel) == []
    warnings = [r for r in caplog.records if "half-written" in r.getMessage()]
    assert len(warnings) == 1  # warned once for that state, not at every look
    (session / PACK).write_bytes(full)
    watcher.poll()
    watcher.poll()
    assert len(envelope_ids(tel)) == 1


def test_a_directory_where_the_pack_should_be_is_warned_once(
        session: Path, tel: CapturedTelemetry, caplog: pytest.LogCaptureFixture) -> None:
    full = (session / PACK).read_bytes()
    (session / PACK).unlink()
    (session / PACK).mkdir()
    watcher = SessionWatcher(session, tel.agent_context)
    for _ in range(3):
        watcher.poll()
    assert envelope_ids(tel) == []
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "pack.json" in warned[0] and "directory" in warned[0]
    (session / PACK).rmdir()  # then the file: read, emitted
    (session / PACK).write_bytes(full)
    watcher.poll()
    assert len(envelope_ids(tel)) == 1


def test_watch_once_on_a_folder_that_holds_no_session_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-session"
    (empty / "sub").mkdir(parents=True)
    out = tmp_path / "bundles.jsonl"
    proc = run_watch(str(empty), "--once", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "not a session folder" in proc.stderr and "WARNING" in proc.stderr
    assert bundles(out) == []


def test_saved_state_carries_on_where_the_last_watcher_stopped(
        session: Path, tel: CapturedTelemetry) -> None:
    first = SessionWatcher(session, tel.agent_context)
    first.poll()
    state = json.loads(json.dumps(first.state()))  # what --state stores
    second = SessionWatcher(session, tel.agent_context, state=state)
    second.poll()
    assert len(envelope_ids(tel)) == 1  # nothing new
    (session / "events.jsonl").write_bytes(b'{"id":"ev-1"}\n')  # history rewritten between runs
    third = SessionWatcher(session, tel.agent_context, state=second.state())
    third.poll()
    breach = [dict(e.attributes or {}) for s in tel.spans() for e in s.events
              if e.name == S.EVENT_RUNTIME_RULE_BREACH]
    assert [b[S.RUNTIME_RULE] for b in breach] == ["events_append_only"]


def test_unreadable_saved_state_starts_afresh(session: Path, tel: CapturedTelemetry) -> None:
    watcher = SessionWatcher(session, tel.agent_context, state={"history": {"x": {}}})
    watcher.poll()
    assert len(envelope_ids(tel)) == 1


# -- the command --------------------------------------------------------------------------------


def run_watch(*args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_agent_context", "watch", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def bundles(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def canonical(bundle: dict[str, Any]) -> dict[str, Any]:
    """Records whose order follows span order, sorted by id."""
    out = dict(bundle)
    out["context_envelope"] = dict(bundle["context_envelope"])
    out["context_envelope"]["compaction_refs"] = sorted(
        bundle["context_envelope"]["compaction_refs"])
    for key, field in (("context_items", "item_id"), ("context_compactions", "compaction_id"),
                       ("context_summaries", "summary_id")):
        out[key] = sorted(bundle[key], key=lambda r, f=field: r[f])
    return out


def test_watch_once_writes_the_expected_bundle_and_leaves_the_folder_alone(
        session: Path, tmp_path: Path) -> None:
    before = tree(session)
    out = tmp_path / "bundles.jsonl"
    proc = run_watch(str(session), "--once", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (bundle,) = bundles(out)
    # real span ids: spans that start at the same time are rebuilt in span id order
    assert canonical(records(bundle)) == canonical(expected_seed_bundle(session))
    assert bundle["rebuild"]["status"] == "complete"
    assert f"emitted {bundle['context_envelope']['context_id']}" in proc.stderr
    assert tree(session) == before


def test_watch_once_with_state_emits_only_what_is_new(session: Path, tmp_path: Path) -> None:
    out, state = tmp_path / "bundles.jsonl", tmp_path / "state.json"
    args = (str(session), "--once", "--out", str(out), "--state", str(state))
    assert run_watch(*args).returncode == 0
    assert run_watch(*args).returncode == 0
    assert len(bundles(out)) == 1  # the second run saw nothing new
    lines = (session / "messages.jsonl").read_bytes().splitlines(keepends=True)
    (session / "messages.jsonl").write_bytes(b"".join(lines[:-1]))  # history shrank
    proc = run_watch(*args)
    assert proc.returncode == 0
    assert "rule breach" in proc.stderr and "messages_append_only (MUST)" in proc.stderr
    third = bundles(out)[1]
    assert third["context_envelope"]["scope"] == "session"


def test_watch_follows_changes_until_terminated(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundles.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_agent_context", "watch", str(session), "--out", str(out),
         "--interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: len(bundles(out)) == 1)
        os.utime(session / PACK, ns=(ns("2026-05-04T10:00:00Z"),) * 2)  # a rebuild
        _wait_for(lambda: len(bundles(out)) == 2)
        time.sleep(0.3)  # more looks at an unchanged folder emit nothing
        assert len(bundles(out)) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    created = [b["context_envelope"]["created_at"] for b in bundles(out)]
    assert created == [PACK_AT, "2026-05-04T10:00:00Z"]


def _wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(("args", "env", "message"), [
    (["{missing}", "--once"], {}, "SESSION_DIR: "),
    (["{session}", "--once", "--interval", "0"], {}, "--interval: must be a positive"),
    (["{session}", "--once", "--out", "{session}/out.jsonl"], {},
     "--out: {session}/out.jsonl is inside the session folder"),
    (["{session}", "--once", "--state", "{session}/context/state.json"], {},
     "--state: {session}/context/state.json is inside the session folder"),
    (["{session}", "--once", "--out", "{missing}/out.jsonl"], {},
     "--out: {missing} does not exist"),
    (["{session}", "--once"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
     "OTEL_EXPORTER_OTLP_PROTOCOL: expected grpc or http/protobuf"),
])
def test_bad_usage_exits_2(session: Path, tmp_path: Path, args: list[str],
                           env: dict[str, str], message: str) -> None:
    before = tree(session)
    fill = {"session": str(session), "missing": str(tmp_path / "missing")}
    proc = run_watch(*[a.format(**fill) for a in args], env=env)
    assert proc.returncode == 2
    assert message.format(**fill) in proc.stderr
    assert tree(session) == before


def test_no_subcommand_arguments_is_bad_usage() -> None:
    proc = run_watch()
    assert proc.returncode == 2
    assert "SESSION_DIR" in proc.stderr


def test_watch_once_sends_otlp_to_the_configured_endpoint(session: Path) -> None:
    """The default destination: an OTLP exporter from the standard variables (here
    OTLP/HTTP to a local receiver that keeps what it gets)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received: list[tuple[str, bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc = run_watch(str(session), "--once", env={
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
            "OTEL_SERVICE_NAME": "abi-watch-test"})
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    spans, services = [], set()
    for path, body in received:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes
                         if a.key == "service.name"}
            spans += [s for ss in rs.scope_spans for s in ss.spans]
    assert services == {"abi-watch-test"}
    assert sorted(s.name for s in spans) == sorted(
        ["context.envelope", "context.surface", "context.selection", "context.budget",
         "context.assembly"] + ["context.compaction"] * 4)


@pytest.mark.parametrize("once", [True, False], ids=["once", "following"])
def test_watch_fails_fast_when_its_exporter_reaches_nothing(session: Path, once: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # discard: nobody there
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "otel_agent_context", "watch",
                           *(["--once"] if once else []), str(session)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "could not send" in proc.stderr and "127.0.0.1:9" in proc.stderr
    assert time.monotonic() - started < 30  # it stops by itself, following or not
