"""``env_text``: the per-call read of an environment variable, as ``os.environ.get(name, "")``
and seeing a change made through ``os.environ`` at once."""

from __future__ import annotations

import os

import pytest

from otel_agent_context._env import env_text
from otel_agent_context.instrumentation._models import context_window

_NAME = "OTEL_AGENT_CONTEXT_TEST_ENV_TEXT"


@pytest.mark.parametrize("value", ["", "x", " true ", "gpt-x=1000,b=2", "caf\u00e9",
                                   "bad\udcff", "\u6a21\u578b"])
def test_same_as_os_environ(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.delenv(_NAME, raising=False)
    assert env_text(_NAME) == os.environ.get(_NAME, "") == ""
    monkeypatch.setenv(_NAME, value)
    assert env_text(_NAME) == os.environ.get(_NAME, "") == value
    monkeypatch.delenv(_NAME)
    assert env_text(_NAME) == ""


def test_changes_seen_at_once() -> None:
    try:
        os.environ[_NAME] = "1"
        assert env_text(_NAME) == "1"
        os.environ[_NAME] = "2"
        assert env_text(_NAME) == "2"
        os.environ.update({_NAME: "3"})
        assert env_text(_NAME) == "3"
        os.environ.pop(_NAME)
        assert env_text(_NAME) == ""
    finally:
        os.environ.pop(_NAME, None)


def test_replaced_environ_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """An application that swaps ``os.environ`` for another mapping is read through it."""
    monkeypatch.setattr(os, "environ", {_NAME: "swapped"})
    assert env_text(_NAME) == "swapped"
    assert env_text("OTEL_AGENT_CONTEXT_TEST_ABSENT") == ""


def test_model_window_override_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS", raising=False)
    assert context_window("env-text-model") is None
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS", "env-text-model=1234")
    assert context_window("env-text-model") == 1234
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS", "env-text-model=99")
    assert context_window("env-text-model") == 99
    monkeypatch.delenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS")
    assert context_window("env-text-model") is None
