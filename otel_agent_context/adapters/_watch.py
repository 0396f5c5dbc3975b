"""Follow a Context Runtime ABI session folder: one envelope per new pack build.

A pack build is a change of ``context/pack.json`` (its mtime or its bytes). Between builds
the watcher still compares ``messages.jsonl`` and ``events.jsonl`` with what it saw last,
and a breach found there (not append-only, deleted) is emitted at once on a ``session``
envelope of its own, so it is never held back until the next build. The folder is only read;
the watcher's memory can be kept elsewhere (:meth:`SessionWatcher.state`) so that
``watch --once`` run again later still sees what changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._api import AgentContext
from ..exceptions import ConfigError
from ._abi import (
    MESSAGES,
    PACK,
    FileState,
    RuleBreach,
    SessionSnapshot,
    _names,
    check_history,
    emit_rule_breaches,
    emit_snapshot,
    read_session,
)

__all__ = ["SessionWatcher"]

_log = logging.getLogger("otel_agent_context.adapters")


class SessionWatcher:
    """Poll a session folder and emit each new pack build once.

    ``state``: what an earlier watcher saw (:meth:`state`), to carry on where it stopped.
    ``on_snapshot``: called with each :class:`SessionSnapshot` read for a new pack build.
    """

    def __init__(self, path: str | os.PathLike[str], agent_context: AgentContext, *,
                 state: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError("session_dir", f"{self.path} is not a directory")
        self.agent_context = agent_context
        self._pack_key: tuple[int, str] | None = None
        self._pack_stat: tuple[int, int] | None = None  # (mtime_ns, size) of that key
        self._history: dict[str, FileState] = {}
        self._agent, self._session = _names(self.path, None)
        self.emitted: list[str] = []  # context ids, in emission order
        self._warned: set[str] = set()  # conditions already warned about, once each
        if state:
            self._load(state)

    # -- memory ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What the watcher has seen, as JSON-ready data (never stored in the session)."""
        return {
            "pack": list(self._pack_key) if self._pack_key else None,
            "pack_stat": list(self._pack_stat) if self._pack_stat else None,
            "history": {rel: s.to_dict() for rel, s in self._history.items()},
            "agent": self._agent,
            "session": self._session,
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        try:
            pack = state.get("pack")
            if pack:
                self._pack_key = (int(pack[0]), str(pack[1]))
            stat = state.get("pack_stat")
            if stat:
                self._pack_stat = (int(stat[0]), int(stat[1]))
            self._history = {rel: FileState.from_dict(s)
                             for rel, s in (state.get("history") or {}).items()}
            self._agent = state.get("agent") or self._agent
            self._session = state.get("session") or self._session
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            _log.warning("watch: ignoring unreadable saved state (%s); starting afresh", exc)
            self._pack_key, self._pack_stat, self._history = None, None, {}

    # -- polling ----------------------------------------------------------------------------

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        """A condition of the folder, told once while it lasts (not at every poll)."""
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(message, *args)

    def _pack_changed(self) -> bool:
        """Whether context/pack.json differs from the last build seen (stat first, then bytes)."""
        pack = self.path / PACK
        try:
            st = pack.stat()
        except FileNotFoundError:
            if not (self.path / MESSAGES).exists():
                self._warn_once("no-session", "watch: %s holds neither %s nor %s: not a "
                                "session folder (yet); watching it", self.path, PACK, MESSAGES)
            return False
        except OSError as exc:
            self._warn_once(f"stat:{exc.errno}", "watch: cannot look at %s: %s", pack,
                            exc.strerror)
            return False
        self._warned.discard("no-session")
        stat = (st.st_mtime_ns, st.st_size)
        if stat == self._pack_stat:
            return False
        try:
            data = pack.read_bytes()
        except OSError as exc:  # a directory where the file should be, no permission, ...
            self._warn_once(f"read:{exc.errno}", "watch: cannot read %s: %s; it is read "
                            "again when it changes", pack, exc.strerror)
            return False
        self._warned = {k for k in self._warned if not k.startswith(("read:", "stat:"))}
        key = (st.st_mtime_ns, hashlib.sha256(data).hexdigest())
        return key != self._pack_key

    def poll(self) -> SessionSnapshot | None:
        """Look once. Emits the pack build if it is new (returns its snapshot), else emits
        history breaches found since the last look on a ``session`` envelope."""
        if self._pack_changed():
            snapshot = read_session(self.path, previous=self._history)
            self._history = snapshot.history
            self._agent, self._session = snapshot.agent or self._agent, snapshot.session
            if snapshot.pack_key is not None:
                self._pack_key = snapshot.pack_key
                self._pack_stat = (snapshot.pack_key[0], _size(self.path / PACK))
            if snapshot.bundle is not None:
                context_id = emit_snapshot(snapshot, self.agent_context)
                if context_id is not None:
                    self.emitted.append(context_id)
                    _log.info("watch: emitted %s (%d rule breaches, %d warnings)", context_id,
                              len(snapshot.breaches), len(snapshot.warnings))
            else:
                self._emit_breaches(snapshot.breaches)  # the pack is unusable (warned)
            return snapshot
        states, breaches, _ = check_history(self.path, self._history)
        self._history = states
        self._emit_breaches(breaches)
        return None

    def _emit_breaches(self, breaches: list[RuleBreach]) -> None:
        if breaches:
            context_id = emit_rule_breaches(self.path, self._agent, self._session, breaches,
                                            self.agent_context)
            self.emitted.append(context_id)

    def run(self, *, interval: float = 1.0, stop: threading.Event | None = None,
            max_polls: int | None = None) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set (or ``max_polls`` polls).
        An unexpected error in one poll is logged and the next poll goes on."""
        stop = stop or threading.Event()
        polls = 0
        while not stop.is_set():
            try:
                self.poll()
            except Exception:
                _log.exception("watch: poll of %s failed; trying again", self.path)
            polls += 1
            if max_polls is not None and polls >= max_polls:
                break
            stop.wait(interval)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
