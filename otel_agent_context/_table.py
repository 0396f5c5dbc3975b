"""The wire contract as one table: GENERATED from semconv/registry.yaml, do not edit.

    python3 scripts/gen_table.py          # rewrite this module
    python3 scripts/gen_table.py --check  # exit 1 if it is out of date (a test runs this)

What every part of the project reads instead of restating the contract: the emitter, the
rebuild and its boundary, the replay (``emit_bundle``), the agent-side instruments, the
processor's ``/metrics``, the docs table and the dashboard generator.

- :data:`ATTRIBUTES`: every attribute the contract names (``context.*`` and the reused
  OpenTelemetry names), with its type, enum members, content flag.
- :data:`TEMPLATES`: prefixed attribute families (``context.selection.signal.<name>``).
- :data:`RECORDS`: for every record of the standard that telemetry carries, its fields in
  order, each with the attribute that carries it and its requirement level there.
- :data:`EVENTS`: every span event, the attributes it must carry, and its records.
- :data:`SPANS`: every span, and its records.
- :data:`METRICS`: every metric: name, instrument, unit, buckets, labels, description.
- :data:`FOLDED`: the parallel arrays of the folded form (contract v0.2): for each, the record
  field its elements carry and the array it runs parallel to.

Standard library only: the dashboard generator loads this file by path.
"""

from __future__ import annotations

from typing import NamedTuple

CONTRACT_VERSION = '0.2'


class AttributeSpec(NamedTuple):
    name: str
    #: "string", "int", "double", "boolean", "string[]", "int[]", or "any" (a reused
    #: OpenTelemetry attribute: a JSON string or a structured value)
    type: str
    #: allowed values (of the elements, for "string[]"); empty when free-form
    members: tuple[str, ...]
    #: the enum has "custom": an unknown value is recorded as custom (original kept)
    has_custom: bool
    #: may hold user or model text: recorded only under content capture
    content: bool
    #: the least value a number (or an array element) may take (a count: 0); None when any
    minimum: float | None = None


class FieldSpec(NamedTuple):
    field: str
    attribute: str
    #: "required", "recommended", "opt_in" or "conditionally_required"
    requirement: str


class EventSpec(NamedTuple):
    name: str
    #: each entry is a set of alternatives of which one must be present (and valid)
    required: tuple[tuple[str, ...], ...]
    #: counts toward the 100 item events a span carries
    item_event: bool
    #: record name -> fields the event carries
    records: dict[str, tuple[FieldSpec, ...]]


class SpanSpec(NamedTuple):
    name: str
    records: dict[str, tuple[FieldSpec, ...]]


class FoldedSpec(NamedTuple):
    #: the record and field one element of the array carries
    record: str
    field: str
    #: the array this one runs parallel to (element i of both describe the same thing), or
    #: "" for the array that sets the length
    parallel_to: str


class MetricSpec(NamedTuple):
    #: OpenTelemetry name
    name: str
    #: "counter" or "histogram"
    instrument: str
    unit: str
    description: str
    #: histogram bucket upper bounds; None for counters
    buckets: tuple[float, ...] | None
    prometheus_name: str
    #: (label, attribute it is taken from, or "" for a label of the rebuild itself)
    labels: tuple[tuple[str, str], ...]


