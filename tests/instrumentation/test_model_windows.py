"""The context-window table and its override: a bad entry is named and left out, and the
longest name wins whichever table holds it."""

from __future__ import annotations

import logging

import pytest

from otel_agent_context.instrumentation import _models
from otel_agent_context.instrumentation._models import context_window, register_model_window


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(_models, "_user", {})
    monkeypatch.setattr(_models, "_found", {})
    monkeypatch.setattr(_models, "_env_tables", {})


def test_bad_entries_are_named_and_left_out(monkeypatch, caplog) -> None:
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS",
                       "my-model=32768, =5,other=abc,neg=-1,zero=0,huge=1e99,"
                       "big=99999999999999999999999999,")
    with caplog.at_level(logging.WARNING, logger=_models.__name__):
        assert context_window("my-model-v2") == 32768
        assert context_window("gpt-4o-mini") == 128_000  # "=5" names no model, not all
        for model in ("other", "neg", "zero", "huge", "big"):
            assert context_window(model) is None
    (record,) = [r for r in caplog.records if "OTEL_AGENT_CONTEXT_MODEL_WINDOWS" in r.message]
    for entry in ("'=5'", "'other=abc'", "'neg=-1'", "'zero=0'", "'huge=1e99'",
                  "'big=99999999999999999999999999'"):
        assert entry in record.message
    assert "my-model" not in record.message


def test_the_longest_name_wins_across_tables(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_MODEL_WINDOWS", "g=7,gpt-4=8000,gpt-4o-mini=64000")
    assert context_window("gpt-4o-mini-2024-07-18") == 64_000  # the override, exact name
    assert context_window("gpt-4o-2024-08-06") == 128_000  # the table's longer "gpt-4o"
    assert context_window("gpt-4-0613") == 8000  # the override's "gpt-4" over the table's
    assert context_window("g-custom") == 7
    register_model_window("gpt-4o", 100_000)  # registered: wins a tie with the table
    assert context_window("gpt-4o-2024-08-06") == 100_000


@pytest.mark.parametrize("tokens", [0, -1, True, 2**63, 1.5, "32768"])
def test_a_registered_window_must_be_a_positive_integer(tokens) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        register_model_window("my-model", tokens)
