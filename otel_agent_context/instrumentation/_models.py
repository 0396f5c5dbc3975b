"""Context-window sizes of current models, with a user override.

Override or extend with ``OTEL_AGENT_CONTEXT_MODEL_WINDOWS="my-model=32768,other=8192"`` or
``register_model_window("my-model", 32768)``. Lookup takes the longest known prefix, so dated
snapshots (``gpt-4o-2024-08-06``) resolve to their family.
"""

from __future__ import annotations

import os

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


def register_model_window(model: str, tokens: int) -> None:
    """Declare the context window of ``model`` (wins over the table)."""
    if not isinstance(tokens, int) or tokens <= 0:
        raise ValueError(f"context window of {model!r} must be a positive integer, got {tokens!r}")
    _user[model] = tokens


def _from_env() -> dict[str, int]:
    out: dict[str, int] = {}
    raw = os.environ.get(OTEL_AGENT_CONTEXT_MODEL_WINDOWS, "")
    for part in raw.split(","):
        if "=" in part:
            name, _, value = part.partition("=")
            try:
                out[name.strip()] = int(value)
            except ValueError:
                continue
    return out


def context_window(model: str | None) -> int | None:
    """The context window of ``model`` in tokens, or ``None`` when unknown."""
    if not model:
        return None
    for table in (_user, _from_env(), MODEL_WINDOWS):
        if model in table:
            return table[model]
        best = max((k for k in table if model.startswith(k)), key=len, default=None)
        if best is not None:
            return table[best]
    return None
