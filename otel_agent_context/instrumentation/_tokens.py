"""Token estimation: a fast default with no download and no network, and a hook for an
exact tokenizer (``set_token_estimator(tiktoken_encoding_len)`` for instance)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

__all__ = ["estimate_tokens", "set_token_estimator"]

_estimator: Callable[[str], int] | None = None
#: What remembered token counts are keyed by: None for the heuristic, else a number of this
#: setting (not the estimator: a key holding a function stays tracked by the garbage
#: collector, and one holding an unhashable estimator would fail every lookup)
_estimator_key: int | None = None
_settings = itertools.count(1)


def set_token_estimator(estimator: Callable[[str], int] | None) -> None:
    """Use ``estimator(text) -> tokens`` instead of the heuristic (``None`` restores it)."""
    global _estimator, _estimator_key
    if estimator is _estimator:
        return  # the same again: what was remembered with it still holds
    _estimator, _estimator_key = estimator, None if estimator is None else next(_settings)


def _heuristic(text: str) -> int:
    # ~4 characters a token for ASCII text (BPE vocabularies of current models); text outside
    # ASCII (CJK, emoji) runs close to a token a character, so count those characters fully.
    if text.isascii():
        return (len(text) + 3) // 4
    wide = sum(1 for ch in text if ord(ch) > 0x2E7F)
    return wide + (len(text) - wide + 3) // 4


def estimate_tokens(text: str | None) -> int:
    """Tokens in ``text`` by the configured estimator (default: a character heuristic)."""
    if not text:
        return 0
    if _estimator is not None:
        return int(_estimator(text))
    return _heuristic(text)
