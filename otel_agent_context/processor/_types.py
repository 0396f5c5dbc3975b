"""Wire types of the contract's attributes (contract section 2), for checking at the door.

A span whose contract attribute has the wrong OTLP type (``context.span_count`` sent as a
string, say) is rejected when it is received, with a message naming the span and the
attribute, so the exporter learns of it (OTLP partial success) and nothing half-valid is
acknowledged and then fails later. Only names this table knows are checked; any other
``context.*`` attribute passes through as it came.

Leniency, on purpose: a ``double`` may arrive as an integer (OpenTelemetry JS encodes whole
numbers as ``intValue``) and an ``int`` as a whole ``double``.
"""

from __future__ import annotations

from .. import _semconv as S

__all__ = [
    "BOOL", "DOUBLE", "EXPECTED", "INT", "REQUIRED_EVENT_ATTRIBUTES", "STRING", "STRING_ARRAY",
    "expected_type",
]

# The names of the OTLP ``AnyValue`` oneof (what ``WhichOneof("value")`` returns), plus
# one for arrays whose elements must be strings.
STRING = "string_value"
INT = "int_value"
DOUBLE = "double_value"
BOOL = "bool_value"
STRING_ARRAY = "string_array"

_INT = (
    S.CONTEXT_SPAN_COUNT, S.SURFACE_ITEM_COUNT, S.SURFACE_TOKEN_ESTIMATE,
    S.SELECTION_CANDIDATE_COUNT, S.SELECTION_SELECTED_COUNT, S.SELECTION_OMITTED_COUNT,
    S.SELECTION_RANK, S.ITEM_TOKEN_ESTIMATE, S.ITEM_BYTE_SIZE, S.ITEM_PRIORITY,
    S.BUDGET_MAX_TOKENS, S.BUDGET_RESERVED_TOKENS, S.BUDGET_MAX_BYTES, S.BUDGET_MAX_ITEMS,
    S.BUDGET_ACTUAL_TOKENS, S.BUDGET_ACTUAL_BYTES, S.BUDGET_ACTUAL_ITEMS,
    S.BUDGET_OVERFLOW_TOKENS, S.TRUNCATION_TOKENS_BEFORE, S.TRUNCATION_TOKENS_AFTER,
    S.WINDOW_ORDER, S.WINDOW_RESERVED_TOKENS, S.WINDOW_USED_TOKENS,
    S.ASSEMBLY_BLOCK_COUNT, S.ASSEMBLY_TOKEN_COUNT, S.BLOCK_INDEX, S.BLOCK_TOKENS,
    S.COMPACTION_SOURCE_COUNT, S.COMPACTION_TOKENS_BEFORE, S.COMPACTION_TOKENS_AFTER,
    S.SUMMARY_TOKEN_ESTIMATE, S.ITEMS_PART,
)
_DOUBLE = (S.SELECTION_SCORE, S.BUDGET_UTILIZATION, S.COMPACTION_COVERAGE)
_BOOL = (S.BUDGET_OVERFLOW, S.COMPACTION_COVERED, S.GEN_AI_CONVERSATION_COMPACTED)
_STRING_ARRAY = (
    S.CONTEXT_ACTOR_REFS, S.CONTEXT_RUNTIME_REFS, S.CONTEXT_POLICY_REFS,
    S.CONTEXT_EVIDENCE_REFS, S.ITEM_VISIBILITY, S.SOURCE_PROVENANCE_REFS,
    S.ASSEMBLY_VISIBILITY, S.INJECTION_VISIBILITY, S.COMPACTION_LOSS_NOTES,
    S.MISSING_CANDIDATE_SOURCES, S.MISSING_BLOCKED_ACTIONS, S.MISSING_RESOLUTION_REFS,
)
#: The attributes the processor itself relies on: wrong here, the span is unusable.
_STRING = (S.CONTEXT_ID, S.CONTEXT_SCOPE, S.CONTEXT_PARENT_ID, S.ITEM_ID)

#: attribute name -> expected wire type.
EXPECTED: dict[str, str] = {
    **{name: INT for name in _INT},
    **{name: DOUBLE for name in _DOUBLE},
    **{name: BOOL for name in _BOOL},
    **{name: STRING_ARRAY for name in _STRING_ARRAY},
    **{name: STRING for name in _STRING},
}

_PREFIXED = ((S.SELECTION_SIGNAL_PREFIX, DOUBLE),)


def expected_type(name: str) -> str | None:
    """The wire type the contract gives ``name``, or None if the table does not know it."""
    kind = EXPECTED.get(name)
    if kind is None:
        for prefix, prefixed_kind in _PREFIXED:
            if name.startswith(prefix):
                return prefixed_kind
    return kind


#: Span events and the attribute each must carry (any one of the alternatives): the ids
#: that tie an event to its record. Without it the event cannot be rebuilt.
REQUIRED_EVENT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    **{name: (S.ITEM_ID,) for name in S.ITEM_EVENTS if name != S.EVENT_BUDGET_TRUNCATED},
    S.EVENT_BUDGET_TRUNCATED: (S.ITEM_ID, S.WINDOW_SEGMENT),
    S.EVENT_MISSING_DETECTED: (S.MISSING_ID,),
    S.EVENT_MISSING_REQUESTED: (S.MISSING_ID,),
    S.EVENT_MISSING_RESOLVED: (S.MISSING_ID,),
    S.EVENT_SUMMARY_CREATED: (S.SUMMARY_ID,),
}
