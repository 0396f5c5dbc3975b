"""``Assembly.blocks``: many blocks in one call record what ``block`` records for each."""

from __future__ import annotations

import pytest

from otel_agent_context import _semconv as S
from otel_agent_context.testing import CapturedTelemetry

ROWS = [
    ("system:1", "system_prompt", 40, "system_prompt", "sha256:" + "a" * 64),
    ("user:2", "user_message", 7, "message_history", None),
    ("ref:3", None, None, None, "sha256:" + "b" * 64),
]


def _record(batch: bool) -> tuple[list[dict], dict]:
    tel = CapturedTelemetry()
    try:
        with tel.agent_context.envelope() as env, env.assembly() as asm:
            asm.block("first", kind="tool_result", tokens=3, injection_point="tool_argument")
            if batch:
                asm.blocks(ROWS)
            else:
                for item_id, kind, tokens, point, digest in ROWS:
                    asm.block(item_id, kind=kind, tokens=tokens, injection_point=point,
                              digest=digest)
            asm.block("last", tokens=1)
        (span,) = [s for s in tel.spans() if s.name == S.SPAN_ASSEMBLY]
        events = [dict(e.attributes) for e in span.events]
        return events, dict(span.attributes)
    finally:
        tel.shutdown()


def test_blocks_match_block_by_block() -> None:
    batch_events, batch_span = _record(True)
    single_events, single_span = _record(False)
    assert batch_events == single_events
    assert [list(e) for e in batch_events] == [list(e) for e in single_events]  # same order
    assert batch_span == single_span  # count, tokens and the ordered hash
    assert [e[S.BLOCK_INDEX] for e in batch_events] == [0, 1, 2, 3, 4]
    assert batch_span[S.ASSEMBLY_BLOCK_COUNT] == 5
    assert batch_span[S.ASSEMBLY_TOKEN_COUNT] == 3 + 40 + 7 + 1


def test_blocks_rejects_an_invalid_kind_like_block() -> None:
    tel = CapturedTelemetry()  # strict: the library's own errors raise
    try:
        with tel.agent_context.envelope() as env, env.assembly() as asm, \
                pytest.raises(ValueError):
            asm.blocks([("x", "not-a-kind", 1, None, None)])
    finally:
        tel.shutdown()