ATTRIBUTES: dict[str, AttributeSpec] = {
    'context.id': AttributeSpec('context.id', 'string', (), False, False),
    'context.scope': AttributeSpec('context.scope', 'string', ('turn', 'task', 'session', 'tool_invocation', 'review', 'handoff', 'custom'), True, False),
    'context.lifecycle': AttributeSpec('context.lifecycle', 'string', ('draft', 'available', 'selected', 'assembled', 'injected', 'compacted', 'redacted', 'expired', 'archived'), False, False),
    'context.schema_version': AttributeSpec('context.schema_version', 'string', (), False, False),
    'context.producer': AttributeSpec('context.producer', 'string', (), False, False),
    'context.parent_id': AttributeSpec('context.parent_id', 'string', (), False, False),
    'context.span_count': AttributeSpec('context.span_count', 'int', (), False, False, 0),
    'context.event_count': AttributeSpec('context.event_count', 'int', (), False, False, 0),
    'context.actor_refs': AttributeSpec('context.actor_refs', 'string[]', (), False, False),
    'context.runtime_refs': AttributeSpec('context.runtime_refs', 'string[]', (), False, False),
    'context.policy_refs': AttributeSpec('context.policy_refs', 'string[]', (), False, False),
    'context.evidence_refs': AttributeSpec('context.evidence_refs', 'string[]', (), False, False),
    'context.item.id': AttributeSpec('context.item.id', 'string', (), False, False),
    'context.item.kind': AttributeSpec('context.item.kind', 'string', ('user_message', 'system_prompt', 'developer_instruction', 'session_history', 'thread_summary', 'working_memory', 'durable_memory', 'knowledge_pack_item', 'document_excerpt', 'file_excerpt', 'artifact_ref', 'tool_result', 'browser_state', 'runtime_state', 'team_memory', 'policy_note', 'external_resource', 'manual_note', 'computed_summary', 'peer_agent_message', 'retrieval_result', 'custom'), True, False),
    'context.item.content_mode': AttributeSpec('context.item.content_mode', 'string', ('inline', 'ref', 'summary', 'embedded_resource', 'resource_link', 'artifact_ref', 'tool_result_ref', 'opaque'), False, False),
    'context.item.title': AttributeSpec('context.item.title', 'string', (), False, True),
    'context.item.content': AttributeSpec('context.item.content', 'string', (), False, True),
    'context.item.content_ref': AttributeSpec('context.item.content_ref', 'string', (), False, False),
    'context.item.mime_type': AttributeSpec('context.item.mime_type', 'string', (), False, False),
    'context.item.language': AttributeSpec('context.item.language', 'string', (), False, False),
    'context.item.token_estimate': AttributeSpec('context.item.token_estimate', 'int', (), False, False, 0),
    'context.item.byte_size': AttributeSpec('context.item.byte_size', 'int', (), False, False, 0),
    'context.item.freshness': AttributeSpec('context.item.freshness', 'string', (), False, False),
    'context.item.trust_level': AttributeSpec('context.item.trust_level', 'string', (), False, False),
    'context.item.sensitivity': AttributeSpec('context.item.sensitivity', 'string', (), False, False),
    'context.item.redaction_state': AttributeSpec('context.item.redaction_state', 'string', ('none', 'masked', 'removed', 'summarized', 'encrypted_ref', 'policy_blocked', 'unknown'), False, False),
    'context.item.visibility': AttributeSpec('context.item.visibility', 'string[]', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.item.priority': AttributeSpec('context.item.priority', 'int', (), False, False),
    'context.item.digest': AttributeSpec('context.item.digest', 'string', (), False, False),
    'context.item.created_at': AttributeSpec('context.item.created_at', 'string', (), False, False),
    'context.source.id': AttributeSpec('context.source.id', 'string', (), False, False),
    'context.source.uri': AttributeSpec('context.source.uri', 'string', (), False, False),
    'context.source.kind': AttributeSpec('context.source.kind', 'string', (), False, False),
    'context.source.selector': AttributeSpec('context.source.selector', 'string', (), False, False),
    'context.source.digest': AttributeSpec('context.source.digest', 'string', (), False, False),
    'context.source.authority': AttributeSpec('context.source.authority', 'string', (), False, False),
    'context.source.license': AttributeSpec('context.source.license', 'string', (), False, False),
    'context.source.retrieved_at': AttributeSpec('context.source.retrieved_at', 'string', (), False, False),
    'context.source.modified_at': AttributeSpec('context.source.modified_at', 'string', (), False, False),
    'context.source.provenance_refs': AttributeSpec('context.source.provenance_refs', 'string[]', (), False, False),
    'context.surface.id': AttributeSpec('context.surface.id', 'string', (), False, False),
    'context.surface.item_count': AttributeSpec('context.surface.item_count', 'int', (), False, False, 0),
    'context.surface.token_estimate': AttributeSpec('context.surface.token_estimate', 'int', (), False, False, 0),
    'context.selection.id': AttributeSpec('context.selection.id', 'string', (), False, False),
    'context.selection.intent': AttributeSpec('context.selection.intent', 'string', (), False, False),
    'context.selection.query': AttributeSpec('context.selection.query', 'string', (), False, True),
    'context.selection.policy': AttributeSpec('context.selection.policy', 'string', (), False, False),
    'context.selection.rationale': AttributeSpec('context.selection.rationale', 'string', (), False, True),
    'context.selection.candidate_count': AttributeSpec('context.selection.candidate_count', 'int', (), False, False, 0),
    'context.selection.selected_count': AttributeSpec('context.selection.selected_count', 'int', (), False, False, 0),
    'context.selection.omitted_count': AttributeSpec('context.selection.omitted_count', 'int', (), False, False, 0),
    'context.selection.actor_ref': AttributeSpec('context.selection.actor_ref', 'string', (), False, False),
    'context.selection.model_ref': AttributeSpec('context.selection.model_ref', 'string', (), False, False),
    'context.selection.rank': AttributeSpec('context.selection.rank', 'int', (), False, False),
    'context.selection.score': AttributeSpec('context.selection.score', 'double', (), False, False),
    'context.omission.reason': AttributeSpec('context.omission.reason', 'string', ('budget', 'low_relevance', 'stale_source', 'policy_block', 'duplicate_coverage', 'unsupported_media', 'privacy_risk', 'missing_permission', 'custom'), True, False),
    'context.omission.detail': AttributeSpec('context.omission.detail', 'string', (), False, False),
    'context.budget.id': AttributeSpec('context.budget.id', 'string', (), False, False),
    'context.budget.target': AttributeSpec('context.budget.target', 'string', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.budget.max_tokens': AttributeSpec('context.budget.max_tokens', 'int', (), False, False, 0),
    'context.budget.reserved_tokens': AttributeSpec('context.budget.reserved_tokens', 'int', (), False, False, 0),
    'context.budget.max_bytes': AttributeSpec('context.budget.max_bytes', 'int', (), False, False, 0),
    'context.budget.max_items': AttributeSpec('context.budget.max_items', 'int', (), False, False, 0),
    'context.budget.actual_tokens': AttributeSpec('context.budget.actual_tokens', 'int', (), False, False, 0),
    'context.budget.actual_bytes': AttributeSpec('context.budget.actual_bytes', 'int', (), False, False, 0),
    'context.budget.actual_items': AttributeSpec('context.budget.actual_items', 'int', (), False, False, 0),
    'context.budget.overflow_strategy': AttributeSpec('context.budget.overflow_strategy', 'string', ('reject', 'truncate_tail', 'truncate_middle', 'summarize_oldest', 'summarize_low_priority', 'defer_to_retrieval', 'ask_for_choice', 'policy_block', 'custom'), True, False),
    'context.budget.overflow': AttributeSpec('context.budget.overflow', 'boolean', (), False, False),
    'context.budget.overflow_tokens': AttributeSpec('context.budget.overflow_tokens', 'int', (), False, False, 0),
    'context.budget.utilization': AttributeSpec('context.budget.utilization', 'double', (), False, False, 0),
    'context.window.id': AttributeSpec('context.window.id', 'string', (), False, False),
    'context.window.segment': AttributeSpec('context.window.segment', 'string', (), False, False),
    'context.window.order': AttributeSpec('context.window.order', 'int', (), False, False),
    'context.window.reserved_tokens': AttributeSpec('context.window.reserved_tokens', 'int', (), False, False, 0),
    'context.window.used_tokens': AttributeSpec('context.window.used_tokens', 'int', (), False, False, 0),
    'context.window.segment_names': AttributeSpec('context.window.segment_names', 'string[]', (), False, False),
    'context.window.segment_orders': AttributeSpec('context.window.segment_orders', 'int[]', (), False, False),
    'context.window.segment_reserved_tokens': AttributeSpec('context.window.segment_reserved_tokens', 'int[]', (), False, False, 0),
    'context.window.segment_used_tokens': AttributeSpec('context.window.segment_used_tokens', 'int[]', (), False, False, 0),
    'context.truncation.strategy': AttributeSpec('context.truncation.strategy', 'string', ('reject', 'truncate_tail', 'truncate_middle', 'summarize_oldest', 'summarize_low_priority', 'defer_to_retrieval', 'ask_for_choice', 'policy_block', 'custom'), True, False),
    'context.truncation.tokens_before': AttributeSpec('context.truncation.tokens_before', 'int', (), False, False, 0),
    'context.truncation.tokens_after': AttributeSpec('context.truncation.tokens_after', 'int', (), False, False, 0),
    'context.assembly.id': AttributeSpec('context.assembly.id', 'string', (), False, False),
    'context.assembly.target': AttributeSpec('context.assembly.target', 'string', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.assembly.block_count': AttributeSpec('context.assembly.block_count', 'int', (), False, False, 0),
    'context.assembly.token_count': AttributeSpec('context.assembly.token_count', 'int', (), False, False, 0),
    'context.assembly.hash': AttributeSpec('context.assembly.hash', 'string', (), False, False),
    'context.assembly.wrapping_policy': AttributeSpec('context.assembly.wrapping_policy', 'string', (), False, False),
    'context.assembly.separator_policy': AttributeSpec('context.assembly.separator_policy', 'string', (), False, False),
    'context.assembly.redaction_state': AttributeSpec('context.assembly.redaction_state', 'string', ('none', 'masked', 'removed', 'summarized', 'encrypted_ref', 'policy_blocked', 'unknown'), False, False),
    'context.assembly.visibility': AttributeSpec('context.assembly.visibility', 'string[]', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.block.index': AttributeSpec('context.block.index', 'int', (), False, False),
    'context.block.tokens': AttributeSpec('context.block.tokens', 'int', (), False, False, 0),
    'context.block.digest': AttributeSpec('context.block.digest', 'string', (), False, False),
    'context.block.source_item_refs': AttributeSpec('context.block.source_item_refs', 'string[]', (), False, False),
    'context.assembly.block_item_ids': AttributeSpec('context.assembly.block_item_ids', 'string[]', (), False, False),
    'context.assembly.block_kinds': AttributeSpec('context.assembly.block_kinds', 'string[]', ('user_message', 'system_prompt', 'developer_instruction', 'session_history', 'thread_summary', 'working_memory', 'durable_memory', 'knowledge_pack_item', 'document_excerpt', 'file_excerpt', 'artifact_ref', 'tool_result', 'browser_state', 'runtime_state', 'team_memory', 'policy_note', 'external_resource', 'manual_note', 'computed_summary', 'peer_agent_message', 'retrieval_result', 'custom'), True, False),
    'context.assembly.block_tokens': AttributeSpec('context.assembly.block_tokens', 'int[]', (), False, False, 0),
    'context.assembly.block_injection_points': AttributeSpec('context.assembly.block_injection_points', 'string[]', ('system_prompt', 'developer_prompt', 'message_history', 'user_message_appendix', 'tool_argument', 'tool_visible_resource', 'runtime_metadata', 'ui_panel', 'review_export', 'peer_agent_message', 'artifact_input', 'custom'), True, False),
    'context.assembly.block_digests': AttributeSpec('context.assembly.block_digests', 'string[]', (), False, False),
    'context.assembly.block_source_counts': AttributeSpec('context.assembly.block_source_counts', 'int[]', (), False, False, 0),
    'context.assembly.block_source_item_refs': AttributeSpec('context.assembly.block_source_item_refs', 'string[]', (), False, False),
    'context.assembly.block_content_modes': AttributeSpec('context.assembly.block_content_modes', 'string[]', ('inline', 'ref', 'summary', 'embedded_resource', 'resource_link', 'artifact_ref', 'tool_result_ref', 'opaque'), False, False),
    'context.assembly.block_content_refs': AttributeSpec('context.assembly.block_content_refs', 'string[]', (), False, False),
    'context.assembly.block_tool_call_ids': AttributeSpec('context.assembly.block_tool_call_ids', 'string[]', (), False, False),
    'context.assembly.block_response_ids': AttributeSpec('context.assembly.block_response_ids', 'string[]', (), False, False),
    'context.assembly.block_contents': AttributeSpec('context.assembly.block_contents', 'string[]', (), False, True),
    'context.injection.id': AttributeSpec('context.injection.id', 'string', (), False, False),
    'context.injection.target': AttributeSpec('context.injection.target', 'string', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.injection.point': AttributeSpec('context.injection.point', 'string', ('system_prompt', 'developer_prompt', 'message_history', 'user_message_appendix', 'tool_argument', 'tool_visible_resource', 'runtime_metadata', 'ui_panel', 'review_export', 'peer_agent_message', 'artifact_input', 'custom'), True, False),
    'context.injection.native_id': AttributeSpec('context.injection.native_id', 'string', (), False, False),
    'context.injection.hash': AttributeSpec('context.injection.hash', 'string', (), False, False),
    'context.injection.final_ref': AttributeSpec('context.injection.final_ref', 'string', (), False, False),
    'context.injection.visibility': AttributeSpec('context.injection.visibility', 'string[]', ('model', 'tool', 'runtime', 'ui', 'user', 'reviewer', 'peer_agent', 'evidence_export'), False, False),
    'context.compaction.id': AttributeSpec('context.compaction.id', 'string', (), False, False),
    'context.compaction.scope': AttributeSpec('context.compaction.scope', 'string', (), False, False),
    'context.compaction.method': AttributeSpec('context.compaction.method', 'string', ('extractive_summary', 'abstractive_summary', 'structured_digest', 'rolling_summary', 'semantic_memory_update', 'human_curated_summary', 'provider_context_editing', 'custom'), True, False),
    'context.compaction.trigger': AttributeSpec('context.compaction.trigger', 'string', (), False, False),
    'context.compaction.source_count': AttributeSpec('context.compaction.source_count', 'int', (), False, False, 0),
    'context.compaction.tokens_before': AttributeSpec('context.compaction.tokens_before', 'int', (), False, False, 0),
    'context.compaction.tokens_after': AttributeSpec('context.compaction.tokens_after', 'int', (), False, False, 0),
    'context.compaction.coverage': AttributeSpec('context.compaction.coverage', 'double', (), False, False, 0),
    'context.compaction.loss_notes': AttributeSpec('context.compaction.loss_notes', 'string[]', (), False, False),
    'context.compaction.validation': AttributeSpec('context.compaction.validation', 'string', (), False, False),
    'context.compaction.replacement_policy': AttributeSpec('context.compaction.replacement_policy', 'string', (), False, False),
    'context.compaction.covered': AttributeSpec('context.compaction.covered', 'boolean', (), False, False),
    'context.summary.id': AttributeSpec('context.summary.id', 'string', (), False, False),
    'context.summary.token_estimate': AttributeSpec('context.summary.token_estimate', 'int', (), False, False, 0),
    'context.summary.refresh_policy': AttributeSpec('context.summary.refresh_policy', 'string', (), False, False),
    'context.summary.digest': AttributeSpec('context.summary.digest', 'string', (), False, False),
    'context.summary.content': AttributeSpec('context.summary.content', 'string', (), False, True),
    'context.missing.id': AttributeSpec('context.missing.id', 'string', (), False, False),
    'context.missing.question': AttributeSpec('context.missing.question', 'string', (), False, True),
    'context.missing.needed_for': AttributeSpec('context.missing.needed_for', 'string', (), False, False),
    'context.missing.severity': AttributeSpec('context.missing.severity', 'string', ('info', 'low', 'medium', 'high', 'blocking'), False, False),
    'context.missing.candidate_sources': AttributeSpec('context.missing.candidate_sources', 'string[]', (), False, False),
    'context.missing.blocked_actions': AttributeSpec('context.missing.blocked_actions', 'string[]', (), False, False),
    'context.missing.requested_from': AttributeSpec('context.missing.requested_from', 'string', (), False, False),
    'context.missing.status': AttributeSpec('context.missing.status', 'string', ('open', 'requested', 'resolved', 'dismissed', 'custom'), True, False),
    'context.missing.scope': AttributeSpec('context.missing.scope', 'string', (), False, False),
    'context.missing.resolution_refs': AttributeSpec('context.missing.resolution_refs', 'string[]', (), False, False),
    'context.redaction.state': AttributeSpec('context.redaction.state', 'string', ('none', 'masked', 'removed', 'summarized', 'encrypted_ref', 'policy_blocked', 'unknown'), False, False),
    'context.redaction.method': AttributeSpec('context.redaction.method', 'string', (), False, False),
    'context.redaction.redacted_by': AttributeSpec('context.redaction.redacted_by', 'string', (), False, False),
    'context.policy.ref': AttributeSpec('context.policy.ref', 'string', (), False, False),
    'context.items.stage': AttributeSpec('context.items.stage', 'string', (), False, False),
    'context.items.part': AttributeSpec('context.items.part', 'int', (), False, False),
    'context.runtime.rule': AttributeSpec('context.runtime.rule', 'string', (), False, False),
    'context.runtime.rule_level': AttributeSpec('context.runtime.rule_level', 'string', (), False, False),
    'context.runtime.rule_detail': AttributeSpec('context.runtime.rule_detail', 'string', (), False, False),
    'context.runtime.path': AttributeSpec('context.runtime.path', 'string', (), False, False),
    'gen_ai.operation.name': AttributeSpec('gen_ai.operation.name', 'string', (), False, False),
    'gen_ai.provider.name': AttributeSpec('gen_ai.provider.name', 'string', (), False, False),
    'gen_ai.request.model': AttributeSpec('gen_ai.request.model', 'string', (), False, False),
    'gen_ai.request.max_tokens': AttributeSpec('gen_ai.request.max_tokens', 'int', (), False, False),
    'gen_ai.response.model': AttributeSpec('gen_ai.response.model', 'string', (), False, False),
    'gen_ai.response.id': AttributeSpec('gen_ai.response.id', 'string', (), False, False),
    'gen_ai.usage.input_tokens': AttributeSpec('gen_ai.usage.input_tokens', 'int', (), False, False),
    'gen_ai.usage.output_tokens': AttributeSpec('gen_ai.usage.output_tokens', 'int', (), False, False),
    'gen_ai.usage.cache_read.input_tokens': AttributeSpec('gen_ai.usage.cache_read.input_tokens', 'int', (), False, False),
    'gen_ai.usage.cache_write.input_tokens': AttributeSpec('gen_ai.usage.cache_write.input_tokens', 'int', (), False, False),
    'gen_ai.conversation.id': AttributeSpec('gen_ai.conversation.id', 'string', (), False, False),
    'gen_ai.conversation.compacted': AttributeSpec('gen_ai.conversation.compacted', 'boolean', (), False, False),
    'gen_ai.agent.id': AttributeSpec('gen_ai.agent.id', 'string', (), False, False),
    'gen_ai.agent.name': AttributeSpec('gen_ai.agent.name', 'string', (), False, False),
    'gen_ai.agent.description': AttributeSpec('gen_ai.agent.description', 'string', (), False, False),
    'gen_ai.agent.version': AttributeSpec('gen_ai.agent.version', 'string', (), False, False),
    'gen_ai.tool.name': AttributeSpec('gen_ai.tool.name', 'string', (), False, False),
    'gen_ai.tool.call.id': AttributeSpec('gen_ai.tool.call.id', 'string', (), False, False),
    'gen_ai.tool.type': AttributeSpec('gen_ai.tool.type', 'string', (), False, False),
    'gen_ai.data_source.id': AttributeSpec('gen_ai.data_source.id', 'string', (), False, False),
    'gen_ai.system_instructions': AttributeSpec('gen_ai.system_instructions', 'any', (), False, True),
    'gen_ai.input.messages': AttributeSpec('gen_ai.input.messages', 'any', (), False, True),
    'gen_ai.output.messages': AttributeSpec('gen_ai.output.messages', 'any', (), False, True),
    'mcp.resource.uri': AttributeSpec('mcp.resource.uri', 'string', (), False, False),
    'mcp.session.id': AttributeSpec('mcp.session.id', 'string', (), False, False),
    'jsonrpc.request.id': AttributeSpec('jsonrpc.request.id', 'string', (), False, False),
    'gen_ai.prompt.name': AttributeSpec('gen_ai.prompt.name', 'string', (), False, False),
    'user.id': AttributeSpec('user.id', 'string', (), False, False),
    'error.type': AttributeSpec('error.type', 'string', (), False, False),
}

#: prefix (with its trailing dot) -> the spec of every attribute of the family
TEMPLATES: dict[str, AttributeSpec] = {
    'context.source.native.': AttributeSpec('context.source.native', 'string', (), False, False),
    'context.selection.signal.': AttributeSpec('context.selection.signal', 'double', (), False, False),
}

RECORDS: dict[str, tuple[FieldSpec, ...]] = {
    'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
    'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
    'RankingSignal': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('rank', 'context.selection.rank', 'recommended'), FieldSpec('score', 'context.selection.score', 'recommended'), ),
    'OmittedRef': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('reason', 'context.omission.reason', 'required'), FieldSpec('detail', 'context.omission.detail', 'recommended'), FieldSpec('score', 'context.selection.score', 'recommended'), ),
    'TruncationRecord': (FieldSpec('item_id', 'context.item.id', 'conditionally_required'), FieldSpec('segment', 'context.window.segment', 'conditionally_required'), FieldSpec('strategy', 'context.truncation.strategy', 'recommended'), FieldSpec('tokens_before', 'context.truncation.tokens_before', 'recommended'), FieldSpec('tokens_after', 'context.truncation.tokens_after', 'recommended'), ),
    'WindowSegment': (FieldSpec('segment', 'context.window.segment', 'required'), FieldSpec('order', 'context.window.order', 'recommended'), FieldSpec('reserved_tokens', 'context.window.reserved_tokens', 'recommended'), FieldSpec('used_tokens', 'context.window.used_tokens', 'recommended'), ),
    'AssemblyBlock': (FieldSpec('index', 'context.block.index', 'required'), FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('tokens', 'context.block.tokens', 'recommended'), FieldSpec('injection_point', 'context.injection.point', 'recommended'), FieldSpec('digest', 'context.block.digest', 'recommended'), FieldSpec('source_item_refs', 'context.block.source_item_refs', 'conditionally_required'), ),
    'ContextInjection': (FieldSpec('injection_id', 'context.injection.id', 'required'), FieldSpec('assembly_id', 'context.assembly.id', 'conditionally_required'), FieldSpec('target', 'context.injection.target', 'recommended'), FieldSpec('injection_point', 'context.injection.point', 'recommended'), FieldSpec('native_id', 'context.injection.native_id', 'recommended'), FieldSpec('visibility', 'context.injection.visibility', 'recommended'), FieldSpec('final_ref', 'context.injection.final_ref', 'recommended'), FieldSpec('hash', 'context.injection.hash', 'recommended'), ),
    'CompactionSource': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('covered', 'context.compaction.covered', 'recommended'), ),
    'ContextSummary': (FieldSpec('summary_id', 'context.summary.id', 'required'), FieldSpec('content', 'context.summary.content', 'opt_in'), FieldSpec('token_estimate', 'context.summary.token_estimate', 'recommended'), FieldSpec('digest', 'context.summary.digest', 'recommended'), FieldSpec('refresh_policy', 'context.summary.refresh_policy', 'recommended'), ),
    'MissingContext': (FieldSpec('missing_id', 'context.missing.id', 'required'), FieldSpec('scope', 'context.missing.scope', 'recommended'), FieldSpec('question', 'context.missing.question', 'opt_in'), FieldSpec('needed_for', 'context.missing.needed_for', 'recommended'), FieldSpec('severity', 'context.missing.severity', 'recommended'), FieldSpec('candidate_sources', 'context.missing.candidate_sources', 'recommended'), FieldSpec('blocked_actions', 'context.missing.blocked_actions', 'recommended'), FieldSpec('requested_from', 'context.missing.requested_from', 'recommended'), FieldSpec('status', 'context.missing.status', 'recommended'), FieldSpec('resolution_refs', 'context.missing.resolution_refs', 'recommended'), ),
    'ContextEvent.metadata': (FieldSpec('state', 'context.redaction.state', 'required'), FieldSpec('method', 'context.redaction.method', 'recommended'), FieldSpec('redacted_by', 'context.redaction.redacted_by', 'recommended'), FieldSpec('policy_ref', 'context.policy.ref', 'recommended'), ),
    'ContextEnvelope': (FieldSpec('context_id', 'context.id', 'required'), FieldSpec('scope', 'context.scope', 'required'), FieldSpec('lifecycle', 'context.lifecycle', 'recommended'), FieldSpec('schema_version', 'context.schema_version', 'recommended'), FieldSpec('producer', 'context.producer', 'recommended'), FieldSpec('parent_id', 'context.parent_id', 'conditionally_required'), FieldSpec('actor_refs', 'context.actor_refs', 'recommended'), FieldSpec('runtime_refs', 'context.runtime_refs', 'recommended'), FieldSpec('policy_refs', 'context.policy_refs', 'recommended'), FieldSpec('evidence_refs', 'context.evidence_refs', 'recommended'), ),
    'ContextSurface': (FieldSpec('surface_id', 'context.surface.id', 'required'), FieldSpec('item_count', 'context.surface.item_count', 'recommended'), FieldSpec('token_estimate', 'context.surface.token_estimate', 'recommended'), ),
    'ContextSelection': (FieldSpec('selection_id', 'context.selection.id', 'required'), FieldSpec('surface_id', 'context.surface.id', 'conditionally_required'), FieldSpec('intent', 'context.selection.intent', 'recommended'), FieldSpec('query', 'context.selection.query', 'opt_in'), FieldSpec('selection_policy', 'context.selection.policy', 'recommended'), FieldSpec('budget_ref', 'context.budget.id', 'conditionally_required'), FieldSpec('rationale', 'context.selection.rationale', 'opt_in'), FieldSpec('actor_ref', 'context.selection.actor_ref', 'recommended'), FieldSpec('model_ref', 'context.selection.model_ref', 'conditionally_required'), FieldSpec('candidate_count', 'context.selection.candidate_count', 'required'), ),
    'ContextBudget': (FieldSpec('budget_id', 'context.budget.id', 'required'), FieldSpec('target', 'context.budget.target', 'recommended'), FieldSpec('max_tokens', 'context.budget.max_tokens', 'recommended'), FieldSpec('reserved_tokens', 'context.budget.reserved_tokens', 'recommended'), FieldSpec('max_bytes', 'context.budget.max_bytes', 'recommended'), FieldSpec('max_items', 'context.budget.max_items', 'recommended'), FieldSpec('actual_tokens', 'context.budget.actual_tokens', 'recommended'), FieldSpec('actual_bytes', 'context.budget.actual_bytes', 'recommended'), FieldSpec('actual_items', 'context.budget.actual_items', 'recommended'), FieldSpec('overflow_strategy', 'context.budget.overflow_strategy', 'recommended'), FieldSpec('overflow', 'context.budget.overflow', 'conditionally_required'), FieldSpec('overflow_tokens', 'context.budget.overflow_tokens', 'conditionally_required'), FieldSpec('utilization', 'context.budget.utilization', 'conditionally_required'), FieldSpec('window_ref', 'context.window.id', 'conditionally_required'), ),
    'ContextWindow': (FieldSpec('window_id', 'context.window.id', 'conditionally_required'), FieldSpec('budget_ref', 'context.budget.id', 'required'), FieldSpec('target', 'context.budget.target', 'recommended'), FieldSpec('max_tokens', 'context.budget.max_tokens', 'recommended'), ),
    'ContextAssembly': (FieldSpec('assembly_id', 'context.assembly.id', 'required'), FieldSpec('target', 'context.assembly.target', 'recommended'), FieldSpec('wrapping_policy', 'context.assembly.wrapping_policy', 'recommended'), FieldSpec('separator_policy', 'context.assembly.separator_policy', 'recommended'), FieldSpec('visibility', 'context.assembly.visibility', 'recommended'), FieldSpec('budget_ref', 'context.budget.id', 'conditionally_required'), FieldSpec('redaction_state', 'context.assembly.redaction_state', 'recommended'), FieldSpec('block_count', 'context.assembly.block_count', 'required'), FieldSpec('token_count', 'context.assembly.token_count', 'recommended'), FieldSpec('hash', 'context.assembly.hash', 'recommended'), ),
    'ContextCompaction': (FieldSpec('compaction_id', 'context.compaction.id', 'required'), FieldSpec('scope', 'context.compaction.scope', 'recommended'), FieldSpec('summary_ref', 'context.summary.id', 'conditionally_required'), FieldSpec('method', 'context.compaction.method', 'recommended'), FieldSpec('trigger', 'context.compaction.trigger', 'recommended'), FieldSpec('coverage', 'context.compaction.coverage', 'recommended'), FieldSpec('loss_notes', 'context.compaction.loss_notes', 'conditionally_required'), FieldSpec('validation', 'context.compaction.validation', 'recommended'), FieldSpec('replacement_policy', 'context.compaction.replacement_policy', 'recommended'), FieldSpec('source_count', 'context.compaction.source_count', 'required'), FieldSpec('tokens_before', 'context.compaction.tokens_before', 'recommended'), FieldSpec('tokens_after', 'context.compaction.tokens_after', 'recommended'), ),
}

EVENTS: dict[str, EventSpec] = {
    'context.item.added': EventSpec('context.item.added', (('context.item.id',),), True, {
        'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
        'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
    }),
    'context.item.updated': EventSpec('context.item.updated', (('context.item.id',),), True, {
        'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
        'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
    }),
    'context.item.removed': EventSpec('context.item.removed', (('context.item.id',),), True, {}),
    'context.item.selected': EventSpec('context.item.selected', (('context.item.id',),), True, {
        'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
        'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
        'RankingSignal': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('rank', 'context.selection.rank', 'recommended'), FieldSpec('score', 'context.selection.score', 'recommended'), ),
    }),
    'context.item.omitted': EventSpec('context.item.omitted', (('context.item.id',), ('context.omission.reason',)), True, {
        'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
        'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
        'OmittedRef': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('reason', 'context.omission.reason', 'required'), FieldSpec('detail', 'context.omission.detail', 'recommended'), FieldSpec('score', 'context.selection.score', 'recommended'), ),
    }),
    'context.budget.truncated': EventSpec('context.budget.truncated', (('context.item.id', 'context.window.segment'),), True, {
        'TruncationRecord': (FieldSpec('item_id', 'context.item.id', 'conditionally_required'), FieldSpec('segment', 'context.window.segment', 'conditionally_required'), FieldSpec('strategy', 'context.truncation.strategy', 'recommended'), FieldSpec('tokens_before', 'context.truncation.tokens_before', 'recommended'), FieldSpec('tokens_after', 'context.truncation.tokens_after', 'recommended'), ),
    }),
    'context.window.segment': EventSpec('context.window.segment', (('context.window.segment',),), False, {
        'WindowSegment': (FieldSpec('segment', 'context.window.segment', 'required'), FieldSpec('order', 'context.window.order', 'recommended'), FieldSpec('reserved_tokens', 'context.window.reserved_tokens', 'recommended'), FieldSpec('used_tokens', 'context.window.used_tokens', 'recommended'), ),
    }),
    'context.assembly.block': EventSpec('context.assembly.block', (('context.item.id',), ('context.block.index',)), True, {
        'ContextItem': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('title', 'context.item.title', 'opt_in'), FieldSpec('content_mode', 'context.item.content_mode', 'recommended'), FieldSpec('content', 'context.item.content', 'opt_in'), FieldSpec('content_ref', 'context.item.content_ref', 'conditionally_required'), FieldSpec('mime_type', 'context.item.mime_type', 'recommended'), FieldSpec('language', 'context.item.language', 'recommended'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('byte_size', 'context.item.byte_size', 'recommended'), FieldSpec('freshness', 'context.item.freshness', 'recommended'), FieldSpec('trust_level', 'context.item.trust_level', 'recommended'), FieldSpec('sensitivity', 'context.item.sensitivity', 'recommended'), FieldSpec('redaction_state', 'context.item.redaction_state', 'recommended'), FieldSpec('visibility', 'context.item.visibility', 'recommended'), FieldSpec('priority', 'context.item.priority', 'recommended'), FieldSpec('digest', 'context.item.digest', 'recommended'), FieldSpec('created_at', 'context.item.created_at', 'recommended'), ),
        'ContextSourceRef': (FieldSpec('source_id', 'context.source.id', 'recommended'), FieldSpec('uri', 'context.source.uri', 'recommended'), FieldSpec('source_kind', 'context.source.kind', 'recommended'), FieldSpec('selector', 'context.source.selector', 'recommended'), FieldSpec('digest', 'context.source.digest', 'recommended'), FieldSpec('authority', 'context.source.authority', 'recommended'), FieldSpec('provenance_refs', 'context.source.provenance_refs', 'recommended'), FieldSpec('license', 'context.source.license', 'recommended'), FieldSpec('retrieved_at', 'context.source.retrieved_at', 'recommended'), FieldSpec('modified_at', 'context.source.modified_at', 'recommended'), ),
        'AssemblyBlock': (FieldSpec('index', 'context.block.index', 'required'), FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('context_kind', 'context.item.kind', 'recommended'), FieldSpec('tokens', 'context.block.tokens', 'recommended'), FieldSpec('injection_point', 'context.injection.point', 'recommended'), FieldSpec('digest', 'context.block.digest', 'recommended'), FieldSpec('source_item_refs', 'context.block.source_item_refs', 'conditionally_required'), ),
    }),
    'context.injection.applied': EventSpec('context.injection.applied', (('context.injection.id',),), False, {
        'ContextInjection': (FieldSpec('injection_id', 'context.injection.id', 'required'), FieldSpec('assembly_id', 'context.assembly.id', 'conditionally_required'), FieldSpec('target', 'context.injection.target', 'recommended'), FieldSpec('injection_point', 'context.injection.point', 'recommended'), FieldSpec('native_id', 'context.injection.native_id', 'recommended'), FieldSpec('visibility', 'context.injection.visibility', 'recommended'), FieldSpec('final_ref', 'context.injection.final_ref', 'recommended'), FieldSpec('hash', 'context.injection.hash', 'recommended'), ),
    }),
    'context.compaction.source': EventSpec('context.compaction.source', (('context.item.id',),), True, {
        'CompactionSource': (FieldSpec('item_id', 'context.item.id', 'required'), FieldSpec('token_estimate', 'context.item.token_estimate', 'recommended'), FieldSpec('covered', 'context.compaction.covered', 'recommended'), ),
    }),
    'context.summary.created': EventSpec('context.summary.created', (('context.summary.id',),), False, {
        'ContextSummary': (FieldSpec('summary_id', 'context.summary.id', 'required'), FieldSpec('content', 'context.summary.content', 'opt_in'), FieldSpec('token_estimate', 'context.summary.token_estimate', 'recommended'), FieldSpec('digest', 'context.summary.digest', 'recommended'), FieldSpec('refresh_policy', 'context.summary.refresh_policy', 'recommended'), ),
    }),
    'context.missing.detected': EventSpec('context.missing.detected', (('context.missing.id',),), False, {
        'MissingContext': (FieldSpec('missing_id', 'context.missing.id', 'required'), FieldSpec('scope', 'context.missing.scope', 'recommended'), FieldSpec('question', 'context.missing.question', 'opt_in'), FieldSpec('needed_for', 'context.missing.needed_for', 'recommended'), FieldSpec('severity', 'context.missing.severity', 'recommended'), FieldSpec('candidate_sources', 'context.missing.candidate_sources', 'recommended'), FieldSpec('blocked_actions', 'context.missing.blocked_actions', 'recommended'), FieldSpec('requested_from', 'context.missing.requested_from', 'recommended'), FieldSpec('status', 'context.missing.status', 'recommended'), ),
    }),
    'context.missing.requested': EventSpec('context.missing.requested', (('context.missing.id',),), False, {
        'MissingContext': (FieldSpec('missing_id', 'context.missing.id', 'required'), FieldSpec('requested_from', 'context.missing.requested_from', 'recommended'), ),
    }),
    'context.missing.resolved': EventSpec('context.missing.resolved', (('context.missing.id',),), False, {
        'MissingContext': (FieldSpec('missing_id', 'context.missing.id', 'required'), FieldSpec('resolution_refs', 'context.missing.resolution_refs', 'recommended'), ),
    }),
    'context.redaction.applied': EventSpec('context.redaction.applied', (('context.item.id',), ('context.redaction.state',)), False, {
        'ContextEvent.metadata': (FieldSpec('state', 'context.redaction.state', 'required'), FieldSpec('method', 'context.redaction.method', 'recommended'), FieldSpec('redacted_by', 'context.redaction.redacted_by', 'recommended'), FieldSpec('policy_ref', 'context.policy.ref', 'recommended'), ),
    }),
    'context.runtime.rule_breach': EventSpec('context.runtime.rule_breach', (('context.runtime.rule',),), False, {}),
}

