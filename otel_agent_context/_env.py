"""Environment variables read by otel_agent_context, each with its default.

Configuration is read once, when an :class:`~otel_agent_context.AgentContext` is built,
never on the hot path.
"""

from __future__ import annotations

import logging
import os

OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = (
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
)
"""The GenAI conventions' content-capture switch: ``NO_CONTENT`` (default), ``SPAN_ONLY``,
``EVENT_ONLY`` or ``SPAN_AND_EVENT``. Context content (item text, queries, summaries,
missing-context questions) is recorded on spans only for ``SPAN_ONLY`` and
``SPAN_AND_EVENT``; ``true``/``false`` are accepted as the older spelling."""

OTEL_AGENT_CONTEXT_BLOCKED_SENSITIVITIES = "OTEL_AGENT_CONTEXT_BLOCKED_SENSITIVITIES"
"""Comma-separated item sensitivities whose content is never recorded, even under content
capture; such items get a ``context.redaction.applied`` event instead.
Default: ``secret,restricted``."""

DEFAULT_BLOCKED_SENSITIVITIES = ("secret", "restricted")

OTEL_AGENT_CONTEXT_STRICT = "OTEL_AGENT_CONTEXT_STRICT"
"""``true`` makes internal errors of the instrumentation API raise instead of being logged.
For the project's own tests; never set it in production. Default: ``false``."""

_CAPTURE_ON_SPANS = frozenset({"SPAN_ONLY", "SPAN_AND_EVENT", "TRUE"})


_log = logging.getLogger("otel_agent_context")
_warned: set[tuple[str, str]] = set()


def warn_once(name: str, value: str, message: str) -> None:
    """Log ``message`` about the setting ``name=value`` once a process: every instrumentor
    and AgentContext reads the same settings (six said the same thing six times)."""
    if (name, value) not in _warned:
        _warned.add((name, value))
        _log.warning("otel_agent_context: %s=%r %s", name, value, message)


def capture_content_from_env(value: str | None) -> bool:
    """Whether the content-capture switch's value asks for content on spans."""
    mode = (value or "").strip().upper()
    if mode == "TRUE":
        warn_once(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, value or "",
                  "(the older spelling) records context content on spans; "
                  "opentelemetry-util-genai reads it as NO_CONTENT, so the GenAI messages "
                  "are not: SPAN_ONLY asks both")
    return mode in _CAPTURE_ON_SPANS

OTEL_AGENT_CONTEXT_EVENTS = "OTEL_AGENT_CONTEXT_EVENTS"
"""Where context events go: ``span_events`` (default; Jaeger shows them) or ``logs``: log
records with ``event_name`` on the event's span (OpenTelemetry's log-based events, OTEP 4430),
counted on the envelope span in ``context.event_count``. Needs an SDK ``LoggerProvider``
(without one, events stay span events). ``AgentContext(events_as=...)`` wins over it."""

OTEL_AGENT_CONTEXT_STAGE_SPANS = "OTEL_AGENT_CONTEXT_STAGE_SPANS"
"""``true`` makes the LLM client instrumentors record each model call's budget and assembly
as ``context.budget`` and ``context.assembly`` spans with an event per window segment and per
block (the contract v0.1 form, about twice the cost). Default: ``false``: the folded form of
contract v0.2, everything on the one GenAI inference span. Bundles are the same either way."""

OTEL_AGENT_CONTEXT_DIGEST = "OTEL_AGENT_CONTEXT_DIGEST"
"""How content is digested: ``hmac-sha256`` (default: keyed, ``hmac-sha256:<hex>``) or
``sha256`` (plain ``sha256:<hex>``, which anyone can test a guess against)."""

OTEL_AGENT_CONTEXT_DIGEST_KEY = "OTEL_AGENT_CONTEXT_DIGEST_KEY"
"""The key of keyed digests (its UTF-8 bytes). Share it between the services whose digests
must match. Without it (and without a key file), a per-host key is created on first use."""

OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE = "OTEL_AGENT_CONTEXT_DIGEST_KEY_FILE"
"""A file holding the key of keyed digests (keeps it out of the process's environment)."""

OTEL_AGENT_CONTEXT_MASKER = "OTEL_AGENT_CONTEXT_MASKER"
"""Under content capture, what every content string passes through before it is recorded:
``builtin`` (API keys, bearer tokens, card numbers, e-mail addresses replaced) or
``module:function`` (returns what may leave, or None). Unset: no masking.
``otel_agent_context.set_content_masker(fn)`` wins over it."""


# A read of an unset variable through ``os.environ.get`` raises and catches a KeyError inside
# the mapping (~7K instructions, callgrind); a model call reads two such variables. The
# environ's own dict gives the same answer as a dictionary lookup.
_ENVIRON = os.environ
_DATA: dict[bytes, bytes] | None = getattr(_ENVIRON, "_data", None)
_ENCODE = getattr(_ENVIRON, "encodekey", None)
_DECODE = getattr(_ENVIRON, "decodevalue", None)
if type(_DATA) is not dict or os.name != "posix" or _ENCODE is None or _DECODE is None:
    _DATA = None
_KEYS: dict[str, bytes] = {}


def env_text(name: str) -> str:
    """``os.environ.get(name, "")``, read live (a variable set or removed through
    ``os.environ`` is seen at once)."""
    data = _DATA
    if data is None or os.environ is not _ENVIRON:
        return os.environ.get(name, "")
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE(name)  # type: ignore[misc]
    value = data.get(key)
    return "" if value is None else _DECODE(value)  # type: ignore[misc]
