"""Fixtures for the LLM client instrumentors: a stub server, captured telemetry, and our
instrumentors with or without the official GenAI ones (in either wrapping order)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from llm_setup import Setup, make_setup
from stub_server import StubServer


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture(params=["none", "outer", "inner"])
def setup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """Ours alone, the official instrumentor outside ours, and inside ours."""
    yield from make_setup(request.param, False, monkeypatch)


@pytest.fixture
def stage_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """Ours alone, writing contract v0.1's stage spans and events
    (``OTEL_AGENT_CONTEXT_STAGE_SPANS=true``, read when instrumenting)."""
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_STAGE_SPANS", "true")
    yield from make_setup("none", False, monkeypatch)


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
