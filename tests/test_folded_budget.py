"""The folded call's budget attributes, written out for speed, are the ones the generic paths
give (the table's ``ContextBudget`` fields); an assembly's hash is the newline-joined parts'
plain sha256 under any digest setting."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from otel_agent_context import _digest
from otel_agent_context import _semconv as S
from otel_agent_context._attributes import fields_to_attributes
from otel_agent_context._digest import assembly_hash
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
@pytest.mark.parametrize("mode", ["hmac-sha256", "sha256"])
def test_an_assembly_hash_is_each_part_and_a_newline_unkeyed(parts: list[str], mode: str,
                                                             monkeypatch) -> None:
    """Not keyed in either digest mode: its parts carry the (keyed) block digests, and the
    rebuild derives the same value from a folded span without the key."""
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST_KEY", "k")
    monkeypatch.setenv("OTEL_AGENT_CONTEXT_DIGEST", mode)
    _digest.reset()
    try:
        h = hashlib.sha256()
        for part in parts:
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\n")
        assert assembly_hash(parts) == "sha256:" + h.hexdigest()
        assert assembly_hash(iter(parts)) == assembly_hash(list(parts))
    finally:
        _digest.reset()
