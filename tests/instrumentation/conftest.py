"""Fixtures for the LLM client instrumentors: a stub server, captured telemetry, and our
instrumentors with or without the official GenAI ones (in either wrapping order)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from stub_server import StubServer

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


def _official() -> list:
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), AnthropicInstrumentor()]


class Setup:
    """Which instrumentors are on, and where the telemetry goes."""

    def __init__(self, tel: CapturedTelemetry, official: str, capture: bool) -> None:
        self.tel = tel
        self.official = official  # "none", "outer" (official wraps ours), "inner"
        self.capture = capture
        self.ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
        self.theirs = _official() if official != "none" else []

    def start(self) -> None:
        kw = {"tracer_provider": self.tel.tracer_provider,
              "meter_provider": self.tel.meter_provider,
              "logger_provider": self.tel.logger_provider}
        ours = [(i, {**kw, "agent_context": self.tel.agent_context}) for i in self.ours]
        theirs = [(i, kw) for i in self.theirs]
        # the instrumentor wrapped last runs outermost
        for inst, args in (ours + theirs if self.official == "outer" else theirs + ours):
            inst.instrument(**args)

    def stop(self) -> None:
        for inst in self.ours + self.theirs:
            inst.uninstrument()


def make_setup(official: str, capture: bool, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[Setup]:
    if capture:
        monkeypatch.setenv(CAPTURE_ENV, "SPAN_ONLY")
    else:
        monkeypatch.delenv(CAPTURE_ENV, raising=False)
    tel = CapturedTelemetry(capture_content=capture)
    setup = Setup(tel, official, capture)
    setup.start()
    try:
        yield setup
    finally:
        setup.stop()
        tel.shutdown()


@pytest.fixture(params=["none", "outer", "inner"])
def setup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """Ours alone, the official instrumentor outside ours, and inside ours."""
    yield from make_setup(request.param, False, monkeypatch)


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    yield from make_setup("none", False, monkeypatch)


@pytest.fixture(params=[False, True], ids=["no_content", "content"])
def capture_setup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                  ) -> Iterator[Setup]:
    yield from make_setup("none", request.param, monkeypatch)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    os.environ.pop("OPENAI_BASE_URL", None)
