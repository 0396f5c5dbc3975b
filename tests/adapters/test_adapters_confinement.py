"""A session folder is written by an agent runtime and may be crafted: the reader (and so
``read_session``, ``watch`` and ``validate``) never reads outside it. A symlinked summary once
carried ``/etc/shadow`` out as content; each escape is a test here, with content capture on
so that anything read would show."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson
import pytest

from otel_agent_context.adapters import read_session
from otel_agent_context.adapters._abi import emit_snapshot
from otel_agent_context.testing import CapturedTelemetry

SECRET = "root:$6$canary-outside-the-session-folder$:19000:0:99999:7:::"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    (directory / "shadow").write_text(SECRET + "\n")
    (directory / "result.md").write_text(SECRET + "\n")
    return directory


def _exported(session: Path) -> tuple[str, list[str]]:
    """Everything the session turns into (bundle, spans, events; capture on), and the
    reader's warnings."""
    snapshot = read_session(session)
    tel = CapturedTelemetry(capture_content=True)
    try:
        emit_snapshot(snapshot, tel.agent_context)
        spans = [(s.name, dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
                 for s in tel.spans()]
        bundles = tel.bundles()
    finally:
        tel.shutdown()
    text = orjson.dumps([spans, bundles, snapshot.bundle.model_dump(mode="json")
                         if hasattr(snapshot.bundle, "model_dump") else str(snapshot.bundle)],
                        default=str).decode()
    return text, snapshot.warnings


def test_a_symlinked_summary_is_not_followed(session: Path, outside: Path) -> None:
    summary = session / "context" / "summary.md"
    summary.unlink()
    summary.symlink_to(outside / "shadow")
    text, warnings = _exported(session)
    assert "canary-outside" not in text
    assert any("context/summary.md" in w and "symbolic link" in w for w in warnings)


def test_a_symlinked_directory_is_not_entered(session: Path, outside: Path) -> None:
    child = session / "context" / "child"
    for path in sorted(child.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    child.mkdir(exist_ok=True)
    (child / "rev-999").symlink_to(outside, target_is_directory=True)
    text, warnings = _exported(session)
    assert "canary-outside" not in text
    assert any("outside the session folder" in w for w in warnings)


def test_names_that_leave_the_folder_are_refused(session: Path, outside: Path) -> None:
    depth = len(session.relative_to(outside.parent).parts)
    escape = "../" * (depth + 2) + "elsewhere/shadow"
    index = session / "context" / "swap" / "index.jsonl"
    lines = [json.loads(line) for line in index.read_text().splitlines() if line.strip()]
    lines.append({"id": escape, "kind": "tool_output", "summary": "escape", "tokens": 1})
    lines.append({"id": str(outside / "shadow"), "kind": "tool_output", "tokens": 1})
    index.write_text("".join(json.dumps(line) + "\n" for line in lines))
    text, warnings = _exported(session)
    assert "canary-outside" not in text
    assert any("outside the session folder" in w for w in warnings)


def test_a_fifo_or_a_device_is_not_read_and_does_not_hang(session: Path) -> None:
    summary = session / "context" / "summary.md"
    summary.unlink()
    os.mkfifo(summary)  # nobody ever writes to it: opening it to read would block
    todo = session / "context" / "todo.md"
    todo.unlink()
    todo.symlink_to("/dev/zero")
    started = time.monotonic()
    _, warnings = _exported(session)
    assert time.monotonic() - started < 10
    assert any("context/summary.md" in w and "not a regular file" in w for w in warnings)
    assert any("context/todo.md" in w for w in warnings)


def test_a_file_past_the_limit_is_not_read(session: Path, monkeypatch) -> None:
    from otel_agent_context.adapters import _abi_reader

    monkeypatch.setattr(_abi_reader, "MAX_FILE_BYTES", 1024)
    (session / "context" / "summary.md").write_text("x" * 4096)
    _, warnings = _exported(session)
    assert any("context/summary.md" in w and "over 1024" in w for w in warnings)
