"""Context-window sizes of current models, with a user override.

Override or extend with ``OTEL_AGENT_CONTEXT_MODEL_WINDOWS="my-model=32768,other=8192"`` or
``register_model_window("my-model", 32768)``. Lookup takes the longest known prefix, so dated
snapshots (``gpt-4o-2024-08-06``) resolve to their family; of names that are prefixes of a
model, the longest wins whichever table holds it (a short override such as ``gpt-4=8192``
does not shrink ``gpt-4o-mini``), a registered one before the variable's before the table's
on a tie. An entry of the variable that is not ``<name>=<positive integer>`` is left out
with a warning naming it.
"""

from __future__ import annotations

import logging

from .._env import env_text

_log = logging.getLogger(__name__)
#: the largest window an OTLP integer attribute holds (int64)
_MAX_TOKENS = 2**63 - 1

__all__ = ["MODEL_WINDOWS", "context_window", "register_model_window"]

OTEL_AGENT_CONTEXT_MODEL_WINDOWS = "OTEL_AGENT_CONTEXT_MODEL_WINDOWS"

#: Input context windows in tokens, from the providers' model pages (checked 2026-11).
MODEL_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-opus": 200_000,
    "claude-3-haiku": 200_000,
}

_user: dict[str, int] = {}
#: (model, override env text, table sizes) -> where the answer is: ("user" | "env" | "table",
#: key), or None for an unknown model. The value itself is read live from its table.
_found: dict[tuple[str, str, int, int], tuple[str, str] | None] = {}
_env_tables: dict[str, dict[str, int]] = {}


def register_model_window(model: str, tokens: int) -> None:
    """Declare the context window of ``model`` (wins over the table)."""
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 < tokens <= _MAX_TOKENS:
        raise ValueError(f"context window of {model!r} must be a positive integer, got {tokens!r}")
    _user[model] = tokens
    _found.clear()


def _from_env(raw: str | None = None) -> dict[str, int]:
    if raw is None:
        raw = env_text(OTEL_AGENT_CONTEXT_MODEL_WINDOWS)
    out = _env_tables.get(raw)
    if out is not None:
        return out
    out = {}
    bad = []
    for part in raw.split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip()
        try:
            tokens = int(value)
        except ValueError:
            tokens = 0
        if name and 0 < tokens <= _MAX_TOKENS:
            out[name] = tokens
        else:
            bad.append(part.strip())
    if bad:  # once a setting: the parsed table is kept below
        _log.warning("otel_agent_context: %s entries left out (each must be "
                     "<model name>=<positive integer>): %s", OTEL_AGENT_CONTEXT_MODEL_WINDOWS,
                     ", ".join(repr(b) for b in bad))
    if len(_env_tables) > 16:
        _env_tables.clear()
    _env_tables[raw] = out
    return out


def _locate(model: str, env: dict[str, int]) -> tuple[str, str] | None:
    found = None
    for name, table in (("user", _user), ("env", env), ("table", MODEL_WINDOWS)):
        best = max((k for k in table if model.startswith(k)), key=len, default=None)
        if best is not None and (found is None or len(best) > len(found[1])):
            found = name, best
    return found


def context_window(model: str | None) -> int | None:
    """The context window of ``model`` in tokens, or ``None`` when unknown.

    The longest-prefix search runs once per model (and per override setting); later calls
    are a dictionary lookup."""
    if not model or type(model) is not str and not isinstance(model, str):
        return None  # an application's odd model value (an int, an enum member's value)
    raw = env_text(OTEL_AGENT_CONTEXT_MODEL_WINDOWS)
    key = (model, raw, len(_user), len(MODEL_WINDOWS))
    try:
        where = _found[key]
    except KeyError:
        where = None
    else:
        if where is None:
            return None
        table = (_user if where[0] == "user" else MODEL_WINDOWS if where[0] == "table"
                 else _from_env(raw))
        value = table.get(where[1])
        if value is not None:
            return value
    env = _from_env(raw)
    where = _locate(model, env)
    if len(_found) > 4096:
        _found.clear()
    _found[key] = where
    if where is None:
        return None
    return (_user if where[0] == "user" else env if where[0] == "env" else MODEL_WINDOWS)[where[1]]
