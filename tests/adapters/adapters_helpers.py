"""Shared helpers for the runtimes adapters' tests (fixtures in conftest.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

from otel_agent_context._digest import digest_bytes

FIXTURES = Path(__file__).parent / "fixtures"
SEED_SESSION = FIXTURES / "abi" / "seed_session"
CONTEXTOS = FIXTURES / "contextos"

#: every file of a copied session is dated FILES_AT, context/pack.json PACK_AT
FILES_AT = "2026-05-04T09:00:00Z"
PACK_AT = "2026-05-04T09:30:00Z"


def ns(rfc3339: str) -> int:
    parsed = dt.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    return int(parsed.timestamp()) * 1_000_000_000


def sha(data: bytes) -> str:
    """The digest the adapters record for these bytes (keyed: see ``_digest``)."""
    return digest_bytes(data)


def set_times(session: Path, files_at: str = FILES_AT, pack_at: str = PACK_AT) -> None:
    for path in session.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(ns(files_at), ns(files_at)))
    pack = session / "context" / "pack.json"
    if pack.exists():
        os.utime(pack, ns=(ns(pack_at), ns(pack_at)))


def copy_session(tmp_path: Path, source: Path = SEED_SESSION, name: str = "default") -> Path:
    """A copy of a fixture session under ``.../agent/coder/session/<name>``, with fixed mtimes."""
    dest = tmp_path / "home" / "1000" / "agent" / "coder" / "session" / name
    shutil.copytree(source, dest)
    set_times(dest)
    return dest


def tree(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``path``: its bytes and mtime, to show nothing was written."""
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def records(bundle: dict[str, Any]) -> dict[str, Any]:
    """The bundle's records, without the telemetry plumbing (telemetry refs, events, rebuild),
    which the tests check on their own."""
    out = json.loads(json.dumps(bundle))
    out["context_envelope"].pop("telemetry_refs", None)
    out.pop("context_events", None)
    out.pop("rebuild", None)
    return out


def events(bundle: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(e["event_class"], e.get("subject_ref")) for e in bundle.get("context_events", [])]


def load(name: str) -> Any:
    return json.loads((CONTEXTOS / name).read_text())
