"""Setting up the LLM client instrumentors for a test: our instrumentors with or without the
official GenAI ones (in either wrapping order), on captured telemetry. A module of its own
(not the conftest) so that tests can import it: the langchain directory's conftest shadows
this directory's ``conftest`` module when the whole tree is collected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


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
