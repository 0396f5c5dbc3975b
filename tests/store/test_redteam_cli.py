"""Red team: ``timeline --session`` and ``query`` on sources an outsider shaped: a FIFO named
``.db`` or inside a directory of JSON Lines, another application's SQLite file, a read-only
store, and ids carrying terminal escape sequences."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import orjson
from conftest import run_cli

from otel_agent_context._store import open_store

ESCAPES = "\x1b]0;PWNED\x07\x1b[2J\x9b31m"


def _bundle(context_id: str, conversation: str, item: str) -> dict:
    return {"context_envelope": {"context_id": context_id,
                                 "telemetry_refs": [{"trace_id": "t-" + context_id}],
                                 "metadata": {"gen_ai.conversation.id": conversation},
                                 "created_at": "2026-01-01T00:00:00Z"},
            "context_items": [{"item_id": item}],
            "context_assemblies": [{"ordered_blocks": [{"item_id": item, "tokens": 3}]}]}


def test_a_fifo_is_refused_rather_than_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "store.db")
    junk = tmp_path / "junk"
    junk.mkdir()
    os.mkfifo(junk / "bundles-1.jsonl")
    for args in (("timeline", str(tmp_path / "store.db"), "--session", "x"),
                 ("query", "--store", str(junk), "conversations"),
                 # one envelope's timeline reads JSON Lines with the store's reader too
                 ("timeline", str(junk), "--context-id", "x"),
                 ("timeline", str(tmp_path / "store.db"))):
        try:
            result = run_cli(*args, check=False, timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{args} waited on a FIFO") from None
        assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr


def test_reading_never_writes_the_schema_into_another_database(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    conn.close()
    result = run_cli("query", "--store", str(other), "conversations", check=False)
    assert result.returncode == 2 and "not an otel-agent-context store" in result.stderr
    with sqlite3.connect(other) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert tables == {"notes"}


def test_a_store_on_a_read_only_mount_can_be_read(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "context.db")) as store:
        store.write([_bundle("c1", "conv", "item")])
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "--bind", str(tmp_path), str(mount)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True)
        result = run_cli("query", "--store", str(mount / "context.db"), "conversations",
                         check=False)
        assert result.returncode == 0, result.stderr
        assert "conv" in result.stdout
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_escape_sequences_in_ids_do_not_reach_the_terminal(tmp_path: Path) -> None:
    source = tmp_path / "b.jsonl"
    source.write_bytes(orjson.dumps(_bundle("ctx" + ESCAPES, "conv" + ESCAPES,
                                            "item" + ESCAPES)) + b"\n")
    outputs = [
        run_cli("timeline", str(source), "--session", "conv" + ESCAPES).stdout,
        run_cli("query", "--store", str(source), "conversations").stdout,
        run_cli("query", "--store", str(source), "envelopes").stdout,
        run_cli("query", "--store", str(source), "window", "conv" + ESCAPES).stdout,
    ]
    for text in outputs:
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text)
        assert "conv" in text or "peak: turn 1" in text  # (window names no conversation)
    # --json keeps the ids exactly (escaped the JSON way)
    as_json = run_cli("query", "--store", str(source), "--json", "conversations").stdout
    assert orjson.loads(as_json)[0]["conversation_id"] == "conv" + ESCAPES