SPANS: dict[str, SpanSpec] = {
    'context.envelope': SpanSpec('context.envelope', {
        'ContextEnvelope': (FieldSpec('context_id', 'context.id', 'required'), FieldSpec('scope', 'context.scope', 'required'), FieldSpec('lifecycle', 'context.lifecycle', 'recommended'), FieldSpec('schema_version', 'context.schema_version', 'recommended'), FieldSpec('producer', 'context.producer', 'recommended'), FieldSpec('parent_id', 'context.parent_id', 'conditionally_required'), FieldSpec('actor_refs', 'context.actor_refs', 'recommended'), FieldSpec('runtime_refs', 'context.runtime_refs', 'recommended'), FieldSpec('policy_refs', 'context.policy_refs', 'recommended'), FieldSpec('evidence_refs', 'context.evidence_refs', 'recommended'), ),
    }),
    'context.surface': SpanSpec('context.surface', {
        'ContextSurface': (FieldSpec('surface_id', 'context.surface.id', 'required'), FieldSpec('item_count', 'context.surface.item_count', 'recommended'), FieldSpec('token_estimate', 'context.surface.token_estimate', 'recommended'), ),
    }),
    'context.selection': SpanSpec('context.selection', {
        'ContextSelection': (FieldSpec('selection_id', 'context.selection.id', 'required'), FieldSpec('surface_id', 'context.surface.id', 'conditionally_required'), FieldSpec('intent', 'context.selection.intent', 'recommended'), FieldSpec('query', 'context.selection.query', 'opt_in'), FieldSpec('selection_policy', 'context.selection.policy', 'recommended'), FieldSpec('budget_ref', 'context.budget.id', 'conditionally_required'), FieldSpec('rationale', 'context.selection.rationale', 'opt_in'), FieldSpec('actor_ref', 'context.selection.actor_ref', 'recommended'), FieldSpec('model_ref', 'context.selection.model_ref', 'conditionally_required'), FieldSpec('candidate_count', 'context.selection.candidate_count', 'required'), ),
    }),
    'context.budget': SpanSpec('context.budget', {
        'ContextBudget': (FieldSpec('budget_id', 'context.budget.id', 'required'), FieldSpec('target', 'context.budget.target', 'recommended'), FieldSpec('max_tokens', 'context.budget.max_tokens', 'recommended'), FieldSpec('reserved_tokens', 'context.budget.reserved_tokens', 'recommended'), FieldSpec('max_bytes', 'context.budget.max_bytes', 'recommended'), FieldSpec('max_items', 'context.budget.max_items', 'recommended'), FieldSpec('actual_tokens', 'context.budget.actual_tokens', 'recommended'), FieldSpec('actual_bytes', 'context.budget.actual_bytes', 'recommended'), FieldSpec('actual_items', 'context.budget.actual_items', 'recommended'), FieldSpec('overflow_strategy', 'context.budget.overflow_strategy', 'recommended'), FieldSpec('overflow', 'context.budget.overflow', 'conditionally_required'), FieldSpec('overflow_tokens', 'context.budget.overflow_tokens', 'conditionally_required'), FieldSpec('utilization', 'context.budget.utilization', 'conditionally_required'), FieldSpec('window_ref', 'context.window.id', 'conditionally_required'), ),
        'ContextWindow': (FieldSpec('window_id', 'context.window.id', 'conditionally_required'), FieldSpec('budget_ref', 'context.budget.id', 'required'), FieldSpec('target', 'context.budget.target', 'recommended'), FieldSpec('max_tokens', 'context.budget.max_tokens', 'recommended'), ),
    }),
    'context.assembly': SpanSpec('context.assembly', {
        'ContextAssembly': (FieldSpec('assembly_id', 'context.assembly.id', 'required'), FieldSpec('target', 'context.assembly.target', 'recommended'), FieldSpec('wrapping_policy', 'context.assembly.wrapping_policy', 'recommended'), FieldSpec('separator_policy', 'context.assembly.separator_policy', 'recommended'), FieldSpec('visibility', 'context.assembly.visibility', 'recommended'), FieldSpec('budget_ref', 'context.budget.id', 'conditionally_required'), FieldSpec('redaction_state', 'context.assembly.redaction_state', 'recommended'), FieldSpec('block_count', 'context.assembly.block_count', 'required'), FieldSpec('token_count', 'context.assembly.token_count', 'recommended'), FieldSpec('hash', 'context.assembly.hash', 'recommended'), ),
    }),
    'context.compaction': SpanSpec('context.compaction', {
        'ContextCompaction': (FieldSpec('compaction_id', 'context.compaction.id', 'required'), FieldSpec('scope', 'context.compaction.scope', 'recommended'), FieldSpec('summary_ref', 'context.summary.id', 'conditionally_required'), FieldSpec('method', 'context.compaction.method', 'recommended'), FieldSpec('trigger', 'context.compaction.trigger', 'recommended'), FieldSpec('coverage', 'context.compaction.coverage', 'recommended'), FieldSpec('loss_notes', 'context.compaction.loss_notes', 'conditionally_required'), FieldSpec('validation', 'context.compaction.validation', 'recommended'), FieldSpec('replacement_policy', 'context.compaction.replacement_policy', 'recommended'), FieldSpec('source_count', 'context.compaction.source_count', 'required'), FieldSpec('tokens_before', 'context.compaction.tokens_before', 'recommended'), FieldSpec('tokens_after', 'context.compaction.tokens_after', 'recommended'), ),
    }),
    'context.items': SpanSpec('context.items', {}),
}

