"""Shared by the framework instrumentors' tests (OpenAI Agents SDK, MCP)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from otel_agent_context.testing import CapturedTelemetry


@contextmanager
def framework_on(instrumentor: Any, setup: Any) -> Iterator[CapturedTelemetry]:
    """``instrumentor`` on, recording into the conftest ``Setup``'s telemetry (whose OpenAI
    instrumentor records the model calls), off again afterwards."""
    instrumentor.instrument(agent_context=setup.tel.agent_context)
    try:
        yield setup.tel
    finally:
        instrumentor.uninstrument()
