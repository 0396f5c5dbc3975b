"""Auto-instrumentors for LLM clients and agent frameworks.

``opentelemetry-instrument python agent.py`` loads them from the ``opentelemetry_instrumentor``
entry points; or call :func:`instrument` once at start-up.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from ._models import context_window, register_model_window
from ._tokens import estimate_tokens, set_token_estimator

__all__ = [
    "context_window",
    "estimate_tokens",
    "instrument",
    "register_model_window",
    "set_token_estimator",
    "uninstrument",
]

_log = logging.getLogger("otel_agent_context")

#: (module, class) of every instrumentor; each is used only when its library is installed.
_INSTRUMENTORS = (
    ("otel_agent_context.instrumentation.openai", "OpenAIContextInstrumentor"),
    ("otel_agent_context.instrumentation.anthropic", "AnthropicContextInstrumentor"),
    ("otel_agent_context.instrumentation.langchain", "LangChainContextInstrumentor"),
    ("otel_agent_context.instrumentation.openai_agents", "OpenAIAgentsContextInstrumentor"),
    ("otel_agent_context.instrumentation.mcp", "MCPContextInstrumentor"),
    ("otel_agent_context.instrumentation.llama_index", "LlamaIndexContextInstrumentor"),
)


def _instrumentors() -> list[Any]:
    found = []
    for module_name, class_name in _INSTRUMENTORS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # not built in this checkout
                continue
            raise
        found.append(getattr(module, class_name)())
    return found


def instrument(**kwargs: Any) -> list[str]:
    """Instrument every supported library that is installed; returns their names.

    Keyword arguments (``tracer_provider``, ``meter_provider``, ``capture_content``) pass to
    each instrumentor. Libraries that are missing or outside the supported versions are
    skipped with a debug log line.
    """
    done = []
    for inst in _instrumentors():
        conflict = inst._check_dependency_conflicts()
        if conflict is not None:
            _log.debug("otel_agent_context: not instrumenting: %s", conflict)
            continue
        inst.instrument(**kwargs)
        done.append(type(inst).__name__)
    return done


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    for inst in _instrumentors():
        if inst.is_instrumented_by_opentelemetry:
            inst.uninstrument()
