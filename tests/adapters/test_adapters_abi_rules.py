"""Context Runtime ABI: a test per rule breach, a test per malformed file, and the folder
is never written to."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from adapters_helpers import PACK_AT, SEED_SESSION, copy_session, set_times, sha, tree

from otel_agent_context import _semconv as S
from otel_agent_context.adapters import (
    RULES,
    RuleBreach,
    SessionWatcher,
    emit_session,
    emit_snapshot,
    read_session,
    session_bundle,
)
from otel_agent_context.testing import CapturedTelemetry

LOGGER = "otel_agent_context.adapters"


def breach_events(tel: CapturedTelemetry) -> list[dict[str, Any]]:
    return [dict(ev.attributes or {}) for span in tel.spans() for ev in span.events
            if ev.name == S.EVENT_RUNTIME_RULE_BREACH]


def breach_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and "rule breach" in r.getMessage()]


def test_every_rule_is_a_seed_rule_with_its_keyword() -> None:
    assert dict(RULES) == {
        "messages_append_only": ("must", "messages.jsonl MUST be append-only logical history."),
        "events_append_only": ("should", "events.jsonl SHOULD be append-only runtime history."),
        "summary_not_only_copy": ("must", "A summary is never the only copy of history."),
        "gc_keeps_durable_history": (
            "must", "GC MUST NOT delete messages.jsonl or events.jsonl unless explicit "
                    "archive/delete policy allows it."),
        "gc_keeps_referenced_child_result": (
            "must", "GC MUST NOT delete a child result while parent context references it."),
    }


def _touch_pack(session: Path, at: str = "2026-05-04T09:45:00Z") -> None:
    """A new pack build: same content, later mtime."""
    set_times(session, pack_at=at)


# -- append-only history ---------------------------------------------------------------------


@pytest.mark.parametrize(("rel", "rule", "level"), [
    ("messages.jsonl", "messages_append_only", "must"),
    ("events.jsonl", "events_append_only", "should"),
])
def test_history_that_shrank_is_a_breach(session: Path, tel: CapturedTelemetry,
                                         caplog: pytest.LogCaptureFixture, rel: str, rule: str,
                                         level: str) -> None:
    before = read_session(session)
    assert before.breaches == []
    path = session / rel
    data = path.read_bytes()
    kept = b"".join(data.splitlines(keepends=True)[:-2])  # the last two lines removed
    path.write_bytes(kept)
    _touch_pack(session)
    caplog.set_level(logging.WARNING, LOGGER)
    after = read_session(session, previous=before.history)
    detail = f"{rel} shrank from {len(data)} to {len(kept)} bytes since last seen"
    assert after.breaches == [RuleBreach(rule, rel, detail)]
    emit_snapshot(after, tel.agent_context)
    assert breach_events(tel) == [{S.RUNTIME_RULE: rule, S.RUNTIME_RULE_LEVEL: level,
                                   S.RUNTIME_RULE_DETAIL: detail, S.RUNTIME_PATH: rel}]
    assert breach_logs(caplog) == [
        f"context runtime rule breach in {session}: {rule} ({level.upper()}): {detail}"]


@pytest.mark.parametrize(("rel", "rule"), [("messages.jsonl", "messages_append_only"),
                                           ("events.jsonl", "events_append_only")])
def test_history_rewritten_in_place_is_a_breach(session: Path, rel: str, rule: str) -> None:
    before = read_session(session)
    path = session / rel
    data = path.read_bytes()
    path.write_bytes(b"{" + b"X" + data[2:] + b'{"appended":true}\n')  # longer, but rewritten
    after = read_session(session, previous=before.history)
    size = len(data)
    assert after.breaches == [RuleBreach(
        rule, rel, f"the first {size} bytes of {rel} were rewritten since last seen "
                   "(not an append)")]


def test_appending_to_history_is_no_breach(session: Path) -> None:
    before = read_session(session)
    with (session / "messages.jsonl").open("ab") as fh:
        fh.write(b'{"id":"msg-241","role":"user","content":"more","tokens":10}\n')
    with (session / "events.jsonl").open("ab") as fh:
        fh.write(b'{"id":"ev-992","type":"state"}\n')
    assert read_session(session, previous=before.history).breaches == []


# -- a summary as the only copy ----------------------------------------------------------------


def test_a_derived_file_citing_history_that_is_gone_is_a_breach(
        session: Path, tel: CapturedTelemetry, caplog: pytest.LogCaptureFixture) -> None:
    lines = (session / "messages.jsonl").read_bytes().splitlines(keepends=True)
    (session / "messages.jsonl").write_bytes(b"".join(lines[:100]))  # 240 -> 100 messages
    caplog.set_level(logging.WARNING, LOGGER)
    snapshot = read_session(session)
    assert snapshot.breaches == [
        RuleBreach("summary_not_only_copy", "context/summary.md",
                   "context/summary.md cites messages:101-150 but messages.jsonl has 100 "
                   "messages: the derived file is the only copy of that history"),
        RuleBreach("summary_not_only_copy", "context/decisions.jsonl",
                   "context/decisions.jsonl cites messages:200-230 but messages.jsonl has 100 "
                   "messages: the derived file is the only copy of that history"),
        RuleBreach("summary_not_only_copy", "context/todo.md",
                   "context/todo.md cites messages:190-200 but messages.jsonl has 100 "
                   "messages: the derived file is the only copy of that history"),
    ]
    assert snapshot.bundle is not None
    notes = {c.compaction_id: c.loss_notes for c in snapshot.bundle.context_compactions}
    assert notes["abi-compaction-summary"] == [
        "cites messages:101-150, not in messages.jsonl (100 messages)"]
    assert notes["abi-compaction-facts"] == []
    emit_snapshot(snapshot, tel.agent_context)
    assert [e[S.RUNTIME_PATH] for e in breach_events(tel)] == [
        "context/summary.md", "context/decisions.jsonl", "context/todo.md"]
    assert len(breach_logs(caplog)) == 3
    (bundle,) = tel.bundles()
    (summary,) = [c for c in bundle["context_compactions"]
                  if c["compaction_id"] == "abi-compaction-summary"]
    # the window is tail:40 = 61-100; the history before it, 1-60, is all cited (1-150)
    assert summary["coverage"] == 1.0
    assert summary["loss_notes"] == [
        "cites messages:101-150, not in messages.jsonl (100 messages)"]


# -- GC ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", ["messages.jsonl", "events.jsonl"])
def test_gc_that_deleted_history_seen_before_is_a_breach(session: Path, tel: CapturedTelemetry,
                                                         rel: str) -> None:
    watcher = SessionWatcher(session, tel.agent_context)
    watcher.poll()
    size = (session / rel).stat().st_size
    (session / rel).unlink()
    watcher.poll()  # no new pack: the breach goes out on a session envelope of its own
    detail = f"{rel} was deleted ({size} bytes when last seen) and context/gc.policy " \
             "does not allow it"
    expected = {S.RUNTIME_RULE: "gc_keeps_durable_history", S.RUNTIME_RULE_LEVEL: "must",
                S.RUNTIME_RULE_DETAIL: detail, S.RUNTIME_PATH: rel}
    if rel == "messages.jsonl":  # the context still cites it: gone history, summaries remain
        assert expected in breach_events(tel)
    else:
        assert breach_events(tel) == [expected]
    bundles = tel.bundles()
    assert [b["context_envelope"]["scope"] for b in bundles] == ["turn", "session"]
    assert bundles[1]["context_envelope"]["context_id"].startswith("abi:coder/default/check-")


def test_gc_that_deleted_history_the_context_refers_to_is_a_breach_on_first_sight(
        session: Path) -> None:
    (session / "messages.jsonl").unlink()
    (session / "events.jsonl").unlink()
    rules = [(b.rule, b.path) for b in read_session(session).breaches]
    assert ("gc_keeps_durable_history", "messages.jsonl") in rules
    assert ("gc_keeps_durable_history", "events.jsonl") in rules  # swap sha256-def cites it


def test_an_explicit_delete_policy_allows_deleting_history(session: Path,
                                                           tel: CapturedTelemetry) -> None:
    (session / "context/gc.policy").write_text("keep_messages=0\nkeep_events=0\n")
    watcher = SessionWatcher(session, tel.agent_context)
    watcher.poll()
    (session / "events.jsonl").unlink()
    watcher.poll()
    assert breach_events(tel) == []


def test_a_deleted_child_result_the_pack_references_is_a_breach(session: Path,
                                                                tel: CapturedTelemetry) -> None:
    (session / "context/child/rev-123/result.md").unlink()
    snapshot = emit_session(session, tel.agent_context)
    detail = ("context/child/rev-123/result.md is referenced by context/pack.json (items[4]) "
              "but does not exist")
    assert snapshot.breaches == [RuleBreach("gc_keeps_referenced_child_result",
                                            "context/child/rev-123/result.md", detail)]
    assert breach_events(tel)[0][S.RUNTIME_RULE_DETAIL] == detail
    (bundle,) = tel.bundles()
    item = next(i for i in bundle["context_items"]
                if i["item_id"] == "context/child/rev-123/result.md")
    assert "digest" not in item and item["token_estimate"] == 1000


def test_a_deleted_child_result_refs_jsonl_references_is_a_breach(session: Path) -> None:
    with (session / "context/refs.jsonl").open("a") as fh:
        fh.write('{"id":"r3","path":"context/child/rev-200/result.md","kind":"artifact"}\n')
    assert read_session(session).breaches == [RuleBreach(
        "gc_keeps_referenced_child_result", "context/child/rev-200/result.md",
        "context/child/rev-200/result.md is referenced by context/refs.jsonl (line 3) but "
        "does not exist")]


# -- malformed and half-written files: a warning, never a crash ------------------------------


def _write(rel: str, data: bytes) -> Callable[[Path], None]:
    def mutate(session: Path) -> None:
        path = session / rel
        if path.is_dir():
            path.rmdir()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return mutate


def _append(rel: str, data: bytes) -> Callable[[Path], None]:
    def mutate(session: Path) -> None:
        with (session / rel).open("ab") as fh:
            fh.write(data)
    return mutate


def _dir(rel: str) -> Callable[[Path], None]:
    def mutate(session: Path) -> None:
        (session / rel).unlink()
        (session / rel).mkdir()
    return mutate


PACK = "context/pack.json"
MALFORMED = {
    "pack half-written": (
        _write(PACK, (SEED_SESSION / PACK).read_bytes()[:150]),
        "context/pack.json: not valid JSON (half-written?)", False),
    "pack empty": (_write(PACK, b""), "context/pack.json: empty", False),
    "pack not an object": (_write(PACK, b"[1, 2]"),
                           "context/pack.json: expected a JSON object, got list", False),
    "pack items not a list": (_write(PACK, b'{"items": {"kind": "system"}}'),
                              "context/pack.json: items: expected a list, got dict", True),
    "pack item not an object": (
        _write(PACK, b'{"items": ["system", {"kind": "system", '
                     b'"source": "context/pinned/system.md", "tokens": 5}]}'),
        "context/pack.json: items[0]: expected an object; ignored", True),
    "pack item tokens not a number": (
        _write(PACK, b'{"items": [{"kind": "system", "source": "context/pinned/system.md", '
                     b'"tokens": "1200"}]}'),
        "context/pack.json: items[0].tokens: expected a non-negative integer, got '1200'; "
        "ignored", True),
    "pack item without source": (
        _write(PACK, b'{"items": [{"kind": "system", "tokens": 5}]}'),
        "context/pack.json: items[0]: no source (pack items SHOULD identify their source)",
        True),
    "pack range not a range of messages": (
        _write(PACK, b'{"items": [{"kind": "recent_messages", "source": "messages.jsonl", '
                     b'"range": "last:5", "tokens": 50}]}'),
        "context/pack.json: items[0]: range 'last:5' is not a range of messages.jsonl; "
        "no digest", True),
    "messages half-written last line": (
        _append("messages.jsonl", b'{"id":"msg-241","role":"us'),
        "messages.jsonl: line 241: half-written last line, not counted", True),
    "messages line not JSON": (
        _write("messages.jsonl", (SEED_SESSION / "messages.jsonl").read_bytes()
               .replace(b'{"id":"msg-005"', b'{id:"msg-005"')),
        "messages.jsonl: line 5: not valid JSON; tokens estimated", True),
    "facts line not JSON": (
        _write("context/facts.jsonl", b'{"id":"f1","text":"x","source":"messages:12-18"}\n'
                                      b'not json\n{"id":"f3","sour'),
        "context/facts.jsonl: line 2: not valid JSON, ignored", True),
    "facts half-written last line": (
        _write("context/facts.jsonl", b'{"id":"f1","text":"x","source":"messages:12-18"}\n'
                                      b'{"id":"f2","sour'),
        "context/facts.jsonl: line 2: half-written last line, ignored", True),
    "decisions line not an object": (
        _write("context/decisions.jsonl", b'["d1"]\n'),
        "context/decisions.jsonl: line 1: expected a JSON object, ignored", True),
    "decisions source not a string": (
        _write("context/decisions.jsonl", b'{"id":"d1","source":12}\n'),
        "context/decisions.jsonl: line 1: source must be a string; ignored", True),
    "facts bad message range": (
        _write("context/facts.jsonl", b'{"id":"f1","source":"messages:18-12"}\n'),
        "context/facts.jsonl: line 1: bad message range 'messages:18-12'; ignored", True),
    "swap entry without id": (
        _write("context/swap/index.jsonl", b'{"kind":"message_range","tokens":5}\n'),
        "context/swap/index.jsonl: line 1: no id; ignored", True),
    "swap tokens negative": (
        _write("context/swap/index.jsonl", b'{"id":"sha256-abc","tokens":-5}\n'),
        "context/swap/index.jsonl: line 1: tokens: expected a non-negative integer, got -5; "
        "ignored", True),
    "dedup refs not a list": (
        _write("context/dedup/index.jsonl", b'{"hash":"sha256-abc","refs":"messages:1-40"}\n'),
        "context/dedup/index.jsonl: line 1: expected hash and a list of refs; ignored", True),
    "budget not a number": (
        _write("context/budget", b"lots\n"), "context/budget: not a token budget: 'lots'; "
                                             "ignored", True),
    "gc.policy line without =": (
        _write("context/gc.policy", b"keep_messages\n"),
        "context/gc.policy: line 1: expected key=value, got 'keep_messages'; ignored", True),
    "summary not UTF-8": (
        _write("context/summary.md", b"\xff\xfe summary messages:1-150\n"),
        "context/summary.md: not UTF-8; undecodable bytes replaced", True),
    "summary is a directory": (_dir("context/summary.md"),
                               "context/summary.md: is a directory, expected a file", True),
    # numbers no field can hold (orjson refuses the whole document for one): the rest is read
    "pack number of 5,000 digits": (
        _write(PACK, (SEED_SESSION / PACK).read_bytes().replace(
            b'"budget_tokens": 32000', b'"budget_tokens": ' + b"9" * 5000)),
        "context/pack.json: 1 number(s) out of range, read as null", True),
    "pack number beyond a double": (
        _write(PACK, (SEED_SESSION / PACK).read_bytes().replace(b'"tokens": 900',
                                                                b'"tokens": 1e400')),
        "context/pack.json: 1 number(s) out of range, read as null", True),
    "messages line with NaN": (
        _write("messages.jsonl", (SEED_SESSION / "messages.jsonl").read_bytes()
               .replace(b'{"id":"msg-005"', b'{"weight":NaN,"id":"msg-005"')),
        "messages.jsonl: line 5: 1 number(s) out of range, read as null", True),
    "swap chunk reference half-written": (
        _write("context/swap/chunk/sha256-abc", b'{"source": "messages.jsonl", "start_'),
        "context/swap/chunk/sha256-abc: not valid JSON (half-written?)", True),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_a_warning_never_a_crash(
        tmp_path: Path, tel: CapturedTelemetry, caplog: pytest.LogCaptureFixture,
        case: str) -> None:
    mutate, warning, has_bundle = MALFORMED[case]
    session = copy_session(tmp_path)
    mutate(session)
    set_times(session)
    caplog.set_level(logging.WARNING, LOGGER)
    snapshot = emit_session(session, tel.agent_context)
    assert any(w.startswith(warning) for w in snapshot.warnings), snapshot.warnings
    assert any(warning in r.getMessage() for r in caplog.records if r.name == LOGGER)
    assert (snapshot.bundle is not None) is has_bundle
    assert len(tel.bundles()) == (1 if has_bundle else 0)
    if has_bundle:
        assert tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_a_missing_pack_is_a_warning_and_nothing_is_emitted(session: Path,
                                                            tel: CapturedTelemetry) -> None:
    (session / PACK).unlink()
    snapshot = emit_session(session, tel.agent_context)
    assert snapshot.bundle is None and session_bundle(session) is None
    assert snapshot.warnings == ["context/pack.json: absent: no pack built yet, nothing to emit"]
    assert tel.spans() == []


def test_a_pack_without_tokens_gets_estimates(session: Path) -> None:
    (session / PACK).write_text(
        '{"items": [{"kind": "system", "source": "context/pinned/system.md"},'
        '{"kind": "recent_messages", "source": "messages.jsonl", "range": "tail:3"},'
        '{"kind": "file", "source": "context/facts.jsonl", "range": "2-2"}]}')
    snapshot = read_session(session)
    text = (session / "context/pinned/system.md").read_text()
    fact2 = (session / "context/facts.jsonl").read_text().splitlines(keepends=True)[1]
    assert snapshot.bundle is not None
    system, recent, facts = snapshot.bundle.context_items[:3]
    assert system.token_estimate == (len(text) + 3) // 4  # ~4 characters a token
    assert recent.token_estimate == 30  # the messages' own "tokens": 10 each
    assert (facts.token_estimate, facts.digest) == ((len(fact2) + 3) // 4,
                                                    sha(fact2.encode()))
    assert facts.source_refs[0].selector == "line_range:2-2"
    assert snapshot.warnings == [
        f"context/pack.json: items[{i}]: no tokens; estimated from {src}"
        for i, src in enumerate(["context/pinned/system.md", "messages.jsonl",
                                 "context/facts.jsonl"])]


def test_repeated_pack_sources_get_distinct_items(session: Path) -> None:
    (session / PACK).write_text(
        '{"items": [{"kind": "system", "source": "context/pinned/system.md", "tokens": 5},'
        '{"kind": "system", "source": "context/pinned/system.md", "tokens": 5}]}')
    bundle = session_bundle(session)
    assert bundle is not None
    assert [b.item_id for b in bundle.context_assemblies[0].ordered_blocks] == [
        "context/pinned/system.md", "context/pinned/system.md@1"]


def test_not_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    from otel_agent_context import ConfigError
    with pytest.raises(ConfigError, match="session_dir"):
        read_session(tmp_path / "nope")


# -- read only -----------------------------------------------------------------------------------


def test_the_session_folder_is_byte_identical_after_a_run(session: Path,
                                                          tel: CapturedTelemetry) -> None:
    before = tree(session)
    emit_session(session, tel.agent_context)
    watcher = SessionWatcher(session, tel.agent_context)
    watcher.run(interval=0.01, max_polls=3)
    assert tree(session) == before
    # emit_session, and the watcher's first look: the same pack build, the same context id
    envelopes = [s for s in tel.spans() if s.name == S.SPAN_ENVELOPE]
    assert len(envelopes) == 2
    assert len({s.attributes[S.CONTEXT_ID] for s in envelopes}) == 1
    assert {b["context_envelope"]["created_at"] for b in tel.bundles()} == {PACK_AT}