METRICS: dict[str, MetricSpec] = {
    'context.envelopes': MetricSpec('context.envelopes', 'counter', '{envelope}', 'Context envelopes completed (API) or rebuilt (processor).', None, 'context_envelopes_total', (('scope', 'context.scope'), ('agent', 'gen_ai.agent.name'), ('status', ''))),
    'context.budget.utilization': MetricSpec('context.budget.utilization', 'histogram', '1', 'Budget utilization (actual tokens / max tokens), with trace-id exemplars.', (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0, 1.1, 1.25, 1.5, 2.0), 'context_budget_utilization_ratio', (('target', 'context.budget.target'), ('agent', 'gen_ai.agent.name'))),
    'context.budget.overflows': MetricSpec('context.budget.overflows', 'counter', '{overflow}', 'Budgets that overflowed.', None, 'context_budget_overflows_total', (('target', 'context.budget.target'), ('agent', 'gen_ai.agent.name'), ('overflow_strategy', 'context.budget.overflow_strategy'))),
    'context.truncations': MetricSpec('context.truncations', 'counter', '{truncation}', 'Truncations to fit a budget.', None, 'context_truncations_total', (('target', 'context.budget.target'), ('agent', 'gen_ai.agent.name'), ('strategy', 'context.truncation.strategy'))),
    'context.truncated_tokens': MetricSpec('context.truncated_tokens', 'counter', '{token}', 'Tokens cut by truncation (tokens before - tokens after).', None, 'context_truncated_tokens_total', (('target', 'context.budget.target'), ('agent', 'gen_ai.agent.name'))),
    'context.items.selected': MetricSpec('context.items.selected', 'counter', '{item}', 'Items selected.', None, 'context_items_selected_total', (('agent', 'gen_ai.agent.name'), ('kind', 'context.item.kind'))),
    'context.items.omitted': MetricSpec('context.items.omitted', 'counter', '{item}', 'Candidate items omitted.', None, 'context_items_omitted_total', (('agent', 'gen_ai.agent.name'), ('kind', 'context.item.kind'), ('reason', 'context.omission.reason'))),
    'context.items.not_injected': MetricSpec('context.items.not_injected', 'counter', '{item}', 'Items selected but never injected: no assembly block of their envelope names them (as its item or in `context.block.source_item_refs`). Counted for envelopes that assembled a prompt at all, for items whose content the emitter knew (with a digest).', None, 'context_items_not_injected_total', (('agent', 'gen_ai.agent.name'), ('kind', 'context.item.kind'))),
    'context.omitted_tokens': MetricSpec('context.omitted_tokens', 'counter', '{token}', 'Tokens of omitted items.', None, 'context_omitted_tokens_total', (('agent', 'gen_ai.agent.name'), ('reason', 'context.omission.reason'))),
    'context.injections': MetricSpec('context.injections', 'counter', '{injection}', 'Context injections.', None, 'context_injections_total', (('target', 'context.injection.target'), ('injection_point', 'context.injection.point'))),
    'context.compactions': MetricSpec('context.compactions', 'counter', '{compaction}', 'Compactions.', None, 'context_compactions_total', (('agent', 'gen_ai.agent.name'), ('method', 'context.compaction.method'), ('trigger', 'context.compaction.trigger'))),
    'context.compaction.coverage': MetricSpec('context.compaction.coverage', 'histogram', '1', 'Compaction source coverage (0-1), with trace-id exemplars.', (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0), 'context_compaction_coverage_ratio', (('agent', 'gen_ai.agent.name'), ('method', 'context.compaction.method'))),
    'context.compaction.uncovered_sources': MetricSpec('context.compaction.uncovered_sources', 'counter', '{source}', 'Compaction sources the summary does not account for.', None, 'context_compaction_uncovered_sources_total', (('agent', 'gen_ai.agent.name'), ('method', 'context.compaction.method'))),
    'context.compaction.loss_notes': MetricSpec('context.compaction.loss_notes', 'counter', '{note}', 'Compaction loss notes.', None, 'context_compaction_loss_notes_total', (('agent', 'gen_ai.agent.name'), ('method', 'context.compaction.method'))),
    'context.missing.detected': MetricSpec('context.missing.detected', 'counter', '{gap}', 'Missing context detected.', None, 'context_missing_detected_total', (('agent', 'gen_ai.agent.name'), ('severity', 'context.missing.severity'))),
    'context.missing.resolved': MetricSpec('context.missing.resolved', 'counter', '{gap}', 'Missing context resolved.', None, 'context_missing_resolved_total', (('agent', 'gen_ai.agent.name'), ('severity', 'context.missing.severity'))),
}

