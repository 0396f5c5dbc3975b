"""Errors raised by otel_agent_context.

    AgentContextError            base of everything this package raises
    ├── RecordError (ValueError) a record field has a wrong type or an unknown enum value
    └── ConfigError (ValueError) a configuration value is invalid; names the key

Run-time misuse of the instrumentation API never raises into the agent: it logs a warning.
Only bad records and bad configuration raise, and only at construction.
"""

from __future__ import annotations

__all__ = ["AgentContextError", "ConfigError", "RecordError"]


class AgentContextError(Exception):
    """Base of every error this package raises."""


class RecordError(AgentContextError, ValueError):
    """A record was built with a wrong type or an unknown enum value."""


class ConfigError(AgentContextError, ValueError):
    """A configuration value is invalid. ``key`` names the user-facing setting."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
