"""Our own failure half-way through recording a call: the call still succeeds, and every
span we started is ended (no leaked stage spans, no half-open implicit envelope). Both forms:
the folded one (contract v0.2, the default) and the stage spans of v0.1
(``OTEL_AGENT_CONTEXT_STAGE_SPANS=true``)."""

from __future__ import annotations

import openai
import pytest

from otel_agent_context import Envelope, _folded
from otel_agent_context import _semconv as S
from otel_agent_context._api import set_strict


def _call(stub) -> str:
    set_strict(False)
    try:
        oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        reply = oc.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hello there"}])
    finally:
        set_strict(True)
    return reply.choices[0].message.content


def test_failure_after_the_budget_started_ends_what_was_started(stage_spans, stub,
                                                                 monkeypatch, caplog) -> None:
    def broken(self, **kwargs):
        raise RuntimeError("bug in our assembly code")

    monkeypatch.setattr(Envelope, "assembly", broken)
    assert _call(stub)  # the application is unaffected
    assert "context stages failed" in caplog.text
    spans = {s.name: s for s in stage_spans.tel.spans()}
    assert set(spans) >= {"context.budget", "chat gpt-4o"}  # the budget span was ended
    chat = spans["chat gpt-4o"]
    assert chat.status.is_ok  # our error is not the call's
    assert chat.attributes["context.span_count"] == 1
    (bundle,) = stage_spans.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"


def test_failure_while_folding_the_call_ends_the_call_alone(alone, stub, monkeypatch,
                                                            caplog) -> None:
    def broken(*args):
        raise RuntimeError("bug in our assembly code")

    # fails after the budget was made, before anything was written on the span
    monkeypatch.setattr(_folded, "_put_assembly", broken)
    assert _call(stub)  # the application is unaffected
    assert "context stages failed" in caplog.text
    spans = alone.tel.spans()
    assert [s.name for s in spans] == ["chat gpt-4o"]  # ended, and nothing else started
    (chat,) = spans
    assert chat.status.is_ok  # our error is not the call's
    assert chat.attributes[S.CONTEXT_SPAN_COUNT] == 0
    assert S.ASSEMBLY_ID not in chat.attributes  # no half-written assembly
    (bundle,) = alone.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"


def test_in_strict_mode_a_failure_while_folding_still_ends_the_call(alone, stub,
                                                                    monkeypatch) -> None:
    """Strict test mode raises our error, but only after ending what was started: the call's
    own envelope is stopped, so its span is exported and rebuilds to one bundle."""
    def broken(*args):
        raise RuntimeError("bug in our assembly code")

    monkeypatch.setattr(_folded, "_put_assembly", broken)
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with pytest.raises(RuntimeError, match="bug in our assembly code"):
        oc.chat.completions.create(model="gpt-4o",
                                   messages=[{"role": "user", "content": "hello there"}])
    spans = alone.tel.spans()
    assert [s.name for s in spans] == ["chat gpt-4o"]
    assert spans[0].attributes[S.CONTEXT_SPAN_COUNT] == 0  # the envelope was stopped
    (bundle,) = alone.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
