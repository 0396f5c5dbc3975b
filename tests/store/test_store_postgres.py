"""The bundle store on a real PostgreSQL (Debian's, started by conftest on loopback):
``serve --store postgresql://...`` fed by the demo over OTLP, the same answers as SQLite,
idempotent writes, concurrent start-up, and every SQL query of the Grafana dashboard."""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import store_expect as X
from conftest import DEMO_TURNS, REPO, read_jsonl, run_cli

from otel_agent_context._store import StoreError, open_store
from otel_agent_context._store._rows import bundle_rows
from otel_agent_context._store._session import conversations, envelopes, session
from otel_agent_context.processor._store_sink import StoreSink

DASHBOARD = REPO / "dashboards" / "grafana" / "dashboards" / "session-timeline.json"
TABLES = ("envelopes", "items", "blocks", "budgets", "window_segments", "compactions",
          "missing_context")


def _counts(store: Any) -> dict[str, int]:
    return {t: store.rows(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"] for t in TABLES}


def _comparable(turns: list[Any]) -> list[dict[str, Any]]:
    out = []
    for turn in turns:
        data = turn.as_json()
        data["envelope"] = {k: v for k, v in data["envelope"].items() if k != "created_at"}
        data["envelope"]["overflow"] = bool(data["envelope"]["overflow"])
        for t in data["truncated"]:
            t["tokens_before"] = t["tokens_before"]
        out.append(data)
    return out


def test_serve_stores_the_demo_in_postgresql_like_sqlite(
        postgres_url: str, demo_out: Path, demo_bundles: list, tmp_path: Path) -> None:
    from processor_testkit import serve, wait_for  # the processor tests' helpers

    ready = tmp_path / "ready.json"
    process, addresses = serve(["--out", str(tmp_path / "out"), "--store", postgres_url,
                                "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "off",
                                "--metrics", "127.0.0.1:0", "--envelope-timeout", "5",
                                "--orphan-timeout", "10"], ready)
    try:
        run_cli("demo", "--endpoint", f"http://{addresses['otlp_grpc']}", "--turns",
                str(DEMO_TURNS), "--seed", "0")
        with open_store(postgres_url) as pg:
            wait_for(lambda: _counts(pg)["envelopes"] == DEMO_TURNS, 30,
                     message="the demo's envelopes in PostgreSQL")
            written = read_jsonl(tmp_path / "out")
            assert {(r["trace_id"], r["context_id"]) for r in pg.rows(
                "SELECT trace_id, context_id FROM envelopes")} == {X.key(b) for b in written}
            with open_store(":memory:") as lite:
                lite.write(written)
                conv = X.conversation(written[0])
                assert _comparable(session(pg, conv)) == _comparable(session(lite, conv))
                assert _counts(pg) == _counts(lite)
                assert [c["turns"] for c in conversations(pg)] == [DEMO_TURNS]
                assert len(envelopes(pg)) == DEMO_TURNS
    finally:
        process.terminate()
        assert process.wait(30) == 0


def test_postgresql_writes_are_idempotent_and_types_are_native(postgres_url: str,
                                                               demo_bundles: list) -> None:
    with open_store(postgres_url) as store:
        store.write(demo_bundles)
        before = _counts(store)
        store.write(demo_bundles)
        store.write(demo_bundles[:2])
        assert _counts(store) == before
        assert before["envelopes"] == len(demo_bundles)
    with psycopg.connect(postgres_url) as raw:
        types = dict(raw.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'envelopes'").fetchall())
        assert types["created_at"] == "timestamp with time zone"
        assert types["bundle"] == "jsonb" and types["overflow"] == "boolean"
        # the bundle is queryable as JSON in the database itself
        [(count,)] = raw.execute(
            "SELECT COUNT(*) FROM envelopes WHERE bundle->'rebuild'->>'status' = 'complete'"
        ).fetchall()
        assert count == len(demo_bundles)


def test_retention_prunes_every_table_in_postgresql(postgres_url: str,
                                                    demo_bundles: list) -> None:
    old = copy.deepcopy(demo_bundles[0])
    old["context_envelope"]["context_id"] = "ctx_old"
    old["context_envelope"]["created_at"] = "2020-01-01T00:00:00Z"
    future = copy.deepcopy(demo_bundles[1])
    future["context_envelope"]["context_id"] = "ctx_future"  # a sender's clock far ahead
    future["context_envelope"]["created_at"] = "2200-01-01T00:00:00Z"
    old_rows = {t: len(rows) for t, rows in bundle_rows(old).items()}
    assert old_rows["items"] and old_rows["blocks"]
    with open_store(postgres_url) as store:
        store.write([*demo_bundles, old, future])
        before = _counts(store)
        assert store.prune(1_600_000_000 * 10**9) == 1  # 2020-09-13: only the old one
        after = _counts(store)
        assert {t: before[t] - after[t] for t in TABLES} == old_rows
        for table in TABLES:
            assert not store.rows(f"SELECT 1 FROM {table} WHERE context_id = 'ctx_old'"), table
    time.sleep(0.01)
    # the sink prunes at start: a retention of a millisecond keeps nothing stored before now,
    # the future-dated envelope included (pruned by when it was stored)
    sink = StoreSink(postgres_url, retention=0.001)
    sink.open()
    try:
        assert _counts(sink.opened) == dict.fromkeys(TABLES, 0)
    finally:
        sink.close()


def test_processors_starting_together_migrate_once(postgres_url: str) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            open_store(postgres_url).close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    with psycopg.connect(postgres_url) as raw:
        assert raw.execute("SELECT COUNT(*) FROM schema_version").fetchone() == (1,)


def test_an_unreachable_database_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"postgres:\*\*\*@"):  # the password never shows
        open_store("postgresql://postgres:secret@127.0.0.1:1/none?connect_timeout=2")
    result = run_cli("serve", "--out", str(tmp_path / "out"), "--otlp-grpc", "127.0.0.1:0",
                     "--otlp-http", "off", "--metrics", "off",
                     "--store", "postgresql://u:secret@127.0.0.1:1/none?connect_timeout=2",
                     check=False, timeout=60)
    assert result.returncode == 2
    assert "store.url (--store)" in result.stderr and "secret" not in result.stderr


# -- the Grafana dashboard's SQL -------------------------------------------------------------------

def _grafana_sql(sql: str, conversation: str, agents: list[str]) -> str:
    """What Grafana sends for this SQL: its variables and macros expanded."""
    sql = sql.replace("${conversation}", conversation)
    sql = sql.replace("${agent:sqlstring}", ", ".join(f"'{a}'" for a in agents))
    sql = re.sub(r"\$__timeFilter\((\w+)\)",
                 r"\1 BETWEEN '2000-01-01T00:00:00Z' AND '2100-01-01T00:00:00Z'", sql)
    assert "$" not in sql, sql  # every variable and macro is accounted for
    return sql


def _queries() -> list[tuple[str, str]]:
    model = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = [(f"variable {v['name']}", v["query"]) for v in model["templating"]["list"]
           if v["type"] == "query"]
    out += [(p["title"], t["rawSql"]) for p in model["panels"] for t in p.get("targets", [])]
    return out


def test_the_dashboard_is_on_the_postgresql_datasource_with_agent_and_conversation() -> None:
    model = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert {"pg", "agent", "conversation"} <= set(variables)
    assert variables["pg"]["query"] == "grafana-postgresql-datasource"
    titles = {p["title"] for p in model["panels"]}
    assert {"Window composition per turn", "Omitted items per turn, by reason",
            "Truncated, compacted and blocking gaps per turn",
            "Compactions: coverage and loss"} <= titles
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "grafana-postgresql-datasource",
                                            "uid": "${pg}"}


def test_every_dashboard_query_returns_data_from_the_filled_database(
        postgres_url: str, demo_bundles: list) -> None:
    with open_store(postgres_url) as store:
        store.write(demo_bundles)
    conversation = X.conversation(demo_bundles[0])
    ordered = X.in_time_order(demo_bundles)
    queries = _queries()
    assert len(queries) >= 8
    with psycopg.connect(postgres_url) as raw:
        results = {}
        for where, sql in queries:
            cursor = raw.execute(_grafana_sql(sql, conversation, ["support-agent"]))
            rows = cursor.fetchall()
            assert rows, f"{where}: no data"
            results[where] = ([d.name for d in cursor.description], rows)
        # the values are the bundles' own
        names, rows = results["Window composition per turn"]
        assert len(rows) == len(ordered)
        for row, bundle in zip(rows, ordered, strict=True):
            assert sum(row[1:]) == sum(X.tokens_by_kind(bundle).values())
            assert dict(zip(names[1:], row[1:], strict=True))["document_excerpt"] == \
                X.tokens_by_kind(bundle).get("document_excerpt", 0)
        names, rows = results["Omitted items per turn, by reason"]
        assert [sum(r[1:]) for r in rows] == [len(X.omitted(b)) for b in ordered]
        assert results["variable conversation"][1] == [(conversation,)]
        # an agent that is not chosen hides the conversation
        empty = raw.execute(_grafana_sql(dict(queries)["Turns"], conversation,
                                         ["another-agent"])).fetchall()
        assert empty == []
