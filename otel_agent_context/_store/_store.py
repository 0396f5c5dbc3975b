"""The bundle store: SQLite (embedded, the default) or PostgreSQL (``postgresql://``).

One :class:`Store` object serves the processor's sink (writes) and the readers (``query``,
``timeline --session``, the web page). Writes are idempotent: a bundle written again (a WAL
replay after a crash) replaces its own rows, so nothing is ever counted twice. SQL is written
once with ``?`` placeholders; the PostgreSQL side turns them into ``%s``.
"""

from __future__ import annotations

import datetime
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from ._rows import COLUMNS, JSON_COLUMNS, TIMESTAMP_COLUMNS, bundle_rows
from ._schema import MIGRATIONS, SCHEMA_VERSION, TYPES

__all__ = ["DEFAULT_SQLITE_NAME", "Store", "StoreError", "open_store"]

log = logging.getLogger(__name__)

#: The SQLite file ``serve`` keeps under ``--out`` unless ``--store`` says otherwise.
DEFAULT_SQLITE_NAME = "context.db"

#: Primary-key width of each table (its first N columns).
_KEY_WIDTH = {"envelopes": 2, "items": 3, "blocks": 4, "budgets": 3, "window_segments": 4,
              "compactions": 3, "missing_context": 3}
_CHILDREN = tuple(t for t in COLUMNS if t != "envelopes")
#: SQLite page size of a new store file.
_PAGE_SIZE = 16384


