"""The store's schema, as numbered migrations written once for both databases.

``{ts}``, ``{json}``, ``{real}`` and ``{bool}`` stand for the column types each database
spells its own way; ``{clustered}`` stores a child table in key order where SQLite
can. A migration is applied once, in a transaction, and recorded in
``schema_version``; a database newer than this code is refused rather than misread.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "TYPES"]

_KEY = "trace_id TEXT NOT NULL, context_id TEXT NOT NULL"

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (1, "envelopes, items, blocks, budgets, window segments, compactions, missing context", (
        f"""CREATE TABLE envelopes (
            {_KEY}, span_id TEXT, conversation_id TEXT, agent_name TEXT, scope TEXT,
            lifecycle TEXT, status TEXT, partial_reasons {{json}}, parent_context_id TEXT,
            model TEXT, created_at {{ts}}, created_ns BIGINT, completed_at {{ts}},
            window_max_tokens BIGINT, window_used_tokens BIGINT, utilization {{real}},
            overflow {{bool}} NOT NULL, overflow_tokens BIGINT, candidate_count INTEGER,
            selected_count INTEGER NOT NULL, omitted_count INTEGER NOT NULL,
            truncated_count INTEGER NOT NULL, compacted_count INTEGER NOT NULL,
            missing_count INTEGER NOT NULL, blocking_missing_count INTEGER NOT NULL,
            window_items {{json}}, tokens_by_kind {{json}}, tokens_by_point {{json}},
            omitted_items {{json}}, truncated_items {{json}}, not_injected_items {{json}},
            bundle {{json}} NOT NULL, stored_ns BIGINT NOT NULL,
            PRIMARY KEY (context_id, trace_id))""",  # context_id first: it is what people look up
        "CREATE INDEX envelopes_by_conversation ON envelopes (conversation_id, created_ns)",
        "CREATE INDEX envelopes_by_time ON envelopes (created_ns)",
        f"""CREATE TABLE items (
            {_KEY}, item_id TEXT NOT NULL, context_kind TEXT, state TEXT NOT NULL,
            omit_reason TEXT, omit_detail TEXT, score {{real}}, rank INTEGER, tokens BIGINT,
            truncated {{bool}} NOT NULL, tokens_after_truncation BIGINT,
            compacted {{bool}} NOT NULL, compaction_id TEXT, injected {{bool}} NOT NULL,
            injection_point TEXT, block_index INTEGER, digest TEXT, source_uri TEXT,
            PRIMARY KEY (trace_id, context_id, item_id)){{clustered}}""",
        "CREATE INDEX items_by_item_id ON items (item_id)",
        f"""CREATE TABLE blocks (
            {_KEY}, assembly_id TEXT NOT NULL, block_index INTEGER NOT NULL, item_id TEXT,
            context_kind TEXT, tokens BIGINT, injection_point TEXT,
            PRIMARY KEY (trace_id, context_id, assembly_id, block_index)){{clustered}}""",
        f"""CREATE TABLE budgets (
            {_KEY}, budget_id TEXT NOT NULL, target TEXT, max_tokens BIGINT,
            reserved_tokens BIGINT, actual_tokens BIGINT, utilization {{real}},
            overflow {{bool}} NOT NULL, overflow_tokens BIGINT, overflow_strategy TEXT,
            truncation_count INTEGER NOT NULL,
            PRIMARY KEY (trace_id, context_id, budget_id)){{clustered}}""",
        f"""CREATE TABLE window_segments (
            {_KEY}, budget_id TEXT NOT NULL, segment_order INTEGER NOT NULL, segment TEXT,
            reserved_tokens BIGINT, used_tokens BIGINT,
            PRIMARY KEY (trace_id, context_id, budget_id, segment_order)){{clustered}}""",
        f"""CREATE TABLE compactions (
            {_KEY}, compaction_id TEXT NOT NULL, method TEXT, trigger_reason TEXT, scope TEXT,
            coverage {{real}}, source_count INTEGER, tokens_before BIGINT, tokens_after BIGINT,
            source_items {{json}}, uncovered_sources {{json}}, loss_notes {{json}}, summary_id TEXT,
            PRIMARY KEY (trace_id, context_id, compaction_id)){{clustered}}""",
        f"""CREATE TABLE missing_context (
            {_KEY}, missing_id TEXT NOT NULL, needed_for TEXT, severity TEXT, status TEXT,
            requested_from TEXT, blocked_actions {{json}},
            PRIMARY KEY (trace_id, context_id, missing_id)){{clustered}}""",
    )),
)

SCHEMA_VERSION = MIGRATIONS[-1][0]

#: Column types by database.
TYPES = {
    "sqlite": {"ts": "TEXT", "json": "TEXT", "real": "REAL", "bool": "INTEGER",
               # a child's rows stored in key order: one envelope's rows are read together
               "clustered": " WITHOUT ROWID"},
    "postgresql": {"ts": "TIMESTAMPTZ", "json": "JSONB", "real": "DOUBLE PRECISION",
                   "bool": "BOOLEAN", "clustered": ""},
}
