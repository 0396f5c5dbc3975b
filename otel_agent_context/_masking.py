"""What content may leave, decided by the application: a masking hook on every content string.

With content capture on, every content string this package records (item and block text,
titles, queries, summaries, missing-context questions, and the messages it hands to the
GenAI conventions' ``gen_ai.*.messages``) passes through the masker first, which returns
what may leave (``None``: nothing). Off by default: with capture off there is no content
to mask. Set it in code with :func:`set_content_masker`, or by environment:
``OTEL_AGENT_CONTEXT_MASKER=builtin`` (the masker below) or ``module:function``.

A masker that raises drops the content it was given (fail closed) and is logged once; the
application never sees the error. Items whose sensitivity is blocked never reach it: their
content is withheld before.

The built-in masker replaces, with ``[REDACTED:<kind>]``: API keys (``sk-...``,
``sk-ant-...``, AWS ``AKIA...``, GitHub ``ghp_...``, Slack ``xox?-...``), bearer tokens,
card numbers (13 to 19 digits that pass the Luhn check) and e-mail addresses.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Any

from . import _env

__all__ = ["builtin_masker", "has_masker", "mask", "mask_messages", "set_content_masker"]

_log = logging.getLogger("otel_agent_context")

Masker = Callable[[str], "str | None"]

_lock = threading.Lock()
_masker: Masker | None = None
_resolved = False
_warned = False

_SECRETS = re.compile(
    r"(?P<api_key>\b(?:sk-ant-[A-Za-z0-9_\-]{16,}|sk-(?:proj-)?[A-Za-z0-9_\-]{16,}"
    r"|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}))"
    r"|(?P<bearer>\b[Bb]earer\s+[A-Za-z0-9\-._~+/]{8,}=*)"
    r"|(?P<email>\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b)"
    r"|(?P<card>\b\d(?:[ \-]?\d){12,18}\b)")


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _replace(match: re.Match[str]) -> str:
    kind = match.lastgroup or "secret"
    if kind == "card":
        digits = re.sub(r"\D", "", match.group(0))
        if not _luhn(digits):
            return match.group(0)
    return f"[REDACTED:{kind}]"


def builtin_masker(text: str) -> str:
    """``text`` with common secrets and personal data replaced (see the module's doc)."""
    return _SECRETS.sub(_replace, text)


def set_content_masker(masker: Callable[[str], str | None] | None) -> None:
    """Use ``masker`` on every content string before it is recorded (``None``: no masking,
    or what ``OTEL_AGENT_CONTEXT_MASKER`` says if set). It returns what may leave, or
    ``None`` to leave nothing; if it raises, that content is dropped."""
    global _masker, _resolved
    with _lock:
        _masker = masker
        _resolved = masker is not None


def _from_env() -> Masker | None:
    value = (os.environ.get(_env.OTEL_AGENT_CONTEXT_MASKER) or "").strip()
    if not value:
        return None
    if value.lower() == "builtin":
        return builtin_masker
    module_name, _, name = value.partition(":")
    try:
        masker = getattr(importlib.import_module(module_name), name)
        if not callable(masker):
            raise TypeError(f"{value} is not callable")
        return masker  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - a bad setting: withhold all content rather than leak
        _log.error("otel_agent_context: %s=%r cannot be loaded; content is withheld",
                   _env.OTEL_AGENT_CONTEXT_MASKER, value, exc_info=True)
        return lambda text: None


def _current() -> Masker | None:
    global _masker, _resolved
    if not _resolved:
        with _lock:
            if not _resolved:
                _masker = _from_env()
                _resolved = True
    return _masker


def has_masker() -> bool:
    return _current() is not None


def mask(value: Any) -> Any:
    """``value`` as it may leave: a string (or the strings of a tuple) through the masker;
    ``None`` when nothing may."""
    masker = _current()
    if masker is None or value is None:
        return value
    if isinstance(value, str):
        return _apply(masker, value)
    if isinstance(value, (tuple, list)):
        out = tuple(v for v in (_apply(masker, x) if isinstance(x, str) else x for x in value)
                    if v is not None)
        return out or None
    return value


def _apply(masker: Masker, text: str) -> str | None:
    global _warned
    try:
        out = masker(text)
    except Exception:  # noqa: BLE001 - fail closed: the content is not recorded
        if not _warned:
            _warned = True
            _log.warning("otel_agent_context: the content masker raised; the content it was "
                         "given is not recorded", exc_info=True)
        return None
    return out if isinstance(out, str) else None


def _mask_part(part: Any) -> Any:
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        return part
    changes = {}
    for name in ("content", "response", "arguments"):
        if hasattr(part, name):
            value = getattr(part, name)
            if isinstance(value, str):
                changes[name] = mask(value) or ""
            elif value is not None and name == "arguments":
                changes[name] = mask(repr(value)) or ""
    return dataclasses.replace(part, **changes) if changes else part


def mask_messages(messages: Any) -> Any:
    """GenAI ``InputMessage``/``OutputMessage`` lists (or system-instruction parts) with
    every text part through the masker; as they are when no masker is set."""
    if _current() is None or not isinstance(messages, list):
        return messages
    out = []
    for message in messages:
        parts = getattr(message, "parts", None)
        if isinstance(parts, list):
            out.append(dataclasses.replace(message, parts=[_mask_part(p) for p in parts]))
        else:
            out.append(_mask_part(message))
    return out