FOLDED: dict[str, FoldedSpec] = {
    'context.window.segment_names': FoldedSpec('WindowSegment', 'segment', ''),
    'context.window.segment_orders': FoldedSpec('WindowSegment', 'order', 'context.window.segment_names'),
    'context.window.segment_reserved_tokens': FoldedSpec('WindowSegment', 'reserved_tokens', 'context.window.segment_names'),
    'context.window.segment_used_tokens': FoldedSpec('WindowSegment', 'used_tokens', 'context.window.segment_names'),
    'context.assembly.block_item_ids': FoldedSpec('AssemblyBlock', 'item_id', ''),
    'context.assembly.block_kinds': FoldedSpec('AssemblyBlock', 'context_kind', 'context.assembly.block_item_ids'),
    'context.assembly.block_tokens': FoldedSpec('AssemblyBlock', 'tokens', 'context.assembly.block_item_ids'),
    'context.assembly.block_injection_points': FoldedSpec('AssemblyBlock', 'injection_point', 'context.assembly.block_item_ids'),
    'context.assembly.block_digests': FoldedSpec('AssemblyBlock', 'digest', 'context.assembly.block_item_ids'),
    'context.assembly.block_source_counts': FoldedSpec('AssemblyBlock', 'source_item_refs', 'context.assembly.block_item_ids'),
    'context.assembly.block_content_modes': FoldedSpec('ContextItem', 'content_mode', 'context.assembly.block_item_ids'),
    'context.assembly.block_content_refs': FoldedSpec('ContextItem', 'content_ref', 'context.assembly.block_item_ids'),
    'context.assembly.block_tool_call_ids': FoldedSpec('ContextSourceRef', 'model_api.tool_call_id', 'context.assembly.block_item_ids'),
    'context.assembly.block_response_ids': FoldedSpec('ContextSourceRef', 'model_api.response_id', 'context.assembly.block_item_ids'),
    'context.assembly.block_contents': FoldedSpec('ContextItem', 'content', 'context.assembly.block_item_ids'),
}
