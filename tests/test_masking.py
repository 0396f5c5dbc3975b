"""The masking hook: every content string passes through it under content capture; the
built-in masker; a failing masker drops the content (fail closed); blocked items never
carry content whatever the hook returns."""

from __future__ import annotations

import pytest

from otel_agent_context import ContextItem, builtin_masker, set_content_masker
from otel_agent_context.testing import CapturedTelemetry


@pytest.fixture
def tel():
    t = CapturedTelemetry(capture_content=True, blocked_sensitivities=["secret"])
    yield t
    t.shutdown()
    set_content_masker(None)


def _item_contents(tel: CapturedTelemetry) -> list[str]:
    return [e.attributes["context.item.content"] for s in tel.spans() for e in s.events
            if "context.item.content" in e.attributes]


def test_the_builtin_masker_replaces_secrets_and_personal_data() -> None:
    text = ("key sk-proj-abcdefghijklmnopqrstu1234, Authorization: Bearer abc.def-ghi_jkl123,"
            " card 4111 1111 1111 1111, not a card 1234 5678 9012 3456, mail ana@example.com")
    masked = builtin_masker(text)
    assert "sk-proj-" not in masked and "[REDACTED:api_key]" in masked
    assert "abc.def-ghi_jkl123" not in masked and "[REDACTED:bearer]" in masked
    assert "4111 1111 1111 1111" not in masked and "[REDACTED:card]" in masked
    assert "1234 5678 9012 3456" in masked  # fails the Luhn check: not a card number
    assert "ana@example.com" not in masked and "[REDACTED:email]" in masked


def test_every_content_string_goes_through_the_hook(tel) -> None:
    set_content_masker(lambda text: text.upper())
    with tel.agent_context.envelope() as env:
        with env.surface() as surface:
            surface.add(ContextItem(item_id="a", content="alpha", title="title"))
        env.missing(question="which?")
    assert _item_contents(tel) == ["ALPHA"]
    (bundle,) = tel.bundles()
    assert bundle["context_items"][0]["title"] == "TITLE"
    assert bundle["missing_context"][0]["question"] == "WHICH?"


def test_a_masker_that_raises_drops_the_content_and_the_host_goes_on(tel, caplog) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("masker bug")

    set_content_masker(broken)
    with tel.agent_context.envelope() as env, env.surface() as surface:
        surface.add(ContextItem(item_id="a", content="alpha"))
    assert _item_contents(tel) == []  # fail closed
    (bundle,) = tel.bundles()
    assert "content" not in bundle["context_items"][0]
    assert bundle["context_items"][0]["digest"].startswith("hmac-sha256:")  # still there
    assert "masker raised" in caplog.text


def test_blocked_items_carry_no_content_whatever_the_hook_returns(tel) -> None:
    set_content_masker(lambda text: "let it out")
    with tel.agent_context.envelope() as env, env.surface() as surface:
        surface.add(ContextItem(item_id="s", content="top secret", sensitivity="secret"))
    assert _item_contents(tel) == []


def test_the_environment_switches_on_the_builtin_masker(monkeypatch) -> None:
    from otel_agent_context import _masking

    monkeypatch.setenv("OTEL_AGENT_CONTEXT_MASKER", "builtin")
    set_content_masker(None)
    _masking._resolved = False
    try:
        assert _masking.mask("write to ana@example.com") == "write to [REDACTED:email]"
    finally:
        monkeypatch.delenv("OTEL_AGENT_CONTEXT_MASKER")
        _masking._resolved = False
        set_content_masker(None)
