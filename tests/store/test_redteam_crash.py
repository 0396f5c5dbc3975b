"""Red team: ``serve`` SIGKILLed while its store thread writes to PostgreSQL, then restarted:
the store holds exactly the JSON Lines files' envelopes, once each."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
from processor_testkit import envelope_spans, read_bundles, request, serve

from otel_agent_context._store import open_store


def _post(address: str, number: int) -> int:
    body = request(envelope_spans(number + 1, f"env-{number}", stages=3)).SerializeToString()
    try:
        return httpx.post(f"http://{address}/v1/traces", content=body, timeout=10,
                          headers={"Content-Type": "application/x-protobuf"}).status_code
    except httpx.HTTPError:
        return 0


def test_sigkill_while_writing_postgresql_then_restart(tmp_path: Path, postgres_url: str) -> None:
    out = tmp_path / "out"
    args = ["--out", str(out), "--store", postgres_url, "--otlp-grpc", "off",
            "--otlp-http", "127.0.0.1:0", "--metrics", "off", "--envelope-timeout", "60"]
    sent = 0
    for _ in range(2):  # two crashes while envelopes stream in
        process, addresses = serve(args, tmp_path / "ready.json")
        killer = threading.Timer(1.5, process.send_signal, (signal.SIGKILL,))
        killer.start()
        while process.poll() is None and sent < 5000:
            if _post(addresses["otlp_http"], sent) == 200:
                sent += 1
        killer.cancel()
        assert process.wait(10) == -signal.SIGKILL
    process, addresses = serve(args, tmp_path / "ready.json")
    for number in range(sent, sent + 20):
        assert _post(addresses["otlp_http"], number) == 200
    deadline = time.monotonic() + 30
    while len(read_bundles(out)) < sent + 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    keys = [(b["context_envelope"]["telemetry_refs"][0]["trace_id"],
             b["context_envelope"]["context_id"]) for b in read_bundles(out)]
    assert len(keys) == len(set(keys)), "JSON Lines holds an envelope twice"
    assert {f"env-{n}" for n in range(sent + 20)} <= {k[1] for k in keys}
    with open_store(postgres_url) as store:
        rows = [(r["trace_id"], r["context_id"]) for r in
                store.rows("SELECT trace_id, context_id FROM envelopes")]
        items = store.rows("SELECT context_id, COUNT(*) AS n FROM items GROUP BY context_id")
    assert sorted(rows) == sorted(keys)
    assert {r["n"] for r in items} == {6}, "an envelope's item rows are missing or doubled"
