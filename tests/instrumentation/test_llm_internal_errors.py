"""Our own failure half-way through recording a call: the call still succeeds, and every
span we started is ended (no leaked stage spans, no half-open implicit envelope)."""

from __future__ import annotations

import openai

from otel_agent_context import Envelope
from otel_agent_context._api import set_strict


def test_failure_after_the_budget_started_ends_what_was_started(alone, stub, monkeypatch,
                                                                 caplog) -> None:
    def broken(self, **kwargs):
        raise RuntimeError("bug in our assembly code")

    monkeypatch.setattr(Envelope, "assembly", broken)
    set_strict(False)
    try:
        oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        reply = oc.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hello there"}])
    finally:
        set_strict(True)
    assert reply.choices[0].message.content  # the application is unaffected
    assert "context stages failed" in caplog.text
    spans = {s.name: s for s in alone.tel.spans()}
    assert set(spans) >= {"context.budget", "chat gpt-4o"}  # the budget span was ended
    chat = spans["chat gpt-4o"]
    assert chat.status.is_ok  # our error is not the call's
    assert chat.attributes["context.span_count"] == 1
    (bundle,) = alone.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
