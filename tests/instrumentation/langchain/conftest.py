"""Fixtures for the LangChain / LangGraph instrumentor: captured telemetry with our
instrumentor on (content capture off by default; ``capture`` for on)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


def _instrumented(capture: bool, strict: bool = True) -> Iterator[CapturedTelemetry]:
    tel = CapturedTelemetry(capture_content=capture, strict=strict)
    inst = LangChainContextInstrumentor()
    inst.instrument(agent_context=tel.agent_context)
    try:
        yield tel
    finally:
        inst.uninstrument()
        tel.shutdown()


@pytest.fixture
def tel() -> Iterator[CapturedTelemetry]:
    """Our instrumentor on, content capture off, internal errors raise."""
    yield from _instrumented(False)


@pytest.fixture
def tel_content() -> Iterator[CapturedTelemetry]:
    """Our instrumentor on, content capture on."""
    yield from _instrumented(True)


@pytest.fixture
def tel_lenient() -> Iterator[CapturedTelemetry]:
    """Our instrumentor on, internal errors logged (production behaviour)."""
    yield from _instrumented(False, strict=False)