def _scrub(value: Any) -> Any:
    """A bundle with its NUL characters replaced (PostgreSQL's text and jsonb refuse them)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, Mapping):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


class StoreError(Exception):
    """The store cannot be opened or used (bad URL, newer schema, unreachable database)."""


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def _rfc3339(value: datetime.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value.isoformat() + "Z"


def open_store(url: str, *, durable: bool = True, read_only: bool = False) -> Store:
    """``postgresql://…`` / ``postgres://…``, ``sqlite:///PATH`` (``sqlite:////abs/path``),
    ``:memory:`` or a plain file path.

    Creates the schema (or migrates it) on open. ``durable=False`` trades SQLite's fsync at
    each commit for speed (the processor's WAL already replays what a crash lost).
    ``read_only`` (a SQLite file the readers open) writes nothing, not even the schema: a
    file that is not a store is refused, and a store on a read-only mount can be read."""
    if url.startswith(("postgresql://", "postgres://")):
        return Store(_PostgresConnection(url), url=_redact(url))
    # as in SQLAlchemy: sqlite:///relative.db, sqlite:////absolute/path.db
    path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else url
    if not path:
        raise StoreError(f"no SQLite file in {url!r} (e.g. sqlite:///context.db)")
    if path != ":memory:":
        parent = Path(path).expanduser().resolve().parent
        if not parent.is_dir():
            raise StoreError(f"cannot open the store {url!r}: {parent} is not a directory")
    read_only = read_only and path != ":memory:"
    return Store(_SqliteConnection(path, durable=durable, read_only=read_only), url=url,
                 read_only=read_only)


class _SqliteConnection:
    dialect = "sqlite"

    def __init__(self, path: str, *, durable: bool, read_only: bool = False) -> None:
        self.errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        # the data refused, as opposed to the database unusable now (locked, full, I/O)
        self.data_errors: tuple[type[BaseException], ...] = (
            sqlite3.DataError, sqlite3.IntegrityError)
        try:
            if read_only:
                self.raw = self._read_only(path)
                return
            self.raw = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                       timeout=30.0)
            # 16 KiB pages for a new file (an existing one keeps its own): a bundle's JSON
            # (KBs, up to hundreds for a large selection) spans a quarter of the overflow
            # pages, which cuts SQLite's CPU time per envelope by a fifth to a third
            # (benchmarks/store.md)
            self.raw.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            self.raw.execute("PRAGMA journal_mode=WAL")
            self.raw.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self.raw.execute("PRAGMA foreign_keys=OFF")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from None

    @staticmethod
    def _read_only(path: str) -> sqlite3.Connection:
        """The file opened for reading only; on a read-only mount, where SQLite cannot make
        the WAL's shared-memory file, as immutable (nothing can write it there either)."""
        uri = "file:" + quote(str(Path(path).expanduser().resolve()))
        for mode in ("?mode=ro", "?mode=ro&immutable=1"):
            raw = sqlite3.connect(uri + mode, uri=True, check_same_thread=False,
                                  isolation_level=None, timeout=30.0)
            try:
                raw.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
                return raw
            except sqlite3.OperationalError:
                raw.close()
                if mode.endswith("immutable=1"):
                    raise
        raise AssertionError("unreachable")

    def sql(self, text: str) -> str:
        return text

    @staticmethod
    def full(exc: BaseException) -> bool:
        """SQLITE_FULL: the disk (or ``max_page_count``) has no room for the transaction."""
        return isinstance(exc, sqlite3.Error) and getattr(
            exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL

    def json(self, value: Any) -> Any:
        return orjson.dumps(value).decode()

    def encoded_json(self, text: str) -> Any:
        return text

    def timestamp(self, value: Any) -> Any:
        return value

    def begin(self) -> None:
        self.raw.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def lock_schema(self) -> None:
        """BEGIN IMMEDIATE already holds the write lock."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self.raw.execute(sql, params)
        return cursor.fetchall() if cursor.description else []

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str],
                                                                    list[tuple[Any, ...]]]:
        cursor = self.raw.execute(sql, params)
        names = [d[0] for d in cursor.description or ()]
        return names, cursor.fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.raw.executemany(sql, rows)

    def reconnect(self) -> None:
        """A local file does not go away."""

    def close(self) -> None:
        self.raw.close()


class _PostgresConnection:
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
            from psycopg.types.json import Jsonb
        except ImportError:
            raise StoreError("a postgresql:// store needs psycopg: "
                             "pip install 'otel-agent-context[postgresql]'") from None
        self._psycopg = psycopg
        self._jsonb = Jsonb
        self._url = url
        self.errors = (psycopg.Error,)
        self.data_errors = (psycopg.DataError, psycopg.IntegrityError)
        self.raw: Any = None
        self.reconnect()

    def reconnect(self) -> None:
        if self.raw is not None and not self.raw.closed and not self.raw.broken:
            return
        try:
            self.raw = self._psycopg.connect(self._url, autocommit=True, connect_timeout=10)
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to the store {_redact(self._url)}: "
                             f"{str(exc).strip()}") from None

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def full(self, exc: BaseException) -> bool:
        """SQLSTATE 53100, disk_full: no room for the transaction."""
        return isinstance(exc, self._psycopg.Error) and getattr(
            exc, "sqlstate", None) == "53100"

    def json(self, value: Any) -> Any:
        return self._jsonb(value, dumps=lambda v: orjson.dumps(v).decode())

    def encoded_json(self, text: str) -> Any:
        return self._jsonb(text, dumps=lambda v: v)

    def timestamp(self, value: Any) -> Any:
        return value

    def begin(self) -> None:
        self.raw.execute("BEGIN")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if not self.raw.closed and not self.raw.broken:
            self.raw.execute("ROLLBACK")

    def lock_schema(self) -> None:
        # two processors starting at once must not both create the tables
        self.raw.execute("SELECT pg_advisory_xact_lock(7244537261)")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self.raw.execute(self.sql(sql), params)
        return cursor.fetchall() if cursor.description else []

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str],
                                                                    list[tuple[Any, ...]]]:
        cursor = self.raw.execute(self.sql(sql), params)
        names = [d.name for d in cursor.description or ()]
        return names, cursor.fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.raw.cursor() as cursor:
            cursor.executemany(self.sql(sql), list(rows))

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()


class Store:
    """Bundles in tables a person can query. Thread-safe: one connection, one lock."""

    def __init__(self, connection: _SqliteConnection | _PostgresConnection, *, url: str,
                 read_only: bool = False) -> None:
        self._db = connection
        self.url = url
        self.dialect = connection.dialect
        self._lock = threading.Lock()
        #: envelopes left out (logged; the JSON Lines file has them), by reason: ``refused``
        #: (their values) or ``full`` (no room in the database even for one envelope alone)
        self.left_out: dict[str, int] = {}
        #: a transaction of write_begun is open
        self._begun = False
        self._insert = {
            table: self._insert_sql(table, columns) for table, columns in COLUMNS.items()
        }
        self._json_at = {table: [i for i, c in enumerate(cols) if c in JSON_COLUMNS]
                         for table, cols in COLUMNS.items()}
        self._ts_at = {table: [i for i, c in enumerate(cols) if c in TIMESTAMP_COLUMNS]
                       for table, cols in COLUMNS.items()}
        #: the envelope's JSON columns but the bundle, its last
        self._envelope_json = self._json_at["envelopes"][:-1]
        assert COLUMNS["envelopes"][-1] == "bundle"
        try:
            if read_only:
                self._check_schema()
            else:
                self._migrate()
        except StoreError:
            connection.close()
            raise
        except connection.errors as exc:
            connection.close()
            raise StoreError(f"cannot prepare the store {url}: {exc}") from None

    # -- schema ----------------------------------------------------------------------------------
    def _migrate(self) -> None:
        db = self._db
        types = TYPES[self.dialect]
        with self._lock:
            db.begin()
            try:
                db.lock_schema()
                db.execute("CREATE TABLE IF NOT EXISTS schema_version "
                           "(version INTEGER NOT NULL, description TEXT, applied_ns BIGINT)")
                found = db.execute("SELECT MAX(version) FROM schema_version")[0][0] or 0
                if found > SCHEMA_VERSION:
                    raise StoreError(
                        f"the store {self.url} has schema version {found}, newer than this "
                        f"otel-agent-context understands ({SCHEMA_VERSION}): upgrade it")
                for version, description, statements in MIGRATIONS:
                    if version <= found:
                        continue
                    for statement in statements:
                        db.execute(statement.format(**types))
                    db.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                               (version, description, time.time_ns()))
                    log.info("store %s: schema migrated to version %d (%s)", self.url, version,
                             description)
                db.commit()
            except BaseException:
                db.rollback()
                raise

    def _check_schema(self) -> None:
        """For a reader: the file must already be a store this code understands."""
        try:
            found = self._db.execute("SELECT MAX(version) FROM schema_version")[0][0] or 0
        except self._db.errors:
            found = 0
        if not found:
            raise StoreError(f"{self.url} is not an otel-agent-context store (no "
                             f"schema_version table)")
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the store {self.url} has schema version {found}, newer than this "
                f"otel-agent-context understands ({SCHEMA_VERSION}): upgrade it")
        if found < SCHEMA_VERSION:
            raise StoreError(f"the store {self.url} has schema version {found}: open it with "
                             f"serve once to migrate it")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT MAX(version) FROM schema_version")[0][0])

    def _insert_sql(self, table: str, columns: Sequence[str]) -> str:
        values = ", ".join("?" for _ in columns)
        sql = f"INSERT INTO {table} ({', '.join(columns)}"
        if table == "envelopes":
            key = "context_id, trace_id"  # the primary key, as _schema declares it
            update = ", ".join(f"{c} = excluded.{c}" for c in (*columns[2:], "stored_ns"))
            return (f"{sql}, stored_ns) VALUES ({values}, ?) "
                    f"ON CONFLICT ({key}) DO UPDATE SET {update}")
        return f"{sql}) VALUES ({values})"

    # -- writing ---------------------------------------------------------------------------------
    def write(self, bundles: Iterable[Mapping[str, Any]],
              encoded: Sequence[bytes] | None = None) -> int:
        """Store bundles in one transaction (all or none); returns how many.

        ``encoded``, when given, is each bundle already as JSON (the JSON Lines sink's
        line): stored as it is rather than encoded a second time.

        A batch the database refuses for its data, or has no room for (disk or volume full),
        is split in halves and written again, down to single envelopes (a batch too big for
        the room left may still fit in parts). An envelope refused alone is tried once more
        with its NUL characters replaced; one that still cannot be stored is left out, logged
        and counted in :attr:`left_out` (the JSON Lines file has it). The processor retries a
        failing batch until it is written, so one envelope must never keep every later one
        (nor the other sinks, which wait for the store) out. A database that is unreachable
        or locked raises: that is retried."""
        bundles = list(bundles)
        lines = list(encoded) if encoded is not None else None
        try:
            return self._write(bundles, lines)
        except Exception as exc:  # noqa: BLE001 - sorted below: only data and room errors
            reason = self._cannot_store(exc)
            if reason is None:
                raise
            log.warning("store: the database %s a batch of %d envelopes (%s); writing it in "
                        "parts", "has no room for" if reason == "full" else "refused",
                        len(bundles), exc)
        return self._write_parts(bundles, lines)

    def _write_parts(self, bundles: list[Mapping[str, Any]],
                     lines: list[bytes] | None) -> int:
        half = len(bundles) // 2
        if half == 0:
            return self._write_alone(bundles[0], lines)
        written = 0
        for part in (slice(0, half), slice(half, None)):
            chunk, chunk_lines = bundles[part], None if lines is None else lines[part]
            try:
                written += self._write(chunk, chunk_lines)
            except Exception as exc:  # noqa: BLE001 - as in write()
                if self._cannot_store(exc) is None:
                    raise
                written += self._write_parts(chunk, chunk_lines)
        return written

    def _write_alone(self, bundle: Mapping[str, Any], lines: list[bytes] | None) -> int:
        """One envelope the database refused or had no room for within a larger part."""
        # the retry stores the scrubbed bundle as its JSON: the whole bundle, from its line
        # when there is one (the store's child decodes only what the rows read)
        attempts: tuple[tuple[Mapping[str, Any], list[bytes] | None], ...] = (
            (bundle, lines), (_scrub(orjson.loads(lines[0]) if lines else bundle), None))
        reason: str | None = None
        error: BaseException | None = None
        for candidate, line in attempts:
            try:
                return self._write([candidate], line)
            except Exception as exc:  # noqa: BLE001 - as in write()
                reason = self._cannot_store(exc)
                if reason is None:
                    raise
                if reason == "full":
                    break  # replacing NUL characters does not make it smaller
                error = exc
        else:
            reason = "refused"
        env = bundle.get("context_envelope")
        context_id = env.get("context_id") if isinstance(env, Mapping) else None
        with self._lock:
            self.left_out[reason] = self.left_out.get(reason, 0) + 1
        log.error("store: envelope %r cannot be stored (%s); it stays in the JSON Lines file "
                  "only", context_id, "no room in the database" if reason == "full" else error)
        return 0

    def _cannot_store(self, exc: BaseException) -> str | None:
        """Why the database cannot take this data: ``"refused"`` (its values; retrying it as
        it is can never succeed), ``"full"`` (no room: a smaller part may fit), or None (the
        database is unusable right now: the whole batch is retried)."""
        if isinstance(exc, (OverflowError, ValueError, TypeError, UnicodeError,
                            *self._db.data_errors)):
            return "refused"
        return "full" if self._db.full(exc) else None

    def _write(self, bundles: Sequence[Mapping[str, Any]],
               encoded: Sequence[bytes] | None) -> int:
        tables = self._tables(bundles, encoded)
        if not tables["envelopes"]:
            return 0
        db = self._db
        with self._lock:
            db.reconnect()
            db.begin()
            try:
                self._put(tables)
                db.commit()
            except BaseException:
                self._rollback()
                raise
        return len(tables["envelopes"])

    # -- a batch written in parts, in one transaction (the store's process) ------------------------
    def write_begun(self, bundles: Sequence[Mapping[str, Any]],
                    encoded: Sequence[bytes] | None = None) -> int:
        """Write ``bundles`` in a transaction left open: the first call after a commit or
        rollback begins it, :meth:`commit_begun` (or :meth:`rollback_begun`) ends it. A
        bundle written by an earlier part of the same transaction is replaced, as a bundle
        written again always is. No splitting: on any error the whole transaction is rolled
        back (every part since it began) and the error raised; the caller decides (the
        store's process writes the whole batch again with :meth:`write`). For one writer:
        another write on this store while the transaction is open fails."""
        db = self._db
        with self._lock:
            try:
                # inside the guard: rows this part cannot make end the transaction as any error
                tables = self._tables(bundles, encoded)
                if not self._begun:
                    db.reconnect()
                    db.begin()
                    self._begun = True
                if tables["envelopes"]:
                    self._put(tables)
            except BaseException:
                self._rollback()
                raise
        return len(tables["envelopes"])

    def commit_begun(self) -> None:
        """Commit what :meth:`write_begun` wrote (nothing to do if nothing is begun); on an
        error everything since it began is rolled back and the error raised."""
        with self._lock:
            if not self._begun:
                return
            try:
                self._db.commit()
            except BaseException:
                self._rollback()
                raise
            self._begun = False

    def rollback_begun(self) -> None:
        """Undo what :meth:`write_begun` wrote since the transaction began (nothing to do
        if nothing is begun)."""
        with self._lock:
            if self._begun:
                self._rollback()

    def _rollback(self) -> None:
        self._begun = False
        try:
            self._db.rollback()
        except self._db.errors:
            log.debug("rollback after a failed write failed", exc_info=True)

    def _tables(self, bundles: Sequence[Mapping[str, Any]], encoded: Sequence[bytes] | None
                ) -> dict[str, dict[tuple[Any, ...], tuple[Any, ...]]]:
        """Each table's rows of ``bundles`` by primary key (a bundle twice: its last)."""
        tables: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]] = {t: {} for t in COLUMNS}
        plain = {t: not self._json_at[t] and not self._ts_at[t] for t in COLUMNS}
        envelopes = tables["envelopes"]
        now = time.time_ns()
        for position, bundle in enumerate(bundles):
            rows_of = bundle_rows(bundle)
            [envelope] = rows_of["envelopes"]
            key = envelope[:2]
            if key in envelopes:  # the same envelope again: only its last version
                for table in _CHILDREN:
                    tables[table] = {k: v for k, v in tables[table].items() if k[:2] != key}
            envelopes[key] = self._envelope(envelope, None if encoded is None
                                            else encoded[position], now)
            for table in _CHILDREN:
                rows = rows_of[table]
                if not rows:
                    continue
                width = _KEY_WIDTH[table]
                target = tables[table]
                if plain[table]:
                    target.update((row[:width], row) for row in rows)
                    continue
                for row in rows:
                    target[row[:width]] = self._adapt(table, row)
        return tables

    def _put(self, tables: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]]) -> None:
        """The rows in the open transaction, replacing those of the same envelopes."""
        db = self._db
        existing = self._existing(list(tables["envelopes"]))
        if existing:
            for table in _CHILDREN:
                db.executemany(f"DELETE FROM {table} WHERE trace_id = ? AND "
                               f"context_id = ?", existing)
        db.executemany(self._insert["envelopes"], tables["envelopes"].values())
        for table in _CHILDREN:
            if tables[table]:
                db.executemany(self._insert[table], tables[table].values())

    def _envelope(self, row: tuple[Any, ...], line: bytes | None, now: int) -> tuple[Any, ...]:
        """The envelope row as bound: JSON columns encoded (the bundle, last, as its JSON
        Lines line when there is one), then the time of storing."""
        values = list(row)
        json = self._db.json
        for index in self._envelope_json:
            values[index] = json(values[index])
        values[-1] = (json(values[-1]) if line is None
                      else self._db.encoded_json(line.rstrip(b"\n").decode()))
        for index in self._ts_at["envelopes"]:
            values[index] = self._db.timestamp(values[index])
        values.append(now)
        return tuple(values)

    def _adapt(self, table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
        json_at, ts_at = self._json_at[table], self._ts_at[table]
        if not json_at and not ts_at:
            return row
        values = list(row)
        for index in json_at:
            value = values[index]
            values[index] = self._db.json(value)
        for index in ts_at:
            values[index] = self._db.timestamp(values[index])
        return tuple(values)

    def _existing(self, keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        wanted = set(keys)
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows = self._db.execute(
                f"SELECT trace_id, context_id FROM envelopes WHERE context_id IN ({marks})",
                [k[1] for k in chunk])
            found.extend(tuple(r) for r in rows if tuple(r) in wanted)
        return found

    def prune(self, older_than_ns: int) -> int:
        """Delete envelopes created (or stored, if undated) before ``older_than_ns``.

        A creation time later than the storing time (the sender dated its spans in the
        future) counts as the storing time: a client cannot keep its envelopes past the
        retention."""
        db = self._db
        condition = ("(CASE WHEN created_ns IS NOT NULL AND created_ns < stored_ns "
                     "THEN created_ns ELSE stored_ns END) < ?")
        with self._lock:
            db.reconnect()
            db.begin()
            try:
                for table in _CHILDREN:
                    db.execute(f"DELETE FROM {table} WHERE (trace_id, context_id) IN "
                               f"(SELECT trace_id, context_id FROM envelopes WHERE {condition})",
                               (older_than_ns,))
                count = len(db.execute(f"DELETE FROM envelopes WHERE {condition} "
                                       f"RETURNING context_id", (older_than_ns,)))
                db.commit()
            except BaseException:
                db.rollback()
                raise
        return count

    # -- reading ---------------------------------------------------------------------------------
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """A read query's rows as dicts (``?`` placeholders; JSON columns decoded)."""
        with self._lock:
            self._db.reconnect()
            try:
                names, rows = self._db.query(sql, params)
            except self._db.errors as exc:
                raise StoreError(f"reading the store {self.url} failed: {exc}") from exc
        decoded = [n in JSON_COLUMNS for n in names]
        out = []
        for row in rows:
            record = {}
            for name, value, is_json in zip(names, row, decoded, strict=True):
                if is_json and isinstance(value, (str, bytes)):
                    value = orjson.loads(value)
                elif isinstance(value, datetime.datetime):  # PostgreSQL's timestamptz
                    value = _rfc3339(value)
                record[name] = value
            out.append(record)
        return out

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read query's rows as plain tuples (no decoding): for the bulk reads of a page."""
        with self._lock:
            self._db.reconnect()
            try:
                return self._db.query(sql, params)[1]
            except self._db.errors as exc:
                raise StoreError(f"reading the store {self.url} failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

