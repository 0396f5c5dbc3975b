"""The folded call's budget attributes and assembly hash, written out for speed, are the ones
the generic paths give: the table's ``ContextBudget`` fields, the newline-joined digest."""

from __future__ import annotations

import hmac
import itertools

import pytest

from otel_agent_context import _digest
from otel_agent_context import _semconv as S
from otel_agent_context._attributes import fields_to_attributes
from otel_agent_context._digest import ordered_digest
from otel_agent_context._folded import fold_call
from otel_agent_context.testing import CapturedTelemetry


@pytest.mark.parametrize("max_tokens,reserved,strategy", list(itertools.product(
    (None, 0, 128_000), (None, 0, 300), (None, "reject", "truncate_middle"))))
def test_budget_attributes_are_the_tables(max_tokens: int | None, reserved: int | None,
                                          strategy: str | None) -> None:
    tel = CapturedTelemetry()
    try:
        span = tel.tracer.start_span("chat m")
        env = tel.agent_context._call_envelope(span)
        budget = fold_call(env, span, max_tokens=max_tokens, reserved_tokens=reserved,
                           overflow_strategy=strategy, segments=[], blocks=[], sources=None,
                           capture=False)
        expected = fields_to_attributes(S.SPAN_BUDGET, "ContextBudget", False,
                                        budget_id=budget.budget_id, target="model",
                                        max_tokens=max_tokens, reserved_tokens=reserved,
                                        overflow_strategy=strategy)
        span.end()
        recorded = dict(tel.spans()[0].attributes)
        budget_keys = [k for k in recorded if k.startswith("context.budget.")]
        assert budget_keys == list(expected)
        assert {k: recorded[k] for k in budget_keys} == expected
    finally:
        tel.shutdown()


@pytest.mark.parametrize("parts", [[], [""], ["a"], ["0:user:1:sha256:x", "1:u:2:", "é\ud800"],
                                   ("a", "b")])
def test_ordered_digest_is_each_part_and_a_newline(parts: list[str], monkeypatch) -> None:
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "k")
    _digest.reset()
    try:
        h = hmac.new(b"k", b"", "sha256")
        for part in parts:
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\n")
        assert ordered_digest(parts) == "hmac-sha256:" + h.hexdigest()
        assert ordered_digest(iter(parts)) == ordered_digest(list(parts))
    finally:
        _digest.reset()
