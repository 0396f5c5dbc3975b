"""``timeline --session`` and ``query`` as a person runs them: from serve's output directory
(its context.db), a SQLite file, or bundles JSON Lines (the same answers), with clear exit
codes for what is not there."""

from __future__ import annotations

import json
from pathlib import Path

import store_expect as X
from conftest import DEMO_TURNS, run_cli


def test_timeline_session_in_the_terminal(demo_out: Path, demo_bundles: list) -> None:
    ordered = X.in_time_order(demo_bundles)
    text = run_cli("timeline", str(demo_out), "--session", "conv-0000").stdout
    assert f"conversation conv-0000: {DEMO_TURNS} turns" in text
    for number, bundle in enumerate(ordered, 1):
        assert f"Turn {number}  {X.key(bundle)[1]}" in text
    truncated = next(i for b in ordered for i in X.truncated(b))
    assert f"truncated {truncated}:" in text
    assert "compacted (rolling_summary)" in text and "loss:" in text
    assert "missing [BLOCKING]" in text and "since turn 1:" in text
    assert "trace: http://localhost:16686/trace/" in text
    every = run_cli("timeline", str(demo_out), "--session", "conv-0000", "--all-items").stdout
    item, reason = sorted(X.omitted(ordered[0]))[0]
    assert f"    {item}  {reason}" in every


def test_the_same_answers_from_json_lines_sqlite_and_stdin(demo_out: Path, tmp_path: Path) -> None:
    from_dir = run_cli("timeline", str(demo_out), "--session", "conv-0000", "--json").stdout
    jsonl = sorted(demo_out.glob("bundles-*.jsonl"))[0]
    from_jsonl = run_cli("timeline", str(jsonl), "--session", "conv-0000", "--json").stdout
    from_db = run_cli("timeline", str(demo_out / "context.db"), "--session", "conv-0000",
                      "--json").stdout
    from_stdin = run_cli("timeline", "-", "--session", "conv-0000", "--json",
                         stdin=jsonl.read_bytes()).stdout.decode()
    # a store is known by its contents, not its name: a copy named `.bak` is still a store,
    # and bundles in a file named `.db` are still bundles
    renamed_db = tmp_path / "store-copy.bak"
    renamed_db.write_bytes((demo_out / "context.db").read_bytes())
    from_renamed_db = run_cli("timeline", str(renamed_db), "--session", "conv-0000",
                              "--json").stdout
    renamed_jsonl = tmp_path / "bundles.db"
    renamed_jsonl.write_bytes(jsonl.read_bytes())
    from_renamed_jsonl = run_cli("timeline", str(renamed_jsonl), "--session", "conv-0000",
                                 "--json").stdout
    parsed = json.loads(from_dir)
    assert len(parsed["turns"]) == DEMO_TURNS
    for other in (from_jsonl, from_db, from_stdin, from_renamed_db, from_renamed_jsonl):
        assert json.loads(other) == parsed


def test_query_answers_the_questions_of_the_issue(demo_out: Path, demo_bundles: list) -> None:
    ordered = X.in_time_order(demo_bundles)
    item, reason = sorted(X.omitted(ordered[0]))[0]
    rows = json.loads(run_cli("query", "--store", str(demo_out), "--json", "dropped", item,
                              "--reason", reason).stdout)
    assert [r["turn"] for r in rows] == [
        n for n, b in enumerate(ordered, 1) if (item, reason) in X.omitted(b)]
    table = run_cli("query", "--store", str(demo_out), "dropped", item).stdout
    assert reason in table and "conv-0000" in table  # turns, reasons and scores
    change = json.loads(run_cli("query", "--store", str(demo_out), "--json", "diff",
                                "conv-0000", "2", "3").stdout)
    assert change["added"] == [i for i in X.window(ordered[2]) if i not in X.window(ordered[1])]
    assert {r["item_id"] for r in change["removed"]} == (
        set(X.window(ordered[1])) - set(X.window(ordered[2])))
    text = run_cli("query", "--store", str(demo_out), "diff", "conv-0000", "2", "3").stdout
    assert text.startswith("turn 2 (")
    window = json.loads(run_cli("query", "--store", str(demo_out), "--json", "window",
                                "conv-0000").stdout)
    peak = max(range(len(ordered)), key=lambda n: ordered[n]["context_budgets"][0]["utilization"])
    assert window["peak_turn"] == peak + 1
    assert [t["by_kind"] for t in window["turns"]] == [X.tokens_by_kind(b) for b in ordered]
    overflowing = json.loads(run_cli("query", "--store", str(demo_out), "--json", "envelopes",
                                     "--overflow").stdout)
    assert {e["context_id"] for e in overflowing} == {
        X.key(b)[1] for b in ordered if b["context_budgets"][0]["overflow"]}
    listing = run_cli("query", "--store", str(demo_out), "conversations").stdout
    assert "conv-0000" in listing


def test_store_and_json_may_follow_the_question(demo_out: Path) -> None:
    before = run_cli("query", "--store", str(demo_out), "--json", "window", "conv-0000").stdout
    after = run_cli("query", "window", "conv-0000", "--store", str(demo_out), "--json").stdout
    assert json.loads(after) == json.loads(before)
    # one before, one after: neither is lost
    mixed = run_cli("query", "--store", str(demo_out), "window", "conv-0000", "--json").stdout
    assert json.loads(mixed) == json.loads(before)
    table = run_cli("query", "--json", "conversations", "--store", str(demo_out)).stdout
    assert json.loads(table)[0]["conversation_id"] == "conv-0000"


def test_what_is_not_there_gets_a_clear_message_and_exit_code(demo_out: Path,
                                                              tmp_path: Path) -> None:
    missing = run_cli("timeline", str(demo_out), "--session", "nope", check=False)
    assert missing.returncode == 1 and "no conversation 'nope'" in missing.stderr
    assert "conv-0000" in missing.stderr  # it names what is there
    nowhere = run_cli("query", "--store", str(tmp_path / "nowhere"), "conversations",
                      check=False)
    assert nowhere.returncode == 2 and "no such file" in nowhere.stderr
    bad_turn = run_cli("query", "--store", str(demo_out), "diff", "conv-0000", "1", "99",
                       check=False)
    assert bad_turn.returncode == 1 and "turns are numbered 1 to" in bad_turn.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text('not json\n{"context_envelope": 3}\n')
    result = run_cli("timeline", str(junk), "--session", "x", check=False)
    assert result.returncode == 1 and "not a bundle, skipped" in result.stderr
